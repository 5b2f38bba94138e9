// ReplayPlan: a graph bound to one replica's mesh, and its replay (see trace_replay.h).
#include "replicate/trace_replay.h"

#include "core/errors.h"
#include "dtensor/framework/trace_hooks.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/relayout.h"

namespace tessel::detail {
namespace {

constexpr std::string_view kComponent = "compile";

bool same_dims(const Mesh& a, const Mesh& b) { return a.dims() == b.dims(); }

std::string spec_text(const TensorSpec& spec) {
  return fmt::format("{} {} {{{}}}", spec.shape.to_string(), dtype_name(spec.dtype),
                     layout_specs_string(spec.layout));
}

}  // namespace

Layout layout_on_mesh(const Layout& layout, const Mesh& mesh) {
  if (layout.mesh() == mesh) return layout;
  return Layout::create(layout.type(), layout.sharding_specs(), mesh, layout.partial());
}

ReplayPlan::ReplayPlan(std::shared_ptr<const Graph> graph, const Mesh& mesh, Runtime& runtime)
    : graph_(std::move(graph)), mesh_(mesh), runtime_(runtime),
      one_device_(mesh.size() == 1) {
  if (!same_dims(graph_->mesh(), mesh_)) {
    throw_invalid(kComponent, "the computation was compiled for core mesh {} but replays on {}, "
                  "whose dimensions differ",
                  graph_->mesh().to_string(), mesh_.to_string());
  }
  for (size_t k = 0; k < graph_->nodes().size(); ++k) {
    steps_.push_back(make_step(graph_->nodes()[k], k));
  }
}

ReplayPlan::Step ReplayPlan::make_step(const GraphNode& node, size_t index) {
  Step step;
  step.node = &node;
  if (node.output >= 0) {
    const TensorSpec& traced = graph_->values()[static_cast<size_t>(node.output)];
    step.out = {traced.shape, traced.dtype, layout_on_mesh(traced.layout, mesh_)};
  }
  const std::string where = fmt::format("{} (node {})", node.op, index);
  switch (node.kind) {
    case GraphNodeKind::kOp: {
      step.def = &OpRegistry::global().get(node.op);
      if (node.attrs && node.attrs->layout) {  // creation ops: the output layout, the runtime
        auto attrs = std::make_shared<OpAttrs>(*node.attrs);
        attrs->layout = layout_on_mesh(*attrs->layout, mesh_);
        attrs->runtime = &runtime_;
        step.attrs = std::move(attrs);
      } else {
        step.attrs = node.attrs ? node.attrs : std::make_shared<const OpAttrs>();
      }
      std::vector<TensorSpec> inputs;
      for (int v : node.inputs) {
        const TensorSpec& in = graph_->values()[static_cast<size_t>(v)];
        inputs.push_back({in.shape, in.dtype, layout_on_mesh(in.layout, mesh_)});
      }
      step.launch = make_launch_plan(*step.def, step.out, inputs, runtime_, where);
      break;
    }
    case GraphNodeKind::kRelayout:
      step.plan = plan_relayout(node.plan.shape, layout_on_mesh(node.plan.from, mesh_),
                                layout_on_mesh(node.plan.to, mesh_), node.plan.dtype);
      break;
    case GraphNodeKind::kCapture:
      step.capture = node.capture.layout().mesh() == mesh_
                         ? node.capture
                         : copy_to_mesh(to_host(node.capture), step.out.layout, runtime_);
      break;
    case GraphNodeKind::kInput:
    case GraphNodeKind::kCollective:
      break;
  }
  return step;
}

DTensor ReplayPlan::run_input(const Step& step, const std::vector<DTensor>& inputs) const {
  const int index = step.node->input_index;
  const DTensor& x = inputs[static_cast<size_t>(index)];
  if (!x.defined()) throw_invalid(kComponent, "input {} is a null DTensor", index);
  if (x.shape() != step.out.shape || x.dtype() != step.out.dtype) {
    throw_invalid(kComponent, "input {} is {} {} but the computation was compiled for {}", index,
                  x.shape().to_string(), dtype_name(x.dtype()), spec_text(step.out));
  }
  return x.layout() == step.out.layout ? x : relayout(x, step.out.layout);
}

void ReplayPlan::check_collective(const Step& step, const DTensor& result) const {
  const bool expected_output = step.node->output >= 0;
  if (expected_output != result.defined() ||
      (expected_output && (result.shape() != step.out.shape || result.dtype() != step.out.dtype ||
                           result.layout() != step.out.layout))) {
    throw_error(ErrorCode::kInternal, kComponent,
                "collective {} (value %{}) returned {}, but the trace recorded {}", step.node->op,
                step.node->output,
                result.defined() ? fmt::format("{} {} in {}", result.shape().to_string(),
                                               dtype_name(result.dtype()),
                                               result.layout().to_string())
                                 : "no value",
                expected_output ? spec_text(step.out) : "no value");
  }
}

std::vector<DTensor> ReplayPlan::run(const std::vector<DTensor>& inputs,
                                     ReplayCollectives& collectives) const {
  if (active_op_tracer() != nullptr) throw_eager_only(kComponent, "running a compiled computation");
  if (static_cast<int>(inputs.size()) != graph_->num_inputs()) {
    throw_invalid(kComponent, "the computation was compiled for {} inputs, got {}",
                  graph_->num_inputs(), inputs.size());
  }
  std::vector<DTensor> values(graph_->values().size());
  std::vector<DTensor> args;
  for (const Step& step : steps_) {
    const GraphNode& node = *step.node;
    args.clear();
    for (int v : node.inputs) args.push_back(values[static_cast<size_t>(v)]);
    DTensor out;
    switch (node.kind) {
      case GraphNodeKind::kInput:
        out = run_input(step, inputs);
        break;
      case GraphNodeKind::kCapture:
        out = step.capture;
        break;
      case GraphNodeKind::kOp:
        out = launch_op(step.launch, args, CallAttrs(step.attrs), runtime_, one_device_);
        break;
      case GraphNodeKind::kRelayout:
        out = execute_relayout(args[0], step.plan);
        break;
      case GraphNodeKind::kCollective:
        out = collectives.run(node, args);
        check_collective(step, out);
        break;
    }
    if (node.output >= 0) values[static_cast<size_t>(node.output)] = std::move(out);
  }
  std::vector<DTensor> outputs;
  outputs.reserve(graph_->outputs().size());
  for (int v : graph_->outputs()) outputs.push_back(values[static_cast<size_t>(v)]);
  return outputs;
}

}  // namespace tessel::detail
