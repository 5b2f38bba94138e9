// Internal: the one error of a call that needs an optional backend this build of tessel left out.
// The stubs that stand in for a backend (src/runtime/cuda/gpu_stub.cpp,
// src/comm/nccl/nccl_stub.cpp, src/comm/mpi/mpi_stub.cpp, src/system/mpi_system_channel_stub.cpp)
// throw it, so that callers need no #ifdefs:
//
//   throw_built_without(Backend::kMpi, "MPI", "mpi_rank")
//     -> kUnavailable "MPI: mpi_rank: tessel was built without MPI (configure with
//        -DTESSEL_WITH_MPI=ON and an MPI installed, e.g. libopenmpi-dev)"
#pragma once

#include <string_view>

#include "core/errors.h"

namespace tessel::detail {

enum class Backend { kMpi, kCuda };

// kUnavailable from `component`: `what` needs `backend`, and how to configure a build with it.
[[noreturn]] inline void throw_built_without(Backend backend, std::string_view component,
                                             std::string_view what) {
  const bool mpi = backend == Backend::kMpi;
  throw_error(ErrorCode::kUnavailable, component, "{}: tessel was built without {} (configure with {})",
              what, mpi ? "MPI" : "CUDA",
              mpi ? "-DTESSEL_WITH_MPI=ON and an MPI installed, e.g. libopenmpi-dev"
                  : "-DTESSEL_WITH_CUDA=ON on a machine with the CUDA toolkit and NCCL");
}

}  // namespace tessel::detail
