// Internal: Tracer, the tracing mode of the calling thread behind compile() (compile.h).
//
// While a Tracer lives on a thread, call_op does not run kernels: it infers the output spec,
// asks the sharding rule, and hands the call to the tracer (trace_hooks.h), which records the
// relayouts the rule requires and the op as graph nodes and returns abstract DTensors
// (dtensor.h: layout, shape, dtype, no data). The recording ReplicaContext (compile_context.h)
// records the collectives across replicas the same way.
//
//   Tracer tracer(core_mesh, runtime);
//   DTensor x = tracer.add_input(0, {Shape{8, 4}, DType::kF32, Layout::replicated(core_mesh, 2)});
//   DTensor y = relu(x);                       // recorded, nothing runs
//   Graph g = tracer.finish({y});              // %0 = input 0; %1 = relu(%0); return %1
//
// Values: every abstract DTensor the trace made is a value; a concrete DTensor an op receives
// is captured once as a constant (it must live on the trace mesh). An abstract DTensor of
// another (finished) trace: kFailedPrecondition. A relayout of a value to a layout already
// made in this trace reuses that value (the graph moves each value at most once per layout).
//
// Errors: a Tracer while another is active on the thread (compile inside a traced function):
// kFailedPrecondition; an op's output or capture on another mesh: kInvalidArgument naming it.
//
// Thread safety: a Tracer is used only by the thread that made it.
#pragma once

#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dtensor/framework/trace_hooks.h"
#include "tessel/replicate/graph.h"

namespace tessel::detail {

class Tracer final : public OpTracer {
 public:
  Tracer(Mesh mesh, Runtime& runtime);
  ~Tracer() override;
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  const Mesh& mesh() const { return mesh_; }
  Runtime& runtime() const { return runtime_; }

  // The abstract value of input `index`; its layout must be on mesh() (kInvalidArgument).
  DTensor add_input(int index, const TensorSpec& spec);
  TracedCall record_op(const OpDef& def, const std::vector<DTensor>& inputs,
                       const TensorSpec& output, const ShardingDecision& decision,
                       const std::shared_ptr<const OpAttrs>& attrs) override;
  // A collective across replicas; `node` holds the name and attributes (kind, op, axis, root).
  // Returns the abstract output with spec `output` (a null DTensor for a barrier).
  DTensor record_collective(GraphNode node, const std::vector<DTensor>& inputs,
                            const std::optional<TensorSpec>& output);

  // Stops tracing and returns the graph returning `outputs` (each a value of this trace or a
  // concrete DTensor, captured; a null DTensor: kInvalidArgument naming its position), without
  // the nodes nothing returned depends on (inputs and collectives are always kept), values
  // renumbered in order.
  Graph finish(const std::vector<DTensor>& outputs);

 private:
  // The value id of `x`, capturing a concrete DTensor; `user` and `position` name the consumer
  // in errors.
  int value_of(const DTensor& x, std::string_view user, size_t position);
  // Registers `handle` as the value made by the last node; returns its id.
  int add_value(const TensorSpec& spec, const DTensor& handle);
  // A new abstract value with `spec` (on mesh(), else kInvalidArgument) made by the last node.
  DTensor new_value(const TensorSpec& spec);
  // `value` in `layout`: itself, or a (memoised) relayout node's output.
  DTensor in_layout(int value, const Layout& layout);
  void uninstall();
  // The graph of the live nodes (see finish).
  Graph prune(std::vector<int> outputs);

  Mesh mesh_;
  Runtime& runtime_;
  bool installed_ = false;
  std::vector<GraphNode> nodes_;
  std::vector<TensorSpec> specs_;                 // per value
  std::vector<DTensor> handles_;                  // per value: its abstract DTensor
  std::unordered_map<uint64_t, int> value_of_id_;  // DTensor::id() -> value
  std::map<std::pair<int, std::string>, int> relaid_;  // (value, layout text) -> value
};

}  // namespace tessel::detail
