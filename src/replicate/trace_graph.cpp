// Graph: the traced nodes and their one-line-per-node text form (see graph.h).
#include <algorithm>
#include <array>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/errors.h"
#include "tessel/replicate/graph.h"

namespace tessel {
namespace {

// One attribute, if the call set it: a list when non-empty ("axes=0,1"), an optional when set,
// whatever its value (random_uniform's "low=0" shows), the equation when non-empty, a flag by
// its name when true, the dtype when not f32 (the output's dtype is printed beside the call
// anyway). The layout and the runtime are not printed (the output's layout is).
void append_attr(std::vector<std::string>& parts, std::string_view name,
                 const std::vector<int64_t>& list) {
  if (!list.empty()) parts.push_back(fmt::format("{}={}", name, fmt::join(list, ",")));
}
template <typename T>
void append_attr(std::vector<std::string>& parts, std::string_view name,
                 const std::optional<T>& value) {
  if (value) parts.push_back(fmt::format("{}={}", name, *value));
}
void append_attr(std::vector<std::string>& parts, std::string_view name, const std::string& text) {
  if (!text.empty()) parts.push_back(fmt::format("{}={}", name, text));
}
void append_attr(std::vector<std::string>& parts, std::string_view name, bool flag) {
  if (flag) parts.emplace_back(name);
}
void append_attr(std::vector<std::string>& parts, std::string_view name, DType dtype) {
  if (dtype != OpAttrs{}.dtype) parts.push_back(fmt::format("{}={}", name, dtype_name(dtype)));
}
void append_attr(std::vector<std::string>&, std::string_view, const std::optional<Layout>&) {}
void append_attr(std::vector<std::string>&, std::string_view, const Runtime*) {}

// The attributes the call set, by name, in OpAttrs' order: "[axes=1, keepdims]", "[shape=4,6,
// low=0, high=1, seed=7]" (empty if none).
std::string attrs_string(const OpAttrs& attrs) {
  std::vector<std::string> parts;
  OpAttrs::for_each_field(
      [&](std::string_view name, auto member) { append_attr(parts, name, attrs.*member); });
  if (parts.empty()) return "";
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

std::string spec_string(const TensorSpec& spec) {
  return fmt::format("{} {} {{{}}}", spec.shape.to_string(), dtype_name(spec.dtype),
                     layout_specs_string(spec.layout));
}

std::string node_string(const GraphNode& node, const std::vector<TensorSpec>& values) {
  std::vector<std::string> args;
  for (int v : node.inputs) {
    args.push_back(node.kind == GraphNodeKind::kOp
                       ? fmt::format("%{} {{{}}}", v, layout_specs_string(values[v].layout))
                       : fmt::format("%{}", v));
  }
  std::string call;
  switch (node.kind) {
    case GraphNodeKind::kInput:
      call = fmt::format("input {}", node.input_index);
      break;
    case GraphNodeKind::kCapture:
      call = fmt::format("capture DTensor#{}", node.capture.id());
      break;
    case GraphNodeKind::kOp:
      call = fmt::format("{}{}({})", node.op, node.attrs ? attrs_string(*node.attrs) : "",
                         fmt::join(args, ", "));
      break;
    case GraphNodeKind::kRelayout:
      call = fmt::format("relayout({})", fmt::join(args, ", "));
      break;
    case GraphNodeKind::kCollective: {
      std::string attr;
      if (node.collective == CollectiveKind::kAllReduce) {
        attr = fmt::format("[{}]", reduce_op_name(node.reduce_op));
      }
      if (node.collective == CollectiveKind::kAllGather) attr = fmt::format("[axis={}]", node.axis);
      if (node.collective == CollectiveKind::kBroadcast) attr = fmt::format("[root={}]", node.root);
      call = fmt::format("{}{}({})", node.op, attr, fmt::join(args, ", "));
      break;
    }
  }
  if (node.output < 0) return "  " + call;
  std::string line = fmt::format("  %{} = {} -> {}", node.output, call,
                                 spec_string(values[static_cast<size_t>(node.output)]));
  if (node.kind == GraphNodeKind::kRelayout) {
    std::vector<std::string> steps;
    for (const RelayoutStep& s : node.plan.steps) steps.push_back(s.to_string());
    line += fmt::format(": {}", steps.empty() ? "no data moves" : fmt::format("{}", fmt::join(steps, "; ")));
  }
  return line;
}

}  // namespace

std::string_view collective_kind_name(CollectiveKind kind) {
  static constexpr std::array<std::string_view, 4> kNames = {"all_reduce", "all_gather",
                                                             "broadcast", "barrier"};
  return kNames[static_cast<size_t>(kind)];
}

std::string layout_specs_string(const Layout& layout) {
  std::string text = fmt::format("{}", fmt::join(layout.sharding_spec_strings(), ","));
  std::vector<std::string> partial;
  for (const PartialDim& p : layout.partial()) {
    partial.push_back(fmt::format("{}({})", reduce_op_name(p.op), p.mesh_dim));
  }
  if (!partial.empty()) text += fmt::format(" partial:{}", fmt::join(partial, ","));
  return text;
}

Graph::Graph(Mesh mesh, std::vector<GraphNode> nodes, std::vector<TensorSpec> values,
             std::vector<int> outputs, int removed_nodes)
    : mesh_(std::move(mesh)), nodes_(std::move(nodes)), values_(std::move(values)),
      outputs_(std::move(outputs)), removed_nodes_(removed_nodes) {}

int Graph::count(GraphNodeKind kind) const {
  return static_cast<int>(std::count_if(nodes_.begin(), nodes_.end(),
                                        [kind](const GraphNode& n) { return n.kind == kind; }));
}

int Graph::num_inputs() const { return count(GraphNodeKind::kInput); }

std::string Graph::to_string() const {
  std::ostringstream os;
  os << fmt::format("graph on mesh {}: {} input{}, {} output{}, {} nodes", mesh_.to_string(),
                    num_inputs(), num_inputs() == 1 ? "" : "s", outputs_.size(),
                    outputs_.size() == 1 ? "" : "s", nodes_.size());
  if (removed_nodes_ > 0) os << fmt::format(" ({} unused removed)", removed_nodes_);
  os << "\n";
  for (const GraphNode& node : nodes_) os << node_string(node, values_) << "\n";
  std::vector<std::string> outs;
  for (int v : outputs_) outs.push_back(fmt::format("%{}", v));
  os << fmt::format("  return {}", fmt::join(outs, ", "));
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Graph& graph) { return os << graph.to_string(); }

}  // namespace tessel
