// pack, unpack, fetch_layout, check_layout, is_dtensor: TF's DTensorPack / DTensorUnpack and
// their checks, in TF's order (reference §4), plus tessel's uneven-shard shape inference.
#include <map>

#include "core/errors.h"
#include "dtensor/dtensor_internal.h"
#include "dtensor/framework/trace_hooks.h"  // tracing hook: pack / unpack are eager only
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/mesh/shard_map.h"

namespace tessel {
namespace {

constexpr std::string_view kPack = "pack";

// Along each tensor dimension: the sum of the distinct shards' extents when every shard is
// local, else the first local shard's extent times the shard count (TF's rule).
Shape infer_global_shape(const std::vector<Tensor>& tensors, const Layout& layout,
                         const std::vector<int64_t>& offsets) {
  const std::vector<std::vector<int64_t>> shard_of = layout.offset_to_shard();
  std::vector<int64_t> dims;
  for (int axis = 0; axis < layout.rank(); ++axis) {
    std::map<int64_t, int64_t> extent_of_shard;  // shard index -> first local extent
    for (size_t i = 0; i < tensors.size(); ++i) {
      extent_of_shard.emplace(shard_of[offsets[i]][axis], tensors[i].shape()[axis]);
    }
    const int64_t shards = layout.num_shards(axis);
    int64_t n = 0;
    if (static_cast<int64_t>(extent_of_shard.size()) == shards) {
      for (const auto& [shard, extent] : extent_of_shard) n += extent;
    } else {
      n = extent_of_shard.begin()->second * shards;
    }
    dims.push_back(n);
  }
  return Shape(dims);
}

}  // namespace

DTensor pack(const std::vector<Tensor>& tensors, const Layout& layout, Runtime& runtime) {
  // Tracing hook (BR-74-05): pack is eager only.
  if (detail::active_op_tracer() != nullptr) detail::throw_eager_only(kPack, "pack()", "BR-74-05");
  if (tensors.empty()) detail::throw_invalid(kPack, "DTensorPack requires 1 or more inputs");
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined()) detail::throw_invalid(kPack, "input {} is a null tensor", i);
  }
  detail::check_tensor_layout(layout, kPack);
  const Mesh& mesh = layout.mesh();
  if (mesh.is_remote()) {  // TF: a component-less DTensor shaped from the first input
    return DTensor(layout, layout.global_shape_from_local_shape(tensors[0].shape()),
                   tensors[0].dtype(), {}, runtime);
  }
  if (static_cast<int64_t>(tensors.size()) != mesh.num_local_devices()) {
    detail::throw_invalid(
        kPack, "The dtensor device {} expected {} inputs to DTensorPack, but got {}",
        detail::dtensor_device_name(runtime), mesh.num_local_devices(), tensors.size());
  }
  const std::vector<Device*> devices = detail::resolve_local_devices(mesh, runtime, kPack);
  for (size_t i = 1; i < tensors.size(); ++i) {
    if (tensors[i].dtype() != tensors[0].dtype()) {
      detail::throw_invalid(kPack,
                            "Components of a PackedTensor must all have the same dtype (input 0: "
                            "{}, input {}: {})",
                            dtype_name(tensors[0].dtype()), i, dtype_name(tensors[i].dtype()));
    }
  }
  for (const Tensor& t : tensors) {
    if (t.rank() != layout.rank()) {
      detail::throw_invalid(kPack,
                            "Packed layout should have the same rank as the rank for each "
                            "component. The rank of each component is: {}, while layout has "
                            "rank: {}\nLayout: {}",
                            t.rank(), layout.rank(), layout.to_string());
    }
  }
  const std::vector<int64_t> offsets = detail::local_offsets(mesh);
  const Shape global_shape = infer_global_shape(tensors, layout, offsets);
  const ShardMap map(layout, global_shape);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Shape expected(map.block(offsets[i]).extents);
    if (tensors[i].shape() != expected) {
      detail::throw_invalid(kPack,
                            "component {} (device {}) has shape {} but its block of the global "
                            "shape {} is {}",
                            i, devices[i]->name(), tensors[i].shape().to_string(),
                            global_shape.to_string(), expected.to_string());
    }
  }
  std::vector<Tensor> components;
  for (size_t i = 0; i < tensors.size(); ++i) {
    Tensor c = devices[i]->allocate(tensors[i].shape(), tensors[i].dtype(), /*zero_fill=*/false);
    c.copy_from(tensors[i]);
    components.push_back(std::move(c));
  }
  return DTensor(layout, global_shape, tensors[0].dtype(), std::move(components), runtime);
}

std::vector<Tensor> unpack(const DTensor& tensor) {
  // Tracing hook (BR-74-05): unpack is eager only, and an abstract value has no components.
  if (detail::active_op_tracer() != nullptr || tensor.is_abstract()) {
    detail::throw_eager_only("unpack", "unpack()", "BR-74-05");
  }
  if (!tensor.defined()) {
    detail::throw_invalid("unpack", "DTensorUnpack expects a tensor placed on the DTensor device");
  }
  if (tensor.layout().mesh().is_remote()) {
    detail::throw_error(ErrorCode::kUnimplemented, "unpack",
                        "DTensorUnpack is not supported on a remote mesh.");
  }
  std::vector<Device*> devices;
  for (int i = 0; i < tensor.num_components(); ++i) devices.push_back(&tensor.device(i));
  detail::synchronize_devices(devices);
  return tensor.components();
}

Layout fetch_layout(const DTensor& tensor) {
  if (!tensor.defined()) {
    detail::throw_invalid("fetch_layout",
                          "FetchLayout expects a tensor placed on the layout device.");
  }
  return tensor.layout();
}

void check_layout(const DTensor& tensor, const Layout& layout) {
  const Layout actual = fetch_layout(tensor);
  if (actual != layout) {
    detail::throw_invalid("check_layout", "Layout of tensor: {}, did not match expected layout: {}",
                          actual.to_string(), layout.to_string());
  }
}

bool is_dtensor(const DTensor& tensor) { return tensor.defined(); }

}  // namespace tessel
