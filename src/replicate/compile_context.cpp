// RecordingReplicaContext and ContextCollectives (see compile_context.h).
#include "replicate/compile_context.h"

namespace tessel::detail {
namespace {

TensorSpec spec_of(const DTensor& x) { return {x.shape(), x.dtype(), x.layout()}; }

}  // namespace

RecordingReplicaContext::RecordingReplicaContext(int num_replicas, Mesh mesh, Runtime& runtime,
                                                 Tracer& tracer)
    : ReplicaContext(0, num_replicas, std::move(mesh), runtime), tracer_(tracer) {}

DTensor RecordingReplicaContext::record(CollectiveKind kind, GraphNode node, const DTensor& x,
                                        TensorSpec output) {
  node.collective = kind;
  node.op = std::string(collective_kind_name(kind));
  return tracer_.record_collective(std::move(node), {x}, std::move(output));
}

DTensor RecordingReplicaContext::run_all_reduce(const DTensor& x, ReduceOp op) {
  check_input(x, "all_reduce");
  GraphNode node;
  node.reduce_op = op;
  return record(CollectiveKind::kAllReduce, std::move(node), x, spec_of(x));
}

DTensor RecordingReplicaContext::run_all_gather(const DTensor& x, int axis) {
  check_input(x, "all_gather");
  GraphNode node;
  node.axis = check_axis(x, axis);
  TensorSpec out = spec_of(x);
  std::vector<int64_t> dims = out.shape.dims();
  dims[static_cast<size_t>(node.axis)] *= num_replicas();
  out.shape = Shape(dims);
  return record(CollectiveKind::kAllGather, std::move(node), x, std::move(out));
}

DTensor RecordingReplicaContext::run_broadcast(const DTensor& x, int root_replica) {
  check_input(x, "broadcast");
  check_root(root_replica);
  GraphNode node;
  node.root = root_replica;
  return record(CollectiveKind::kBroadcast, std::move(node), x, spec_of(x));
}

void RecordingReplicaContext::run_barrier() {
  GraphNode node;
  node.collective = CollectiveKind::kBarrier;
  node.op = std::string(collective_kind_name(CollectiveKind::kBarrier));
  tracer_.record_collective(std::move(node), {}, std::nullopt);
}

DTensor ContextCollectives::run(const GraphNode& node, const std::vector<DTensor>& inputs) {
  switch (node.collective) {
    case CollectiveKind::kAllReduce:
      return ctx_.all_reduce(inputs[0], node.reduce_op);
    case CollectiveKind::kAllGather:
      return ctx_.all_gather(inputs[0], node.axis);
    case CollectiveKind::kBroadcast:
      return ctx_.broadcast(inputs[0], node.root);
    case CollectiveKind::kBarrier:
      ctx_.barrier();
      return DTensor();
  }
  return DTensor();
}

}  // namespace tessel::detail
