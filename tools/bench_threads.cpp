#include "bench_threads.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

namespace tessel::cli::bench {
namespace {

// Other libraries' variables, read as text and compared with "1" before this process sets them:
// std::getenv, not the library's typed reader (src/core/env.h, internal to the library; the CLI
// is a client of the public headers), which reads tessel's own settings.
constexpr const char* kPinned[] = {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"};
// Set in the re-executed process, so that it never loops when exec keeps the old environment.
constexpr const char* kMarker = "TESSEL_BENCH_THREADS_PINNED";

}  // namespace

void pin_thread_environment(char** argv) {
  if (std::getenv(kMarker) != nullptr) return;
  bool changed = false;
  for (const char* name : kPinned) {
    const char* value = std::getenv(name);
    if (value == nullptr) {
      setenv(name, "1", 1);
      changed = true;
    } else if (std::string(value) != "1") {
      std::cerr << "tessel bench: running with " << name << "=" << value
                << " as set (the recorded figures use 1)\n";
    }
  }
  setenv(kMarker, "1", 1);
  if (!changed) return;
  execv("/proc/self/exe", argv);
  // Still here: the pools are whatever the loaded libraries chose; say so and go on.
  std::cerr << "tessel bench: could not re-execute with OPENBLAS_NUM_THREADS=1 ("
            << std::strerror(errno) << "); OpenBLAS keeps its default thread count\n";
}

}  // namespace tessel::cli::bench
