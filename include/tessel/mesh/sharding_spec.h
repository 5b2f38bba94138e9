// ShardingSpec: how one tensor dimension is laid over a mesh.
//
//   "unsharded"  the dimension is replicated
//   "x"          split over mesh dimension x (TensorFlow's form)
//   "x+y"        tessel extension: split over x and y together, x major: shard index
//                coord_x * size_y + coord_y, size_x * size_y shards
//   "match"      relayout target only: keep the source's spec for this dimension
//   "any"        no preference (layout propagation; TF's C++ "any")
// Mesh dimension names never contain '+', so the extension cannot collide with a TF spec.
//
// Thread safety: value type.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tessel {

inline constexpr std::string_view kUnsharded = "unsharded";
inline constexpr std::string_view kMatch = "match";
inline constexpr std::string_view kAny = "any";
inline constexpr std::string_view kScalar = "scalar";  // legacy: sole spec of a rank-0 layout

class ShardingSpec {
 public:
  enum class Kind { kUnsharded, kSharded, kMatch, kAny };

  ShardingSpec() = default;  // unsharded
  static ShardingSpec unsharded() { return ShardingSpec(); }
  static ShardingSpec match() { return ShardingSpec(Kind::kMatch, {}); }
  static ShardingSpec any() { return ShardingSpec(Kind::kAny, {}); }
  // Sharded over one or more mesh dimensions, major first. Empty list or an empty name:
  // Error kInvalidArgument.
  static ShardingSpec sharded(std::vector<std::string> mesh_dims);
  // "unsharded", "match", "any", "x" or "x+y". Malformed ("", "x+", "+x", "scalar+x"):
  // kInvalidArgument. TF's legacy "scalar" parses as a spec over a dimension named "scalar";
  // Layout::create reads it as TF's GetLayout does (the sole spec of a rank-0 layout).
  static ShardingSpec parse(std::string_view text);

  Kind kind() const { return kind_; }
  bool is_unsharded() const { return kind_ == Kind::kUnsharded; }
  bool is_sharded() const { return kind_ == Kind::kSharded; }
  bool is_match() const { return kind_ == Kind::kMatch; }
  bool is_any() const { return kind_ == Kind::kAny; }
  // The mesh dimensions a sharded spec splits over (empty otherwise).
  const std::vector<std::string>& mesh_dims() const { return mesh_dims_; }
  bool uses(std::string_view mesh_dim) const;

  std::string to_string() const;
  friend bool operator==(const ShardingSpec&, const ShardingSpec&) = default;

 private:
  ShardingSpec(Kind kind, std::vector<std::string> dims) : kind_(kind), mesh_dims_(std::move(dims)) {}
  Kind kind_ = Kind::kUnsharded;
  std::vector<std::string> mesh_dims_;  // major first; only for kSharded
};

}  // namespace tessel
