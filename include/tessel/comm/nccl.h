// NCCL communicators: Communicator objects (communicator.h) whose collectives run NCCL on GPU
// devices' memory, with the same semantics and errors as every other Communicator.
//
//   Runtime rt;                                                 // one GPU device per GPU
//   auto comms = make_nccl_communicators(rt.gpu_devices());    // rank r on GPU:r
//   // on rank r's thread:
//   Tensor x = rt.gpu_devices()[r]->allocate(Shape{1024}, DType::kF32);
//   comms[r]->all_reduce(x, x, ReduceOp::kSum);                 // ncclAllReduce on GPU:r
//
// Tensors in the GPU's memory take NCCL: all_reduce, reduce, broadcast, all_gather (any axis,
// uneven blocks), reduce_scatter (even or `counts`), all_to_all (even or `send_counts`),
// send/recv and barrier. Every call meets the other ranks on the host first (the group's host
// transport: in-process, or MPI across processes), so ranks calling different collectives get
// kFailedPrecondition and a missing rank is named in kDeadlineExceeded, as with host groups;
// then NCCL runs on the device's CUDA stream, and the call returns when its GPU work is done. A
// GPU that does not finish by the deadline aborts the NCCL communicator (ncclCommAbort) and the
// call throws kDeadlineExceeded naming the operation and the group: nothing hangs. Host-memory
// tensors still work on these communicators (the host transport's algorithms run); the block
// collectives of relayout (transfer_boxes, reduce_scatter_boxes), gather and scatter on GPU
// memory are kUnimplemented for now.
//
// Arithmetic is NCCL's: bf16 and f16 are reduced in their own precision along NCCL's ring (host
// groups reduce them in f32), mean is ncclAvg (floating dtypes only), bool reduces as uint8
// max/min (or/and).
//
// Built without CUDA: every factory throws kUnavailable; nccl_available() is false.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessel/comm/collective_options.h"
#include "tessel/comm/communicator.h"

namespace tessel {

class Device;

// True when this build has NCCL (the CUDA backend).
bool nccl_available();
// The NCCL library's version ("2.28.3"); "" without CUDA.
std::string nccl_version();

// One group over GPU devices of this process, rank r on gpus[r] (ncclCommInitAll), named by the
// devices. Every device must be a GPU device, each on a different GPU (NCCL allows one rank per
// GPU): kInvalidArgument naming the offending device otherwise.
std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(const std::vector<Device*>& gpus);

// One rank of a group that spans processes: `host` is this rank's Communicator of the group over
// host memory (an MPI communicator, or an in-process one); it is kept for the rendezvous. Rank
// 0 makes NCCL's unique id and broadcasts it over `host`; then every rank joins on `gpu`
// (ncclCommInitRank, non-blocking), all within options' deadline (kDeadlineExceeded naming the
// group otherwise).
std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> host, Device& gpu,
                                                     const CollectiveOptions& options = {});

}  // namespace tessel
