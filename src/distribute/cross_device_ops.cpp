// CrossDeviceOps: the public methods (TF's validation order, the single-replica shortcut) and
// the base class's hooks.
#include "tessel/distribute/cross_device_ops.h"

#include "comm/reduce_kernels.h"
#include "core/errors.h"
#include "distribute/device_groups.h"
#include "distribute/ops_internal.h"
#include "distribute/replica_thread.h"

namespace tessel {
namespace {

using detail::kOps;

// BR-70-05: these calls are cross-replica. Inside replicate()'s computation (a replica context)
// each replica would run a cross-device step of its own over devices the others use; from a
// device's own stream they would wait for themselves.
void check_controller(const Runtime& rt, const char* method) {
  if (const std::optional<detail::ReplicaThread> r = detail::current_replica_thread()) {
    detail::throw_error(ErrorCode::kFailedPrecondition, kOps,
                        "{} must be called in a cross-replica context, not inside replicate()'s "
                        "computation (here replica {} of {} is running)",
                        method, r->replica, r->num_replicas);
  }
  for (Device* d : rt.devices()) {
    if (d->stream().on_worker_thread()) {
      detail::throw_error(ErrorCode::kFailedPrecondition, kOps,
                          "{} must be called from the controller (a cross-replica context), not "
                          "from op '{}' running on {}: it would wait for its own stream",
                          method, d->stream().current_op(), d->name());
    }
  }
}

void check_distinct(const std::vector<Device*>& devices, const std::vector<std::string>& names,
                    const char* what) {
  for (size_t i = 0; i < devices.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (devices[i] == devices[j]) {
        detail::throw_invalid(kOps, "{} name device {} twice ('{}' and '{}')", what,
                              devices[i]->name(), names[j], names[i]);
      }
    }
  }
}

std::string describe(const Value& v) {
  if (const auto* t = std::get_if<Tensor>(&v)) {
    return fmt::format("{} {}", t->shape().to_string(), dtype_name(t->dtype()));
  }
  const auto& s = std::get<IndexedSlices>(v);
  return fmt::format("IndexedSlices dense_shape {} {}", s.dense_shape().to_string(),
                     dtype_name(s.dtype()));
}

// Every component must be combinable with the first one.
void check_components(const DistributedValues& v, const char* method, bool shapes_must_match) {
  const Value& first = v.value(0);
  for (int i = 1; i < v.size(); ++i) {
    const Value& x = v.value(i);
    bool ok = x.index() == first.index();
    if (ok && std::holds_alternative<Tensor>(x)) {
      const Tensor& a = std::get<Tensor>(first);
      const Tensor& b = std::get<Tensor>(x);
      ok = a.dtype() == b.dtype() && (!shapes_must_match || a.shape() == b.shape());
    } else if (ok) {
      const auto& a = std::get<IndexedSlices>(first);
      const auto& b = std::get<IndexedSlices>(x);
      ok = a.dtype() == b.dtype() && a.dense_shape() == b.dense_shape();
    }
    if (!ok) {
      detail::throw_invalid(
          kOps, "{}: component {} on {} ({}) does not match component 0 on {} ({})", method, i,
          v.devices()[static_cast<size_t>(i)], describe(x), v.devices()[0], describe(first));
    }
  }
}

// A value mixing dense and sparse components is densified (TF's aggregation adds them densely).
DistributedValues densify_mixed(const DistributedValues& v) {
  bool dense = false;
  for (const Value& x : v.values()) dense = dense || std::holds_alternative<Tensor>(x);
  if (!dense || !v.has_indexed_slices()) return v;
  std::vector<Value> out;
  for (const Value& x : v.values()) {
    if (const auto* t = std::get_if<Tensor>(&x)) {
      out.push_back(*t);
    } else {
      out.push_back(std::get<IndexedSlices>(x).to_dense());
    }
  }
  return PerReplica(v.devices(), std::move(out));
}

// The checks every reduction runs before its implementation (after the shortcut, as TF).
DistributedValues checked_for_reduce(ReduceOp op, const DistributedValues& value,
                                     const char* method) {
  if (value.empty()) detail::throw_invalid(kOps, "`per_replica_value` must be non-empty");
  if (value.has_indexed_slices() && op != ReduceOp::kSum && op != ReduceOp::kMean) {
    bool all_sparse = true;
    for (const Value& x : value.values()) all_sparse = all_sparse && x.index() == 1;
    if (all_sparse) detail::throw_invalid(kOps, "`reduce_op` must be Reduce.SUM or Reduce.MEAN.");
  }
  DistributedValues v = densify_mixed(value);
  check_components(v, method, /*shapes_must_match=*/true);
  if (!v.has_indexed_slices()) {
    try {
      detail::check_reducible(v.tensor(0).dtype(), op);
    } catch (const Error& e) {
      throw Error(e.code(), kOps, fmt::format("{}: {}", method, e.message()));
    }
  }
  return v;
}

}  // namespace

int CrossDevicePlan::num_collectives() const {
  int n = 0;
  for (const PlanStep& s : steps) n += s.kind == "all_reduce" || s.kind == "all_gather";
  return n;
}

CrossDeviceOps::CrossDeviceOps(Runtime& runtime)
    : runtime_(&runtime), groups_(std::make_unique<detail::DeviceGroups>(runtime)) {}

CrossDeviceOps::~CrossDeviceOps() = default;

std::vector<Device*> CrossDeviceOps::resolve(const std::vector<std::string>& names) const {
  std::vector<Device*> out;
  for (const std::string& n : names) out.push_back(&runtime_->device(n));
  return out;
}

CrossDevicePlan CrossDeviceOps::last_plan() const {
  std::lock_guard<std::mutex> lock(plan_mu_);
  return last_plan_;
}

int64_t CrossDeviceOps::num_collectives() const {
  std::lock_guard<std::mutex> lock(plan_mu_);
  return num_collectives_;
}

void CrossDeviceOps::begin(const char* method) {
  call_started_ = std::chrono::steady_clock::now();
  plan_ = CrossDevicePlan{};
  plan_.method = method;
}

detail::CallDeadline CrossDeviceOps::call_deadline(const CommunicationOptions& options) const {
  const auto timeout = detail::effective_timeout(options);
  return detail::CallDeadline{call_started_ + timeout, timeout};
}

std::optional<Mirrored> CrossDeviceOps::single_replica_copy(const DistributedValues& value,
                                                            const std::vector<Device*>& devices,
                                                            const std::vector<Device*>& dests,
                                                            const CommunicationOptions& options) {
  if (num_workers_ != 1 || value.size() != 1 || !detail::same_devices(devices, dests)) {
    return std::nullopt;
  }
  plan_.path = "single_replica_shortcut";
  return detail::copy_to_devices(value.value(0), devices, call_deadline(options), plan_);
}

void CrossDeviceOps::finish() {
  std::lock_guard<std::mutex> lock(plan_mu_);
  num_collectives_ += plan_.num_collectives();
  last_plan_ = plan_;
}

namespace {

// Records the plan when a call ends (success or failure), once it got past validation.
class CallScope {
 public:
  explicit CallScope(std::function<void()> finish) : finish_(std::move(finish)) {}
  ~CallScope() {
    if (validated) finish_();
  }
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;
  bool validated = false;

 private:
  std::function<void()> finish_;
};

}  // namespace

std::vector<Device*> CrossDeviceOps::destinations_of(const Destinations& destinations) const {
  if (destinations.is_empty()) detail::throw_invalid(kOps, "{}", kDestinationsEmptyMessage);
  std::vector<Device*> out = resolve(destinations.devices());
  check_distinct(out, destinations.devices(), "destinations");
  return out;
}

std::vector<Device*> CrossDeviceOps::devices_of(const DistributedValues& value) const {
  std::vector<Device*> out = resolve(value.devices());
  check_distinct(out, value.devices(), "the value's components");
  return out;
}

bool CrossDeviceOps::on_one_device_set(const std::vector<ValueDestinationPair>& pairs) const {
  bool all_match = true;
  std::vector<Device*> first;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto& [value, dest] = pairs[i];
    const std::vector<Device*> dests = destinations_of(dest);
    const std::vector<Device*> devices = devices_of(value);
    if (i == 0) first = devices;
    all_match =
        all_match && detail::same_devices(devices, dests) && detail::same_devices(devices, first);
  }
  return all_match;
}

Mirrored CrossDeviceOps::reduce(ReduceOp reduce_op, const DistributedValues& per_replica_value,
                                const Destinations& destinations,
                                const CommunicationOptions& options) {
  check_controller(*runtime_, "reduce");
  std::lock_guard<std::mutex> call(call_mu_);
  begin("reduce");
  CallScope scope([this] { finish(); });
  const std::vector<Device*> dests = destinations_of(destinations);
  const std::vector<Device*> devices = devices_of(per_replica_value);
  scope.validated = true;
  if (auto copy = single_replica_copy(per_replica_value, devices, dests, options)) return *copy;
  const DistributedValues value = checked_for_reduce(reduce_op, per_replica_value, "reduce");
  return reduce_implementation(reduce_op, value, destinations, options);
}

std::vector<Mirrored> CrossDeviceOps::batch_reduce(
    ReduceOp reduce_op, const std::vector<ValueDestinationPair>& value_destination_pairs,
    const CommunicationOptions& options) {
  check_controller(*runtime_, "batch_reduce");
  std::lock_guard<std::mutex> call(call_mu_);
  begin("batch_reduce");
  CallScope scope([this] { finish(); });
  if (value_destination_pairs.empty()) {
    scope.validated = true;
    plan_.path = "empty";
    return {};
  }
  const bool all_match = on_one_device_set(value_destination_pairs);
  scope.validated = true;
  if (num_workers_ == 1 && all_match && value_destination_pairs[0].first.size() == 1) {
    plan_.path = "single_replica_shortcut";
    std::vector<Mirrored> out;
    for (const auto& [value, dest] : value_destination_pairs) {
      out.emplace_back(detail::names_of(devices_of(value)), value.values());
    }
    return out;
  }
  std::vector<ValueDestinationPair> pairs;
  for (const auto& [value, dest] : value_destination_pairs) {
    pairs.emplace_back(checked_for_reduce(reduce_op, value, "batch_reduce"), dest);
  }
  return batch_reduce_implementation(reduce_op, pairs, options);
}

Mirrored CrossDeviceOps::broadcast(const Tensor& tensor, const Destinations& destinations) {
  check_controller(*runtime_, "broadcast");
  std::lock_guard<std::mutex> call(call_mu_);
  begin("broadcast");
  CallScope scope([this] { finish(); });
  destinations_of(destinations);
  if (!tensor.defined()) detail::throw_invalid(kOps, "broadcast of a null tensor");
  scope.validated = true;
  return broadcast_implementation(tensor, destinations);
}

Mirrored CrossDeviceOps::gather(const DistributedValues& per_replica_value,
                                const Destinations& destinations, int axis,
                                const CommunicationOptions& options) {
  check_controller(*runtime_, "gather");
  std::lock_guard<std::mutex> call(call_mu_);
  begin("gather");
  CallScope scope([this] { finish(); });
  if (per_replica_value.has_indexed_slices()) {
    detail::throw_error(ErrorCode::kUnimplemented, kOps,
                        "gather/all_gather does not support IndexedSlices");
  }
  const std::vector<Device*> dests = destinations_of(destinations);
  const std::vector<Device*> devices = devices_of(per_replica_value);
  scope.validated = true;
  if (auto copy = single_replica_copy(per_replica_value, devices, dests, options)) return *copy;
  if (per_replica_value.empty())
    detail::throw_invalid(kOps, "`per_replica_value` must be non-empty");
  check_components(per_replica_value, "gather", /*shapes_must_match=*/false);
  const Tensor& first = per_replica_value.tensor(0);
  const int rank = first.rank();
  if (axis < -rank || axis >= rank) {
    detail::throw_invalid(kOps, "gather: axis {} is out of range for rank {} values", axis, rank);
  }
  const int a = axis < 0 ? axis + rank : axis;
  for (int i = 1; i < per_replica_value.size(); ++i) {
    const Tensor& t = per_replica_value.tensor(i);
    bool ok = t.rank() == rank;
    for (int k = 0; ok && k < rank; ++k) ok = k == a || t.shape()[k] == first.shape()[k];
    if (!ok) {
      detail::throw_invalid(kOps,
                            "gather along axis {}: component {} on {} has shape {}, component 0 on "
                            "{} has shape {}; only the gathered axis may differ",
                            a, i, per_replica_value.devices()[static_cast<size_t>(i)],
                            t.shape().to_string(), per_replica_value.devices()[0],
                            first.shape().to_string());
    }
  }
  return gather_implementation(per_replica_value, destinations, a, options);
}

Mirrored CrossDeviceOps::reduce_implementation(ReduceOp, const DistributedValues&,
                                               const Destinations&, const CommunicationOptions&) {
  detail::throw_error(ErrorCode::kUnimplemented, kOps,
                      "_reduce method must be implemented in descendants.");
}

std::vector<Mirrored> CrossDeviceOps::batch_reduce_implementation(
    ReduceOp, const std::vector<ValueDestinationPair>&, const CommunicationOptions&) {
  detail::throw_error(ErrorCode::kUnimplemented, kOps,
                      "batch_reduce_implementation method must be implemented in descendants.");
}

Mirrored CrossDeviceOps::broadcast_implementation(const Tensor& tensor,
                                                  const Destinations& destinations) {
  plan_.path = "broadcast";
  return detail::copy_to_devices(tensor, destinations_of(destinations),
                                 call_deadline(CommunicationOptions()), plan_);
}

Mirrored CrossDeviceOps::gather_implementation(const DistributedValues&, const Destinations&, int,
                                               const CommunicationOptions&) {
  detail::throw_error(ErrorCode::kUnimplemented, kOps,
                      "_gather method must be implemented in descendants.");
}

std::variant<Tensor, Mirrored> reduce_non_distributed_value(ReduceOp reduce_op, const Tensor& value,
                                                            const Destinations& destinations,
                                                            int num_replicas_in_graph,
                                                            Runtime& runtime) {
  if (!value.defined())
    detail::throw_invalid(kOps, "reduce_non_distributed_value of a null tensor");
  if (reduce_op == ReduceOp::kMean || reduce_op == ReduceOp::kMax || reduce_op == ReduceOp::kMin) {
    return value;
  }
  if (num_replicas_in_graph != 1) {
    detail::throw_invalid(kOps,
                          "A non-DistributedValues value {} cannot be reduced with the given "
                          "reduce op {}.",
                          value.to_string(), reduce_op_name(reduce_op));
  }
  CrossDeviceOps ops(runtime);
  return ops.broadcast(value, destinations);
}

std::vector<std::string> first_devices(int count, const Runtime& runtime) {
  if (count < 0 || count > runtime.num_devices()) {
    detail::throw_invalid(kOps, "{} devices requested but the runtime has {}", count,
                          runtime.num_devices());
  }
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) out.push_back(runtime.device(i).name());
  return out;
}

}  // namespace tessel
