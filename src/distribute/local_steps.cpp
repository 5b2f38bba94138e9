// Internal: steps that run without a communicator: copies, reduce-to-one, gather-to-one.
#include <algorithm>
#include <memory>

#include "core/errors.h"
#include "distribute/kernels.h"
#include "distribute/ops_internal.h"
#include "runtime/launch.h"

namespace tessel::detail {
namespace {

int64_t elements_of(const Value& v) {
  if (const auto* t = std::get_if<Tensor>(&v)) return t->num_elements();
  return std::get<IndexedSlices>(v).values().num_elements();
}

DType dtype_of_value(const Value& v) {
  if (const auto* t = std::get_if<Tensor>(&v)) return t->dtype();
  return std::get<IndexedSlices>(v).dtype();
}

PlanStep copy_step(const Value& v, const std::vector<Device*>& dests) {
  return PlanStep{"copy", "", 1, elements_of(v), dtype_of_value(v), names_of(dests)};
}

std::vector<Tensor> dense_components(const DistributedValues& value) {
  std::vector<Tensor> out;
  for (int i = 0; i < value.size(); ++i) out.push_back(value.tensor(i));
  return out;
}

}  // namespace

std::chrono::milliseconds effective_timeout(const CommunicationOptions& options) {
  const auto t = options.collective_options().timeout;
  return t.count() > 0 ? t : default_collective_timeout();
}

bool same_devices(const std::vector<Device*>& a, const std::vector<Device*>& b) {
  std::vector<Device*> x = a;
  std::vector<Device*> y = b;
  std::sort(x.begin(), x.end());
  std::sort(y.begin(), y.end());
  x.erase(std::unique(x.begin(), x.end()), x.end());
  y.erase(std::unique(y.begin(), y.end()), y.end());
  return x == y;
}

std::vector<std::string> names_of(const std::vector<Device*>& devices) {
  std::vector<std::string> out;
  for (const Device* d : devices) out.push_back(d->name());
  return out;
}

std::string resolved_algorithm_name(Algorithm algorithm) {
  return std::string(
      algorithm_name(algorithm == Algorithm::kAuto ? Algorithm::kDirect : algorithm));
}

Mirrored copy_to_devices(const Value& value, const std::vector<Device*>& dests,
                         const CallDeadline& deadline, CrossDevicePlan& plan) {
  auto results = std::make_shared<std::vector<Value>>(dests.size(), Value(Tensor()));
  std::vector<StreamTask> tasks;
  for (size_t j = 0; j < dests.size(); ++j) {
    Device* d = dests[j];
    tasks.push_back({d, [results, j, d, value] { (*results)[j] = copy_value(*d, value); }});
  }
  plan.steps.push_back(copy_step(value, dests));
  run_on_streams("CrossDeviceOps", "copy", std::move(tasks), deadline);
  return Mirrored(names_of(dests), *results);
}

Mirrored reduce_to_one(Device& reduce_device, const ReductionToOneDevice::AccumulationFn& fn,
                       ReduceOp op, const DistributedValues& value,
                       const std::vector<Device*>& value_devices, const std::vector<Device*>& dests,
                       const CallDeadline& deadline, CrossDevicePlan& plan) {
  const int64_t count = value.size();
  auto results = std::make_shared<std::vector<Value>>(dests.size(), Value(Tensor()));
  Device* rd = &reduce_device;
  const bool sparse = value.has_indexed_slices();
  const bool use_fn = fn && !sparse && (op == ReduceOp::kSum || op == ReduceOp::kMean);
  auto work = [results, rd, dests, value, op, count, sparse, use_fn, fn] {
    Value reduced;
    if (sparse) {
      std::vector<IndexedSlices> slices;
      for (int i = 0; i < value.size(); ++i) slices.push_back(value.indexed_slices(i));
      reduced = reduce_indexed_slices(*rd, slices, op, count);
    } else if (use_fn) {
      const std::vector<Tensor> inputs = dense_components(value);
      const Tensor sum = fn(inputs);
      if (!sum.defined() || !(sum.shape() == inputs[0].shape()) ||
          sum.dtype() != inputs[0].dtype()) {
        throw_invalid(kOps,
                      "accumulation_fn returned {} for inputs of shape {} and dtype {}; it must "
                      "return a tensor of the same shape and dtype",
                      sum.defined()
                          ? sum.shape().to_string() + " " + std::string(dtype_name(sum.dtype()))
                          : std::string("a null tensor"),
                      inputs[0].shape().to_string(), dtype_name(inputs[0].dtype()));
      }
      Tensor out = copy_to(*rd, sum);
      if (op == ReduceOp::kMean) divide_in_place(out, count);
      reduced = out;
    } else {
      reduced = reduce_tensors(*rd, dense_components(value), op, count);
    }
    for (size_t j = 0; j < dests.size(); ++j) {
      (*results)[j] = dests[j] == rd ? reduced : copy_value(*dests[j], reduced);
    }
  };
  const Value& first = value.value(0);
  plan.steps.push_back(PlanStep{"reduce_to_one", rd->name(), 1, elements_of(first),
                                dtype_of_value(first), names_of(value_devices)});
  plan.steps.push_back(copy_step(first, dests));
  if (op == ReduceOp::kMean) plan.mean_divisors.push_back(count);
  run_on_streams("CrossDeviceOps", "reduce_to_one", {{rd, work}}, deadline);
  return Mirrored(names_of(dests), *results);
}

Mirrored gather_to_one(Device& reduce_device, const DistributedValues& value,
                       const std::vector<Device*>& value_devices, const std::vector<Device*>& dests,
                       int axis, const CallDeadline& deadline, CrossDevicePlan& plan) {
  auto results = std::make_shared<std::vector<Value>>(dests.size(), Value(Tensor()));
  Device* rd = &reduce_device;
  const std::vector<Tensor> inputs = dense_components(value);
  auto work = [results, rd, dests, inputs, axis] {
    const Tensor gathered = concat(*rd, inputs, axis);
    for (size_t j = 0; j < dests.size(); ++j) {
      (*results)[j] = dests[j] == rd ? gathered : copy_to(*dests[j], gathered);
    }
  };
  int64_t total = 0;
  for (const Tensor& t : inputs) total += t.num_elements();
  plan.steps.push_back(PlanStep{"gather_to_one", rd->name(), static_cast<int>(inputs.size()), total,
                                inputs[0].dtype(), names_of(value_devices)});
  plan.steps.push_back(PlanStep{"copy", "", 1, total, inputs[0].dtype(), names_of(dests)});
  run_on_streams("CrossDeviceOps", "gather_to_one", {{rd, work}}, deadline);
  return Mirrored(names_of(dests), *results);
}

Mirrored place_results(const std::vector<Device*>& group_devices, const std::vector<Value>& results,
                       const std::vector<Device*>& dests, const CallDeadline& deadline,
                       CrossDevicePlan& plan) {
  std::vector<Value> placed(dests.size(), Value(Tensor()));
  std::vector<Device*> missing;
  std::vector<size_t> missing_at;
  for (size_t j = 0; j < dests.size(); ++j) {
    auto it = std::find(group_devices.begin(), group_devices.end(), dests[j]);
    if (it != group_devices.end()) {
      placed[j] = results[static_cast<size_t>(it - group_devices.begin())];
    } else {
      missing.push_back(dests[j]);
      missing_at.push_back(j);
    }
  }
  if (!missing.empty()) {
    const Mirrored copies = copy_to_devices(results.front(), missing, deadline, plan);
    for (size_t m = 0; m < missing.size(); ++m)
      placed[missing_at[m]] = copies.value(static_cast<int>(m));
  }
  return Mirrored(names_of(dests), placed);
}

}  // namespace tessel::detail
