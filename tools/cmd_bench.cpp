// tessel bench: picks the benchmark by its first argument, one file each:
//   tessel bench <collective> ...  cmd_bench_collective.cpp (also `tessel bench --help`)
//   tessel bench fusion ...        cmd_bench_fusion.cpp
//   tessel bench relayout ...      cmd_bench_relayout.cpp
//   tessel bench matmul|dispatch   cmd_bench_ops.cpp
//   tessel bench replicate ...     cmd_bench_replicate.cpp
//   tessel bench gpt ...           cmd_bench_gpt.cpp
//   tessel bench checkpoint ...    cmd_bench_checkpoint.cpp
//   tessel bench embedding ...     cmd_bench_embedding.cpp
//   tessel bench nccl ...          cmd_bench_nccl.cpp (GPUs; cmd_bench_nccl_stub.cpp without CUDA)
#include <algorithm>
#include <iostream>
#include <string>
#include <string_view>

#include "commands.h"
#include "tessel/core/blas.h"
#include "tessel/core/parallel.h"
#include "tessel/dtensor/sharding_fallback.h"

namespace tessel::cli {

// Every figure depends on the BLAS kernel and the threads an op may use: a bench that ran says
// which, on stderr after its results (stdout may be --json; a usage error or --help prints
// nothing more), and lists the ops that had no sharding rule for their inputs' layouts and fell
// back (sharding_fallback.h), whose relayouts the figures include.
int with_blas_line(const Args& args, int status) {
  if (status != 0 || std::find(args.begin(), args.end(), "--help") != args.end() ||
      std::find(args.begin(), args.end(), "-h") != args.end()) {
    return status;
  }
  std::cerr << "blas: " << blas_info().to_string() << "; intra-op threads per op: "
            << intra_op_threads() << " of " << machine_cores() << " cores\n";
  if (const std::string fallbacks = sharding_fallbacks_text(); !fallbacks.empty()) {
    std::cerr << "sharding fallbacks (ops without a sharding rule for their inputs' layouts):\n"
              << fallbacks;
  }
  return status;
}

int run_bench(const Args& args) {
  struct Subcommand {
    std::string_view name;
    int (*run)(const Args& args);
  };
  static constexpr Subcommand kSubcommands[] = {{"fusion", run_bench_fusion},
                                                {"relayout", run_bench_relayout},
                                                {"matmul", run_bench_matmul},
                                                {"dispatch", run_bench_dispatch},
                                                {"replicate", run_bench_replicate},
                                                {"gpt", run_bench_gpt},
                                                {"checkpoint", run_bench_checkpoint},
                                                {"embedding", run_bench_embedding},
                                                {"nccl", run_bench_nccl}};
  if (!args.empty()) {
    for (const Subcommand& sub : kSubcommands) {
      if (args[0] == sub.name) {
        return with_blas_line(args, sub.run(Args(args.begin() + 1, args.end())));
      }
    }
  }
  return with_blas_line(args, run_bench_collective(args));
}

}  // namespace tessel::cli
