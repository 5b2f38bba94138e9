// Internal: Communicator's collectives on device-memory tensors (device_collectives.h): the
// host meeting first (signatures compared, missing ranks named), then the transport's device
// collectives. Called by communicator.cpp after its argument checks, inside its failure guard.
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
// The same for a call on two tensors (either may be null): one stages and neither is a strided
// view in device memory.
bool stages_through_host(Transport& transport, const Tensor& a, const Tensor& b);
// A host copy of `t`; a null tensor stays null.
Tensor host_copy(const Tensor& t);
// `host` copied into memory of `like`'s allocator (a device's); `host` itself when `like` is
// null or in host memory.
Tensor copy_like(const Tensor& host, const Tensor& like);

}  // namespace tessel::detail
