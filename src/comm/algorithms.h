// Internal: the collective algorithms, one file each, all written against detail::Transport.
// The Communicator validates arguments, builds the signature and picks the algorithm; these
// functions only move and combine bytes.
#pragma once

#include <cstdint>

#include "comm/transport.h"
#include "tessel/comm/collective_options.h"
#include "tessel/core/allocator.h"
#include "tessel/core/dtype.h"
#include "tessel/core/reduce_op.h"

namespace tessel::detail {

struct AllReduceArgs {
  const void* input = nullptr;
  void* output = nullptr;  // may equal input
  int64_t count = 0;       // elements
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  size_t segment_bytes = 0;  // pipelining segment (ring, reduce_to_one)
  Allocator* scratch = nullptr;  // temporaries (null: the host allocator)
  const Signature* signature = nullptr;
  Deadline deadline;
};

// In-process: rank r reduces chunk r straight from every peer's input into every peer's output
// (two rendezvous); small buffers: one rendezvous, every rank reduces staged copies of all inputs
// into its own output.
void direct_all_reduce(Transport& t, const AllReduceArgs& a);
// Ring reduce-scatter then ring all-gather over send/recv, in segments.
void ring_all_reduce(Transport& t, const AllReduceArgs& a);
// Recursive vector halving (reduce-scatter) then distance doubling (all-gather); ranks beyond
// the largest power of two fold into a partner first.
void halving_doubling_all_reduce(Transport& t, const AllReduceArgs& a);
// Within each host onto its leader, across hosts among the leaders, back within each host.
// Hosts come from the members' device names (job and task); one host: direct_all_reduce.
void hierarchical_all_reduce(Transport& t, const AllReduceArgs& a);
// Everyone streams segments to rank 0, which reduces and streams the result back.
void reduce_to_one_all_reduce(Transport& t, const AllReduceArgs& a);

// The MPI library's all-reduce (MPI_Iallreduce, polled against the deadline) on an MPI
// transport (mpi/mpi_all_reduce.cpp). Other transports: kInvalidArgument; built without MPI:
// kUnavailable (mpi/mpi_stub.cpp).
void mpi_all_reduce(Transport& t, const AllReduceArgs& a);
// What kAuto runs on a transport that does not share memory: on MPI transports kHierarchical
// (shared memory within hosts, host_shm.h) where two processes share a host, else kMpi;
// kHierarchical on hierarchical groups across processes, else kRing.
Algorithm auto_all_reduce_algorithm(const Transport& t, size_t bytes);
// hierarchical_all_reduce of a group across MPI processes (mpi/mpi_hierarchy.cpp): a group of
// make_hierarchical_communicators, or the MPI transport's own; through the hosts' shared memory
// where processes share a host (host_shm.h), else within the process, MPI across processes,
// back. False for other transports (and without MPI).
bool process_hierarchy_all_reduce(Transport& t, const AllReduceArgs& a);

// Tag space of algorithm traffic (user send/recv tags are >= 0).
inline constexpr int kAlgorithmTag = -1;

}  // namespace tessel::detail
