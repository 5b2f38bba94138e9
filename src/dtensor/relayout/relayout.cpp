// relayout: runs a plan's steps on the devices' streams (see relayout.h). Each step takes every
// participating device's current block to its block under the step's target layout.
#include "tessel/dtensor/relayout.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>

#include "comm/group_service.h"
#include "comm/group_step.h"
#include "core/errors.h"
#include "dtensor/relayout/block_transfers.h"
#include "dtensor/dtensor_internal.h"
#include "runtime/launch.h"
#include "tessel/comm/mesh_groups.h"
#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/dtensor_api.h"

namespace tessel {
namespace {

constexpr std::string_view kComponent = "relayout";

std::atomic<int64_t> g_collectives{0};
std::atomic<int64_t> g_bytes{0};
std::atomic<int64_t> g_collective_ns{0};

bool communicates(RelayoutStepKind kind) {
  return kind != RelayoutStepKind::kLocalSlice && kind != RelayoutStepKind::kLocalPartial;
}

// The current block of every device while a plan runs, by the runtime's device name (meshes may
// spell names differently).
using Blocks = std::map<std::string, Tensor>;

Tensor allocate(Device& device, const Box& box, DType dtype) {
  return device.allocate(Shape(box.extents), dtype, /*zero_fill=*/false);
}

// The value every device but the first of its group takes when a tensor becomes Partial.
void fill_identity(Tensor& t, ReduceOp op) {
  if (op == ReduceOp::kSum) t.copy_from(Tensor::zeros(t.shape(), t.dtype()));
  if (op == ReduceOp::kProd) t.copy_from(Tensor::full(t.shape(), t.dtype(), 1.0));
  // max, min and mean of equal copies are the value itself.
}

class StepRunner {
 public:
  StepRunner(Runtime& runtime, const Shape& shape, DType dtype, const RelayoutOptions& options)
      : runtime_(runtime), shape_(shape), dtype_(dtype),
        deadline_(detail::CallDeadline::after(options.timeout)),
        service_(detail::GroupService::of(runtime)), pool_(service_->pool()) {
    collective_.deadline = deadline_.at;  // every step's collectives share the call's budget
  }

  // Every step of the call uses the pool taken when the call started; the collectives' scratch
  // memory is the devices' (their memory statistics include it).
  void run(const RelayoutStep& step, Blocks& blocks) {
    detail::GroupStep group_step(std::string(kComponent), service_, pool_,
                                 detail::GroupStep::Scratch::kDevice);
    auto outputs = std::make_shared<Blocks>();
    switch (step.kind) {
      case RelayoutStepKind::kAllGather:
      case RelayoutStepKind::kAllToAll:
      case RelayoutStepKind::kSendRecv:
        moving_tasks(step, blocks, *outputs, group_step);
        break;
      default:
        in_place_tasks(step, blocks, *outputs, group_step);
    }
    group_step.run(step.kind_name(), deadline_);
    blocks = std::move(*outputs);
  }

 private:
  // Steps whose devices are the mesh's and whose blocks stay put or shrink locally, or reduce.
  // Only this client's devices get tasks; their groups reach the others'.
  void in_place_tasks(const RelayoutStep& step, Blocks& blocks, Blocks& outputs,
                      detail::GroupStep& group_step) {
    const Mesh& mesh = step.from.mesh();
    const std::vector<int64_t> offsets = detail::local_offsets(mesh);
    const std::vector<Box> before = detail::blocks_of(step.from, shape_);
    const std::vector<Box> after = detail::blocks_of(step.to, shape_);
    const ReduceOp op = step.kind == RelayoutStepKind::kLocalPartial
                            ? step.to.partial().front().op
                            : (step.from.partial().empty() ? ReduceOp::kSum
                                                           : step.from.partial().front().op);
    for (size_t i = 0; i < offsets.size(); ++i) {
      const size_t k = static_cast<size_t>(offsets[i]);
      Device* device = &runtime_.device(mesh.local_devices()[i]);
      const Tensor input = blocks.at(device->name());
      Tensor output = allocate(*device, after[k], dtype_);
      outputs[device->name()] = output;
      const int64_t offset = offsets[i];
      const CollectiveOptions copts = collective_;
      std::function<void()> fn;
      Communicator* used = nullptr;  // the task's communicator, if it has one
      switch (step.kind) {
        case RelayoutStepKind::kLocalSlice:
          fn = [=]() mutable { copy_box(input, before[k].offsets, output, after[k].offsets, after[k]); };
          break;
        case RelayoutStepKind::kLocalPartial: {
          const bool keeps = group_position(mesh, step.mesh_dims, offset).rank == 0;
          fn = [=]() mutable {
            output.copy_from(input);
            if (!keeps) fill_identity(output, op);
          };
          break;
        }
        case RelayoutStepKind::kAllReduce: {
          Communicator* comm = communicator(mesh, step.mesh_dims, offset);
          used = comm;
          const detail::CollectiveTimer timed("all_reduce");
          fn = [=]() mutable { timed([&] { comm->all_reduce(input, output, op, copts); }); };
          break;
        }
        case RelayoutStepKind::kReduceScatter: {
          Communicator* comm = communicator(mesh, step.mesh_dims, offset);
          used = comm;
          std::vector<Box> boxes;
          for (int64_t member : group_position(mesh, step.mesh_dims, offset).members) {
            boxes.push_back(after[static_cast<size_t>(member)]);
          }
          const detail::CollectiveTimer timed("reduce_scatter");
          fn = [=]() mutable {
            timed([&] {
              comm->reduce_scatter_boxes(input, before[k].offsets, output, boxes, op, copts);
            });
          };
          break;
        }
        default:
          detail::throw_error(ErrorCode::kInternal, kComponent, "step {} is not in place",
                              step.kind_name());
      }
      group_step.add(*device, used, std::move(fn));
    }
  }

  // Block-moving steps: every participant of this client runs transfer_boxes in its group.
  void moving_tasks(const RelayoutStep& step, Blocks& blocks, Blocks& outputs,
                    detail::GroupStep& group_step) {
    const size_t n = step.participants.size();
    const std::vector<std::string> local = local_names(step);
    std::vector<detail::MaybeBox> before(n), after(n);
    place(step.from, step.participants, before);
    place(step.to, step.participants, after);
    // The group mesh: the step's mesh and dims, or every participant for send_recv.
    Mesh mesh = step.from.mesh();
    std::vector<std::string> dims = step.mesh_dims;
    if (step.kind == RelayoutStepKind::kSendRecv) {
      mesh = Mesh::create_on_devices({{"participants", static_cast<int64_t>(n)}}, step.participants);
      dims = {"participants"};
    }
    const std::vector<int64_t> zeros(static_cast<size_t>(shape_.rank()), 0);
    for (size_t p = 0; p < n; ++p) {
      if (std::find(local.begin(), local.end(), step.participants[p]) == local.end()) continue;
      Device* device = &runtime_.device(step.participants[p]);
      const GroupPosition pos = group_position(mesh, dims, static_cast<int64_t>(p));
      Communicator* comm = communicator(mesh, dims, static_cast<int64_t>(p));
      std::vector<std::vector<int64_t>> in_origins, out_origins;
      std::map<int64_t, int> rank_of;
      for (size_t r = 0; r < pos.members.size(); ++r) {
        const size_t m = static_cast<size_t>(pos.members[r]);
        rank_of[pos.members[r]] = static_cast<int>(r);
        in_origins.push_back(before[m] ? before[m]->offsets : zeros);
        out_origins.push_back(after[m] ? after[m]->offsets : zeros);
      }
      std::vector<Communicator::BoxTransfer> transfers;
      for (const RelayoutTransfer& t : step.transfers) {
        auto from = rank_of.find(t.from);
        auto to = rank_of.find(t.to);
        if (from != rank_of.end() && to != rank_of.end()) {
          transfers.push_back({from->second, to->second, t.box});
        }
      }
      Tensor input = before[p] ? blocks.at(device->name()) : Tensor();
      Tensor output;
      if (after[p]) {
        output = allocate(*device, *after[p], dtype_);
        outputs[device->name()] = output;
      }
      const std::string label = step.kind_name();
      const CollectiveOptions copts = collective_;
      const detail::CollectiveTimer timed(label);
      group_step.add(*device, comm, [=]() mutable {
        timed([&] {
          comm->transfer_boxes(input, in_origins, output, out_origins, transfers, label, copts);
        });
      });
    }
  }

  // The participants of `step` that are this client's devices: all of them on a single-client
  // mesh, else those the meshes list as local (participants use the meshes' spelling).
  static std::vector<std::string> local_names(const RelayoutStep& step) {
    std::vector<std::string> local;
    for (const Mesh* mesh : {&step.from.mesh(), &step.to.mesh()}) {
      const bool all = mesh->num_local_devices() == mesh->size();
      for (const std::string& name : all ? detail::mesh_device_names(*mesh) : mesh->local_devices()) {
        local.push_back(name);
      }
    }
    return local;
  }

  // Each participant's block under `layout` (nullopt for devices outside its mesh).
  void place(const Layout& layout, const std::vector<std::string>& participants,
             std::vector<detail::MaybeBox>& out) const {
    const std::vector<std::string> names = detail::mesh_device_names(layout.mesh());
    const std::vector<Box> boxes = detail::blocks_of(layout, shape_);
    for (size_t k = 0; k < names.size(); ++k) {
      auto it = std::find(participants.begin(), participants.end(), names[k]);
      if (it != participants.end()) out[static_cast<size_t>(it - participants.begin())] = boxes[k];
    }
  }

  // The communicator of the device at mesh `offset` in the group over `dims`.
  Communicator* communicator(const Mesh& mesh, const std::vector<std::string>& dims,
                             int64_t offset) {
    return &pool_->get(mesh, dims, offset, deadline_.left());
  }

  Runtime& runtime_;
  Shape shape_;
  DType dtype_;
  detail::CallDeadline deadline_;
  CollectiveOptions collective_;
  std::shared_ptr<detail::GroupService> service_;
  std::shared_ptr<CommunicatorPool> pool_;
};

}  // namespace

namespace detail {
void count_collective(int64_t bytes) {
  g_collectives.fetch_add(1, std::memory_order_relaxed);
  g_bytes.fetch_add(bytes, std::memory_order_relaxed);
}
void count_collective_time(std::chrono::steady_clock::duration time) {
  g_collective_ns.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(time).count(),
                            std::memory_order_relaxed);
}
}  // namespace detail

RelayoutStats relayout_stats() {
  return {g_collectives.load(), g_bytes.load(), static_cast<double>(g_collective_ns.load()) * 1e-9};
}

DTensor execute_relayout(const DTensor& tensor, const RelayoutPlan& plan,
                         const RelayoutOptions& options) {
  if (!tensor.defined()) detail::throw_invalid(kComponent, "relayout of a null DTensor");
  if (plan.from != tensor.layout() || !(plan.shape == tensor.shape()) ||
      plan.dtype != tensor.dtype()) {
    detail::throw_invalid(kComponent, "the plan is for {} {} in {}, the tensor is {} {} in {}",
                          plan.shape.to_string(), dtype_name(plan.dtype), plan.from.to_string(),
                          tensor.shape().to_string(), dtype_name(tensor.dtype()),
                          tensor.layout().to_string());
  }
  if (plan.steps.empty()) {
    if (plan.to == tensor.layout()) return tensor;
    return DTensor(plan.to, tensor.shape(), tensor.dtype(), tensor.components(), tensor.runtime());
  }
  Blocks blocks;
  for (int i = 0; i < tensor.num_components(); ++i) {
    blocks[tensor.device(i).name()] = tensor.component(i);
  }
  StepRunner runner(tensor.runtime(), tensor.shape(), tensor.dtype(), options);
  for (const RelayoutStep& step : plan.steps) {
    runner.run(step, blocks);
    if (communicates(step.kind)) detail::count_collective(step.bytes_total);
  }
  std::vector<Tensor> components;
  const Mesh& mesh = plan.to.mesh();
  for (const std::string& name : mesh.is_single_device()
                                     ? std::vector<std::string>{mesh.single_device()}
                                     : mesh.local_devices()) {
    components.push_back(blocks.at(tensor.runtime().device(name).name()));
  }
  return DTensor(plan.to, tensor.shape(), tensor.dtype(), std::move(components), tensor.runtime());
}

namespace detail {

DTensor relayout_untracked(const DTensor& tensor, const Layout& layout,
                           const RelayoutOptions& options) {
  if (!tensor.defined()) throw_invalid(kComponent, "relayout of a null DTensor");
  return execute_relayout(tensor, plan_relayout(tensor.shape(), tensor.layout(), layout,
                                                tensor.dtype()),
                          options);
}

}  // namespace detail

namespace detail {

// How a tape sees a user's relayout: an op whose gradient is the output's gradient (the tape
// relays it out to the input's layout, TF's relayout_like), so that gradients flow through
// explicit relayouts (sequence parallelism, call_with_layout) as through ops.
const OpDef& relayout_op() {
  static const OpDef* def = [] {
    auto* d = new OpDef();
    d->name = "relayout";
    d->num_inputs = 1;
    d->vjp = [](const VjpArgs& a) { return std::vector<DTensor>{a.grad}; };
    d->saves = VjpSaves::nothing();
    return d;
  }();
  return *def;
}

void record_relayout(const DTensor& in, const DTensor& out) {
  if (GradientTape::any()) GradientTape::record_call(relayout_op(), {in}, {in}, out, nullptr);
}

}  // namespace detail

DTensor relayout(const DTensor& tensor, const Layout& layout, const RelayoutOptions& options) {
  DTensor out = detail::relayout_untracked(tensor, layout, options);
  if (out.id() != tensor.id()) detail::record_relayout(tensor, out);
  return out;
}

DTensor relayout(const DTensor& tensor, const Layout& layout) {
  return relayout(tensor, layout, RelayoutOptions{});
}

DTensor relayout(const Tensor& tensor, const Layout& layout, Runtime& runtime) {
  return copy_to_mesh(tensor, layout, runtime);
}

DTensor relayout_like(const DTensor& tensor, const DTensor& like, const RelayoutOptions& options) {
  if (!like.defined()) detail::throw_invalid(kComponent, "relayout_like with a null layout tensor");
  return relayout(tensor, like.layout(), options);
}

}  // namespace tessel
