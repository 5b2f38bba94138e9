// The relayout planner: how a tensor gets from one layout to another, as a list of steps you can
// read (and cost) before anything moves.
//
//   Mesh mesh = Mesh::create({{"x", 4}});
//   RelayoutPlan plan = plan_relayout(Shape{4096, 4096}, Layout({"x", "unsharded"}, mesh),
//                                     Layout({"unsharded", "x"}, mesh), DType::kF32);
//   std::cout << plan;
//   // relayout [4096,4096] f32: x,unsharded -> unsharded,x on |x=4| (1 step, 12.0 MiB sent per device, peak 16.0 MiB)
//   //   1. all_to_all over x on dims 0->1: 12.0 MiB sent per device, peak 16.0 MiB -> unsharded,x
//
// Steps (kinds and what each does per device; groups are TF's collective groups of the step's
// mesh dimensions, mesh_groups.h):
//   local_slice     keep a sub-block of the local block (replicated -> sharded): no communication
//   local_partial   replicated -> Partial: the first device of each group keeps the value, the
//                   others take the reduction's identity (sum: 0, prod: 1; max/min/mean keep it)
//   all_gather      sharded -> replicated along `mesh_dims` on `tensor_dims`
//   all_to_all      the sharding moves from tensor_dims[0] to tensor_dims[1] along `mesh_dims`
//   all_reduce      Partial over `mesh_dims` -> replicated
//   reduce_scatter  Partial over `mesh_dims` -> sharded on `tensor_dims[0]`
//   send_recv       any other move (mesh dimensions swapped, regrouped, uneven shards that do not
//                   nest, another mesh): point-to-point transfers of exactly the blocks whose
//                   holder changes, each from one holder (the receiver itself when it has it)
// Block-moving steps (all_gather, all_to_all, send_recv) list their transfers: global regions
// from a source participant to a target participant, in participant indices (`participants`
// names the devices: the mesh's devices in offset order, or both meshes' devices for a move
// between meshes).
//
// The planner follows TF's lowering (collectives.cc, reference §5.1) and goes beyond it: Partial
// layouts (all_reduce / reduce_scatter), several mesh dimensions on one tensor dimension, uneven
// shards (chunk semantics: a collective step is used only when the blocks nest exactly, else
// send_recv), swapped mesh dimensions and other meshes (send_recv instead of gather-then-slice).
// No step moves a byte that its target does not need; where collectives would move more in total
// than sending the blocks directly (x,unsharded -> y,unsharded: a gather then a slice), the plan
// is one send_recv.
//
// Thread safety: pure functions and value types.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/core/box.h"
#include "tessel/core/dtype.h"
#include "tessel/core/shape.h"
#include "tessel/mesh/layout.h"

namespace tessel {

enum class RelayoutStepKind {
  kLocalSlice,
  kLocalPartial,
  kAllGather,
  kAllToAll,
  kAllReduce,
  kReduceScatter,
  kSendRecv,
};
// "local_slice", "local_partial", "all_gather", "all_to_all", "all_reduce", "reduce_scatter",
// "send_recv".
std::string_view relayout_step_kind_name(RelayoutStepKind kind);

struct RelayoutTransfer {
  int from = 0;  // participant holding the region before the step
  int to = 0;    // participant holding it after
  Box box;       // global coordinates
  friend bool operator==(const RelayoutTransfer&, const RelayoutTransfer&) = default;
};

struct RelayoutStep {
  RelayoutStepKind kind = RelayoutStepKind::kLocalSlice;
  std::vector<std::string> mesh_dims;  // the mesh dimensions it runs over (groups)
  std::vector<int> tensor_dims;        // the tensor dimensions it changes
  Layout from;                         // layout before the step
  Layout to;                           // layout after the step
  // The most bytes any one device sends (to other devices) in this step.
  int64_t bytes_per_device = 0;
  // Bytes sent between devices in this step, summed over the devices.
  int64_t bytes_total = 0;
  // The most bytes any one device holds for the relayout during the step: its output block,
  // plus its input block when that is an earlier step's output (the source tensor's block is
  // not counted: it exists before the relayout). Block moves and reductions run in place on
  // shared memory and need no other temporary.
  int64_t peak_bytes = 0;
  std::vector<std::string> participants;   // device names; transfers index into it
  std::vector<RelayoutTransfer> transfers;  // block-moving steps only

  std::string kind_name() const { return std::string(relayout_step_kind_name(kind)); }
  // "all_to_all over x on dims 0->1: 12.0 MiB sent per device, peak 16.0 MiB -> unsharded,x"
  std::string to_string() const;
};

struct RelayoutPlan {
  Shape shape;
  DType dtype = DType::kF32;
  Layout from;
  Layout to;  // the target with every `match` resolved
  std::vector<RelayoutStep> steps;  // empty: nothing to do (same layout)

  // Sums over the steps of bytes_per_device and bytes_total, and the largest peak_bytes.
  int64_t bytes_per_device() const;
  int64_t bytes_total() const;
  int64_t peak_bytes() const;
  // A header line, then one line per step (see the example above).
  std::string to_string() const;
};
std::ostream& operator<<(std::ostream& os, const RelayoutPlan& plan);

// The target with `match` specs replaced by the source's spec for that axis (TF §5.3: an axis
// whose source mesh dimension the target already uses elsewhere cannot match: kInvalidArgument
// naming the axis and the dimension). Ranks differ: kInvalidArgument.
Layout resolve_match(const Layout& from, const Layout& to);

// The plan. Errors (kInvalidArgument, component "relayout", naming the layouts): rank of
// `shape`, `from` or `to` differ ("Attempted to relayout to a different global shape"); an empty
// layout or one with `any` specs; a target whose Partial dims the source is not Partial over
// with the same op, unless the source is replicated along them (local_partial); sum -> max and
// other op changes are impossible. Meshes with different device types: kInvalidArgument.
RelayoutPlan plan_relayout(const Shape& shape, const Layout& from, const Layout& to,
                           DType dtype = DType::kF32);

}  // namespace tessel
