#include "tessel/mesh/layout.h"

#include <algorithm>
#include <set>

#include "core/errors.h"
#include "mesh/mesh_data.h"
#include "tessel/mesh/shard_range.h"

namespace tessel {
namespace {

constexpr std::string_view kLayout = "Layout";

// TF's legacy "scalar" spec (ShardingSpec::parse reads it as a dimension named "scalar").
bool is_scalar_spec(const ShardingSpec& spec) {
  return spec.is_sharded() && spec.mesh_dims().size() == 1 && spec.mesh_dims()[0] == kScalar;
}

// Python's repr of a list of strings: ['x', 'unsharded'].
std::string python_list(const std::vector<std::string>& items) {
  std::vector<std::string> quoted;
  for (const std::string& s : items) quoted.push_back("'" + s + "'");
  return fmt::format("[{}]", fmt::join(quoted, ", "));
}

// The specs, parsed, after TF's Python Layout.__init__ checks (§2.3 step 2), extended to "x+y".
std::vector<ShardingSpec> parse_python_specs(const std::vector<std::string>& specs,
                                             const Mesh& mesh) {
  std::vector<ShardingSpec> parsed_specs;
  std::vector<std::string> used;
  for (const std::string& spec : specs) {
    parsed_specs.push_back(ShardingSpec::parse(spec));
    if (spec == kUnsharded || spec == kMatch) continue;
    if (spec == kAny) {
      detail::throw_invalid(
          kLayout, "{}: A dimension sharding must either be a valid mesh dimension or UNSHARDED.",
          spec);
    }
    const ShardingSpec& parsed = parsed_specs.back();
    used.insert(used.end(), parsed.mesh_dims().begin(), parsed.mesh_dims().end());
  }
  for (const std::string& dim : used) {
    if (std::count(used.begin(), used.end(), dim) > 1) {
      detail::throw_invalid(kLayout,
                            "Mesh dimension {} was repeated in sharding specification {}. Mesh "
                            "dimensions must be unique in a layout.",
                            dim, python_list(specs));
    }
    if (!mesh.contains_dim(dim)) {
      detail::throw_invalid(
          kLayout, "{}: A dimension sharding must either be a valid mesh dimension or UNSHARDED.",
          dim);
    }
  }
  return parsed_specs;
}

}  // namespace

Layout::Layout() = default;

Layout::Layout(LayoutType type, std::vector<ShardingSpec> specs, Mesh mesh,
               std::vector<PartialDim> partial)
    : data_(std::make_shared<const Data>(
          Data{type, std::move(specs), std::move(mesh), std::move(partial)})) {}

const Layout::Data& Layout::empty_data() {
  static const Data* empty = new Data();  // never destroyed: layouts may be read during exit
  return *empty;
}

Layout::Layout(const std::vector<std::string>& sharding_specs, const Mesh& mesh) {
  *this = create(LayoutType::kStatic, parse_python_specs(sharding_specs, mesh), mesh);
}

Layout Layout::create(LayoutType type, std::vector<ShardingSpec> specs, const Mesh& mesh,
                      std::vector<PartialDim> partial) {
  if ((type == LayoutType::kSingleDevice) != mesh.is_single_device()) {
    detail::throw_invalid(kLayout, "type is single device, but mesh is not single device: {}",
                          mesh.to_string());
  }
  if ((type == LayoutType::kEmpty) != mesh.is_empty()) {
    detail::throw_invalid(kLayout, "type is empty, but mesh is not empty: {}", mesh.to_string());
  }
  if ((type == LayoutType::kSingleDevice || type == LayoutType::kEmpty) &&
      (!specs.empty() || !partial.empty())) {
    detail::throw_invalid(kLayout, "a {} layout has no sharding specs or partial dimensions",
                          type == LayoutType::kEmpty ? "empty" : "single-device");
  }
  // TF's GetLayout: every spec names mesh dimensions (or is TF's legacy "scalar"); then, in
  // order, a "scalar" spec makes the layout rank 0 when it is the only one, and a mesh dimension
  // may shard one tensor dimension only.
  for (const ShardingSpec& spec : specs) {
    if (is_scalar_spec(spec)) continue;
    for (const std::string& dim : spec.mesh_dims()) {
      if (!mesh.contains_dim(dim)) {
        detail::throw_invalid(kLayout,
                              "sharding spec ({}) refers to mesh dimension not contained in mesh {}",
                              dim, mesh.to_string());
      }
    }
  }
  std::set<std::string> used;
  for (size_t axis = 0; axis < specs.size(); ++axis) {
    if (is_scalar_spec(specs[axis])) {
      if (specs.size() > 1) {
        detail::throw_invalid(kLayout,
                              "A scalar sharding_spec can only be used as a single sharding_spec "
                              "instruction, not as part of list of sharding_specs as attempted "
                              "here with {} sharding_specs",
                              specs.size());
      }
      specs.clear();
      break;
    }
    for (const std::string& dim : specs[axis].mesh_dims()) {
      if (!used.insert(dim).second) {
        detail::throw_invalid(kLayout,
                              "Attempted to shard two or more tensor dimensions over mesh "
                              "dimension {}",
                              dim);
      }
    }
  }
  std::set<std::string> partial_seen;
  for (const PartialDim& p : partial) {
    if (!mesh.contains_dim(p.mesh_dim)) {
      detail::throw_invalid(kLayout,
                            "partial dimension ({}) refers to mesh dimension not contained in "
                            "mesh {}",
                            p.mesh_dim, mesh.to_string());
    }
    if (!partial_seen.insert(p.mesh_dim).second) {
      detail::throw_invalid(kLayout, "mesh dimension {} is listed as partial twice", p.mesh_dim);
    }
    if (used.count(p.mesh_dim)) {
      detail::throw_invalid(kLayout,
                            "mesh dimension {} is partial and also shards a tensor dimension; a "
                            "mesh dimension holds either shards or pending reductions",
                            p.mesh_dim);
    }
  }
  std::sort(partial.begin(), partial.end(), [&](const PartialDim& a, const PartialDim& b) {
    return mesh.dim_index(a.mesh_dim) < mesh.dim_index(b.mesh_dim);
  });
  return Layout(type, std::move(specs), mesh, std::move(partial));
}

Layout Layout::replicated(const Mesh& mesh, int rank) {
  if (rank < 0) detail::throw_invalid(kLayout, "replicated: rank {} is negative", rank);
  return create(LayoutType::kStatic, std::vector<ShardingSpec>(static_cast<size_t>(rank)), mesh);
}

Layout Layout::batch_sharded(const Mesh& mesh, const std::string& batch_dim, int rank, int axis) {
  if (rank < 1 || axis < 0 || axis >= rank) {
    detail::throw_invalid(kLayout, "batch_sharded: axis {} is not a dimension of rank {}", axis,
                          rank);
  }
  std::vector<ShardingSpec> specs(static_cast<size_t>(rank));
  specs[static_cast<size_t>(axis)] = ShardingSpec::parse(batch_dim);
  return create(LayoutType::kStatic, std::move(specs), mesh);
}

Layout Layout::inner_sharded(const Mesh& mesh, const std::string& inner_dim, int rank) {
  return batch_sharded(mesh, inner_dim, rank, rank - 1);
}

Layout Layout::single_device(const Mesh& mesh) {
  return create(LayoutType::kSingleDevice, {}, mesh);
}

std::vector<std::string> Layout::sharding_spec_strings() const {
  std::vector<std::string> out;
  for (const ShardingSpec& s : sharding_specs()) out.push_back(s.to_string());
  return out;
}

int64_t Layout::num_shards(int axis) const {
  if (axis < 0 || axis >= rank()) {
    detail::throw_error(ErrorCode::kOutOfRange, kLayout,
                        "num_shards: axis {} is outside a layout of rank {}", axis, rank());
  }
  const ShardingSpec& spec = sharding_specs()[static_cast<size_t>(axis)];
  if (spec.is_match() || spec.is_any()) {
    detail::throw_invalid(kLayout, "num_shards: axis {} is '{}', which has no shard count", axis,
                          spec.to_string());
  }
  int64_t shards = 1;
  for (const std::string& dim : spec.mesh_dims()) shards *= mesh().dim_size(dim);
  return shards;
}

std::vector<int64_t> Layout::num_shards_per_dim() const {
  std::vector<int64_t> out;
  for (int i = 0; i < rank(); ++i) out.push_back(num_shards(i));
  return out;
}

bool Layout::is_fully_replicated() const {
  if (is_single_device() || is_partial()) return false;
  return std::all_of(sharding_specs().begin(), sharding_specs().end(),
                     [](const ShardingSpec& s) { return s.is_unsharded(); });
}

bool Layout::is_batch_parallel() const {
  if (is_single_device() || is_empty() || rank() < 1 || !sharding_specs()[0].is_sharded()) {
    return false;
  }
  return std::all_of(sharding_specs().begin() + 1, sharding_specs().end(),
                     [](const ShardingSpec& s) { return s.is_unsharded(); });
}

std::vector<std::string> Layout::sharded_mesh_dims() const {
  std::vector<std::string> out;
  for (const std::string& dim : mesh().dim_names()) {
    for (const ShardingSpec& s : sharding_specs()) {
      if (s.uses(dim)) out.push_back(dim);
    }
  }
  return out;
}

int64_t Layout::shard_index(int axis, const std::vector<int64_t>& location) const {
  int64_t index = 0;
  for (const std::string& dim : sharding_specs()[static_cast<size_t>(axis)].mesh_dims()) {
    const int d = mesh().dim_index(dim);
    index = index * mesh().dims()[static_cast<size_t>(d)].size + location[static_cast<size_t>(d)];
  }
  return index;
}

namespace {
void check_rank(const Layout& layout, int rank, const std::string& shape, std::string_view what) {
  if (!layout.is_single_device() && rank != layout.rank()) {
    detail::throw_invalid(kLayout, "{}: shape {} has rank {} but the layout has rank {}", what,
                          shape, rank, layout.rank());
  }
}
void check_rank(const Layout& layout, const Shape& shape, std::string_view what) {
  check_rank(layout, shape.rank(), shape.to_string(), what);
}
}  // namespace

Shape Layout::local_shape(const Shape& global_shape, int64_t offset) const {
  check_rank(*this, global_shape, "local_shape");
  if (is_single_device()) return global_shape;
  const std::vector<int64_t> location = mesh().device_location(offset);
  std::vector<int64_t> dims = global_shape.dims();
  for (int axis = 0; axis < rank(); ++axis) {
    const int64_t shards = num_shards(axis);
    if (shards == 1) continue;
    dims[axis] = shard_range(dims[axis], shards, shard_index(axis, location)).extent;
  }
  return Shape(dims);
}

int64_t Layout::largest_block_extent(int axis, int64_t n) const {
  return std::min(n, shard_chunk_size(n, num_shards(axis)));
}

Shape Layout::local_shape_from_global_shape(const Shape& global_shape) const {
  check_rank(*this, global_shape, "local_shape_from_global_shape");
  if (is_single_device()) return global_shape;
  std::vector<int64_t> dims = global_shape.dims();
  for (int axis = 0; axis < rank(); ++axis) dims[axis] = largest_block_extent(axis, dims[axis]);
  return Shape(dims);
}

PartialShape Layout::local_partial_shape_from_global_shape(const PartialShape& global_shape) const {
  if (!global_shape.rank_known()) return global_shape;  // TF: dims() == -1 comes back as is
  check_rank(*this, global_shape.rank(), global_shape.to_string(), "local_shape_from_global_shape");
  if (is_single_device()) return global_shape;
  std::vector<int64_t> dims = global_shape.dims();
  for (int axis = 0; axis < rank(); ++axis) {
    if (dims[axis] != kUnknownDim) dims[axis] = largest_block_extent(axis, dims[axis]);
  }
  return PartialShape(std::move(dims));
}

Shape Layout::global_shape_from_local_shape(const Shape& local_shape) const {
  check_rank(*this, local_shape, "global_shape_from_local_shape");
  if (is_single_device()) return local_shape;
  std::vector<int64_t> dims = local_shape.dims();
  for (int axis = 0; axis < rank(); ++axis) dims[axis] *= num_shards(axis);
  return Shape(dims);
}

std::vector<std::vector<int64_t>> Layout::offset_to_shard() const {
  std::vector<std::vector<int64_t>> out;
  for (int64_t offset = 0; offset < mesh().size(); ++offset) {
    const std::vector<int64_t> location = mesh().device_location(offset);
    std::vector<int64_t> shard;
    for (int axis = 0; axis < rank(); ++axis) {
      if (sharding_specs()[axis].is_match() || sharding_specs()[axis].is_any()) {
        detail::throw_invalid(kLayout, "offset_to_shard: axis {} is '{}'", axis,
                              sharding_specs()[axis].to_string());
      }
      shard.push_back(shard_index(axis, location));
    }
    out.push_back(std::move(shard));
  }
  return out;
}

int64_t Layout::offset_tuple_to_global_index(const std::vector<int64_t>& shard) const {
  if (static_cast<int>(shard.size()) != rank()) {
    detail::throw_invalid(kLayout, "offset_tuple_to_global_index: {} entries for rank {}",
                          shard.size(), rank());
  }
  int64_t index = 0;
  for (int axis = 0; axis < rank(); ++axis) {
    const int64_t shards = num_shards(axis);
    if (shard[axis] < 0 || shard[axis] >= shards) {
      detail::throw_error(ErrorCode::kOutOfRange, kLayout,
                          "offset_tuple_to_global_index: shard {} of axis {} is outside [0, {})",
                          shard[axis], axis, shards);
    }
    index = index * shards + shard[axis];
  }
  return index;
}

std::string Layout::shard_vector_string() const {
  std::vector<std::string> shards;
  for (const std::vector<int64_t>& s : offset_to_shard()) {
    std::vector<int64_t> one_based;
    for (int64_t v : s) one_based.push_back(v + 1);
    shards.push_back(fmt::format("({})", fmt::join(one_based, ",")));
  }
  return fmt::format("shards:[{}] num_shards_per_dim:({})", fmt::join(shards, ","),
                     fmt::join(num_shards_per_dim(), ","));
}

Layout Layout::to_parted() const {
  if (type() != LayoutType::kStatic && type() != LayoutType::kParted) {
    detail::throw_invalid(kLayout, "to_parted: only a static layout can become parted: {}",
                          to_string());
  }
  return Layout(LayoutType::kParted, sharding_specs(), mesh(), partial());
}

Layout Layout::delete_dims(const std::vector<int>& dims) const {
  std::vector<ShardingSpec> kept;
  for (int axis = 0; axis < rank(); ++axis) {
    if (std::find(dims.begin(), dims.end(), axis) == dims.end()) {
      kept.push_back(sharding_specs()[axis]);
    }
  }
  return create(type(), std::move(kept), mesh(), partial());
}

Layout Layout::transposed_2d() const {
  if (rank() < 2) detail::throw_invalid(kLayout, "transposed_2d: rank {} is below 2", rank());
  std::vector<ShardingSpec> specs = sharding_specs();
  std::swap(specs[specs.size() - 1], specs[specs.size() - 2]);
  return Layout(type(), std::move(specs), mesh(), partial());
}

Layout Layout::left_pad(int new_rank) const {
  if (new_rank <= rank()) return *this;
  std::vector<ShardingSpec> specs(static_cast<size_t>(new_rank - rank()));
  specs.insert(specs.end(), sharding_specs().begin(), sharding_specs().end());
  return Layout(type(), std::move(specs), mesh(), partial());
}

Layout Layout::without_partial() const { return Layout(type(), sharding_specs(), mesh(), {}); }

Layout Layout::with_partial(std::vector<PartialDim> partial) const {
  return create(type(), sharding_specs(), mesh(), std::move(partial));
}

bool Layout::is_equivalent_ignoring_type(const Layout& other) const {
  if (rank() != other.rank() || mesh() != other.mesh() || partial() != other.partial()) {
    return false;
  }
  for (int axis = 0; axis < rank(); ++axis) {
    const ShardingSpec& a = sharding_specs()[axis];
    const ShardingSpec& b = other.sharding_specs()[axis];
    if (a == b) continue;
    const bool a_one = !a.is_match() && !a.is_any() && num_shards(axis) == 1;
    const bool b_one = !b.is_match() && !b.is_any() && other.num_shards(axis) == 1;
    if (!a_one || !b_one) return false;
  }
  return true;
}

bool Layout::is_equivalent(const Layout& other) const {
  return type() == other.type() && is_equivalent_ignoring_type(other);
}

bool operator==(const Layout& a, const Layout& b) {
  if (a.data_ == b.data_) return true;  // copies share their data
  const Layout::Data& x = a.data();
  const Layout::Data& y = b.data();
  return x.type == y.type && x.specs == y.specs && x.partial == y.partial && x.mesh == y.mesh;
}

size_t Layout::hash() const {
  return std::hash<std::string>()(to_string()) ^ (mesh().hash() * 31u);
}

std::ostream& operator<<(std::ostream& os, const Layout& layout) {
  return os << layout.to_string();
}

}  // namespace tessel
