// Layout <-> TensorFlow's text form (tf-dtensor-semantics.md §2.5) and tessel's extensions:
//   sharding_specs:x,unsharded, mesh:<mesh>              TF
//   parted:x,unsharded, mesh:<mesh>                      TF
//   maximal:true, mesh:<device>                          TF (single device)
//   empty_layout                                         TF
//   sharding_specs:x+y,unsharded, mesh:<mesh>            tessel: several mesh dims on one axis
//   sharding_specs:x,unsharded, partial:sum(y), mesh:..  tessel: pending reductions
// TF rejects both extensions (a '+' names no mesh dim; three space-separated parts).
#include "core/errors.h"
#include "core/text.h"
#include "tessel/mesh/layout.h"

namespace tessel {
namespace {

constexpr std::string_view kLayout = "Layout";
constexpr std::string_view kStaticPrefix = "sharding_specs:";
constexpr std::string_view kPartedPrefix = "parted:";
constexpr std::string_view kSinglePrefix = "maximal:";
constexpr std::string_view kPartialPrefix = "partial:";
constexpr std::string_view kMeshPrefix = "mesh:";
constexpr std::string_view kEmptyLayout = "empty_layout";

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// "x,unsharded," -> specs. TF drops the last comma-separated piece whatever it holds, so
// "x,y" silently means rank 1; tessel requires the trailing comma instead.
std::vector<ShardingSpec> parse_specs(std::string_view body, const std::string& text) {
  std::vector<ShardingSpec> specs;
  if (body.empty()) return specs;
  if (body.back() != ',') {
    detail::throw_invalid(kLayout,
                          "sharding specs '{}' must end with ',' (TensorFlow would silently drop "
                          "the last spec) in '{}'",
                          body, text);
  }
  // TF's legacy "scalar" is read by Layout::create, as TF's FromString leaves it to GetLayout.
  for (const std::string& piece : detail::split(body.substr(0, body.size() - 1), ',')) {
    specs.push_back(ShardingSpec::parse(piece));
  }
  return specs;
}

// "sum(y),max(z)," -> Partial dims.
std::vector<PartialDim> parse_partial(std::string_view body, const std::string& text) {
  std::vector<PartialDim> partial;
  if (body.empty() || body.back() != ',') {
    detail::throw_invalid(kLayout, "partial dimensions '{}' must end with ',' in '{}'", body, text);
  }
  for (const std::string& piece : detail::split(body.substr(0, body.size() - 1), ',')) {
    const size_t open = piece.find('(');
    if (open == std::string::npos || open == 0 || piece.back() != ')' || open + 2 > piece.size() - 1) {
      detail::throw_invalid(kLayout, "malformed partial dimension '{}': expected <op>(<mesh dim>)",
                            piece);
    }
    partial.push_back({piece.substr(open + 1, piece.size() - open - 2),
                       reduce_op_from_name(piece.substr(0, open))});
  }
  return partial;
}

}  // namespace

Layout Layout::from_string(const std::string& text) {
  if (text == kEmptyLayout) return Layout();
  const std::vector<std::string> parts = detail::split(text, ' ');
  const bool has_partial = parts.size() == 3 && starts_with(parts[1], kPartialPrefix);
  if (parts.size() != 2 && !has_partial) {
    detail::throw_invalid(kLayout, "Expected 2 items but found {}: '{}'", parts.size(), text);
  }
  std::string_view mesh_text = parts.back();
  if (starts_with(mesh_text, kMeshPrefix)) mesh_text.remove_prefix(kMeshPrefix.size());
  const Mesh mesh = Mesh::from_string(std::string(mesh_text));  // mesh errors come first (TF)

  std::string_view head = parts[0];
  std::vector<PartialDim> partial;
  if (has_partial) {
    partial = parse_partial(std::string_view(parts[1]).substr(kPartialPrefix.size()), text);
  }
  if (starts_with(head, kSinglePrefix)) return create(LayoutType::kSingleDevice, {}, mesh, partial);
  LayoutType type;
  if (starts_with(head, kStaticPrefix)) {
    type = LayoutType::kStatic;
    head.remove_prefix(kStaticPrefix.size());
  } else if (starts_with(head, kPartedPrefix)) {
    type = LayoutType::kParted;
    head.remove_prefix(kPartedPrefix.size());
  } else {
    detail::throw_invalid(kLayout, "Unknown layout type prefix in '{}'", parts[0]);
  }
  // The empty mesh has no "static" layout: TF's type/mesh rule names the mismatch.
  return create(mesh.is_empty() ? LayoutType::kStatic : type, parse_specs(head, text), mesh,
                std::move(partial));
}

std::string Layout::to_string() const {
  switch (type()) {
    case LayoutType::kEmpty: return std::string(kEmptyLayout);
    case LayoutType::kSingleDevice: return fmt::format("maximal:true, mesh:{}", mesh().to_string());
    case LayoutType::kStatic:
    case LayoutType::kParted: break;
  }
  std::string out(type() == LayoutType::kParted ? kPartedPrefix : kStaticPrefix);
  for (const ShardingSpec& spec : sharding_specs()) out += spec.to_string() + ",";
  out += " ";
  if (!partial().empty()) {
    out += kPartialPrefix;
    for (const PartialDim& p : partial()) {
      out += fmt::format("{}({}),", reduce_op_name(p.op), p.mesh_dim);
    }
    out += " ";
  }
  return out + fmt::format("mesh:{}", mesh().to_string());
}

}  // namespace tessel
