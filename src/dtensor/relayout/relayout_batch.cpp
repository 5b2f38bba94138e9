// relayout_batch: many relayouts, the all-reduce-only ones fused into scoped buckets (one
// collective per bucket; results are the buckets' fields), the all-gather-only and the
// reduce-scatter-only ones fused likewise (fused_gather_scatter.h), the rest one by one. Each
// result is recorded on the gradient tapes as relayout() records it.
#include <map>
#include <optional>
#include <memory>
#include <tuple>

#include "comm/group_service.h"
#include "comm/group_step.h"
#include "core/errors.h"
#include "dtensor/dtensor_internal.h"
#include "dtensor/relayout/block_transfers.h"
#include "dtensor/relayout/fused_gather_scatter.h"
#include "runtime/launch.h"
#include "tessel/alloc/fusion_rules.h"
#include "tessel/alloc/scoped_allocator.h"
#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/relayout.h"

namespace tessel {
namespace {

// Tensors whose plan is one all_reduce, all_gather or reduce_scatter over the same mesh and dims
// with the same op and dtype.
using FuseKey = std::tuple<RelayoutStepKind, uint64_t, std::vector<std::string>, ReduceOp, DType>;

// The fused collective `plan` can join, if any.
std::optional<RelayoutStepKind> fused_kind(const RelayoutPlan& p, const Shape& shape) {
  if (p.steps.size() != 1) return std::nullopt;
  const RelayoutStepKind kind = p.steps[0].kind;
  if (kind == RelayoutStepKind::kAllReduce && p.from.partial().size() == p.steps[0].mesh_dims.size() &&
      p.to.partial().empty()) {
    return kind;
  }
  if (kind == RelayoutStepKind::kAllGather && detail::fusable_gather(p, shape)) return kind;
  if (kind == RelayoutStepKind::kReduceScatter && detail::fusable_reduce_scatter(p, shape)) {
    return kind;
  }
  return std::nullopt;
}

void reduce_fused(const std::vector<DTensor>& tensors, const std::vector<size_t>& members,
                  const std::vector<RelayoutPlan>& plans, const detail::CallDeadline& deadline,
                  std::vector<DTensor>& out) {
  const DTensor& first = tensors[members.front()];
  const RelayoutStep& step = plans[members.front()].steps.front();
  const ReduceOp op = first.layout().partial().front().op;
  const Mesh& mesh = first.layout().mesh();
  Runtime& runtime = first.runtime();
  const std::vector<Device*> devices = detail::resolve_local_devices(mesh, runtime, "relayout");
  const std::vector<int64_t> offsets = detail::local_offsets(mesh);
  auto service = detail::GroupService::of(runtime);
  auto pool = service->pool();
  detail::GroupStep group_step("relayout", service, pool, detail::GroupStep::Scratch::kDevice);
  // Per device: one scoped backing holding every member's component.
  auto results = std::make_shared<std::vector<std::vector<Tensor>>>(devices.size());
  CollectiveOptions copts;
  copts.deadline = deadline.at;
  for (size_t d = 0; d < devices.size(); ++d) {
    std::vector<Tensor> inputs;
    std::vector<Shape> shapes;
    for (size_t m : members) {
      inputs.push_back(tensors[m].component(static_cast<int>(d)));
      shapes.push_back(inputs.back().shape());
    }
    Communicator* comm = &pool->get(mesh, step.mesh_dims, offsets[d], deadline.left());
    Device* device = devices[d];
    const DType dtype = first.dtype();
    const detail::CollectiveTimer timed("fused all_reduce");
    group_step.add(*device, comm, [=]() {
      ScopedAllocator scope(shapes, dtype, "relayout_batch", 0, static_cast<int>(shapes.size()),
                            device->allocator());
      const std::vector<Tensor>& fields = scope.allocate_all();
      for (size_t f = 0; f < fields.size(); ++f) Tensor(fields[f]).copy_from(inputs[f]);
      Tensor all = scope.concat(scope.backing(), fields);
      timed([&] { comm->all_reduce(all, all, op, copts); });
      scope.close();
      (*results)[d] = fields;
    });
  }
  group_step.run("fused all_reduce", deadline);
  int64_t bytes = 0;
  for (size_t m : members) bytes += plans[m].bytes_total();
  detail::count_collective(bytes);
  for (size_t i = 0; i < members.size(); ++i) {
    std::vector<Tensor> components;
    for (size_t d = 0; d < devices.size(); ++d) components.push_back((*results)[d][i]);
    const size_t m = members[i];
    out[m] = DTensor(plans[m].to, tensors[m].shape(), tensors[m].dtype(), std::move(components),
                     runtime);
  }
}

}  // namespace

std::vector<DTensor> relayout_batch(const std::vector<DTensor>& tensors,
                                    const std::vector<Layout>& layouts, int64_t bucket_bytes) {
  if (tensors.size() != layouts.size()) {
    detail::throw_invalid("relayout", "{} tensors but {} layouts", tensors.size(), layouts.size());
  }
  // One budget for the whole batch, as for one multi-step relayout.
  const detail::CallDeadline deadline = detail::CallDeadline::after(RelayoutOptions{}.timeout);
  std::vector<DTensor> out(tensors.size());
  std::vector<RelayoutPlan> plans;
  std::map<FuseKey, std::vector<size_t>> fusable;
  std::vector<FuseKey> order;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined()) detail::throw_invalid("relayout", "tensor {} is null", i);
    plans.push_back(plan_relayout(tensors[i].shape(), tensors[i].layout(), layouts[i],
                                  tensors[i].dtype()));
    const RelayoutPlan& p = plans.back();
    if (const auto kind = fused_kind(p, tensors[i].shape())) {
      const ReduceOp op = p.from.is_partial() ? p.from.partial().front().op : ReduceOp::kSum;
      FuseKey key{*kind, p.from.mesh().global_fingerprint(), p.steps[0].mesh_dims, op,
                  tensors[i].dtype()};
      auto [it, fresh] = fusable.try_emplace(key);
      if (fresh) order.push_back(key);
      it->second.push_back(i);
    } else {
      out[i] = execute_relayout(tensors[i], p, RelayoutOptions{deadline.left()});
    }
  }
  for (const FuseKey& key : order) {
    const std::vector<size_t>& members = fusable[key];
    // Sized by the layout's largest block, not a local component: every process must make the
    // same buckets (the same collectives), a process holding none of the mesh's devices included.
    std::vector<int64_t> bytes;
    for (size_t m : members) {
      std::vector<detail::MaybeBox> blocks;
      for (const Box& b : detail::blocks_of(tensors[m].layout(), tensors[m].shape())) {
        blocks.push_back(b);
      }
      bytes.push_back(detail::max_block_bytes(blocks, tensors[m].dtype()));
    }
    for (const std::vector<int>& bucket : group_by_size(bytes, bucket_bytes)) {
      std::vector<size_t> chosen;
      for (int b : bucket) chosen.push_back(members[static_cast<size_t>(b)]);
      const RelayoutStepKind kind = std::get<RelayoutStepKind>(key);
      if (kind != RelayoutStepKind::kAllReduce && chosen.size() == 1) {
        // Alone, the plain step is cheaper: it moves blocks straight between the devices.
        out[chosen[0]] = execute_relayout(tensors[chosen[0]], plans[chosen[0]],
                                          RelayoutOptions{deadline.left()});
        continue;
      }
      switch (kind) {
        case RelayoutStepKind::kAllGather:
          detail::gather_fused(tensors, chosen, plans, deadline, out);
          break;
        case RelayoutStepKind::kReduceScatter:
          detail::reduce_scatter_fused(tensors, chosen, plans, deadline, out);
          break;
        default:
          reduce_fused(tensors, chosen, plans, deadline, out);
      }
    }
  }
  if (GradientTape::any()) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (out[i].id() != tensors[i].id()) detail::record_relayout(tensors[i], out[i]);
    }
  }
  return out;
}

}  // namespace tessel
