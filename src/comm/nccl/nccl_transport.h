// Internal: one rank of an NCCL group: a Transport whose host-side calls (the rendezvous that
// compares signatures and names missing ranks, barriers, host-memory point to point) go to the
// host transport it wraps (in-process or MPI), and whose device collectives run NCCL on its GPU
// device's stream.
//
// Waiting: after queueing an NCCL call the rank records an event and polls it together with
// ncclCommGetAsyncError; past the deadline (or on an asynchronous NCCL error) it aborts the NCCL
// communicator (ncclCommAbort, on a thread of its own: it cancels NCCL's kernels but may wait for
// a stalled stream) and, through Communicator's failure guard, the host group (the other ranks'
// waits end with kAborted), and throws kDeadlineExceeded naming the operation and the group.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "comm/device_collectives.h"
#include "comm/transport.h"

namespace tessel {
class Device;
}

namespace tessel::detail {

class NcclTransport : public Transport, public DeviceCollectives {
 public:
  // Takes over `comm` (initialised for this rank on `gpu`); `host` is this rank's endpoint of
  // the same group, with the same rank and size.
  NcclTransport(std::shared_ptr<Transport> host, ncclComm_t comm, Device& gpu);
  ~NcclTransport() override;

  // Transport, delegated to the host transport.
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::vector<std::string>& members() const override { return host_->members(); }
  bool shares_memory() const override { return host_->shares_memory(); }
  std::vector<Post> exchange(const Signature& s, const Post& mine, Deadline d) override {
    return host_->exchange(s, mine, d);
  }
  std::vector<Post> share(const Signature& s, const Post& mine, Deadline d) override {
    return host_->share(s, mine, d);
  }
  void barrier(const Signature& s, Deadline d) override { host_->barrier(s, d); }
  void send(int peer, int tag, const void* data, size_t bytes, const Signature& s,
            Deadline d) override {
    host_->send(peer, tag, data, bytes, s, d);
  }
  void recv(int peer, int tag, void* data, size_t bytes, const Signature& s, Deadline d) override {
    host_->recv(peer, tag, data, bytes, s, d);
  }
  // Aborts the NCCL communicator too.
  void abort(const std::string& reason) override;
  void fail(const std::string& reason) override;
  Staging& staging() override { return host_->staging(); }
  DeviceCollectives* device_collectives() override { return this; }

  // DeviceCollectives.
  MemorySpace memory_space() const override;
  void all_reduce(const void* in, void* out, int64_t count, DType dtype, ReduceOp op,
                  const Signature& sig, Deadline deadline) override;
  void reduce(const void* in, void* out, int64_t count, DType dtype, ReduceOp op, int root,
              const Signature& sig, Deadline deadline) override;
  void broadcast(void* buffer, int64_t count, DType dtype, int root, const Signature& sig,
                 Deadline deadline) override;
  void all_gather(const void* in, void* out, const std::vector<int64_t>& counts, DType dtype,
                  const Signature& sig, Deadline deadline) override;
  void reduce_scatter(const void* in, void* out, const std::vector<int64_t>& counts, DType dtype,
                      ReduceOp op, const Signature& sig, Deadline deadline) override;
  void all_to_all(const void* in, const std::vector<int64_t>& send_counts,
                  const std::vector<int64_t>& send_offsets, void* out,
                  const std::vector<int64_t>& recv_counts,
                  const std::vector<int64_t>& recv_offsets, DType dtype, const Signature& sig,
                  Deadline deadline) override;
  void send(const void* data, int64_t count, DType dtype, int peer, const Signature& sig,
            Deadline deadline) override;
  void recv(void* data, int64_t count, DType dtype, int peer, const Signature& sig,
            Deadline deadline) override;

  ncclComm_t comm() const { return comm_; }
  cudaStream_t stream() const { return stream_; }
  int ordinal() const { return ordinal_; }

 private:
  // Checks an NCCL call's result (kInternal naming `what` and NCCL's message).
  void check(ncclResult_t result, const Signature& sig, std::string_view what);
  // Waits for the work queued on the stream so far; see the header comment.
  void wait(const Signature& sig, Deadline deadline);
  // ncclCommAbort once (later calls do nothing).
  void abort_nccl();

  std::shared_ptr<Transport> host_;
  ncclComm_t comm_ = nullptr;
  std::string device_name_;
  int ordinal_ = -1;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
  bool nccl_aborted_ = false;                   // ncclCommAbort started (the handle is gone)
  std::atomic<bool> abort_requested_{false};   // abort() or fail() was called
};

// NCCL's datatype for `dtype` (kBool as uint8 with max/min); c128 and u32:
// kInvalidArgument naming the dtype.
ncclDataType_t nccl_dtype(DType dtype, std::string_view op);
// NCCL's reduction for `op` on `dtype`: bool sum/max are max (logical or), prod/min are min
// (logical and); mean is ncclAvg on floating dtypes (integers and bool: kInvalidArgument).
ncclRedOp_t nccl_op(ReduceOp op, DType dtype, std::string_view what);

}  // namespace tessel::detail
