// Tracer: records op calls, relayouts, collectives, inputs and captures as graph nodes (see
// trace.h); the thread's active tracer lives in src/dtensor/trace_hooks.cpp.
#include "replicate/trace.h"

#include "core/errors.h"

namespace tessel::detail {
namespace {

constexpr std::string_view kComponent = "compile";

}  // namespace

Tracer::Tracer(Mesh mesh, Runtime& runtime) : mesh_(std::move(mesh)), runtime_(runtime) {
  if (active_op_tracer() != nullptr) {
    throw_error(ErrorCode::kFailedPrecondition, kComponent,
                "compile() was called while another computation is being traced on this thread "
                "(compile inside a traced function); compile it before, outside the trace");
  }
  set_active_op_tracer(this);
  installed_ = true;
}

Tracer::~Tracer() { uninstall(); }

void Tracer::uninstall() {
  if (installed_) set_active_op_tracer(nullptr);
  installed_ = false;
}

int Tracer::add_value(const TensorSpec& spec, const DTensor& handle) {
  const int id = static_cast<int>(specs_.size());
  specs_.push_back(spec);
  handles_.push_back(handle);
  value_of_id_.emplace(handle.id(), id);
  nodes_.back().output = id;
  return id;
}

DTensor Tracer::new_value(const TensorSpec& spec) {
  if (spec.layout.mesh() != mesh_) {
    throw_invalid(kComponent, "{} makes a {} {} value on mesh {}, not on the replica's core mesh "
                  "{} that the computation is traced on",
                  nodes_.back().op, spec.shape.to_string(), dtype_name(spec.dtype),
                  spec.layout.mesh().to_string(), mesh_.to_string());
  }
  DTensor handle = DTensor::abstract(spec.layout, spec.shape, spec.dtype, runtime_);
  add_value(spec, handle);
  return handle;
}

DTensor Tracer::add_input(int index, const TensorSpec& spec) {
  GraphNode node;
  node.kind = GraphNodeKind::kInput;
  node.op = "input";
  node.input_index = index;
  nodes_.push_back(std::move(node));
  return new_value(spec);
}

int Tracer::value_of(const DTensor& x, std::string_view user, size_t position) {
  if (!x.defined()) throw_invalid(kComponent, "{}: input {} is a null DTensor", user, position);
  auto it = value_of_id_.find(x.id());
  if (it != value_of_id_.end()) return it->second;
  if (x.is_abstract()) {
    throw_error(ErrorCode::kFailedPrecondition, kComponent,
                "{}: input {} is abstract DTensor #{} of another trace (a traced value kept past "
                "the end of its compile()); values do not carry over between traces",
                user, position, x.id());
  }
  if (x.layout().mesh() != mesh_) {
    throw_invalid(kComponent, "{}: input {} captures a DTensor on mesh {}; a compiled computation "
                  "computes on the replica's core mesh {}",
                  user, position, x.layout().mesh().to_string(), mesh_.to_string());
  }
  GraphNode node;
  node.kind = GraphNodeKind::kCapture;
  node.op = "capture";
  node.capture = x;
  nodes_.push_back(std::move(node));
  return add_value({x.shape(), x.dtype(), x.layout()}, x);
}

DTensor Tracer::in_layout(int value, const Layout& layout) {
  const TensorSpec spec = specs_[static_cast<size_t>(value)];
  if (spec.layout == layout) return handles_[static_cast<size_t>(value)];
  const auto key = std::make_pair(value, layout.to_string());
  auto it = relaid_.find(key);
  if (it != relaid_.end()) return handles_[static_cast<size_t>(it->second)];
  GraphNode node;
  node.kind = GraphNodeKind::kRelayout;
  node.op = "relayout";
  node.inputs = {value};
  node.plan = plan_relayout(spec.shape, spec.layout, layout, spec.dtype);
  nodes_.push_back(std::move(node));
  DTensor handle = new_value({spec.shape, spec.dtype, layout});
  relaid_.emplace(key, static_cast<int>(specs_.size()) - 1);
  return handle;
}

TracedCall Tracer::record_op(const OpDef& def, const std::vector<DTensor>& inputs,
                             const TensorSpec& output, const ShardingDecision& decision,
                             const std::shared_ptr<const OpAttrs>& attrs) {
  TracedCall call;
  std::vector<int> ids;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DTensor ready = in_layout(value_of(inputs[i], def.name, i), decision.inputs[i]);
    ids.push_back(value_of_id_.at(ready.id()));
    call.ready.push_back(ready);
  }
  GraphNode node;
  node.kind = GraphNodeKind::kOp;
  node.op = def.name;
  node.inputs = std::move(ids);
  node.attrs = attrs;
  nodes_.push_back(std::move(node));
  call.result = new_value({output.shape, output.dtype, decision.output});
  return call;
}

DTensor Tracer::record_collective(GraphNode node, const std::vector<DTensor>& inputs,
                                  const std::optional<TensorSpec>& output) {
  node.kind = GraphNodeKind::kCollective;
  for (size_t i = 0; i < inputs.size(); ++i) node.inputs.push_back(value_of(inputs[i], node.op, i));
  nodes_.push_back(std::move(node));
  return output ? new_value(*output) : DTensor();
}

Graph Tracer::finish(const std::vector<DTensor>& outputs) {
  std::vector<int> ids;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined()) {
      throw_invalid(kComponent, "output {} of the computation is a null DTensor", i);
    }
    ids.push_back(value_of(outputs[i], "return", i));
  }
  uninstall();
  return prune(std::move(ids));
}

Graph Tracer::prune(std::vector<int> outputs) {
  std::vector<bool> live(specs_.size(), false);
  for (int v : outputs) live[static_cast<size_t>(v)] = true;
  std::vector<bool> keep(nodes_.size(), false);
  for (size_t k = nodes_.size(); k-- > 0;) {
    const GraphNode& node = nodes_[k];
    // Inputs keep their positions; collectives are called by every replica in the same order.
    keep[k] = node.kind == GraphNodeKind::kInput || node.kind == GraphNodeKind::kCollective ||
              (node.output >= 0 && live[static_cast<size_t>(node.output)]);
    if (keep[k]) {
      for (int v : node.inputs) live[static_cast<size_t>(v)] = true;
    }
  }
  std::vector<int> renumbered(specs_.size(), -1);
  std::vector<GraphNode> nodes;
  std::vector<TensorSpec> specs;
  for (size_t k = 0; k < nodes_.size(); ++k) {
    if (!keep[k]) continue;
    GraphNode node = std::move(nodes_[k]);
    for (int& v : node.inputs) v = renumbered[static_cast<size_t>(v)];
    if (node.output >= 0) {
      specs.push_back(specs_[static_cast<size_t>(node.output)]);
      renumbered[static_cast<size_t>(node.output)] = static_cast<int>(specs.size()) - 1;
      node.output = static_cast<int>(specs.size()) - 1;
    }
    nodes.push_back(std::move(node));
  }
  for (int& v : outputs) v = renumbered[static_cast<size_t>(v)];
  const int removed = static_cast<int>(nodes_.size() - nodes.size());
  return Graph(mesh_, std::move(nodes), std::move(specs), std::move(outputs), removed);
}

}  // namespace tessel::detail
