#include "tessel/mesh/shard_map.h"

#include <algorithm>
#include <map>

#include "core/errors.h"
#include "tessel/mesh/shard_range.h"

namespace tessel {
namespace {

constexpr std::string_view kShardMap = "ShardMap";

std::string range_label(int64_t offset, int64_t extent) {
  return fmt::format("[{}:{})", offset, offset + extent);
}

std::string center(const std::string& s, size_t width) {
  const size_t pad = width > s.size() ? width - s.size() : 0;
  return std::string(pad / 2, ' ') + s + std::string(pad - pad / 2, ' ');
}

}  // namespace

ShardMap::ShardMap(const Layout& layout, const Shape& global_shape)
    : layout_(layout), global_shape_(global_shape) {
  if (layout.is_empty()) detail::throw_invalid(kShardMap, "the empty layout places no tensor");
  if (layout.is_single_device()) {
    std::vector<int64_t> zeros(static_cast<size_t>(global_shape.rank()), 0);
    blocks_.push_back({zeros, global_shape.dims(), zeros});
    return;
  }
  if (layout.rank() != global_shape.rank()) {
    detail::throw_invalid(kShardMap, "shape {} has rank {} but layout {} has rank {}",
                          global_shape.to_string(), global_shape.rank(), layout.to_string(),
                          layout.rank());
  }
  const std::vector<std::vector<int64_t>> shards = layout.offset_to_shard();
  const std::vector<int64_t> counts = layout.num_shards_per_dim();
  for (const std::vector<int64_t>& shard : shards) {
    ShardBlock block;
    block.shard = shard;
    for (int axis = 0; axis < layout.rank(); ++axis) {
      const ShardRange r = shard_range(global_shape[axis], counts[axis], shard[axis]);
      block.offsets.push_back(r.offset);
      block.extents.push_back(r.extent);
    }
    blocks_.push_back(std::move(block));
  }
}

const ShardBlock& ShardMap::block(int64_t offset) const {
  if (offset < 0 || offset >= num_devices()) {
    detail::throw_error(ErrorCode::kOutOfRange, kShardMap,
                        "device offset {} is outside the mesh's {} devices", offset, num_devices());
  }
  return blocks_[static_cast<size_t>(offset)];
}

std::vector<ShardMap::Replicas> ShardMap::distinct_blocks() const {
  std::map<std::vector<int64_t>, Replicas> by_shard;
  for (int64_t offset = 0; offset < num_devices(); ++offset) {
    Replicas& r = by_shard[blocks_[offset].shard];
    r.block = blocks_[offset];
    r.device_offsets.push_back(offset);
  }
  std::vector<Replicas> out;
  for (auto& [shard, replicas] : by_shard) out.push_back(std::move(replicas));
  return out;
}

namespace {

// Global device ids holding each distinct block, keyed by shard index.
std::map<std::vector<int64_t>, std::string> device_labels(const ShardMap& map) {
  const Mesh& mesh = map.layout().mesh();
  std::map<std::vector<int64_t>, std::string> labels;
  for (const ShardMap::Replicas& r : map.distinct_blocks()) {
    std::vector<int64_t> ids;
    for (int64_t offset : r.device_offsets) {
      ids.push_back(mesh.is_single_device() ? 0 : mesh.global_device_ids()[offset]);
    }
    labels[r.block.shard] = fmt::format("{}", fmt::join(ids, ","));
  }
  return labels;
}

// Rank 1 and 2: a grid whose rows are shards of dim 0 and columns shards of dim 1.
std::string draw_grid(const ShardMap& map) {
  const int rank = map.global_shape().rank();
  const std::vector<int64_t> counts =
      map.layout().is_single_device() ? std::vector<int64_t>(rank, 1)
                                      : map.layout().num_shards_per_dim();
  const int64_t rows = rank == 2 ? counts[0] : 1;
  const int64_t cols = counts[rank - 1];
  const int64_t row_len = rank == 2 ? map.global_shape()[0] : 1;
  const int64_t col_len = map.global_shape()[rank - 1];
  const auto labels = device_labels(map);

  std::vector<std::string> col_heads, row_heads;
  for (int64_t c = 0; c < cols; ++c) {
    const ShardRange r = shard_range(col_len, cols, c);
    col_heads.push_back(range_label(r.offset, r.extent));
  }
  for (int64_t r = 0; r < rows; ++r) {
    const ShardRange range = shard_range(row_len, rows, r);
    row_heads.push_back(rank == 2 ? range_label(range.offset, range.extent) : "");
  }
  size_t cell = 0;
  for (const auto& [shard, label] : labels) cell = std::max(cell, label.size());
  for (const std::string& h : col_heads) cell = std::max(cell, h.size());
  cell += 2;
  size_t margin = 0;
  for (const std::string& h : row_heads) margin = std::max(margin, h.size());
  margin += 1;

  std::string rule = std::string(margin, ' ') + "+";
  for (int64_t c = 0; c < cols; ++c) rule += std::string(cell, '-') + "+";
  std::string out = std::string(margin + 1, ' ');
  for (const std::string& h : col_heads) out += center(h, cell) + " ";
  out += "\n" + rule + "\n";
  for (int64_t r = 0; r < rows; ++r) {
    out += row_heads[r] + std::string(margin - row_heads[r].size(), ' ') + "|";
    for (int64_t c = 0; c < cols; ++c) {
      const std::vector<int64_t> shard = rank == 2 ? std::vector<int64_t>{r, c}
                                                   : std::vector<int64_t>{c};
      auto it = labels.find(shard);
      out += center(it == labels.end() ? "?" : it->second, cell) + "|";
    }
    out += "\n" + rule + "\n";
  }
  return out;
}

// Rank 0 and >= 3: one line per distinct block.
std::string draw_table(const ShardMap& map) {
  const auto labels = device_labels(map);
  std::string out = "devices          block\n";
  for (const ShardMap::Replicas& r : map.distinct_blocks()) {
    std::vector<std::string> ranges;
    for (size_t i = 0; i < r.block.offsets.size(); ++i) {
      ranges.push_back(range_label(r.block.offsets[i], r.block.extents[i]));
    }
    out += fmt::format("{:<16} {}\n", labels.at(r.block.shard),
                       ranges.empty() ? std::string("(scalar)")
                                      : fmt::format("{}", fmt::join(ranges, " x ")));
  }
  return out;
}

}  // namespace

std::string ShardMap::visualize() const {
  const Layout& l = layout_;
  std::string specs = l.is_single_device() ? "single device"
                                           : fmt::format("{}", fmt::join(l.sharding_spec_strings(), ","));
  std::vector<std::string> dims;
  for (const MeshDimension& d : l.mesh().dims()) dims.push_back(fmt::format("{}={}", d.name, d.size));
  const std::string mesh_dims = fmt::format("{}", fmt::join(dims, ","));
  std::string out = fmt::format("shape {} as [{}] over mesh |{}|, device ids in each block\n",
                                global_shape_.to_string(), specs, mesh_dims);
  const int rank = global_shape_.rank();
  out += (rank == 1 || rank == 2) ? draw_grid(*this) : draw_table(*this);
  for (const PartialDim& p : l.partial()) {
    out += fmt::format("partial: each block holds a pending {} over mesh dimension {}\n",
                       reduce_op_name(p.op), p.mesh_dim);
  }
  return out;
}

std::string visualize(const Layout& layout, const Shape& global_shape) {
  return ShardMap(layout, global_shape).visualize();
}

}  // namespace tessel
