// Internal: the two ReplicaContext bridges of compile() (compile.h).
// - RecordingReplicaContext: handed to the function while it is traced; its collectives check
//   their arguments as every context does (replica_context.h) and record a graph node with the
//   output spec the real collective gives (x's layout; all_gather multiplies the gathered axis
//   by num_replicas), returning an abstract value.
// - ContextCollectives: runs a replayed graph's collective nodes on a real context.
//
//   detail::Tracer tracer(mesh, runtime);
//   auto ctx = std::make_shared<RecordingReplicaContext>(num_replicas, mesh, runtime, tracer);
//   DTensor s = ctx->all_reduce(x);      // node "all_reduce[sum](%x)", abstract s
//
// Thread safety: each belongs to one replica's controller thread.
#pragma once

#include <vector>

#include "replicate/trace.h"
#include "replicate/trace_replay.h"
#include "tessel/replicate/replica_context.h"

namespace tessel::detail {

class RecordingReplicaContext final : public ReplicaContext {
 public:
  RecordingReplicaContext(int num_replicas, Mesh mesh, Runtime& runtime, Tracer& tracer);

 private:
  // The collectives (the expiry checks are the base class's).
  DTensor run_all_reduce(const DTensor& x, ReduceOp op) override;
  DTensor run_all_gather(const DTensor& x, int axis) override;
  DTensor run_broadcast(const DTensor& x, int root_replica) override;
  void run_barrier() override;

  DTensor record(CollectiveKind kind, GraphNode node, const DTensor& x, TensorSpec output);
  Tracer& tracer_;
};

class ContextCollectives final : public ReplayCollectives {
 public:
  explicit ContextCollectives(ReplicaContext& ctx) : ctx_(ctx) {}
  DTensor run(const GraphNode& node, const std::vector<DTensor>& inputs) override;

 private:
  ReplicaContext& ctx_;
};

}  // namespace tessel::detail
