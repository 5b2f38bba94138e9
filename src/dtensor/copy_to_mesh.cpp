// copy_to_mesh and to_host: a host tensor split into its blocks on the local devices, and the
// blocks put back together (Partial terms combined), so that to_host(copy_to_mesh(x, L)) == x.
#include <algorithm>
#include <optional>

#include "comm/reduce_kernels.h"
#include "core/errors.h"
#include "dtensor/dtensor_internal.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/mesh/shard_map.h"

namespace tessel {
namespace {

constexpr std::string_view kCopyToMesh = "copy_to_mesh";
constexpr std::string_view kToHost = "to_host";

void check_partial_dtype(const Layout& layout, DType dtype, std::string_view component) {
  for (const PartialDim& p : layout.partial()) {
    if (p.op == ReduceOp::kMean && dtype == DType::kBool) {
      detail::throw_invalid(component, "partial mean({}) is not defined for bool tensors",
                            p.mesh_dim);
    }
  }
}

// What the device at `offset` holds of a Partial value v: v, or the identity of the first sum or
// prod partial dim (in mesh order, the order to_host reduces in) along which it is not at 0.
// max, min and mean keep v along their dims: their reduction of equal values is the value.
std::optional<double> partial_identity(const Layout& layout, int64_t offset) {
  const Mesh& mesh = layout.mesh();
  const std::vector<int64_t> location = mesh.device_location(offset);
  for (const PartialDim& p : layout.partial()) {
    if (p.op != ReduceOp::kSum && p.op != ReduceOp::kProd) continue;
    if (location[mesh.dim_index(p.mesh_dim)] != 0) return p.op == ReduceOp::kSum ? 0.0 : 1.0;
  }
  return std::nullopt;
}

// One local component per combination of partial-dim coordinates (row-major, the first partial
// dim major) among the holders of one block; empty when some combination has no local holder.
std::vector<Tensor> partial_terms(const DTensor& tensor, const std::vector<int64_t>& holders,
                                  const std::vector<int64_t>& offsets) {
  const Mesh& mesh = tensor.layout().mesh();
  int64_t count = 1;
  for (const PartialDim& p : tensor.layout().partial()) count *= mesh.dim_size(p.mesh_dim);
  std::vector<Tensor> terms(static_cast<size_t>(count));
  for (size_t i = 0; i < offsets.size(); ++i) {
    if (std::find(holders.begin(), holders.end(), offsets[i]) == holders.end()) continue;
    const std::vector<int64_t> location = mesh.device_location(offsets[i]);
    int64_t index = 0;
    for (const PartialDim& p : tensor.layout().partial()) {
      index = index * mesh.dim_size(p.mesh_dim) + location[mesh.dim_index(p.mesh_dim)];
    }
    if (!terms[index].defined()) terms[index] = tensor.component(static_cast<int>(i));
  }
  for (const Tensor& t : terms) {
    if (!t.defined()) return {};
  }
  return terms;
}

// Combines the terms one partial dim at a time, first dim first (mean divides by its size), on
// the host (the terms of GPU devices are copied there first).
Tensor combine_terms(std::vector<Tensor> terms, const Layout& layout) {
  if (layout.is_partial()) {
    for (Tensor& t : terms) t = t.to_host();
  }
  for (const PartialDim& p : layout.partial()) {
    const int64_t n = layout.mesh().dim_size(p.mesh_dim);
    const size_t inner = terms.size() / static_cast<size_t>(n);
    std::vector<Tensor> next;
    for (size_t q = 0; q < inner; ++q) {
      std::vector<const void*> inputs;
      for (int64_t c = 0; c < n; ++c) inputs.push_back(terms[c * inner + q].data());
      Tensor out = Tensor::empty(terms[q].shape(), terms[q].dtype(), nullptr, false);
      void* output = out.data();
      detail::reduce_buffers(out.dtype(), p.op, inputs.data(), static_cast<int>(n), &output, 1, 0,
                             out.num_elements(), n);
      next.push_back(std::move(out));
    }
    terms = std::move(next);
  }
  return terms[0];
}

}  // namespace

DTensor copy_to_mesh(const Tensor& tensor, const Layout& layout, Runtime& runtime) {
  if (!tensor.defined()) detail::throw_invalid(kCopyToMesh, "the input is a null tensor");
  detail::check_tensor_layout(layout, kCopyToMesh);
  if (tensor.rank() != layout.rank()) {
    detail::throw_invalid(kCopyToMesh, "tensor of shape {} has rank {} but layout {} has rank {}",
                          tensor.shape().to_string(), tensor.rank(), layout.to_string(),
                          layout.rank());
  }
  check_partial_dtype(layout, tensor.dtype(), kCopyToMesh);
  const std::vector<Device*> devices =
      detail::resolve_local_devices(layout.mesh(), runtime, kCopyToMesh);
  const std::vector<int64_t> offsets = detail::local_offsets(layout.mesh());
  const ShardMap map(layout, tensor.shape());
  std::vector<Tensor> components;
  for (size_t i = 0; i < devices.size(); ++i) {
    const ShardBlock& b = map.block(offsets[i]);
    Tensor c = devices[i]->allocate(Shape(b.extents), tensor.dtype(), /*zero_fill=*/false);
    if (std::optional<double> identity = partial_identity(layout, offsets[i])) {
      c.fill(*identity);
    } else {
      c.copy_from(tensor.block(b.offsets, b.extents));
    }
    components.push_back(std::move(c));
  }
  return DTensor(layout, tensor.shape(), tensor.dtype(), std::move(components), runtime);
}

Tensor to_host(const DTensor& tensor) {
  if (!tensor.defined()) {
    detail::throw_invalid(kToHost, "to_host expects a tensor placed on the DTensor device");
  }
  const Layout& layout = tensor.layout();
  check_partial_dtype(layout, tensor.dtype(), kToHost);
  std::vector<Device*> devices;
  for (int i = 0; i < tensor.num_components(); ++i) devices.push_back(&tensor.device(i));
  detail::synchronize_devices(devices);

  const std::vector<int64_t> offsets = detail::local_offsets(layout.mesh());
  Tensor out = Tensor::empty(tensor.shape(), tensor.dtype(), nullptr, /*zero_fill=*/false);
  std::vector<std::string> missing;
  for (const ShardMap::Replicas& r : ShardMap(layout, tensor.shape()).distinct_blocks()) {
    if (Shape(r.block.extents).num_elements() == 0) continue;  // nothing to fetch
    std::vector<Tensor> terms = partial_terms(tensor, r.device_offsets, offsets);
    if (terms.empty()) {
      std::vector<int64_t> ids;
      for (int64_t o : r.device_offsets) ids.push_back(layout.mesh().global_device_ids()[o]);
      missing.push_back(fmt::format("{} (devices {})",
                                    detail::block_string(r.block.offsets, r.block.extents),
                                    fmt::join(ids, ",")));
      continue;
    }
    out.block(r.block.offsets, r.block.extents).copy_from(combine_terms(std::move(terms), layout));
  }
  if (!missing.empty()) {
    detail::throw_error(ErrorCode::kFailedPrecondition, kToHost,
                        "blocks not (or only partly) held by this process's devices: {}; "
                        "relayout to a replicated layout first",
                        fmt::join(missing, ", "));
  }
  return out;
}

Tensor full_tensor(const DTensor& tensor) {
  if (!tensor.defined()) return to_host(tensor);  // its error
  const Mesh& mesh = tensor.layout().mesh();
  if (mesh.is_single_device() || mesh.num_local_devices() == mesh.size()) return to_host(tensor);
  return to_host(detail::relayout_untracked(tensor, Layout::replicated(mesh, tensor.shape().rank())));
}

}  // namespace tessel
