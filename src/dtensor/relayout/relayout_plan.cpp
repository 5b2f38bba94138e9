// RelayoutPlan and RelayoutStep: names, totals and the printed form (the planner is in
// relayout_planner.cpp).
#include "tessel/dtensor/relayout_plan.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/byte_size.h"

namespace tessel {
namespace {

// "x,unsharded" or "x,unsharded partial:sum(y)".
std::string specs_text(const Layout& layout) {
  if (layout.is_single_device()) return "single device";
  std::string text = fmt::format("{}", fmt::join(layout.sharding_spec_strings(), ","));
  if (layout.rank() == 0) text = "scalar";
  for (const PartialDim& p : layout.partial()) {
    text += fmt::format(" partial:{}({})", reduce_op_name(p.op), p.mesh_dim);
  }
  return text;
}

std::string mesh_text(const Mesh& mesh) {
  if (mesh.is_single_device()) return mesh.single_device();
  std::string text = "|";
  for (const MeshDimension& d : mesh.dims()) text += fmt::format("{}={}|", d.name, d.size);
  return text;
}

}  // namespace

std::string_view relayout_step_kind_name(RelayoutStepKind kind) {
  switch (kind) {
    case RelayoutStepKind::kLocalSlice: return "local_slice";
    case RelayoutStepKind::kLocalPartial: return "local_partial";
    case RelayoutStepKind::kAllGather: return "all_gather";
    case RelayoutStepKind::kAllToAll: return "all_to_all";
    case RelayoutStepKind::kAllReduce: return "all_reduce";
    case RelayoutStepKind::kReduceScatter: return "reduce_scatter";
    case RelayoutStepKind::kSendRecv: return "send_recv";
  }
  return "unknown";
}

std::string RelayoutStep::to_string() const {
  std::string text(relayout_step_kind_name(kind));
  if (!mesh_dims.empty()) text += fmt::format(" over {}", fmt::join(mesh_dims, ","));
  if (tensor_dims.size() == 1) text += fmt::format(" on dim {}", tensor_dims[0]);
  if (tensor_dims.size() > 1) {
    text += fmt::format(" on dims {}", fmt::join(tensor_dims, kind == RelayoutStepKind::kAllToAll ? "->" : ","));
  }
  if (kind == RelayoutStepKind::kSendRecv) {
    int moved = 0;
    for (const RelayoutTransfer& t : transfers) moved += t.from != t.to ? 1 : 0;
    text += fmt::format(" ({} blocks move)", moved);
  }
  return text + fmt::format(": {} sent per device, peak {} -> {}", detail::format_bytes(bytes_per_device),
                            detail::format_bytes(peak_bytes), specs_text(to));
}

int64_t RelayoutPlan::bytes_per_device() const {
  int64_t total = 0;
  for (const RelayoutStep& s : steps) total += s.bytes_per_device;
  return total;
}

int64_t RelayoutPlan::bytes_total() const {
  int64_t total = 0;
  for (const RelayoutStep& s : steps) total += s.bytes_total;
  return total;
}

int64_t RelayoutPlan::peak_bytes() const {
  int64_t most = 0;
  for (const RelayoutStep& s : steps) most = std::max(most, s.peak_bytes);
  return most;
}

std::string RelayoutPlan::to_string() const {
  std::string where = mesh_text(from.mesh());
  if (to.mesh() != from.mesh()) where += " -> " + mesh_text(to.mesh());
  std::string text = fmt::format(
      "relayout {} {}: {} -> {} on {} ({} step{}, {} sent per device, peak {})", shape.to_string(),
      dtype_name(dtype), specs_text(from), specs_text(to), where, steps.size(),
      steps.size() == 1 ? "" : "s", detail::format_bytes(bytes_per_device()), detail::format_bytes(peak_bytes()));
  for (size_t i = 0; i < steps.size(); ++i) {
    text += fmt::format("\n  {}. {}", i + 1, steps[i].to_string());
  }
  return text;
}

std::ostream& operator<<(std::ostream& os, const RelayoutPlan& plan) {
  return os << plan.to_string();
}

}  // namespace tessel
