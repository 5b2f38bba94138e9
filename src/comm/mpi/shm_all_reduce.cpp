// All-reduce through the host's shared-memory segment (comm/mpi/host_shm.h), the level between
// the in-process devices and MPI across hosts, for the groups of make_mpi_communicator and
// make_hierarchical_communicators whose processes share a host.
//
// Every participant of the host (one per group rank on it: a thread of one of its processes)
// copies its input, one slot-sized chunk at a time, into its own slot of the segment; after the
// chunk's barrier, participant i reduces part i of the chunk over all slots (in group rank order,
// with the reduce kernels of the in-process algorithms, so one host's result is the in-process
// result bit for bit) into the chunk's result area, and after the next chunk's barrier every
// participant copies the finished result out (from kStreamOutBytes with non-temporal stores).
// Chunks are 1 MiB, so that the slots stay in cache between the copy in, the reduction and the
// copy out: on the 2-core development machine 256 KiB and 1 MiB chunks beat 4 MiB ones at 16 and
// 256 MiB despite more barriers, and 1 MiB beat 256 KiB with 4 processes
// (docs/benchmarks-history.md). Two banks of slots and results alternate from barrier to barrier,
// so one barrier per chunk suffices (and one more at the end). Small buffers: after one barrier
// each participant reduces all slots straight into its output.
// With several hosts, each chunk's host result (kMean: its sum) goes through a ring all-reduce
// among the hosts' leaders over MPI before the participants copy it out.
#include <algorithm>
#include <cstring>

#include "comm/algorithms.h"
#include "comm/leader_transport.h"
#include "comm/mpi/host_shm.h"
#include "comm/mpi/mpi_transport.h"
#include "comm/reduce_kernels.h"
#include "core/errors.h"
#include "core/stream_copy.h"
#include "tessel/mesh/shard_range.h"

namespace tessel::detail {
namespace {

// Up to this many bytes every participant reduces the whole buffer itself (one barrier).
constexpr size_t kSmallBytes = 64 << 10;
// From this many bytes the finished chunks are copied out with non-temporal stores
// (core/stream_copy.h): an output line is then written without being read first, a third less
// memory traffic for the copy. 2026-11-30, 4 processes x 1 device and 2 x 2, alternating:
// 1.2-1.4x faster at 4, 16, 64 and 256 MiB; no clear gain or loss at 1 and 2 MiB, where the
// output may be read again from cache (docs/benchmarks-history.md, "Session 21").
constexpr size_t kStreamOutBytes = 4 << 20;

// One host: the pipeline described above.
void one_host(HostShm& shm, int me, const AllReduceArgs& a, int64_t group_size) {
  const size_t item = dtype_size(a.dtype);
  const int H = shm.size();
  uint64_t& round = shm.rounds(me);
  const auto* in = static_cast<const unsigned char*>(a.input);
  auto* out = static_cast<unsigned char*>(a.output);
  std::vector<const void*> slots(static_cast<size_t>(H));
  const auto gather_slots = [&](int bank) {
    for (int i = 0; i < H; ++i) slots[static_cast<size_t>(i)] = shm.slot(bank, i);
  };
  const size_t bytes = static_cast<size_t>(a.count) * item;
  if (bytes <= std::min(kSmallBytes, shm.slot_bytes())) {
    const int bank = static_cast<int>(round & 1);
    std::memcpy(shm.slot(bank, me), in, bytes);
    shm.barrier(me, round, *a.signature, a.deadline);
    shm.check_calls(me, round++, *a.signature);
    gather_slots(bank);
    void* target = out;
    reduce_buffers(a.dtype, a.op, slots.data(), H, &target, 1, 0, a.count, group_size);
    return;
  }
  const int64_t chunk = static_cast<int64_t>(shm.slot_bytes() / item);
  const int64_t chunks = (a.count + chunk - 1) / chunk;
  const auto extent = [&](int64_t j) { return std::min(chunk, a.count - j * chunk); };
  const bool streaming = bytes >= kStreamOutBytes;
  int previous_bank = 0;
  for (int64_t j = 0; j <= chunks; ++j) {
    const int bank = static_cast<int>(round & 1);
    if (j < chunks) {
      std::memcpy(shm.slot(bank, me), in + static_cast<size_t>(j * chunk) * item,
                  static_cast<size_t>(extent(j)) * item);
    }
    shm.barrier(me, round, *a.signature, a.deadline);
    if (j == 0) shm.check_calls(me, round, *a.signature);
    ++round;
    if (j < chunks) {
      const ShardRange part = shard_range(extent(j), H, me);
      if (part.extent > 0) {
        gather_slots(bank);
        void* target = shm.result(bank);
        reduce_buffers(a.dtype, a.op, slots.data(), H, &target, 1, part.offset,
                       part.offset + part.extent, group_size);
      }
    }
    if (j > 0) {
      auto* to = out + static_cast<size_t>((j - 1) * chunk) * item;
      const size_t n = static_cast<size_t>(extent(j - 1)) * item;
      if (streaming) {
        stream_copy(to, shm.result(previous_bank), n);
      } else {
        std::memcpy(to, shm.result(previous_bank), n);
      }
    }
    previous_bank = bank;
  }
}

// Several hosts: per chunk, copy in, reduce parts (partial op), the leader's ring across hosts,
// copy out; three barriers per chunk.
void several_hosts(HostShm& shm, int me, const AllReduceArgs& a, int64_t group_size,
                   MpiTransport& mpi) {
  const size_t item = dtype_size(a.dtype);
  const int H = shm.size();
  uint64_t& round = shm.rounds(me);
  const auto* in = static_cast<const unsigned char*>(a.input);
  auto* out = static_cast<unsigned char*>(a.output);
  const ReduceOp partial = a.op == ReduceOp::kMean ? ReduceOp::kSum : a.op;
  const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(shm.slot_bytes() / item));
  std::vector<const void*> slots(static_cast<size_t>(H));
  const std::vector<int>& leaders = shm.host_leaders();
  const int my_host = static_cast<int>(std::find(leaders.begin(), leaders.end(), shm.my_host_leader()) -
                                       leaders.begin());
  for (int64_t begin = 0, j = 0; begin < a.count || j == 0; begin += chunk, ++j) {
    const int64_t n = std::min(chunk, a.count - begin);
    const int bank = static_cast<int>(round & 1);
    if (n > 0) std::memcpy(shm.slot(bank, me), in + static_cast<size_t>(begin) * item, static_cast<size_t>(n) * item);
    shm.barrier(me, round, *a.signature, a.deadline);
    if (j == 0) shm.check_calls(me, round, *a.signature);
    ++round;
    const ShardRange part = shard_range(std::max<int64_t>(n, 0), H, me);
    if (part.extent > 0) {
      for (int i = 0; i < H; ++i) slots[static_cast<size_t>(i)] = shm.slot(bank, i);
      void* target = shm.result(bank);
      reduce_buffers(a.dtype, partial, slots.data(), H, &target, 1, part.offset,
                     part.offset + part.extent, 1);
    }
    shm.barrier(me, round++, *a.signature, a.deadline);
    if (me == 0 && n > 0) {
      LeaderTransport cross(mpi, leaders, my_host);
      AllReduceArgs across = a;
      across.input = shm.result(bank);
      across.output = shm.result(bank);
      across.count = n;
      across.op = partial;
      ring_all_reduce(cross, across);
      finish_mean(a.dtype, a.op, shm.result(bank), n, group_size);
    }
    shm.barrier(me, round++, *a.signature, a.deadline);
    if (n > 0) std::memcpy(out + static_cast<size_t>(begin) * item, shm.result(bank), static_cast<size_t>(n) * item);
    if (a.count == 0) break;
  }
}

}  // namespace

void host_shm_all_reduce(HostShm& shm, int me, const AllReduceArgs& a, int64_t group_size,
                         MpiTransport& mpi) {
  try {
    shm.publish_call(me, shm.rounds(me), *a.signature, a.count);
    if (shm.multi_host()) return several_hosts(shm, me, a, group_size, mpi);
    one_host(shm, me, a, group_size);
  } catch (const Error& e) {
    shm.abort(e.message());
    throw;
  }
}

}  // namespace tessel::detail
