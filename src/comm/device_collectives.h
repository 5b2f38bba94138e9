// Internal: collectives over device memory, offered by transports that have them (the NCCL
// transport, src/comm/nccl/). Communicator (communicator.cpp) routes a call here when its tensors
// are in device memory; host tensors keep the host algorithms.
//
// Every call is one rank's part, as with Communicator; counts are elements; pointers are device
// addresses on the transport's GPU. A call returns when its work on the GPU is done, or throws:
// kDeadlineExceeded past `deadline` (the group is aborted, so no rank hangs), kAborted when the
// group was aborted, kInternal for a library error. The ranks' signatures were compared before
// (Communicator meets on the host first), so a call here only moves data.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "comm/transport.h"
#include "tessel/core/dtype.h"
#include "tessel/core/memory_space.h"
#include "tessel/core/reduce_op.h"
#include "tessel/core/tensor.h"

namespace tessel::detail {

class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;

  // The memory this rank's buffers must be in.
  virtual MemorySpace memory_space() const = 0;

  virtual void all_reduce(const void* in, void* out, int64_t count, DType dtype, ReduceOp op,
                          const Signature& sig, Deadline deadline) = 0;
  // `out` is read on `root` only.
  virtual void reduce(const void* in, void* out, int64_t count, DType dtype, ReduceOp op,
                      int root, const Signature& sig, Deadline deadline) = 0;
  virtual void broadcast(void* buffer, int64_t count, DType dtype, int root, const Signature& sig,
                         Deadline deadline) = 0;
  // Rank r's `counts[r]` elements land at out + offset_r (offsets: the running sum of counts).
  virtual void all_gather(const void* in, void* out, const std::vector<int64_t>& counts,
                          DType dtype, const Signature& sig, Deadline deadline) = 0;
  // Reduces `in` (sum of counts elements) over the ranks; rank r keeps block r in `out`.
  virtual void reduce_scatter(const void* in, void* out, const std::vector<int64_t>& counts,
                              DType dtype, ReduceOp op, const Signature& sig, Deadline deadline) = 0;
  // Sends send_counts[j] elements from in + send_offsets[j] to rank j and receives
  // recv_counts[j] elements at out + recv_offsets[j] from rank j.
  virtual void all_to_all(const void* in, const std::vector<int64_t>& send_counts,
                          const std::vector<int64_t>& send_offsets, void* out,
                          const std::vector<int64_t>& recv_counts,
                          const std::vector<int64_t>& recv_offsets, DType dtype,
                          const Signature& sig, Deadline deadline) = 0;
  virtual void send(const void* data, int64_t count, DType dtype, int peer, const Signature& sig,
                    Deadline deadline) = 0;
  virtual void recv(void* data, int64_t count, DType dtype, int peer, const Signature& sig,
                    Deadline deadline) = 0;
};

// The device collectives that must run `op` on `t`: null when t is in host memory (the host
// algorithms run); kInvalidArgument when t is in device memory and this transport has none, or
// t is in another device's memory than the transport's.
DeviceCollectives* device_collectives_for(Transport& transport, const Tensor& t,
                                          std::string_view op);

}  // namespace tessel::detail
