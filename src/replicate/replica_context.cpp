// ReplicaContext (single-replica base, argument checks) and GroupReplicaContext, the context of
// replicate()'s replicas (see replica_context.h, group_replica_context.h).
#include "tessel/replicate/replica_context.h"

#include <fmt/format.h>

#include <memory>
#include <utility>

#include "core/errors.h"
#include "replicate/group_replica_context.h"
#include "tessel/dtensor/relayout.h"

namespace tessel {
namespace {

constexpr const char* kComponent = "ReplicaContext";

// The sharding specs and Partial dims of a layout without its mesh: what must agree between
// the replicas (each has its own mesh).
std::string layout_without_mesh(const Layout& layout) {
  const std::string text = layout.to_string();
  return text.substr(0, text.find(" mesh:"));
}

std::string describe(const DTensor& x) {
  return fmt::format("{}{} {}", dtype_name(x.dtype()), x.shape().to_string(),
                     layout_without_mesh(x.layout()));
}

bool linear(ReduceOp op) { return op == ReduceOp::kSum || op == ReduceOp::kMean; }

// Whether reducing every core's component over the replicas with `op` keeps the pending
// reductions of x's Partial dims valid: both linear, or the same op (max of maxes, ...).
bool commutes_with_partial(const Layout& layout, ReduceOp op) {
  for (const PartialDim& p : layout.partial()) {
    if (!(linear(p.op) && linear(op)) && p.op != op) return false;
  }
  return true;
}

}  // namespace

ReplicaContext::ReplicaContext(int replica_id, int num_replicas, Mesh mesh, Runtime& runtime)
    : replica_id_(replica_id),
      num_replicas_(num_replicas),
      mesh_(std::move(mesh)),
      runtime_(&runtime) {
  if (num_replicas < 1 || replica_id < 0 || replica_id >= num_replicas) {
    detail::throw_invalid(kComponent, "replica_id {} must lie in [0, num_replicas = {})",
                          replica_id, num_replicas);
  }
  if (mesh_.is_empty() || mesh_.is_single_device()) {
    detail::throw_invalid(kComponent, "replica {} needs a mesh of its cores; got {}", replica_id,
                          mesh_.to_string());
  }
}

ReplicaContext::~ReplicaContext() = default;

Runtime& ReplicaContext::runtime() const {
  if (expired_.load()) throw_expired("runtime");
  return *runtime_;
}

void ReplicaContext::throw_expired(const char* call) const {
  detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                      "{} used after {} (replica {} of {}); a context is valid during its "
                      "computation only",
                      call, what_ended_, replica_id_, num_replicas_);
}

std::shared_lock<std::shared_mutex> ReplicaContext::enter(const char* call) const {
  std::shared_lock<std::shared_mutex> lock(expiry_mu_);
  if (expired_.load()) throw_expired(call);
  return lock;
}

void ReplicaContext::expire(const std::string& what_ended) noexcept {
  const std::unique_lock<std::shared_mutex> lock(expiry_mu_);  // waits for calls in flight
  if (expired_.load()) return;
  what_ended_ = what_ended;
  expired_.store(true);
}

DTensor ReplicaContext::all_reduce(const DTensor& x, ReduceOp op) {
  const auto hold = enter("all_reduce");
  return run_all_reduce(x, op);
}

DTensor ReplicaContext::all_gather(const DTensor& x, int axis) {
  const auto hold = enter("all_gather");
  return run_all_gather(x, axis);
}

DTensor ReplicaContext::broadcast(const DTensor& x, int root_replica) {
  const auto hold = enter("broadcast");
  return run_broadcast(x, root_replica);
}

void ReplicaContext::barrier() {
  const auto hold = enter("barrier");
  run_barrier();
}

void ReplicaContext::check_input(const DTensor& x, const char* collective) const {
  if (!x.defined()) {
    detail::throw_invalid(kComponent, "{} on replica {}: the input is a null DTensor", collective,
                          replica_id_);
  }
  if (x.layout().mesh() != mesh_ || &x.runtime() != runtime_) {
    detail::throw_invalid(kComponent,
                          "{} on replica {}: the input must lie on this replica's cores (mesh {}); "
                          "it is on {}",
                          collective, replica_id_, mesh_.to_string(),
                          x.layout().mesh().to_string());
  }
}

int ReplicaContext::check_axis(const DTensor& x, int axis) const {
  const int rank = x.rank();
  if (axis < -rank || axis >= rank) {
    detail::throw_invalid(kComponent, "all_gather on replica {}: axis {} is out of range for {}",
                          replica_id_, axis, describe(x));
  }
  return axis < 0 ? axis + rank : axis;
}

void ReplicaContext::check_root(int root_replica) const {
  if (root_replica < 0 || root_replica >= num_replicas_) {
    detail::throw_invalid(kComponent,
                          "broadcast on replica {}: root_replica {} must lie in [0, {})",
                          replica_id_, root_replica, num_replicas_);
  }
}

void ReplicaContext::bind_variables(std::vector<VariableSlot> variables) {
  variables_ = std::move(variables);
  variables_bound_ = true;
}

namespace {

// The slot of variable `index`, or kUnimplemented where no variables are bound (compile()'s
// tracer), kInvalidArgument outside [0, count).
template <typename Slots>
auto& variable_slot(Slots& slots, bool bound, int index, int replica, const char* call) {
  if (!bound) {
    detail::throw_error(ErrorCode::kUnimplemented, kComponent,
                        "{} on replica {}: compile()'s traced computation does not record "
                        "variable reads and assignments; replicate() runs them",
                        call, replica);
  }
  if (index < 0 || static_cast<size_t>(index) >= slots.size()) {
    detail::throw_invalid(kComponent,
                          "{} on replica {}: variable {} is not one of the {} variables", call,
                          replica, index, slots.size());
  }
  return slots[static_cast<size_t>(index)];
}

}  // namespace

DTensor ReplicaContext::read_variable(int index) const {
  const auto hold = enter("read_variable");
  return variable_slot(variables_, variables_bound_, index, replica_id_, "read_variable").value;
}

void ReplicaContext::assign_variable(int index, const DTensor& value) {
  const auto hold = enter("assign_variable");
  VariableSlot& slot =
      variable_slot(variables_, variables_bound_, index, replica_id_, "assign_variable");
  check_input(value, "assign_variable");
  if (value.dtype() != slot.dtype) {
    detail::throw_invalid(
        kComponent, "assign_variable on replica {}: variable '{}' is {}; the value is {}",
        replica_id_, slot.name, dtype_name(slot.dtype), dtype_name(value.dtype()));
  }
  if (value.shape() != slot.shape) {
    detail::throw_invalid(kComponent,
                          "assign_variable on replica {}: variable '{}': Cannot update variable "
                          "with shape {} using a Tensor with shape {}, shapes must be equal.",
                          replica_id_, slot.name, slot.shape.to_string(),
                          value.shape().to_string());
  }
  if (slot.mirrored && slot.aggregation == VariableAggregation::kNone && num_replicas_ > 1) {
    detail::throw_invalid(kComponent,
                          "assign_variable on replica {}: variable '{}' is mirrored over {} "
                          "replicas with aggregation NONE. You must specify an aggregation method "
                          "to update a MirroredVariable in Replica Context "
                          "(ReplicatedVariable::aggregation: SUM, MEAN or ONLY_FIRST_REPLICA).",
                          replica_id_, slot.name, num_replicas_);
  }
  slot.value = value;
  ++slot.assignments;
}

namespace {

void require_one_replica(const ReplicaContext& ctx, const char* collective) {
  if (ctx.num_replicas() == 1) return;
  detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                      "{} over {} replicas needs cross-replica communicators; only the contexts "
                      "replicate() makes have them",
                      collective, ctx.num_replicas());
}

}  // namespace

DTensor ReplicaContext::run_all_reduce(const DTensor& x, ReduceOp) {
  check_input(x, "all_reduce");
  require_one_replica(*this, "all_reduce");
  return x;
}

DTensor ReplicaContext::run_all_gather(const DTensor& x, int axis) {
  check_input(x, "all_gather");
  check_axis(x, axis);
  require_one_replica(*this, "all_gather");
  return x;
}

DTensor ReplicaContext::run_broadcast(const DTensor& x, int root_replica) {
  check_input(x, "broadcast");
  check_root(root_replica);
  require_one_replica(*this, "broadcast");
  return x;
}

void ReplicaContext::run_barrier() { require_one_replica(*this, "barrier"); }

namespace detail {

GroupReplicaContext::GroupReplicaContext(int replica_id, Mesh mesh, Runtime& runtime,
                                         std::shared_ptr<CrossReplicaGroup> group)
    : ReplicaContext(replica_id, group->num_replicas(), std::move(mesh), runtime),
      group_(std::move(group)) {}

template <typename MakeTask>
void GroupReplicaContext::run_on_cores(const std::string& collective, const std::string& signature,
                                       MakeTask&& task) {
  std::vector<StreamTask> tasks;
  for (int c = 0; c < group_->num_cores(); ++c) {
    tasks.push_back({&group_->device(replica_id(), c),
                     task(c, &group_->communicator(replica_id(), c), group_)});
  }
  // The group may be gone when a stream drops a task it skipped: nothing to abort then.
  const std::weak_ptr<CrossReplicaGroup> weak = group_;
  auto part = std::make_shared<StreamLaunch>(
      kComponent, collective, std::move(tasks), group_->launch_deadline(),
      fmt::format("within the call's {} ms", group_->timeout().count()),
      [weak](const std::string& reason) {
        if (const auto group = weak.lock()) group->abort(reason);
      });
  group_->launch(replica_id(), signature, part);
  part->wait();
  group_->note(replica_id(), CrossReplicaGroup::kInComputation);
}

namespace {

// What each task holds: the group owns the task's communicator.
using Group = std::shared_ptr<CrossReplicaGroup>;

// A fresh block of every core's component's shape, on the core's device.
std::vector<Tensor> allocate_like(const DTensor& x) {
  std::vector<Tensor> out;
  for (int c = 0; c < x.num_components(); ++c) {
    out.push_back(x.device(c).allocate(x.component(c).shape(), x.dtype(), /*zero_fill=*/false));
  }
  return out;
}

}  // namespace

DTensor GroupReplicaContext::run_all_reduce(const DTensor& x, ReduceOp op) {
  check_input(x, "all_reduce");
  const std::string signature =
      fmt::format("all_reduce({}) of {}", reduce_op_name(op), describe(x));
  const bool keep = commutes_with_partial(x.layout(), op);
  const DTensor in = keep ? x : relayout(x, x.layout().without_partial());
  const std::vector<Tensor> outputs = allocate_like(in);
  run_on_cores("all_reduce", signature, [&](int c, Communicator* comm, const Group& group) {
    return [comm, input = in.component(c), output = outputs[c], op, group]() mutable {
      comm->all_reduce(input, output, op, group->collective_options());
    };
  });
  DTensor out(in.layout(), in.shape(), in.dtype(), outputs, runtime());
  return keep ? out : relayout(out, x.layout());
}

DTensor GroupReplicaContext::run_all_gather(const DTensor& x, int axis) {
  check_input(x, "all_gather");
  const int a = check_axis(x, axis);
  const std::string signature = fmt::format("all_gather(axis {}) of {}", a, describe(x));
  std::vector<ShardingSpec> specs = x.layout().sharding_specs();
  specs[static_cast<size_t>(a)] = ShardingSpec::unsharded();
  const Layout gathered = Layout::create(x.layout().type(), specs, mesh(), x.layout().partial());
  const DTensor in = gathered == x.layout() ? x : relayout(x, gathered);
  auto results = std::make_shared<std::vector<Tensor>>(static_cast<size_t>(in.num_components()));
  run_on_cores("all_gather", signature, [&](int c, Communicator* comm, const Group& group) {
    return [comm, input = in.component(c), results, c, a, group]() {
      (*results)[static_cast<size_t>(c)] = comm->all_gather(input, a, group->collective_options());
    };
  });
  std::vector<int64_t> dims = x.shape().dims();
  dims[static_cast<size_t>(a)] *= num_replicas();
  DTensor out(gathered, Shape(dims), x.dtype(), *results, runtime());
  return gathered == x.layout() ? out : relayout(out, x.layout());
}

DTensor GroupReplicaContext::run_broadcast(const DTensor& x, int root_replica) {
  check_input(x, "broadcast");
  check_root(root_replica);
  const std::string signature = fmt::format("broadcast(root {}) of {}", root_replica, describe(x));
  const std::vector<Tensor> outputs = allocate_like(x);
  const bool root = replica_id() == root_replica;
  run_on_cores("broadcast", signature, [&](int c, Communicator* comm, const Group& group) {
    return
        [comm, input = x.component(c), output = outputs[c], root, root_replica, group]() mutable {
          if (root) output.copy_from(input);
          comm->broadcast(output, root_replica, group->collective_options());
        };
  });
  return DTensor(x.layout(), x.shape(), x.dtype(), outputs, runtime());
}

Tensor GroupReplicaContext::gather_for_write_back(const Tensor& value, const std::string& what) {
  auto result = std::make_shared<Tensor>();
  run_on_cores("all_gather", what, [&](int c, Communicator* comm, const Group& group) {
    return [c, comm, value, result, group]() {
      if (c == 0) *result = comm->all_gather(value, 0, group->collective_options());
    };
  });
  return *result;
}

void GroupReplicaContext::run_barrier() {
  run_on_cores("barrier", "barrier", [&](int, Communicator* comm, const Group& group) {
    return [comm, group]() { comm->barrier(group->collective_options()); };
  });
}

}  // namespace detail
}  // namespace tessel
