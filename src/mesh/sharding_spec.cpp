#include "tessel/mesh/sharding_spec.h"

#include <algorithm>

#include "core/errors.h"

namespace tessel {

ShardingSpec ShardingSpec::sharded(std::vector<std::string> mesh_dims) {
  if (mesh_dims.empty()) detail::throw_invalid("ShardingSpec", "a sharded spec needs a mesh dimension");
  for (const std::string& d : mesh_dims) {
    if (d.empty()) {
      detail::throw_invalid("ShardingSpec", "empty mesh dimension name in [{}]",
                            fmt::join(mesh_dims, "+"));
    }
  }
  return ShardingSpec(Kind::kSharded, std::move(mesh_dims));
}

ShardingSpec ShardingSpec::parse(std::string_view text) {
  if (text == kUnsharded) return unsharded();
  if (text == kMatch) return match();
  if (text == kAny) return any();
  if (text.empty()) detail::throw_invalid("ShardingSpec", "empty sharding spec");
  std::vector<std::string> dims;
  size_t start = 0;
  while (true) {
    const size_t plus = text.find('+', start);
    const std::string_view piece = text.substr(start, plus == std::string_view::npos ? plus : plus - start);
    if (piece.empty()) {
      detail::throw_invalid("ShardingSpec", "malformed sharding spec '{}': empty mesh dimension", text);
    }
    const bool combined = piece.size() != text.size();
    if (combined && (piece == kUnsharded || piece == kMatch || piece == kAny || piece == kScalar)) {
      detail::throw_invalid("ShardingSpec", "'{}' cannot be combined with '+' in '{}'", piece, text);
    }
    dims.emplace_back(piece);
    if (plus == std::string_view::npos) break;
    start = plus + 1;
  }
  return sharded(std::move(dims));
}

bool ShardingSpec::uses(std::string_view mesh_dim) const {
  return std::find(mesh_dims_.begin(), mesh_dims_.end(), mesh_dim) != mesh_dims_.end();
}

std::string ShardingSpec::to_string() const {
  switch (kind_) {
    case Kind::kUnsharded: return std::string(kUnsharded);
    case Kind::kMatch: return std::string(kMatch);
    case Kind::kAny: return std::string(kAny);
    case Kind::kSharded: return fmt::format("{}", fmt::join(mesh_dims_, "+"));
  }
  return "";
}

}  // namespace tessel
