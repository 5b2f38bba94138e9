#include "tessel/dtensor/dtensor.h"

#include <exception>

#include "core/errors.h"
#include "dtensor/dtensor_internal.h"
#include "dtensor/placement.h"
#include "tessel/mesh/shard_map.h"

namespace tessel {
namespace {

constexpr std::string_view kDTensor = "DTensor";

void check_rank(const Layout& layout, const Shape& global_shape) {
  if (layout.rank() != global_shape.rank()) {
    detail::throw_invalid(kDTensor, "shape {} has rank {} but layout {} has rank {}",
                          global_shape.to_string(), global_shape.rank(), layout.to_string(),
                          layout.rank());
  }
}

}  // namespace

namespace detail {

void check_tensor_layout(const Layout& layout, std::string_view component) {
  if (layout.is_empty()) throw_invalid(component, "the empty layout places no tensor");
  if (layout.is_single_device()) {
    throw_invalid(component, "the single-device layout {} is not a mesh layout",
                  layout.to_string());
  }
  for (const ShardingSpec& spec : layout.sharding_specs()) {
    if (spec.is_match() || spec.is_any()) {
      throw_invalid(component, "layout {} has a '{}' spec; a tensor needs concrete specs",
                    layout.to_string(), spec.to_string());
    }
  }
}

std::vector<Device*> resolve_local_devices(const Mesh& mesh, Runtime& runtime,
                                           std::string_view component) {
  std::vector<Device*> devices;
  for (const std::string& name : mesh.local_devices()) {
    try {
      devices.push_back(&runtime.device(name));
    } catch (const Error& e) {
      // TF's text when a mesh names a device the process lacks (a TPU mesh on a host without
      // TPUs: EagerContext's device lookup while copying the input onto the mesh).
      throw_invalid(component,
                    "{} unknown device. The mesh device is not one of this runtime's ({})", name,
                    e.message());
    }
  }
  return devices;
}

std::vector<int64_t> local_offsets(const Mesh& mesh) {
  std::vector<int64_t> offsets;
  for (int64_t id : mesh.local_device_ids()) offsets.push_back(mesh.offset_of_device_id(id));
  return offsets;
}

void synchronize_devices(const std::vector<Device*>& devices) {
  std::exception_ptr first;
  for (Device* d : devices) {
    try {
      d->stream().synchronize();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

std::string block_string(const std::vector<int64_t>& offsets, const std::vector<int64_t>& extents) {
  std::vector<std::string> ranges;
  for (size_t i = 0; i < offsets.size(); ++i) {
    ranges.push_back(fmt::format("{}:{}", offsets[i], offsets[i] + extents[i]));
  }
  return fmt::format("[{}]", fmt::join(ranges, ", "));
}

}  // namespace detail

DTensor::DTensor(Layout layout, Shape global_shape, DType dtype, std::vector<Tensor> components,
                 Runtime& runtime) {
  if (!layout.is_empty() && !layout.is_single_device()) check_rank(layout, global_shape);
  const auto place = detail::placement(layout, global_shape, runtime, kDTensor);
  if (components.size() != place->devices.size()) {
    detail::throw_invalid(kDTensor, "{} components given for the {} local devices of mesh {}",
                          components.size(), place->devices.size(), layout.mesh().to_string());
  }
  for (size_t i = 0; i < components.size(); ++i) {
    const Tensor& c = components[i];
    const std::string& device = place->devices[i]->name();
    if (!c.defined()) detail::throw_invalid(kDTensor, "component {} ({}) is null", i, device);
    if (c.dtype() != dtype) {
      detail::throw_invalid(kDTensor, "component {} ({}) has dtype {}, expected {}", i, device,
                            dtype_name(c.dtype()), dtype_name(dtype));
    }
    const std::vector<int64_t>& expected = place->blocks[i].extents;
    if (c.shape().dims() != expected) {
      detail::throw_invalid(kDTensor, "component {} ({}) has shape {}, expected {}", i, device,
                            c.shape().to_string(), Shape(expected).to_string());
    }
    if (!c.is_contiguous()) {
      detail::throw_invalid(kDTensor, "component {} ({}) is not contiguous", i, device);
    }
  }
  data_ = std::make_shared<const Data>(Data{.layout = std::move(layout),
                                             .shape = std::move(global_shape),
                                             .dtype = dtype,
                                             .components = std::move(components),
                                             .placement = place,
                                             .runtime = &runtime});
}

// Tracing hook (compile.h): an abstract value has the constructor's layout checks and no data.
DTensor DTensor::abstract(Layout layout, Shape global_shape, DType dtype, Runtime& runtime) {
  detail::check_tensor_layout(layout, kDTensor);
  check_rank(layout, global_shape);
  DTensor d;
  d.data_ = std::make_shared<const Data>(Data{.layout = std::move(layout),
                                               .shape = std::move(global_shape),
                                               .dtype = dtype,
                                               .components = {},
                                               .placement = nullptr,
                                               .runtime = &runtime,
                                               .abstract = true});
  return d;
}

void DTensor::throw_abstract(std::string_view call) const {
  detail::throw_error(ErrorCode::kFailedPrecondition, kDTensor,
                      "{} of abstract DTensor #{} ({} {}, a value traced by compile(), or a "
                      "stand-in for a tensor a gradient tape did not keep: OpDef::saves): it has "
                      "no data, and reading data (to_host, unpack, relayout, components) is "
                      "eager-only; run the compiled computation instead",
                      call, id_, shape().to_string(), dtype_name(dtype()));
}

const DTensor::Data& DTensor::null_data() {
  static const Data* null = new Data();  // never destroyed: null DTensors may be read at exit
  return *null;
}

int64_t DTensor::nbytes() const {
  return shape().num_elements() * static_cast<int64_t>(dtype_size(dtype()));
}

const Tensor& DTensor::component(int local_index) const {
  if (is_abstract()) throw_abstract("component()");  // tracing hook
  if (local_index < 0 || local_index >= num_components()) {
    detail::throw_error(ErrorCode::kOutOfRange, kDTensor,
                        "component index {} is outside the {} local components", local_index,
                        num_components());
  }
  return data_->components[static_cast<size_t>(local_index)];
}

Device& DTensor::device(int local_index) const {
  component(local_index);  // the index check
  return *data_->placement->devices[static_cast<size_t>(local_index)];
}

Runtime& DTensor::runtime() const {
  if (!defined()) {
    detail::throw_error(ErrorCode::kFailedPrecondition, kDTensor, "runtime() of a null DTensor");
  }
  return *data_->runtime;
}

std::string DTensor::to_string() const {
  if (!defined()) return "DTensor(null)";
  return fmt::format("DTensor(shape={}, dtype={}, layout={})", shape().to_string(),
                     dtype_name(dtype()), layout().to_string());
}

}  // namespace tessel
