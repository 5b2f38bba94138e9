// relayout_batch's fused all-gathers and reduce-scatters (fused_gather_scatter.h).
#include "dtensor/relayout/fused_gather_scatter.h"

#include <memory>

#include "comm/group_service.h"
#include "comm/group_step.h"
#include "dtensor/relayout/block_transfers.h"
#include "runtime/launch.h"
#include "tessel/comm/mesh_groups.h"
#include "tessel/core/box.h"

namespace tessel::detail {
namespace {

bool single_step(const RelayoutPlan& plan, RelayoutStepKind kind) {
  return plan.steps.size() == 1 && plan.steps[0].kind == kind &&
         plan.from.mesh().device_type() == "CPU";
}

// A flat view of `count` elements of `buffer` from `offset`, shaped as `box`.
Tensor view(const Tensor& buffer, int64_t offset, const Box& box) {
  return buffer.slice(0, offset, offset + box.num_elements()).reshape(Shape(box.extents));
}

// The fused members' blocks, per member, per mesh offset: before and after the step.
struct MemberBlocks {
  std::vector<std::vector<Box>> before, after;
};

MemberBlocks member_blocks(const std::vector<DTensor>& tensors, const std::vector<size_t>& members,
                           const std::vector<RelayoutPlan>& plans) {
  MemberBlocks b;
  for (size_t m : members) {
    b.before.push_back(blocks_of(plans[m].from, tensors[m].shape()));
    b.after.push_back(blocks_of(plans[m].to, tensors[m].shape()));
  }
  return b;
}

// The step's devices of this process, their offsets, communicators and a group step to run on.
struct FusedStep {
  FusedStep(const DTensor& first, const RelayoutStep& step, const CallDeadline& deadline)
      : mesh(first.layout().mesh()), dims(step.mesh_dims), runtime(first.runtime()),
        devices(resolve_local_devices(mesh, runtime, "relayout")), offsets(local_offsets(mesh)),
        service(GroupService::of(runtime)), pool(service->pool()),
        group_step("relayout", service, pool, GroupStep::Scratch::kDevice) {
    options.deadline = deadline.at;
  }
  Communicator* communicator(size_t local, const CallDeadline& deadline) {
    return &pool->get(mesh, dims, offsets[local], deadline.left());
  }
  const Mesh& mesh;
  std::vector<std::string> dims;
  Runtime& runtime;
  std::vector<Device*> devices;
  std::vector<int64_t> offsets;
  std::shared_ptr<GroupService> service;
  std::shared_ptr<CommunicatorPool> pool;
  GroupStep group_step;
  CollectiveOptions options;
};

// Every device's results, per device then per member, made into the members' DTensors.
void assemble(const std::vector<DTensor>& tensors, const std::vector<size_t>& members,
              const std::vector<RelayoutPlan>& plans, const FusedStep& step,
              const std::vector<std::vector<Tensor>>& results, std::vector<DTensor>& out) {
  int64_t bytes = 0;
  for (size_t m : members) bytes += plans[m].bytes_total();
  count_collective(bytes);
  for (size_t i = 0; i < members.size(); ++i) {
    std::vector<Tensor> components;
    for (size_t d = 0; d < step.devices.size(); ++d) components.push_back(results[d][i]);
    const size_t m = members[i];
    out[m] = DTensor(plans[m].to, tensors[m].shape(), tensors[m].dtype(), std::move(components),
                     step.runtime);
  }
}

}  // namespace

bool fusable_gather(const RelayoutPlan& plan, const Shape& shape) {
  if (!single_step(plan, RelayoutStepKind::kAllGather) || plan.from.is_partial() ||
      plan.to.is_partial()) {
    return false;
  }
  const Mesh& mesh = plan.from.mesh();
  const std::vector<Box> before = blocks_of(plan.from, shape);
  const std::vector<Box> after = blocks_of(plan.to, shape);
  for (int64_t k = 0; k < mesh.size(); ++k) {
    int64_t covered = 0;
    for (int64_t member : group_position(mesh, plan.steps[0].mesh_dims, k).members) {
      const Box& part = before[static_cast<size_t>(member)];
      if (!after[static_cast<size_t>(k)].contains(part)) return false;
      covered += part.num_elements();
    }
    if (covered != after[static_cast<size_t>(k)].num_elements()) return false;
  }
  return true;
}

bool fusable_reduce_scatter(const RelayoutPlan& plan, const Shape& shape) {
  if (!single_step(plan, RelayoutStepKind::kReduceScatter) || plan.to.is_partial() ||
      plan.from.partial().size() != plan.steps[0].mesh_dims.size()) {
    return false;
  }
  const Mesh& mesh = plan.from.mesh();
  const std::vector<Box> before = blocks_of(plan.from, shape);
  const std::vector<Box> after = blocks_of(plan.to, shape);
  for (int64_t k = 0; k < mesh.size(); ++k) {
    const Box& input = before[static_cast<size_t>(k)];
    for (int64_t member : group_position(mesh, plan.steps[0].mesh_dims, k).members) {
      if (!(before[static_cast<size_t>(member)] == input) ||
          !input.contains(after[static_cast<size_t>(member)])) {
        return false;
      }
    }
  }
  return true;
}

// Each device packs its block of every member (member after member), all_gather concatenates
// the group's buffers in rank order, and each device copies every rank's part of every member
// into its gathered block.
void gather_fused(const std::vector<DTensor>& tensors, const std::vector<size_t>& members,
                  const std::vector<RelayoutPlan>& plans, const CallDeadline& deadline,
                  std::vector<DTensor>& out) {
  FusedStep step(tensors[members.front()], plans[members.front()].steps.front(), deadline);
  auto blocks = std::make_shared<const MemberBlocks>(member_blocks(tensors, members, plans));
  auto results = std::make_shared<std::vector<std::vector<Tensor>>>(step.devices.size());
  const DType dtype = tensors[members.front()].dtype();
  for (size_t d = 0; d < step.devices.size(); ++d) {
    const auto k = static_cast<size_t>(step.offsets[d]);
    std::vector<Tensor> inputs;
    int64_t own = 0;
    for (size_t i = 0; i < members.size(); ++i) {
      inputs.push_back(tensors[members[i]].component(static_cast<int>(d)));
      own += blocks->before[i][k].num_elements();
    }
    const std::vector<int64_t> ranks = group_position(step.mesh, step.dims, step.offsets[d]).members;
    Communicator* comm = step.communicator(d, deadline);
    Device* device = step.devices[d];
    const CollectiveOptions options = step.options;
    const CollectiveTimer timed("fused all_gather");
    step.group_step.add(*device, comm, [=]() {
      Tensor packed = device->allocate(Shape{own}, dtype, /*zero_fill=*/false);
      int64_t offset = 0;
      for (size_t i = 0; i < inputs.size(); ++i) {
        const Box& mine = blocks->before[i][k];
        if (mine.empty()) continue;
        view(packed, offset, mine).copy_from(inputs[i]);
        offset += mine.num_elements();
      }
      Tensor gathered;
      timed([&] { gathered = comm->all_gather(packed, 0, options); });
      std::vector<Tensor>& mine = (*results)[d];
      for (size_t i = 0; i < inputs.size(); ++i) {
        const Box& target = blocks->after[i][k];
        mine.push_back(device->allocate(Shape(target.extents), dtype, /*zero_fill=*/false));
      }
      offset = 0;
      for (int64_t r : ranks) {
        for (size_t i = 0; i < inputs.size(); ++i) {
          const Box& part = blocks->before[i][static_cast<size_t>(r)];
          if (part.empty()) continue;
          copy_box(view(gathered, offset, part), part.offsets, mine[i], blocks->after[i][k].offsets,
                   part);
          offset += part.num_elements();
        }
      }
    });
  }
  step.group_step.run("fused all_gather", deadline);
  assemble(tensors, members, plans, step, *results, out);
}

// Each device packs, rank after rank, the region of every member that rank keeps; reduce_scatter
// with those per-rank counts leaves each device its regions reduced, which it unpacks.
void reduce_scatter_fused(const std::vector<DTensor>& tensors, const std::vector<size_t>& members,
                          const std::vector<RelayoutPlan>& plans, const CallDeadline& deadline,
                          std::vector<DTensor>& out) {
  const DTensor& first = tensors[members.front()];
  FusedStep step(first, plans[members.front()].steps.front(), deadline);
  auto blocks = std::make_shared<const MemberBlocks>(member_blocks(tensors, members, plans));
  auto results = std::make_shared<std::vector<std::vector<Tensor>>>(step.devices.size());
  const DType dtype = first.dtype();
  const ReduceOp op = first.layout().partial().front().op;
  for (size_t d = 0; d < step.devices.size(); ++d) {
    const auto k = static_cast<size_t>(step.offsets[d]);
    std::vector<Tensor> inputs;
    for (size_t m : members) inputs.push_back(tensors[m].component(static_cast<int>(d)));
    const std::vector<int64_t> ranks = group_position(step.mesh, step.dims, step.offsets[d]).members;
    std::vector<int64_t> counts;
    for (int64_t r : ranks) {
      int64_t count = 0;
      for (size_t i = 0; i < members.size(); ++i) {
        count += blocks->after[i][static_cast<size_t>(r)].num_elements();
      }
      counts.push_back(count);
    }
    Communicator* comm = step.communicator(d, deadline);
    Device* device = step.devices[d];
    const CollectiveOptions options = step.options;
    const CollectiveTimer timed("fused reduce_scatter");
    step.group_step.add(*device, comm, [=]() {
      int64_t total = 0;
      for (int64_t c : counts) total += c;
      Tensor packed = device->allocate(Shape{total}, dtype, /*zero_fill=*/false);
      int64_t offset = 0;
      for (int64_t r : ranks) {
        for (size_t i = 0; i < inputs.size(); ++i) {
          const Box& region = blocks->after[i][static_cast<size_t>(r)];
          if (region.empty()) continue;
          Tensor part = view(packed, offset, region);
          copy_box(inputs[i], blocks->before[i][k].offsets, part, region.offsets, region);
          offset += region.num_elements();
        }
      }
      Tensor reduced;
      timed([&] { reduced = comm->reduce_scatter(packed, op, counts, options); });
      std::vector<Tensor>& mine = (*results)[d];
      offset = 0;
      for (size_t i = 0; i < inputs.size(); ++i) {
        const Box& region = blocks->after[i][k];
        mine.push_back(device->allocate(Shape(region.extents), dtype, /*zero_fill=*/false));
        if (region.empty()) continue;
        mine.back().copy_from(view(reduced, offset, region));
        offset += region.num_elements();
      }
    });
  }
  step.group_step.run("fused reduce_scatter", deadline);
  assemble(tensors, members, plans, step, *results, out);
}

}  // namespace tessel::detail
