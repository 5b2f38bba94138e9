// Graph: what compile() traced from a replica computation — one node per op call, inserted
// relayout, collective across replicas, input and captured constant, in the order they ran —
// printable, so that users can read what a compiled computation will run before it runs.
//
//   CompilationResult r = compile(step, signature, options);
//   std::cout << r.computation()->graph();
//   // graph on mesh replica_0|core=1|...|CPU:0: 2 inputs, 1 output, 5 nodes (1 unused removed)
//   //   %0 = input 0 -> [8,4] f32 {unsharded,unsharded}
//   //   %1 = input 1 -> [4,2] f32 {unsharded,unsharded}
//   //   %2 = matmul(%0 {unsharded,unsharded}, %1 {unsharded,unsharded}) -> [8,2] f32 {...}
//   //   %3 = all_reduce[sum](%2) -> [8,2] f32 {unsharded,unsharded}
//   //   barrier()
//   //   return %3
//
// Values are numbered %0, %1, ... in the order they were made; each node makes at most one
// (barrier makes none). Nodes that nothing returned depends on are left out (inputs and
// collectives always stay: every replica calls the same collectives in the same order).
// Layouts print as their sharding specs (with "partial:sum(core)" when Partial) on the graph's
// mesh, a replica's core mesh at trace time: at replay every layout is the same specs on the
// replica's own core mesh. A relayout node is one the sharding rule of its consumer required
// (dispatch would insert it); it prints its plan's steps.
//
// Thread safety: an immutable value once compile() returns it.
#pragma once

#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/core/reduce_op.h"
#include "tessel/dtensor/dtensor.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/relayout_plan.h"
#include "tessel/mesh/mesh.h"

namespace tessel {

enum class GraphNodeKind {
  kInput,       // input `input_index` of the computation
  kCapture,     // a concrete DTensor the traced function used (a constant of the graph)
  kOp,          // an op of the registry (op_registry.h), its inputs already in the required layouts
  kRelayout,    // a relayout the consumer's sharding rule required
  kCollective,  // a ReplicaContext collective across replicas: all_reduce, all_gather, broadcast,
                // barrier
};

// The collectives of ReplicaContext (replica_context.h) a graph records.
enum class CollectiveKind { kAllReduce, kAllGather, kBroadcast, kBarrier };
// "all_reduce", "all_gather", "broadcast", "barrier".
std::string_view collective_kind_name(CollectiveKind kind);

struct GraphNode {
  GraphNodeKind kind = GraphNodeKind::kOp;
  std::string op;                // op name, "relayout", collective name, "input", "capture"
  std::vector<int> inputs;       // value ids
  int output = -1;               // value id; -1 for barrier
  std::shared_ptr<const OpAttrs> attrs;  // kOp: the call's attrs
  int input_index = -1;          // kInput: position in the computation's inputs
  DTensor capture;               // kCapture: the value (concrete)
  RelayoutPlan plan;             // kRelayout: the plan on the graph's mesh
  CollectiveKind collective = CollectiveKind::kAllReduce;  // kCollective
  ReduceOp reduce_op = ReduceOp::kSum;  // all_reduce
  int axis = 0;                  // all_gather
  int root = 0;                  // broadcast: the root replica
};

class Graph {
 public:
  Graph() = default;
  Graph(Mesh mesh, std::vector<GraphNode> nodes, std::vector<TensorSpec> values,
        std::vector<int> outputs, int removed_nodes = 0);

  // The core mesh the graph was traced on (replica 0's).
  const Mesh& mesh() const { return mesh_; }
  const std::vector<GraphNode>& nodes() const { return nodes_; }
  // The spec (shape, dtype, layout on mesh()) of each value, by id.
  const std::vector<TensorSpec>& values() const { return values_; }
  // The value ids the computation returns, in order.
  const std::vector<int>& outputs() const { return outputs_; }
  int num_inputs() const;
  // Nodes of each kind.
  int count(GraphNodeKind kind) const;
  // Traced nodes left out because nothing the computation returns depends on them (the eager
  // run computes them: gradients of inputs nobody asked for, ...).
  int removed_nodes() const { return removed_nodes_; }

  // A header line, one line per node (see the example above), then "return %a, %b".
  std::string to_string() const;

 private:
  Mesh mesh_;
  std::vector<GraphNode> nodes_;
  std::vector<TensorSpec> values_;
  std::vector<int> outputs_;
  int removed_nodes_ = 0;
};

std::ostream& operator<<(std::ostream& os, const Graph& graph);

// "unsharded,core" or "core,unsharded partial:sum(core)": a layout's specs without its mesh.
std::string layout_specs_string(const Layout& layout);

}  // namespace tessel
