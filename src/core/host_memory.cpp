// host_memory.h: the host's available memory, the default process limit and its accessors.
#include "tessel/core/host_memory.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

#include "core/env.h"
#include "core/host_allocator.h"
#include "core/host_memory_probe.h"

namespace tessel {
namespace detail {
namespace {

constexpr const char* kLimitEnv = "TESSEL_HOST_MEMORY_LIMIT";
constexpr const char* kFractionEnv = "TESSEL_PER_PROCESS_MEMORY_FRACTION";

// More processes on one host than any launcher starts: a larger local size is a typo.
constexpr int64_t kMaxLocalProcesses = 1 << 20;

// cgroup limits at or above this mean "no limit" (v1 writes 2^63 rounded down to a page).
constexpr int64_t kNoCgroupLimit = int64_t{1} << 60;

// The first whole number in `path`, or nullopt ("max", missing file, ...).
std::optional<int64_t> read_number(const std::string& path) {
  std::ifstream in(path);
  int64_t value = 0;
  if (in >> value) return value;
  return std::nullopt;
}

std::optional<int64_t> mem_available(const std::string& meminfo) {
  std::ifstream in(meminfo);
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

// The cgroup path of this process for cgroup v2 ("0::") or for v1's memory controller.
std::optional<std::string> cgroup_path(const std::string& self_cgroup, bool v2) {
  std::ifstream in(self_cgroup);
  std::string line;
  while (std::getline(in, line)) {
    const size_t first = line.find(':');
    const size_t second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string_view controllers =
        std::string_view(line).substr(first + 1, second - first - 1);
    const bool match =
        v2 ? line.compare(0, first, "0") == 0 && controllers.empty()
           : (',' + std::string(controllers) + ',').find(",memory,") != std::string::npos;
    if (match) return line.substr(second + 1);
  }
  return std::nullopt;
}

// The smallest limit - usage of the cgroup at `path` under `root` and of its ancestors.
std::optional<int64_t> cgroup_headroom(const std::string& root, std::string path,
                                       const char* limit_file, const char* usage_file) {
  std::optional<int64_t> least;
  while (true) {
    const std::string dir = root + (path == "/" ? "" : path);
    const std::optional<int64_t> limit = read_number(dir + "/" + limit_file);
    if (limit && *limit < kNoCgroupLimit) {
      const int64_t headroom =
          std::max<int64_t>(0, *limit - read_number(dir + "/" + usage_file).value_or(0));
      least = std::min(least.value_or(headroom), headroom);
    }
    if (path.empty() || path == "/") return least;
    const size_t slash = path.rfind('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
}

// Processes of this job on this host, as the launcher says (Open MPI's, then MPICH's variable),
// else 1. A value that is not a positive integer is an error, not a silent 1.
int64_t local_processes() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    if (const auto n = env_int(name, {1, kMaxLocalProcesses}, "Allocator")) return *n;
  }
  return 1;
}

double per_process_fraction() {
  return env_number(kFractionEnv, {0.0, 1.0}, "Allocator", "a fraction in (0, 1]")
      .value_or(kDefaultPerProcessMemoryFraction);
}

int64_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  return pages > 0 && page_size > 0 ? int64_t{pages} * page_size : -1;
}

}  // namespace

int64_t available_memory(const HostMemoryFiles& files) {
  std::optional<int64_t> available = mem_available(files.meminfo);
  std::optional<int64_t> headrooms[2];
  if (const auto path = cgroup_path(files.self_cgroup, /*v2=*/true)) {
    headrooms[0] = cgroup_headroom(files.cgroup_root, *path, "memory.max", "memory.current");
  }
  if (const auto path = cgroup_path(files.self_cgroup, /*v2=*/false)) {
    headrooms[1] = cgroup_headroom(files.cgroup_root + "/memory", *path, "memory.limit_in_bytes",
                                   "memory.usage_in_bytes");
  }
  for (const std::optional<int64_t>& headroom : headrooms) {
    if (headroom) available = std::min(available.value_or(*headroom), *headroom);
  }
  return available.value_or(-1);
}

int64_t default_host_memory_limit() {
  if (const auto bytes = env_byte_size(kLimitEnv, 1, "Allocator")) return *bytes;
  const double fraction = per_process_fraction();
  int64_t memory = host_available_memory();
  if (memory < 0) memory = physical_memory();
  if (memory < 0) return int64_t{1} << 47;  // unknown: only the address-space bound
  return std::max<int64_t>(
      1, static_cast<int64_t>(static_cast<double>(memory) * fraction) / local_processes());
}

}  // namespace detail

int64_t host_available_memory() { return detail::available_memory({}); }

int64_t host_memory_limit() { return detail::HostAllocator::instance().limit(); }

void set_host_memory_limit(int64_t bytes) { detail::HostAllocator::instance().set_limit(bytes); }

MemoryStats host_memory_stats() { return detail::HostAllocator::instance().stats(); }

void reset_host_peak_memory() { detail::HostAllocator::instance().reset_peak(); }

}  // namespace tessel
