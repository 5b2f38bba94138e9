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

// kUnimplemented when `t` is in device memory: `op` has no device version yet.
void reject_device_memory(const Tensor& t, std::string_view op);

}  // namespace tessel::detail
