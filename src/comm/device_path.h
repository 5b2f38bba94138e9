// Internal: Communicator's collectives on device-memory tensors (device_collectives.h): the
// host meeting first (signatures compared, missing ranks named), then the transport's device
// collectives. Called by communicator.cpp after its argument checks, inside its failure guard.
// Device memory that has no device path is staged through host copies instead (below).
#pragma once

#include <vector>

#include "comm/device_collectives.h"
#include "tessel/core/tensor.h"

namespace tessel::detail {

void device_all_reduce(DeviceCollectives& dev, Transport& t, const Tensor& input, Tensor& output,
                       ReduceOp op, const Signature& sig, Deadline deadline);
void device_reduce(DeviceCollectives& dev, Transport& t, const Tensor& input, Tensor& output,
                   ReduceOp op, int root, const Signature& sig, Deadline deadline);
void device_broadcast(DeviceCollectives& dev, Transport& t, Tensor& tensor, int root,
                      const Signature& sig, Deadline deadline);
// Blocks along `axis` may differ in size between ranks (learnt at the meeting).
Tensor device_all_gather(DeviceCollectives& dev, Transport& t, const Tensor& input, int axis,
                         const Signature& sig, Deadline deadline);
// `rows`: rows kept by each rank (axis 0).
Tensor device_reduce_scatter(DeviceCollectives& dev, Transport& t, const Tensor& input,
                             ReduceOp op, const std::vector<int64_t>& rows, const Signature& sig,
                             Deadline deadline);
// `rows`: rows sent to each rank (axis 0); what each rank receives is learnt at the meeting.
Tensor device_all_to_all(DeviceCollectives& dev, Transport& t, const Tensor& input,
                         const std::vector<int64_t>& rows, const Signature& sig, Deadline deadline);

// Host staging: a collective on device-memory tensors over a transport without device
// collectives (an in-process or MPI group of GPU devices), or of a collective without a device
// version (device_version false: the block collectives, gather, scatter), runs on host copies,
// and the results are copied back. True when `t` is defined and in device memory and either.
// A strided view in device memory never stages (false): a host copy would hide its stride (and
// copying one out of device memory is unimplemented), so the call goes on to its argument
// checks, which refuse it with kInvalidArgument and abort the group, as for a host view.
bool stages_through_host(Transport& transport, const Tensor& t, bool device_version = true);
// A host copy of `t`; a null tensor stays null.
Tensor host_copy(const Tensor& t);
// `host` copied into memory of `like`'s allocator (a device's); `host` itself when `like` is
// null or in host memory.
Tensor copy_like(const Tensor& host, const Tensor& like);

// The host staging of one Communicator collective call, decided once for the call from every
// tensor it takes: the input it reads and the output it writes (either may be null; a tensor the
// call updates in place, as broadcast and recv do, is both). The call stages when either tensor
// stages (above) and neither is a strided view in device memory. A call that stages runs again
// on input() and output(), host tensors, then finish() brings the result back:
//
//   if (detail::HostStaging host{*transport_, input, &output}) {
//     all_reduce(host.input(), host.output(), op, options);
//     return host.finish();
//   }
//
// input() is a host copy of the input. output() is that same copy when the output shares the
// input's storage (in place: broadcast, recv, an all_reduce into its input), else a fresh host
// tensor: the output's old bytes are never read. A null tensor stays null, for the argument
// checks to refuse it on every rank.
class HostStaging {
 public:
  HostStaging(Transport& transport, const Tensor& input, Tensor* output = nullptr,
              bool device_version = true);
  explicit operator bool() const { return staged_; }

  const Tensor& input() const { return input_; }
  Tensor& output() { return output_; }
  // Copies output() into the caller's output (a null one stays null).
  void finish();
  // `result` of the call on input() (a collective that returns its result), in the memory of
  // the caller's input.
  Tensor finish(const Tensor& result) const;

 private:
  const Tensor& caller_input_;
  Tensor* caller_output_;
  bool staged_ = false;
  Tensor input_, output_;
};

}  // namespace tessel::detail
