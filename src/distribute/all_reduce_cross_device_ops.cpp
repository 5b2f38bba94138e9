// AllReduceCrossDeviceOps, NcclAllReduce, HierarchicalCopyAllReduce: packed all-reduce over the
// value's devices, ReductionToOneDevice otherwise.
#include <map>

#include "core/errors.h"
#include "distribute/ops_internal.h"
#include "tessel/alloc/fusion_rules.h"
#include "tessel/distribute/cross_device_ops.h"

namespace tessel {
namespace {

constexpr std::string_view kComponent = "AllReduceCrossDeviceOps";

Algorithm algorithm_of(const std::string& all_reduce_alg) {
  if (all_reduce_alg == "nccl") return Algorithm::kAuto;
  if (all_reduce_alg == "hierarchical_copy") return Algorithm::kHierarchical;
  try {
    return algorithm_from_name(all_reduce_alg);
  } catch (const Error&) {
    detail::throw_invalid(kComponent,
                          "unknown all_reduce_alg '{}': use 'nccl', 'hierarchical_copy' or a "
                          "tessel algorithm (auto, direct, ring, halving_doubling, "
                          "reduce_to_one, hierarchical)",
                          all_reduce_alg);
  }
}

int checked_packs(int num_packs, const char* who) {
  if (num_packs < 0) {
    detail::throw_invalid(kComponent, "{} requires num_packs >= 0, but {} is specified", who,
                          num_packs);
  }
  return num_packs;
}

}  // namespace

AllReduceCrossDeviceOps::AllReduceCrossDeviceOps(std::string all_reduce_alg, int num_packs,
                                                 Runtime& runtime)
    : CrossDeviceOps(runtime),
      all_reduce_alg_(std::move(all_reduce_alg)),
      algorithm_(algorithm_of(all_reduce_alg_)),
      num_packs_(checked_packs(num_packs, "AllReduceCrossDeviceOps")) {}

NcclAllReduce::NcclAllReduce(int num_packs, Runtime& runtime)
    : AllReduceCrossDeviceOps("nccl", checked_packs(num_packs, "NCCL all-reduce"), runtime) {}

HierarchicalCopyAllReduce::HierarchicalCopyAllReduce(int num_packs, Runtime& runtime)
    : AllReduceCrossDeviceOps("hierarchical_copy", checked_packs(num_packs, "HierarchicalCopy"),
                              runtime) {}

Mirrored AllReduceCrossDeviceOps::reduce_implementation(ReduceOp reduce_op,
                                                        const DistributedValues& value,
                                                        const Destinations& destinations,
                                                        const CommunicationOptions& options) {
  const std::vector<Device*> dests = destinations_of(destinations);
  if (detail::same_devices(devices_of(value), dests)) {
    return batch_all_reduce(reduce_op, {{value, destinations}}, options).front();
  }
  plan().path = "reduce_to_one_device";
  return detail::reduce_to_one(*dests.front(), nullptr, reduce_op, value, devices_of(value), dests,
                               call_deadline(options), plan());
}

std::vector<Mirrored> AllReduceCrossDeviceOps::batch_reduce_implementation(
    ReduceOp reduce_op, const std::vector<ValueDestinationPair>& pairs,
    const CommunicationOptions& options) {
  const bool all_match = on_one_device_set(pairs);
  if (all_match) return batch_all_reduce(reduce_op, pairs, options);
  std::vector<Mirrored> out;
  for (const auto& [value, dest] : pairs) {
    out.push_back(reduce_implementation(reduce_op, value, dest, options));
  }
  plan().path = "per_pair";
  return out;
}

std::vector<Mirrored> AllReduceCrossDeviceOps::batch_all_reduce(
    ReduceOp reduce_op, const std::vector<ValueDestinationPair>& pairs,
    const CommunicationOptions& options) {
  plan().path = "all_reduce";
  const detail::CallDeadline deadline = call_deadline(options);
  const std::vector<Device*> devices = devices_of(pairs.front().first);
  std::vector<int> dense;
  std::vector<int> sparse;
  for (size_t k = 0; k < pairs.size(); ++k) {
    (pairs[k].first.has_indexed_slices() ? sparse : dense).push_back(static_cast<int>(k));
  }

  std::vector<std::vector<Tensor>> reduced;  // [device][dense index]
  if (!dense.empty()) {
    std::vector<std::vector<Tensor>> inputs(devices.size());
    for (int k : dense) {
      const DistributedValues& v = pairs[static_cast<size_t>(k)].first;
      const std::vector<Device*> vd = devices_of(v);
      for (size_t d = 0; d < devices.size(); ++d) {
        const auto at = std::find(vd.begin(), vd.end(), devices[d]) - vd.begin();
        inputs[d].push_back(v.tensor(static_cast<int>(at)));
      }
    }
    std::vector<detail::PackSpec> packs;
    if (num_packs_ == 0) {
      for (size_t i = 0; i < dense.size(); ++i) {
        packs.push_back({{static_cast<int>(i)}, {inputs[0][i].num_elements()}});
      }
    } else {
      std::map<DType, size_t> by_dtype;  // dtype -> its pack spec, in order of first appearance
      for (size_t i = 0; i < dense.size(); ++i) {
        const DType dt = inputs[0][i].dtype();
        auto [it, added] = by_dtype.try_emplace(dt, packs.size());
        if (added) packs.emplace_back();
        packs[it->second].tensors.push_back(static_cast<int>(i));
      }
      for (detail::PackSpec& p : packs) {
        int64_t total = 0;
        for (int i : p.tensors) total += inputs[0][static_cast<size_t>(i)].num_elements();
        p.ranges = split_into_packs(total, num_packs_);
      }
    }
    CollectiveOptions collective;
    collective.algorithm = algorithm_;
    const detail::GroupJob job = detail::make_group_job(
        groups(), static_cast<int>(devices.size()), devices, deadline, collective);
    const int64_t divisor = static_cast<int64_t>(devices.size()) * num_between_graph_workers();
    reduced = detail::all_reduce_dense(job, inputs, packs, reduce_op, divisor, plan());
  }

  std::vector<std::optional<Mirrored>> out(pairs.size());
  for (size_t i = 0; i < dense.size(); ++i) {
    const auto& [value, dest] = pairs[static_cast<size_t>(dense[i])];
    const std::vector<Device*> dests = destinations_of(dest);
    std::vector<Value> values;
    for (Device* d : dests) {
      const auto at = std::find(devices.begin(), devices.end(), d) - devices.begin();
      values.push_back(reduced[static_cast<size_t>(at)][i]);
    }
    out[static_cast<size_t>(dense[i])].emplace(detail::names_of(dests), std::move(values));
  }
  // TF: "Efficient allreduce is not supported for IndexedSlices": each one is reduced on its
  // first device and copied back to its devices (an all-gather in disguise).
  for (int k : sparse) {
    const auto& [value, dest] = pairs[static_cast<size_t>(k)];
    const std::vector<Device*> vd = devices_of(value);
    out[static_cast<size_t>(k)] = detail::reduce_to_one(*vd.front(), nullptr, reduce_op, value, vd,
                                                        destinations_of(dest), deadline, plan());
  }
  std::vector<Mirrored> result;
  for (auto& m : out) result.push_back(std::move(*m));
  return result;
}

Mirrored AllReduceCrossDeviceOps::gather_implementation(const DistributedValues& value,
                                                        const Destinations& destinations, int axis,
                                                        const CommunicationOptions& options) {
  // TF: "gather/all_gather with NCCL or HierarchicalCopy is not supported. Falling back to
  // gather on one device and then broadcast."
  const std::vector<Device*> dests = destinations_of(destinations);
  plan().path = "reduce_to_one_device";
  return detail::gather_to_one(*dests.front(), value, devices_of(value), dests, axis,
                               call_deadline(options), plan());
}

}  // namespace tessel
