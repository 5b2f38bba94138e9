// Host memory admission: the process-wide limit on what host_allocator() holds.
//
// Every tensor's storage, a host Tensor's or a device's, comes from host_allocator(). It counts
// the bytes it holds (blocks in use plus its cache of freed blocks) and refuses, before asking the
// system, a request that would take that past host_memory_limit(): Error kResourceExhausted
// naming the request, the limit and the bytes in use. It first gives its cache back to the system
// and tries again, so cached blocks never cause a refusal. Devices have their own, smaller limits
// on top of this one (runtime/device.h, docs/memory.md).
//
//   set_host_memory_limit(int64_t{64} << 20);
//   Tensor::zeros(Shape{25 << 20}, DType::kF32);   // 100 MiB: ResourceExhausted, nothing held
//   Tensor::zeros(Shape{8 << 20}, DType::kF32);    // 32 MiB: fine
//   host_memory_stats().live_bytes;                // 33554432 while it lives
//
// The default limit, fixed on first use of host_allocator():
//   - TESSEL_HOST_MEMORY_LIMIT, a byte count ("17179869184", "16G", "512MiB"), if set;
//   - else TESSEL_PER_PROCESS_MEMORY_FRACTION (TF's per_process_gpu_memory_fraction, for the
//     host; default kDefaultPerProcessMemoryFraction) of host_available_memory(), divided by the
//     processes of this job on this host
//     (OMPI_COMM_WORLD_LOCAL_SIZE or MPI_LOCALNRANKS under mpirun, else 1);
//   - when the available memory cannot be read, the same fraction of the physical memory.
// A malformed variable: kInvalidArgument naming it, from the first allocation.
//
// Only tensor storage is counted: numpy arrays, BLAS work space and other C++ containers are not,
// which is why the default leaves a fifth of the available memory to them (and to the growth of
// other processes). JAX's XLA_PYTHON_CLIENT_MEM_FRACTION takes 0.75, but reserves it up front;
// tessel reserves nothing, and 0.8 keeps the GPT example's baby model on a 2x2 mesh (3.7 GiB a
// device) within the default while the host has 18.4 GiB available (docs/memory.md).
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstdint>

#include "tessel/core/allocator.h"

namespace tessel {

// The share of the available memory a process takes by default (see above).
inline constexpr double kDefaultPerProcessMemoryFraction = 0.8;

// Bytes this process could still take from the host now: MemAvailable of /proc/meminfo, lowered
// to the headroom of the process's cgroup (cgroup v2 memory.max - memory.current, or v1
// memory.limit_in_bytes - memory.usage_in_bytes) where it sets a limit. -1 when unknown.
int64_t host_available_memory();

// The process-wide limit on the bytes host_allocator() holds (in use plus cached).
int64_t host_memory_limit();
// Sets it. bytes < 1: kInvalidArgument naming the value. A limit below what is in use now is
// allowed: blocks already handed out stay valid, new requests fail until enough is freed.
void set_host_memory_limit(int64_t bytes);

// host_allocator()'s counters: live_bytes (in use, sizes rounded up to the 64-byte alignment),
// peak_bytes, total_allocated_bytes and num_allocations (fresh blocks and cache hits),
// cached_bytes and limit_bytes (host_memory_limit()).
MemoryStats host_memory_stats();
// Sets host_memory_stats().peak_bytes to the current live_bytes.
void reset_host_peak_memory();

}  // namespace tessel
