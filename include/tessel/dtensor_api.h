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
// - pack: no inputs: kInvalidArgument "DTensorPack requires 1 or more inputs"; a count other
//   than the mesh's local devices: kInvalidArgument "The dtensor device <name> expected <N>
//   inputs to DTensorPack, but got <M>"; a rank other than the layout's: kInvalidArgument
//   "Packed layout should have the same rank as the rank for each component. The rank of each
//   component is: R, while layout has rank: L"; dtypes that differ: kInvalidArgument
//   "Components of a PackedTensor must all have the same dtype" (TF: Internal); a component
//   whose shape is not its block's: kInvalidArgument naming the component, its device, its
//   shape and the expected one; a scalar with a sharded layout cannot occur (a rank-0 layout
//   has no specs: BR-74-07); a layout with match/any specs or an empty layout:
//   kInvalidArgument; a mesh device this runtime lacks: kInvalidArgument naming it.
// - unpack / fetch_layout / to_host of a null DTensor: kInvalidArgument ("DTensorUnpack expects
//   a tensor placed on the DTensor device", "FetchLayout expects a tensor placed on the layout
//   device."); unpack of a DTensor on a remote mesh: kUnimplemented "DTensorUnpack is not
//   supported on a remote mesh."
// - check_layout: kInvalidArgument "Layout of tensor: <a>, did not match expected layout: <b>".
//
// Thread safety: the default-mesh stack is per thread; everything else is pure or goes through
// the devices' streams.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessel/dtensor.h"
#include "tessel/layout.h"
#include "tessel/mesh.h"
#include "tessel/runtime.h"
#include "tessel/tensor.h"

namespace tessel {

// A DTensor from one component per local device of layout's mesh (local device order). The
// global shape is inferred from the components: along a sharded dimension, the sum of the
// distinct shards' extents (uneven chunks allowed; when some shards are on other processes,
// the first shard's extent times the shard count, TF's rule). Components are copied onto their
// devices (no aliasing of the caller's tensors). Pack does not check that replicated components
// agree (TF neither): that is the caller's contract.
DTensor pack(const std::vector<Tensor>& tensors, const Layout& layout,
             Runtime& runtime = Runtime::global());
// The components, in local device order (the DTensor's own storage, not copies).
std::vector<Tensor> unpack(const DTensor& tensor);
Layout fetch_layout(const DTensor& tensor);
void check_layout(const DTensor& tensor, const Layout& layout);
// True for a defined DTensor (Python: for any DTensor object; false for anything else).
bool is_dtensor(const DTensor& tensor);

// A host tensor laid out as `layout`: each local device takes its block (a local split, no
// communication: every process holds the whole host tensor, as in TF). A Partial layout puts the
// value in the first device of each partial group and the reduction's identity elsewhere, so
// that the pending reduction gives the tensor back. Shape rank other than the layout's:
// kInvalidArgument.
DTensor copy_to_mesh(const Tensor& tensor, const Layout& layout,
                     Runtime& runtime = Runtime::global());

// The global tensor on the host (Partial layouts reduced first). Every local device's block is
// used; on a multi-client mesh the other processes' blocks must be brought here by a relayout to
// a replicated layout first (kFailedPrecondition otherwise, naming the missing blocks).
Tensor to_host(const DTensor& tensor);
inline Tensor full_tensor(const DTensor& tensor) { return to_host(tensor); }

// The default mesh: a per-thread stack. DefaultMeshScope pushes on construction and pops on
// destruction (TF's `with dtensor.default_mesh(mesh):`); nesting restores the previous one.
class DefaultMeshScope {
 public:
  explicit DefaultMeshScope(const Mesh& mesh);  // an empty mesh: kInvalidArgument
  ~DefaultMeshScope();
  DefaultMeshScope(const DefaultMeshScope&) = delete;
  DefaultMeshScope& operator=(const DefaultMeshScope&) = delete;
};
// The innermost default mesh of this thread, if any.
std::optional<Mesh> get_default_mesh();
// The default mesh, or kInvalidArgument "No default mesh has been registered to DTensor" (for
// ops whose mesh cannot be inferred).
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
// process (it needs only the layout and the shape).
std::string visualize(const DTensor& tensor);

}  // namespace tessel
