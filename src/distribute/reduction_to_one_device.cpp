// ReductionToOneDevice: reduce (or concatenate) on one device, then copy to the destinations.
#include "distribute/ops_internal.h"
#include "tessel/distribute/cross_device_ops.h"

namespace tessel {

ReductionToOneDevice::ReductionToOneDevice(std::string reduce_to_device,
                                           AccumulationFn accumulation_fn, Runtime& runtime)
    : CrossDeviceOps(runtime), accumulation_fn_(std::move(accumulation_fn)) {
  if (!reduce_to_device.empty()) reduce_to_device_ = runtime.device(reduce_to_device).name();
}

Mirrored ReductionToOneDevice::reduce_implementation(ReduceOp reduce_op,
                                                     const DistributedValues& value,
                                                     const Destinations& destinations,
                                                     const CommunicationOptions& options) {
  const std::vector<Device*> dests = destinations_of(destinations);
  Device& rd = reduce_to_device_.empty() ? *dests.front() : runtime().device(reduce_to_device_);
  plan().path = "reduce_to_one_device";
  return detail::reduce_to_one(rd, accumulation_fn_, reduce_op, value, devices_of(value), dests,
                               call_deadline(options), plan());
}

std::vector<Mirrored> ReductionToOneDevice::batch_reduce_implementation(
    ReduceOp reduce_op, const std::vector<ValueDestinationPair>& pairs,
    const CommunicationOptions& options) {
  std::vector<Mirrored> out;
  for (const auto& [value, dest] : pairs) {
    out.push_back(reduce_implementation(reduce_op, value, dest, options));
  }
  return out;
}

Mirrored ReductionToOneDevice::gather_implementation(const DistributedValues& value,
                                                     const Destinations& destinations, int axis,
                                                     const CommunicationOptions& options) {
  const std::vector<Device*> dests = destinations_of(destinations);
  Device& rd = reduce_to_device_.empty() ? *dests.front() : runtime().device(reduce_to_device_);
  plan().path = "reduce_to_one_device";
  return detail::gather_to_one(rd, value, devices_of(value), dests, axis,
                               call_deadline(options), plan());
}

}  // namespace tessel
