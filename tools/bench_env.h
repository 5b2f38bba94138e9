// Internal to `tessel bench`: the machine a benchmark runs on, read beside the figures so that
// numbers from a busy or small machine can be told apart (load, other processes' CPU time) and
// sizes that cannot fit are refused before they start (physical memory).
#pragma once

#include <string>

namespace tessel::cli::bench {

// The 1-minute load average (getloadavg), or -1 when the system does not say.
double load_average();
// The same as text: "0.52", or "unknown".
std::string load_average_text();

// Bytes of physical memory, or 0 when the system does not say.
double physical_memory_bytes();

// Refuses a run whose buffers would not fit, before it starts (rather than being killed or
// failing an allocation halfway): throws UsageError(command, ...) when `needed_bytes` is more
// than 3/4 of physical memory, naming `what` asked for it (e.g. "--n 65536").
void check_fits_in_memory(const std::string& command, double needed_bytes, const std::string& what);

// CPU time counters of the whole machine and of this process (clock ticks), to tell how much of
// the machine other processes (or the hypervisor, as steal time) took during a run.
struct CpuSample {
  double total = 0;  // all CPUs, every state
  double busy = 0;   // all CPUs, not idle or waiting for I/O (steal counts as busy)
  double self = 0;   // this process, user + system
  bool valid = false;
};

// Reads /proc/stat and /proc/self/stat; invalid when either cannot be read.
CpuSample sample_cpu();

// The fraction of all CPUs' time between `a` and `b` that went to other processes or steal
// (0 when either sample is invalid).
double other_cpu_fraction(const CpuSample& a, const CpuSample& b);

}  // namespace tessel::cli::bench
