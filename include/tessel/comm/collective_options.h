// CollectiveOptions: how one collective call runs — algorithm, deadline, pipelining segment.
//
//   CollectiveOptions opts;
//   opts.algorithm = Algorithm::kRing;
//   opts.timeout = std::chrono::seconds(5);
//   comm.all_reduce(x, y, ReduceOp::kSum, opts);
//
// kAuto picks by size and transport: in-process groups use kDirect (participants read each
// other's buffers); MPI communicators use kMpi, hierarchical groups across processes kHierarchical
// (tessel/comm/mpi.h; docs/benchmarks-history.md, "tessel over MPI"); other transports that do
// not share memory use kRing. Every wait inside a collective ends by its deadline: `deadline` when
// set, else `timeout` from the call's entry, or when that is zero the process default,
// TESSEL_COLLECTIVE_TIMEOUT_S seconds (300 when unset).
//
// A caller that runs several collectives as one operation (a multi-step relayout, a cross-device
// reduce followed by a broadcast, the collectives of one replicate() call) sets `deadline` once,
// so that the steps share one budget instead of each getting a fresh `timeout`.
#pragma once

#include <chrono>
#include <cstddef>
#include <string_view>

namespace tessel {

enum class Algorithm {
  kAuto,             // chosen per call by size and transport
  kDirect,           // in-process: each rank reduces 1/N of the data straight from peers' buffers
  kRing,             // reduce-scatter then all-gather around a ring, pipelined in segments
  kHalvingDoubling,  // recursive vector halving, distance doubling (Rabenseifner)
  kReduceToOne,      // reduce on the root, then broadcast from it
  kHierarchical,     // within each host first, then across hosts, then back
  kMpi,              // the MPI library's own MPI_Iallreduce (MPI communicators only, tessel/comm/mpi.h)
};

// "auto", "direct", "ring", "halving_doubling" (also "tree"), "reduce_to_one", "hierarchical",
// "mpi".
std::string_view algorithm_name(Algorithm algorithm);
// Unknown name: Error kInvalidArgument naming it.
Algorithm algorithm_from_name(std::string_view name);

// Segment size the ring pipelines in when CollectiveOptions::segment_bytes is 0 (Gloo's 1 MiB).
inline constexpr size_t kDefaultSegmentBytes = size_t{1} << 20;

struct CollectiveOptions {
  Algorithm algorithm = Algorithm::kAuto;
  // Deadline for the whole call, measured from entry. Zero: default_collective_timeout().
  std::chrono::milliseconds timeout{0};
  // Absolute deadline (steady_clock, the clock of Python's time.monotonic()). When set (not the
  // epoch) it wins over `timeout`; one already past fails the call's first wait at once.
  std::chrono::steady_clock::time_point deadline{};
  // Pipelining segment of the ring, and the largest message of the point-to-point collectives
  // (bytes). Zero: kDefaultSegmentBytes. Tests lower it so that multi-segment paths run on small
  // inputs.
  size_t segment_bytes = 0;
};

// TESSEL_COLLECTIVE_TIMEOUT_S (seconds, may be fractional) or 300 s. A malformed value:
// Error kInvalidArgument naming it.
std::chrono::milliseconds default_collective_timeout();

}  // namespace tessel
