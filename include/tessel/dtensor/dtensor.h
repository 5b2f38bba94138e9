// DTensor: one global tensor laid out over a mesh of devices (TensorFlow DTensor's DTensor).
//
// A DTensor has a global shape, a dtype and a Layout; it holds one component per LOCAL device of
// its layout's mesh, in mesh.local_devices() order: component i is the block of the global
// tensor that the ShardMap (shard_map.h) gives that device, allocated from the device (so the
// device's memory statistics count it), contiguous. Devices of other processes (a multi-client
// mesh) hold their own components; a mesh with no local device (remote) gives a DTensor with no
// components. A Partial layout means every component holds a pending term of a reduction over
// the partial mesh dimensions (see layout.h); to_host() reduces it, one partial dimension at a
// time in mesh-dimension order (this order matters only when the ops differ).
//
//   Mesh mesh = Mesh::create({{"x", 4}});
//   DTensor d = copy_to_mesh(Tensor::random_uniform({10, 6}, DType::kF32, 7),
//                            Layout({"x", "unsharded"}, mesh));
//   d.component(1)          // rows [3, 6) on CPU:1 (chunk semantics: 3, 3, 3, 1 rows)
//   relayout(d, Layout({"unsharded", "x"}, mesh))   // see relayout.h
//
// Make DTensors with pack / copy_to_mesh / relayout (dtensor_api.h, relayout.h); the
// constructor below checks every invariant and is for those functions and the op layer.
//
// Abstract DTensors (tracing, compile.h): while compile() traces a computation, ops return
// abstract DTensors — layout, shape, dtype and an id, no data. Reading their data
// (num_components, component, components, device; hence to_host, unpack, relayout to another
// layout) throws kFailedPrecondition: data exists only in eager mode. A gradient tape hands a
// VJP such a stand-in for an input or output that the VJP does not read (OpDef::saves).
//
// Thread safety: an immutable value (components share storage like Tensor handles). Copies
// share one block of data (layout, shape, components, ...), so copying a DTensor costs a
// reference count, not a copy of its layout and component handles.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/core/dtype.h"
#include "tessel/core/shape.h"
#include "tessel/core/tensor.h"
#include "tessel/mesh/layout.h"
#include "tessel/runtime/device.h"
#include "tessel/runtime/runtime.h"

namespace tessel {

namespace detail {
struct Placement;      // src/dtensor/placement.h
struct PlannedOutput;  // src/dtensor/framework/launch_plan.cpp
}  // namespace detail

class DTensor {
 public:
  DTensor() = default;  // null: defined() is false
  // Checks: the layout is a tensor layout (not empty, not single-device, no match/any specs,
  // rank == shape rank), every local device of the mesh exists in `runtime`, components.size()
  // equals the local device count, and component i is defined, has `dtype`, is contiguous and
  // has its block's shape.
  // Violations: kInvalidArgument naming the component, its shape and the expected one.
  DTensor(Layout layout, Shape global_shape, DType dtype, std::vector<Tensor> components,
          Runtime& runtime);

  bool defined() const { return data_ != nullptr; }
  const Layout& layout() const { return data().layout; }
  const Shape& shape() const { return data().shape; }
  DType dtype() const { return data().dtype; }
  int rank() const { return shape().rank(); }
  // Bytes of the global tensor (elements * dtype size).
  int64_t nbytes() const;

  // An abstract DTensor: kFailedPrecondition (eager-only), as component / components / device.
  int num_components() const {
    if (is_abstract()) throw_abstract("num_components()");
    return static_cast<int>(data().components.size());
  }
  const Tensor& component(int local_index) const;  // kOutOfRange for a bad index
  const std::vector<Tensor>& components() const {
    if (is_abstract()) throw_abstract("components()");
    return data().components;
  }
  // The device of component i (mesh.local_devices()[i] in the runtime).
  Device& device(int local_index) const;
  Runtime& runtime() const;  // kFailedPrecondition on a null DTensor

  // "DTensor(shape=[8,6], dtype=f32, layout=sharding_specs:x,unsharded, mesh:...)";
  // "DTensor(null)" for a null DTensor.
  std::string to_string() const;

  // Identifies this value (copies share it): gradient tapes key their records by it.
  uint64_t id() const { return id_; }

  // ---- tracing hook (compile.h, src/replicate/trace*.cpp) ---------------------------------
  // An abstract DTensor for a value compile() traces: the layout checks of the constructor
  // (kInvalidArgument), no components, no device check. Only the tracer makes them.
  static DTensor abstract(Layout layout, Shape global_shape, DType dtype, Runtime& runtime);
  bool is_abstract() const { return data().abstract; }

 private:
  // What copies share; immutable once made.
  struct Data {
    Layout layout;
    Shape shape;
    DType dtype = DType::kF32;
    std::vector<Tensor> components;
    std::shared_ptr<const detail::Placement> placement;  // devices per component; null if abstract
    Runtime* runtime = nullptr;
    bool abstract = false;  // tracing hook: see abstract()
  };
  // The data, or that of a null DTensor (empty layout and shape, no components).
  const Data& data() const { return data_ ? *data_ : null_data(); }
  static const Data& null_data();
  // kFailedPrecondition: `call` reads data, which an abstract DTensor does not have.
  [[noreturn]] void throw_abstract(std::string_view call) const;

  std::shared_ptr<const Data> data_;  // null: a null DTensor
  uint64_t id_ = next_id();

  // Dispatch hook (src/dtensor/framework/launch_plan.cpp): assembles an op's output from blocks its launch
  // plan allocated, skipping the constructor's checks, which the plan made once.
  friend struct detail::PlannedOutput;

  static uint64_t next_id();  // unique per constructed value, process-wide
};

}  // namespace tessel
