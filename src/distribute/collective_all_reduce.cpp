// CollectiveAllReduce: collectives over group_size devices (this worker's and the others'),
// bytes_per_pack packing, MEAN over the whole group.
#include <algorithm>

#include "core/errors.h"
#include "distribute/ops_internal.h"
#include "tessel/alloc/fusion_rules.h"
#include "tessel/distribute/cross_device_ops.h"

namespace tessel {
namespace {

constexpr std::string_view kComponent = "CollectiveAllReduce";

// TF's dense batch plan: reverse the batch (gradients become ready roughly in reverse), group by
// bytes_per_pack, one all-reduce per pack. tessel also closes a pack where the dtype changes
// (one buffer holds one dtype).
std::vector<detail::PackSpec> plan_packs(const std::vector<Tensor>& tensors,
                                         int64_t bytes_per_pack) {
  std::vector<int> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(tensors.size() - 1 - i);
  std::vector<int64_t> bytes;
  for (int i : order)
    bytes.push_back(static_cast<int64_t>(tensors[static_cast<size_t>(i)].nbytes()));
  std::vector<detail::PackSpec> packs;
  for (const std::vector<int>& group : group_by_size(bytes, bytes_per_pack)) {
    detail::PackSpec* current = nullptr;
    for (int pos : group) {
      const int i = order[static_cast<size_t>(pos)];
      if (current == nullptr || tensors[static_cast<size_t>(current->tensors.back())].dtype() !=
                                    tensors[static_cast<size_t>(i)].dtype()) {
        packs.emplace_back();
        current = &packs.back();
      }
      current->tensors.push_back(i);
    }
  }
  for (detail::PackSpec& p : packs) {
    int64_t total = 0;
    for (int i : p.tensors) total += tensors[static_cast<size_t>(i)].num_elements();
    p.ranges = {total};
    p.scoped = true;
  }
  return packs;
}

}  // namespace

CollectiveAllReduce::CollectiveAllReduce(std::vector<std::string> devices, int group_size,
                                         CommunicationOptions options, Runtime& runtime)
    : CrossDeviceOps(runtime), group_size_(group_size), options_(options) {
  if (devices.empty()) detail::throw_invalid(kComponent, "devices must not be empty");
  if (group_size < 1)
    detail::throw_invalid(kComponent, "group_size must be >= 1, got {}", group_size);
  if (group_size % static_cast<int>(devices.size()) != 0) {
    detail::throw_invalid(kComponent,
                          "group_size must be divisible by the number of devices. group_size "
                          "{}, {} devices",
                          group_size, devices.size());
  }
  const std::vector<Device*> resolved = resolve(devices);
  for (size_t i = 0; i < resolved.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (resolved[i] == resolved[j]) {
        detail::throw_invalid(kComponent, "device {} is given twice ('{}' and '{}')",
                              resolved[i]->name(), devices[j], devices[i]);
      }
    }
    devices_.push_back(resolved[i]->name());
  }
  set_num_between_graph_workers(group_size / static_cast<int>(devices.size()));
}

std::vector<Mirrored> CollectiveAllReduce::all_reduce_values(
    ReduceOp reduce_op, const std::vector<DistributedValues>& values,
    const CommunicationOptions& call_options) {
  const CommunicationOptions options = options_.merge(call_options);
  const std::vector<Device*> devices = resolve(devices_);
  const detail::CallDeadline deadline = call_deadline(options);
  const detail::GroupJob job = detail::make_group_job(groups(), group_size_, devices, deadline,
                                                      options.collective_options());

  // Components by this object's device order.
  std::vector<std::vector<Value>> by_device(values.size());
  for (size_t k = 0; k < values.size(); ++k) {
    const std::vector<Device*> vd = devices_of(values[k]);
    if (!detail::same_devices(vd, devices) || vd.size() != devices.size()) {
      detail::throw_invalid(kComponent,
                            "the value's devices [{}] are not this object's devices [{}]",
                            fmt::join(values[k].devices(), ", "), fmt::join(devices_, ", "));
    }
    for (Device* d : devices) {
      by_device[k].push_back(
          values[k].value(static_cast<int>(std::find(vd.begin(), vd.end(), d) - vd.begin())));
    }
  }
  std::vector<int> dense;
  std::vector<int> sparse;
  for (size_t k = 0; k < values.size(); ++k) {
    (values[k].has_indexed_slices() ? sparse : dense).push_back(static_cast<int>(k));
  }
  std::vector<std::vector<Value>> results(values.size());
  if (!dense.empty()) {
    std::vector<std::vector<Tensor>> inputs(devices.size());
    for (size_t d = 0; d < devices.size(); ++d) {
      for (int k : dense)
        inputs[d].push_back(std::get<Tensor>(by_device[static_cast<size_t>(k)][d]));
    }
    const auto packs = plan_packs(inputs[0], options.bytes_per_pack());
    const auto reduced =
        detail::all_reduce_dense(job, inputs, packs, reduce_op, group_size_, plan());
    for (size_t i = 0; i < dense.size(); ++i) {
      for (size_t d = 0; d < devices.size(); ++d)
        results[static_cast<size_t>(dense[i])].push_back(reduced[d][i]);
    }
  }
  for (int k : sparse) {
    std::vector<IndexedSlices> inputs;
    for (const Value& v : by_device[static_cast<size_t>(k)])
      inputs.push_back(std::get<IndexedSlices>(v));
    for (IndexedSlices& s :
         detail::all_reduce_sparse(job, inputs, reduce_op, group_size_, plan())) {
      results[static_cast<size_t>(k)].push_back(std::move(s));
    }
  }
  std::vector<Mirrored> out;
  for (auto& r : results) out.emplace_back(devices_, std::move(r));
  return out;
}

Mirrored CollectiveAllReduce::reduce_implementation(ReduceOp reduce_op,
                                                    const DistributedValues& value,
                                                    const Destinations& destinations,
                                                    const CommunicationOptions& options) {
  plan().path = "collective";
  const std::vector<Device*> dests = destinations_of(destinations);
  const Mirrored reduced = all_reduce_values(reduce_op, {value}, options).front();
  return detail::place_results(resolve(devices_), reduced.values(), dests,
                               call_deadline(options_.merge(options)), plan());
}

std::vector<Mirrored> CollectiveAllReduce::batch_reduce_implementation(
    ReduceOp reduce_op, const std::vector<ValueDestinationPair>& pairs,
    const CommunicationOptions& options) {
  const bool all_match = on_one_device_set(pairs);
  std::vector<Mirrored> out;
  if (!all_match) {
    // TF: "Efficient batch_reduce is not supported if destinations are different."
    for (const auto& [value, dest] : pairs) {
      out.push_back(reduce_implementation(reduce_op, value, dest, options));
    }
    plan().path = "per_pair";
    return out;
  }
  plan().path = "collective";
  std::vector<DistributedValues> values;
  for (const auto& pair : pairs) values.push_back(pair.first);
  const std::vector<Mirrored> reduced = all_reduce_values(reduce_op, values, options);
  const std::vector<Device*> devices = resolve(devices_);
  const detail::CallDeadline deadline = call_deadline(options_.merge(options));
  for (size_t k = 0; k < pairs.size(); ++k) {
    out.push_back(detail::place_results(devices, reduced[k].values(),
                                        destinations_of(pairs[k].second), deadline, plan()));
  }
  return out;
}

Mirrored CollectiveAllReduce::gather_implementation(const DistributedValues& value,
                                                    const Destinations& destinations, int axis,
                                                    const CommunicationOptions& call_options) {
  plan().path = "collective";
  const CommunicationOptions options = options_.merge(call_options);
  const std::vector<Device*> devices = resolve(devices_);
  const std::vector<Device*> vd = devices_of(value);
  if (!detail::same_devices(vd, devices) || vd.size() != devices.size()) {
    detail::throw_invalid(kComponent, "the value's devices [{}] are not this object's devices [{}]",
                          fmt::join(value.devices(), ", "), fmt::join(devices_, ", "));
  }
  std::vector<Tensor> inputs;
  for (Device* d : devices) {
    inputs.push_back(
        value.tensor(static_cast<int>(std::find(vd.begin(), vd.end(), d) - vd.begin())));
  }
  const detail::CallDeadline deadline = call_deadline(options);
  const detail::GroupJob job = detail::make_group_job(groups(), group_size_, devices, deadline,
                                                      options.collective_options());
  const std::vector<Tensor> gathered = detail::all_gather(job, inputs, axis, plan());
  return detail::place_results(devices, std::vector<Value>(gathered.begin(), gathered.end()),
                               destinations_of(destinations), deadline, plan());
}

}  // namespace tessel
