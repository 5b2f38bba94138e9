#include "bench_env.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "flags.h"

namespace tessel::cli::bench {

double load_average() {
  double load[1] = {0};
  return getloadavg(load, 1) == 1 ? load[0] : -1;
}

std::string load_average_text() {
  const double load = load_average();
  if (load < 0) return "unknown";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", load);
  return buf;
}

double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<double>(pages) * static_cast<double>(page_size);
}

void check_fits_in_memory(const std::string& command, double needed_bytes,
                          const std::string& what) {
  const double physical = physical_memory_bytes();
  if (physical > 0 && needed_bytes > 0.75 * physical) {
    constexpr double kMiB = 1 << 20;
    throw UsageError(command, what + " needs about " +
                                  std::to_string(static_cast<int64_t>(needed_bytes / kMiB)) +
                                  " MiB of buffers; this machine has " +
                                  std::to_string(static_cast<int64_t>(physical / kMiB)) + " MiB");
  }
}

CpuSample sample_cpu() {
  CpuSample s;
  std::ifstream stat("/proc/stat");
  std::string cpu;
  double v[10] = {};
  if (!(stat >> cpu) || cpu != "cpu") return s;
  for (double& x : v) stat >> x;  // user nice system idle iowait irq softirq steal guest guest_nice
  s.total = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
  s.busy = s.total - v[3] - v[4];
  std::ifstream self("/proc/self/stat");
  std::string line;
  std::getline(self, line);
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos) return s;
  std::istringstream fields(line.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14 || i == 15) s.self += std::stod(field);  // utime, stime
  }
  s.valid = true;
  return s;
}

double other_cpu_fraction(const CpuSample& a, const CpuSample& b) {
  if (!a.valid || !b.valid || b.total <= a.total) return 0;
  const double other = (b.busy - a.busy) - (b.self - a.self);
  return std::clamp(other / (b.total - a.total), 0.0, 1.0);
}

}  // namespace tessel::cli::bench
