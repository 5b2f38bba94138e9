// Internal: ReplayPlan, a traced Graph bound to one replica's core mesh and runtime, and its
// replay: the graph's kernels and relayouts run again on new inputs without calling the traced
// function, without shape inference, sharding rules or the relayout planner.
//
//   ReplayPlan plan(graph, ctx.mesh(), ctx.runtime());        // once per replica mesh
//   std::vector<DTensor> out = plan.run(inputs, collectives);  // every step
//
// Built once (the constructor): every layout of the graph is moved onto the replica's mesh
// (same specs; the meshes must have the same dimensions), each op's output placement and its
// inputs' placements, each relayout's plan, each captured constant copied onto the mesh.
// run(): per node, launch_op (the kernel half of dispatch), execute_relayout with the stored
// plan, or the collective through `collectives`. On a one-device mesh every kernel runs on the
// calling thread whenever the device's stream is idle (the caller would only wait for the
// worker; tessel bench replicate: no thread hand-off per op). Values live until run() returns,
// as the eager step's tape keeps them: dropping each after its last use made glibc hand the
// blocks back to the system mid-step and fault them in again (about 200 page faults per step
// of the benchmark's MLP, against none).
// Errors (run): inputs other than the graph's count, shape or dtype: kInvalidArgument naming the
// input and both specs (an input in another layout is relaid out to the signature's); a
// collective whose result differs from the traced spec: kInternal naming the node; called while
// tracing: kFailedPrecondition (eager-only). Kernel errors surface at the next sync point, as in
// eager mode.
//
// Thread safety: run() may be called from several threads at once (it changes nothing in the
// plan); each call runs on the replica's devices.
#pragma once

#include <memory>
#include <vector>

#include "dtensor/framework/launch_plan.h"
#include "tessel/replicate/graph.h"

namespace tessel::detail {

// Runs the collective nodes of a replay (a ReplicaContext's, in compile.cpp).
class ReplayCollectives {
 public:
  virtual ~ReplayCollectives() = default;
  // The output of collective `node` on `inputs` (a null DTensor for a barrier).
  virtual DTensor run(const GraphNode& node, const std::vector<DTensor>& inputs) = 0;
};

// `layout`'s specs and Partial dims on `mesh`.
Layout layout_on_mesh(const Layout& layout, const Mesh& mesh);

class ReplayPlan {
 public:
  // Errors: a mesh whose dimensions differ from the graph's: kInvalidArgument naming both.
  ReplayPlan(std::shared_ptr<const Graph> graph, const Mesh& mesh, Runtime& runtime);

  const Mesh& mesh() const { return mesh_; }
  std::vector<DTensor> run(const std::vector<DTensor>& inputs,
                           ReplayCollectives& collectives) const;

 private:
  struct Step {
    const GraphNode* node = nullptr;
    TensorSpec out;                        // the output's spec on mesh_
    const OpDef* def = nullptr;            // kOp
    std::shared_ptr<const OpAttrs> attrs;  // kOp: layout / runtime moved to mesh_
    std::shared_ptr<const LaunchPlan> launch;  // kOp
    RelayoutPlan plan;                     // kRelayout
    DTensor capture;                       // kCapture, on mesh_
  };

  Step make_step(const GraphNode& node, size_t index);
  DTensor run_input(const Step& step, const std::vector<DTensor>& inputs) const;
  void check_collective(const Step& step, const DTensor& result) const;

  std::shared_ptr<const Graph> graph_;
  Mesh mesh_;
  Runtime& runtime_;
  bool one_device_;  // every kernel runs on the caller when the device is idle (launch_op)
  std::vector<Step> steps_;
};

}  // namespace tessel::detail
