// tessel info: what this build of tessel is and what it can use on this machine.
#include <iostream>
#include <string>
#include <thread>

#include "commands.h"
#include "flags.h"
#include "tessel/comm/mpi.h"
#include "tessel/core/blas.h"
#include "tessel/core/matmul_precision.h"
#include "tessel/core/parallel.h"
#include "tessel/config.h"
#include "tessel/runtime/runtime.h"

namespace tessel::cli {
namespace {

constexpr const char* kHelp =
    "usage: tessel info\n"
    "\n"
    "Prints tessel's version, the compiler that built it, which components and backends are\n"
    "compiled in, and the number of hardware threads.\n";

// The compiler and version that built this binary (and the library with it).
std::string compiler() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "gcc " __VERSION__;
#else
  return "unknown";
#endif
}

// The sanitizer this binary was built with, if any.
const char* sanitizer() {
#if defined(__SANITIZE_THREAD__)
  return "thread";
#elif defined(__SANITIZE_ADDRESS__)
  return "address";
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
  return "thread";
#elif __has_feature(address_sanitizer)
  return "address";
#else
  return "none";
#endif
#else
  return "none";
#endif
}

// Optional backends: config.h defines TESSEL_HAVE_<X> once the build can compile them in.
const char* built(bool yes) { return yes ? "built" : "not built"; }

#ifdef TESSEL_HAVE_MPI
constexpr bool kHaveMpi = true;
#else
constexpr bool kHaveMpi = false;
#endif
#ifdef TESSEL_HAVE_NCCL
constexpr bool kHaveNccl = true;
#else
constexpr bool kHaveNccl = false;
#endif
#ifdef TESSEL_HAVE_CUDA
constexpr bool kHaveCuda = true;
#else
constexpr bool kHaveCuda = false;
#endif

// "built (<MPI library and version>)" or "not built".
std::string mpi_info() {
  if (!mpi_available()) return built(false);
  const std::string version = mpi_library_version();
  return std::string(built(true)) + " (" + version.substr(0, version.find(',')) + ")";
}

NoOptions parse(const Args& args) {
  FlagParser("info").parse(args);  // takes no arguments
  return {};
}

int print_info(NoOptions) {
  std::cout << "tessel " << TESSEL_VERSION_STRING << "\n"
            << "compiler:         " << compiler() << " (C++ " << __cplusplus << ")\n"
            << "sanitizer:        " << sanitizer() << "\n"
            << "components:       core, mesh, runtime, comm, distribute\n"
            << "transports:       in-process (always)" << (kHaveMpi ? ", MPI" : "") << "\n"
            << "algorithms:       direct, ring, halving_doubling, reduce_to_one, hierarchical"
            << (kHaveMpi ? ", mpi" : "") << "\n"
            << "MPI:              " << mpi_info() << "\n"
            << "NCCL:             " << built(kHaveNccl) << "\n"
            << "CUDA:             " << built(kHaveCuda) << "\n"
            << "hardware threads: " << std::thread::hardware_concurrency() << "\n"
            << "BLAS:             " << blas_info().to_string() << "\n"
            << "intra-op threads: " << machine_cores()
            << " cores, shared by the CPU devices (TESSEL_INTRA_OP_THREADS fixes it)\n"
            << "f32 matmuls:      " << matmul_precision_name(matmul_precision())
            << (tensor_float_32_execution_enabled()
                    ? " (TF32 on GPU tensor cores, f32 on CPUs; TESSEL_MATMUL_PRECISION=highest "
                      "keeps f32)\n"
                    : " (f32 on every device; TESSEL_MATMUL_PRECISION=high allows TF32 on GPUs)\n");
  const Runtime& runtime = Runtime::global();  // TESSEL_CPU_DEVICES, default 4
  std::cout << "devices:          " << runtime.num_devices() << " virtual CPU\n";
  for (const Device* d : runtime.devices()) std::cout << "  " << d->name() << "\n";
  return kExitOk;
}

}  // namespace

int run_info(const Args& args) { return run_command(args, kHelp, parse, print_info); }

}  // namespace tessel::cli
