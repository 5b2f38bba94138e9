// Internal: how much memory the host can still give this process, read from /proc and the
// cgroup file system. The paths are parameters so that tests can point them at copies.
#pragma once

#include <cstdint>
#include <string>

namespace tessel::detail {

struct HostMemoryFiles {
  std::string meminfo = "/proc/meminfo";          // MemAvailable, in kB
  std::string self_cgroup = "/proc/self/cgroup";  // "0::<path>" (v2), "N:memory:<path>" (v1)
  std::string cgroup_root = "/sys/fs/cgroup";     // v2 here, v1 under <root>/memory
};

// MemAvailable, lowered to the smallest headroom (limit - usage) of the process's memory cgroup
// and its ancestors that set a limit; -1 when neither can be read. See host_available_memory().
int64_t available_memory(const HostMemoryFiles& files);

}  // namespace tessel::detail
