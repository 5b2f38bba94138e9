// The DTensor API with TensorFlow's names (tf.experimental.dtensor): pack, unpack,
// fetch_layout, check_layout, is_dtensor, copy_to_mesh, to_host / full_tensor, default_mesh,
// call_with_layout, device_name, visualize. relayout and relayout_like are in relayout.h.
//
//   Mesh mesh = Mesh::create({{"x", 2}});
//   Layout rows({"x", "unsharded"}, mesh);
//   DTensor d = pack({Tensor::zeros({3, 4}, DType::kF32), Tensor::zeros({2, 4}, DType::kF32)},
//                    rows);                      // global shape [5, 4]: uneven rows 3 + 2
//   std::vector<Tensor> parts = unpack(d);       // the two components, local device order
//   Tensor whole = to_host(d);                   // [5, 4] on the host
//   {
//     DefaultMeshScope scope(mesh);              // TF's `with default_mesh(mesh):`
//     get_default_mesh() == mesh;
//   }
//
// Errors (tessel::Error; TF's messages where TF has one, see docs/compatibility.md):
// - pack: no inputs: kInvalidArgument "DTensorPack requires 1 or more inputs"; a null input:
//   kInvalidArgument naming it; a count other than the mesh's local devices: kInvalidArgument
//   "The dtensor device <name> expected <N> inputs to DTensorPack, but got <M>" (<name>: the
//   DTensor device of `runtime`); a rank other than the layout's: kInvalidArgument
//   "Packed layout should have the same rank as the rank for each component. The rank of each
//   component is: R, while layout has rank: L"; dtypes that differ: kInvalidArgument
//   "Components of a PackedTensor must all have the same dtype" (TF: Internal); a component
//   whose shape is not its block's: kInvalidArgument naming the component, its device, its
//   shape and the expected one; a scalar with a sharded layout cannot occur (a rank-0 layout
//   has no specs: BR-74-07); a layout with match/any specs or an empty layout:
//   kInvalidArgument; a mesh device this runtime lacks: kInvalidArgument naming it. Checks run
//   in TF's order: inputs, layout, remote mesh (TF's dummy: no count check), count, devices,
//   dtypes, ranks, then the block shapes.
// - unpack / fetch_layout / to_host of a null DTensor: kInvalidArgument ("DTensorUnpack expects
//   a tensor placed on the DTensor device", "FetchLayout expects a tensor placed on the layout
//   device.", "to_host expects a tensor placed on the DTensor device"); unpack of a DTensor on a
//   remote mesh: kUnimplemented "DTensorUnpack is not supported on a remote mesh."
// - unpack and to_host are sync points: they wait for the streams of the DTensor's devices and
//   throw the first failure of work enqueued there (Stream's error, naming device and op).
// - check_layout: kInvalidArgument "Layout of tensor: <a>, did not match expected layout: <b>".
//
// Thread safety: the default-mesh stack is per thread; everything else is pure or goes through
// the devices' streams.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessel/core/tensor.h"
#include "tessel/dtensor/dtensor.h"
#include "tessel/mesh/layout.h"
#include "tessel/mesh/mesh.h"
#include "tessel/runtime/runtime.h"

namespace tessel {

// A DTensor from one component per local device of layout's mesh (local device order). The
// global shape is inferred from the components: along a sharded dimension, the sum of the
// distinct shards' extents (uneven chunks allowed; when some shards are on other processes,
// the first local shard's extent times the shard count, TF's rule). A remote mesh (no local
// device) gives a DTensor with no components whose shape comes from the first input (TF's
// dummy). Components are copied onto their devices (no aliasing of the caller's tensors). Pack
// does not check that replicated components agree (TF neither): that is the caller's contract.
DTensor pack(const std::vector<Tensor>& tensors, const Layout& layout,
             Runtime& runtime = Runtime::global());
// The components, in local device order (the DTensor's own storage, not copies).
std::vector<Tensor> unpack(const DTensor& tensor);
Layout fetch_layout(const DTensor& tensor);
void check_layout(const DTensor& tensor, const Layout& layout);
// True for a defined DTensor (Python: for any DTensor object; false for anything else).
bool is_dtensor(const DTensor& tensor);

// A host tensor laid out as `layout`: each local device takes its block (a local split, no
// communication: every process holds the whole host tensor, as in TF). A Partial layout splits
// the value into terms the pending reduction gives back: along sum and prod dims the device at
// coordinate 0 keeps the value and the others hold the identity (0, 1); mean, max and min keep
// the value everywhere (the mean of n equal values is the value). With several partial dims a
// device holds the identity of the first sum/prod dim (mesh order) where it is not at 0, else
// the value. A null tensor, a rank other than the layout's, or partial mean of bool:
// kInvalidArgument.
DTensor copy_to_mesh(const Tensor& tensor, const Layout& layout,
                     Runtime& runtime = Runtime::global());

// The global tensor on the host (Partial layouts reduced first: the terms of each block are
// combined with the op, mean dividing the sum by the group size, so that
// to_host(copy_to_mesh(x, L)) == x bit for bit for non-partial L, and for partial L with values
// the reduction represents exactly). Every local device's block is used; on a multi-client mesh
// the other processes' blocks must be brought here by a relayout to a replicated layout first
// (kFailedPrecondition otherwise, naming the missing non-empty blocks and their device ids).
Tensor to_host(const DTensor& tensor);
// to_host that also works when other clients hold blocks (PyTorch's full_tensor): on a mesh that
// spans clients it first relays out to replicated, a collective every client must call; on a
// single-client mesh it is to_host.
Tensor full_tensor(const DTensor& tensor);

// The default mesh: a per-thread stack. DefaultMeshScope pushes on construction and pops on
// destruction (TF's `with dtensor.default_mesh(mesh):`); nesting restores the previous one.
class DefaultMeshScope {
 public:
  // An empty mesh: kInvalidArgument "Expect `mesh` to be a non-empty `Mesh`, got empty_mesh".
  explicit DefaultMeshScope(const Mesh& mesh);
  ~DefaultMeshScope();
  DefaultMeshScope(const DefaultMeshScope&) = delete;
  DefaultMeshScope& operator=(const DefaultMeshScope&) = delete;

 private:
  // The stack's depth below this scope: the destructor cuts the stack back to it, so closing an
  // outer scope first also closes the inner ones, and a scope closed on another thread (whose
  // stack is shallower) changes nothing there.
  size_t depth_ = 0;
};
// The innermost default mesh of this thread, if any.
std::optional<Mesh> get_default_mesh();
// The default mesh, or kInvalidArgument "<op>: No default mesh has been registered to DTensor"
// (for ops whose mesh cannot be inferred).
Mesh require_default_mesh(std::string_view op);

// Runs fn(args...) with layout's mesh as the default mesh and returns its result relaid out to
// `layout` (TF's call_with_layout; fn returns a DTensor).
DTensor relayout(const DTensor& tensor, const Layout& layout);  // relayout.h
template <typename Fn, typename... Args>
DTensor call_with_layout(Fn&& fn, const Layout& layout, Args&&... args) {
  DefaultMeshScope scope(layout.mesh());
  return relayout(std::forward<Fn>(fn)(std::forward<Args>(args)...), layout);
}

// The name of tessel's DTensor device, TF's form: "/job:localhost/replica:0/task:0/device:CUSTOM:0"
// (job, replica and task of the global runtime).
std::string device_name();

// The shard map of the DTensor with global device ids (ShardMap::visualize); works on every
// process (it needs only the layout and the shape). A null DTensor: kInvalidArgument.
std::string visualize(const DTensor& tensor);

}  // namespace tessel
