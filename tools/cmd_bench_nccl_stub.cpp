// tessel bench nccl in a build without CUDA: says so (the real one is cmd_bench_nccl.cpp).
#include "commands.h"
#include "tessel/core/error.h"

namespace tessel::cli {

int run_bench_nccl(const Args&) {
  throw Error(ErrorCode::kUnavailable, "bench nccl",
              "tessel was built without CUDA and NCCL (configure with -DTESSEL_WITH_CUDA=ON)");
}

}  // namespace tessel::cli
