// Tracing (the abstract mode of call_op), the Graph it records and its replay on a replica's
// mesh — the layer under compile() (compile_test.cpp). BR_74_05: pack / unpack are eager only.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>

#include "dtensor/framework/op_util.h"
#include "replicate/trace.h"
#include "replicate/trace_replay.h"
#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/relayout.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

using detail::ReplayPlan;
using detail::Tracer;

std::atomic<int> g_counting_kernel_runs{0};

// An identity op that counts its kernel runs and accepts only replicated inputs.
void register_counting_op() {
  static bool done = [] {
    OpDef def;
    def.name = "test_compile_counting_identity";
    def.num_inputs = 1;
    def.infer = [](const std::vector<TensorSpec>& in, const OpAttrs&) { return in[0]; };
    def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
      const Layout replicated = Layout::replicated(in[0].layout.mesh(), in[0].shape.rank());
      return ShardingDecision{{replicated}, replicated};
    };
    def.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs&,
                    const LocalContext&) {
      ++g_counting_kernel_runs;
      out.copy_from(in[0]);
    };
    OpRegistry::global().add(std::move(def));
    return true;
  }();
  (void)done;
}

// Collectives of a single replica: all_reduce, broadcast and all_gather are the identity.
class SingleReplicaCollectives : public detail::ReplayCollectives {
 public:
  DTensor run(const GraphNode& node, const std::vector<DTensor>& inputs) override {
    ++calls;
    return node.collective == CollectiveKind::kBarrier ? DTensor() : inputs[0];
  }
  int calls = 0;
};

Tensor host(const std::vector<float>& v, Shape shape) { return Tensor::from_vector<float>(v, shape); }

TensorSpec replicated_spec(const Mesh& mesh, Shape shape) {
  const int rank = shape.rank();
  return {std::move(shape), DType::kF32, Layout::replicated(mesh, rank)};
}

// A small dense layer's loss and its gradients (the tape records while tracing).
std::vector<DTensor> loss_and_grads(const std::vector<DTensor>& in) {
  const DTensor& x = in[0];
  const DTensor& w = in[1];
  GradientTape tape;
  tape.watch(w);
  const DTensor h = relu(matmul(x, w));
  const DTensor loss = reduce_mean(multiply(h, h));
  std::vector<DTensor> g = tape.gradient(loss, {w});
  return {loss, g[0], subtract(w, multiply(g[0], 0.1))};
}

TEST(CompileTrace, OpsAreRecordedNotRunAndReturnAbstractValues) {
  register_counting_op();
  Runtime rt({.num_cpu_devices = 2});
  const Mesh mesh = Mesh::create({{"core", 1}});
  g_counting_kernel_runs = 0;
  Tracer tracer(mesh, rt);
  const DTensor x = tracer.add_input(0, replicated_spec(mesh, Shape{2, 3}));
  const DTensor y = call_op("test_compile_counting_identity", {x});
  EXPECT_TRUE(y.is_abstract());
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  const Graph g = tracer.finish({y});
  EXPECT_EQ(g_counting_kernel_runs.load(), 0);
  ASSERT_EQ(g.nodes().size(), 2u);
  EXPECT_EQ(g.nodes()[1].kind, GraphNodeKind::kOp);
  EXPECT_EQ(g.nodes()[1].op, "test_compile_counting_identity");
  EXPECT_EQ(g.nodes()[1].inputs, std::vector<int>{0});
  EXPECT_EQ(g.outputs(), std::vector<int>{1});
}

TEST(CompileTrace, RelayoutsTheShardingRuleRequiresAreNodesPrintedWithTheirPlan) {
  register_counting_op();
  Runtime rt({.num_cpu_devices = 2});
  const Mesh mesh = Mesh::create({{"core", 2}});
  Tracer tracer(mesh, rt);
  const DTensor x = tracer.add_input(0, {Shape{4, 6}, DType::kF32, Layout({"core", "unsharded"}, mesh)});
  const DTensor a = call_op("test_compile_counting_identity", {x});
  const DTensor b = call_op("test_compile_counting_identity", {x});  // reuses the relayout
  const Graph g = tracer.finish({a, b});
  EXPECT_EQ(g.count(GraphNodeKind::kRelayout), 1);
  EXPECT_EQ(g.count(GraphNodeKind::kOp), 2);
  const std::string text = g.to_string();
  EXPECT_NE(text.find("%1 = relayout(%0) -> [4,6] f32 {unsharded,unsharded}: all_gather over core"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("%2 = test_compile_counting_identity(%1 {unsharded,unsharded}) -> [4,6] f32"),
            std::string::npos)
      << text;
  // One line per node, a header and the return line.
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), static_cast<long>(g.nodes().size()) + 1);
  EXPECT_NE(text.find("return %2, %3"), std::string::npos) << text;
}

TEST(CompileTrace, ShapeMismatchIsTheOpsInferErrorAtTraceTime) {
  Runtime rt({.num_cpu_devices = 1});
  const Mesh mesh = Mesh::create({{"core", 1}});
  Tracer tracer(mesh, rt);
  const DTensor a = tracer.add_input(0, replicated_spec(mesh, Shape{2, 3}));
  const DTensor b = tracer.add_input(1, replicated_spec(mesh, Shape{4, 5}));
  EXPECT_TESSEL_ERROR(matmul(a, b), ErrorCode::kInvalidArgument, "matmul");
}

TEST(CompileTrace, BR_74_05_PackIsEagerOnly) {
  Runtime rt({.num_cpu_devices = 1});
  const Mesh mesh = Mesh::create({{"core", 1}});
  const Layout layout = Layout::replicated(mesh, 1);
  {
    Tracer tracer(mesh, rt);
    EXPECT_TESSEL_ERROR(pack({host({1, 2}, Shape{2})}, layout, rt), ErrorCode::kFailedPrecondition,
                        "pack: pack() is eager-only (BR-74-05)");
  }
  EXPECT_EQ(to_host(pack({host({1, 2}, Shape{2})}, layout, rt)).to_doubles(),
            (std::vector<double>{1, 2}));  // after the trace: eager again
}

TEST(CompileTrace, BR_74_05_UnpackIsEagerOnly) {
  Runtime rt({.num_cpu_devices = 1});
  const Mesh mesh = Mesh::create({{"core", 1}});
  const DTensor concrete = copy_to_mesh(host({1, 2}, Shape{2}), Layout::replicated(mesh, 1), rt);
  DTensor abstract_value;
  {
    Tracer tracer(mesh, rt);
    abstract_value = tracer.add_input(0, replicated_spec(mesh, Shape{2}));
    EXPECT_TESSEL_ERROR(unpack(concrete), ErrorCode::kFailedPrecondition,
                        "unpack: unpack() is eager-only (BR-74-05)");
    EXPECT_TESSEL_ERROR(unpack(abstract_value), ErrorCode::kFailedPrecondition, "BR-74-05");
  }
  EXPECT_TESSEL_ERROR(unpack(abstract_value), ErrorCode::kFailedPrecondition, "eager-only");
  EXPECT_EQ(unpack(concrete).size(), 1u);
}

TEST(CompileTrace, DataOfAnAbstractValueIsEagerOnly) {
  Runtime rt({.num_cpu_devices = 2});
  const Mesh mesh = Mesh::create({{"core", 2}});
  Tracer tracer(mesh, rt);
  const DTensor x = tracer.add_input(0, {Shape{4}, DType::kF32, Layout({"core"}, mesh)});
  EXPECT_TESSEL_ERROR(to_host(x), ErrorCode::kFailedPrecondition, "eager-only");
  EXPECT_TESSEL_ERROR(x.component(0), ErrorCode::kFailedPrecondition,
                      "component() of abstract DTensor");
  EXPECT_TESSEL_ERROR(x.components(), ErrorCode::kFailedPrecondition, "eager-only");
  EXPECT_TESSEL_ERROR(x.device(0), ErrorCode::kFailedPrecondition, "eager-only");
  EXPECT_TESSEL_ERROR(relayout(x, Layout::replicated(mesh, 1)), ErrorCode::kFailedPrecondition,
                      "eager-only");
  EXPECT_EQ(relayout(x, x.layout()).id(), x.id());  // no data moves: allowed
}

TEST(CompileTrace, AbstractValueOutsideItsTraceFails) {
  Runtime rt({.num_cpu_devices = 1});
  const Mesh mesh = Mesh::create({{"core", 1}});
  DTensor escaped;
  {
    Tracer tracer(mesh, rt);
    escaped = relu(tracer.add_input(0, replicated_spec(mesh, Shape{3})));
    tracer.finish({escaped});
  }
  EXPECT_TESSEL_ERROR(relu(escaped), ErrorCode::kFailedPrecondition,
                      "relu: input 0 is an abstract DTensor (a value traced by compile()) used "
                      "outside its trace");
  Tracer next(mesh, rt);
  EXPECT_TESSEL_ERROR(relu(escaped), ErrorCode::kFailedPrecondition, "of another trace");
}

TEST(CompileTrace, TracingInsideATraceFails) {
  Runtime rt({.num_cpu_devices = 1});
  const Mesh mesh = Mesh::create({{"core", 1}});
  Tracer outer(mesh, rt);
  EXPECT_TESSEL_ERROR(Tracer(mesh, rt), ErrorCode::kFailedPrecondition,
                      "while another computation is being traced on this thread");
}

TEST(CompileTrace, OutputsAndCapturesMustLiveOnTheTraceMesh) {
  Runtime rt({.num_cpu_devices = 2});
  const Mesh mesh = Mesh::create_on_devices({{"core", 1}}, {"CPU:0"});
  const Mesh other = Mesh::create_on_devices({{"core", 1}}, {"CPU:1"});
  const DTensor foreign = copy_to_mesh(host({1}, Shape{1}), Layout::replicated(other, 1), rt);
  Tracer tracer(mesh, rt);
  EXPECT_TESSEL_ERROR(relu(foreign), ErrorCode::kInvalidArgument, "captures a DTensor on mesh");
  EXPECT_TESSEL_ERROR(zeros(Shape{2}, Layout::replicated(other, 1), DType::kF32, &rt),
                      ErrorCode::kInvalidArgument, "not on the replica's core mesh");
  EXPECT_TESSEL_ERROR(tracer.finish({DTensor()}), ErrorCode::kInvalidArgument,
                      "output 0 of the computation is a null DTensor");
}

TEST(CompileTrace, NodesNothingReturnedNeedsAreRemovedButCollectivesStay) {
  Runtime rt({.num_cpu_devices = 1});
  const Mesh mesh = Mesh::create({{"core", 1}});
  Tracer tracer(mesh, rt);
  const DTensor x = tracer.add_input(0, replicated_spec(mesh, Shape{2}));
  exp(x);  // unused: removed
  GraphNode node;
  node.op = "all_reduce";
  tracer.record_collective(node, {tanh(x)}, replicated_spec(mesh, Shape{2}));  // kept
  const Graph g = tracer.finish({negative(x)});
  EXPECT_EQ(g.removed_nodes(), 1);
  const std::string text = g.to_string();
  EXPECT_NE(text.find("4 nodes (1 unused removed)"), std::string::npos) << text;
  EXPECT_NE(text.find("%1 = tanh(%0 {unsharded}) -> [2] f32 {unsharded}\n"
                      "  %2 = all_reduce[sum](%1) -> [2] f32 {unsharded}\n"
                      "  %3 = negative(%0 {unsharded}) -> [2] f32 {unsharded}\n"
                      "  return %3"),
            std::string::npos)
      << text;
}

TEST(CompileTrace, OpsPrintTheAttributesTheirCallSetByName) {
  Runtime rt({.num_cpu_devices = 1});
  const Mesh mesh = Mesh::create({{"core", 1}});
  Tracer tracer(mesh, rt);
  const DTensor x = tracer.add_input(0, replicated_spec(mesh, Shape{2, 3}));
  // Values that are another attribute's default (0) still print where the op reads them.
  const DTensor u = random_uniform(Shape{2, 3}, Layout::replicated(mesh, 2), /*seed=*/0,
                                   /*low=*/0.0, /*high=*/1.0, DType::kF32, &rt);
  const DTensor y = reduce_sum(concat({add(x, 0.0), u}, 0), {1}, /*keepdims=*/true);
  const Graph g =
      tracer.finish({y, transpose(x, {1, 0}),
                     fill(Shape{2}, 0.0, Layout::replicated(mesh, 1), DType::kF32, &rt)});
  const std::string text = g.to_string();
  for (const char* call : {"random_uniform[shape=2,3, low=0, high=1, seed=0]() -> [2,3] f32",
                           "add_scalar[operand=0](%0 {unsharded,unsharded})", "concat2[axis=0](",
                           "reduce_sum[axes=1, keepdims](", "transpose[perm=1,0](%0 ",
                           "fill[shape=2, value=0]() -> [2] f32"}) {
    EXPECT_NE(text.find(call), std::string::npos) << call << " in\n" << text;
  }
}

// Replays `fn` traced on `trace_mesh` on `replay_mesh` and compares with running it eagerly there.
void expect_replay_matches_eager(const Mesh& trace_mesh, const Mesh& replay_mesh, Runtime& rt) {
  const std::function<std::vector<DTensor>(const std::vector<DTensor>&)> fn = loss_and_grads;
  const Tensor x = Tensor::random_normal(Shape{8, 4}, DType::kF32, 1);
  const Tensor w = Tensor::random_normal(Shape{4, 3}, DType::kF32, 2);
  std::shared_ptr<const Graph> graph;
  {
    Tracer tracer(trace_mesh, rt);
    graph = std::make_shared<const Graph>(tracer.finish(
        fn({tracer.add_input(0, replicated_spec(trace_mesh, Shape{8, 4})),
            tracer.add_input(1, replicated_spec(trace_mesh, Shape{4, 3}))})));
  }
  const std::vector<DTensor> inputs = {copy_to_mesh(x, Layout::replicated(replay_mesh, 2), rt),
                                       copy_to_mesh(w, Layout::replicated(replay_mesh, 2), rt)};
  const std::vector<DTensor> eager = fn(inputs);
  SingleReplicaCollectives collectives;
  const ReplayPlan plan(graph, replay_mesh, rt);
  for (int step = 0; step < 2; ++step) {
    const std::vector<DTensor> replayed = plan.run(inputs, collectives);
    ASSERT_EQ(replayed.size(), eager.size());
    for (size_t i = 0; i < eager.size(); ++i) {
      EXPECT_EQ(replayed[i].layout(), eager[i].layout()) << i;
      EXPECT_EQ(to_host(replayed[i]).to_doubles(), to_host(eager[i]).to_doubles()) << i;
    }
  }
}

TEST(CompileReplay, ReplayOfATrainingStepEqualsEagerBitForBit) {
  Runtime rt({.num_cpu_devices = 1});
  const Mesh mesh = Mesh::create({{"core", 1}});
  expect_replay_matches_eager(mesh, mesh, rt);
}

TEST(CompileReplay, ReplayOnAnotherReplicasMeshMovesEveryLayoutThere) {
  Runtime rt({.num_cpu_devices = 2});
  expect_replay_matches_eager(Mesh::create_on_devices({{"core", 1}}, {"CPU:0"}),
                              Mesh::create_on_devices({{"core", 1}}, {"CPU:1"}), rt);
}

TEST(CompileReplay, CapturedConstantsAndCollectivesReplay) {
  Runtime rt({.num_cpu_devices = 2});
  const Mesh trace_mesh = Mesh::create_on_devices({{"core", 1}}, {"CPU:0"});
  const Mesh replay_mesh = Mesh::create_on_devices({{"core", 1}}, {"CPU:1"});
  const DTensor bias = copy_to_mesh(host({10, 20}, Shape{2}), Layout::replicated(trace_mesh, 1), rt);
  std::shared_ptr<const Graph> graph;
  {
    Tracer tracer(trace_mesh, rt);
    const DTensor x = tracer.add_input(0, replicated_spec(trace_mesh, Shape{2}));
    GraphNode node;
    node.op = "all_reduce";
    node.collective = CollectiveKind::kAllReduce;
    const DTensor summed = tracer.record_collective(node, {add(x, bias)}, replicated_spec(trace_mesh, Shape{2}));
    graph = std::make_shared<const Graph>(tracer.finish({summed}));
  }
  EXPECT_EQ(graph->count(GraphNodeKind::kCapture), 1);
  EXPECT_NE(graph->to_string().find("all_reduce[sum](%2)"), std::string::npos) << *graph;
  SingleReplicaCollectives collectives;
  const ReplayPlan plan(graph, replay_mesh, rt);
  const std::vector<DTensor> out = plan.run(
      {copy_to_mesh(host({1, 2}, Shape{2}), Layout::replicated(replay_mesh, 1), rt)}, collectives);
  EXPECT_EQ(collectives.calls, 1);
  EXPECT_EQ(out[0].layout().mesh(), replay_mesh);
  EXPECT_EQ(to_host(out[0]).to_doubles(), (std::vector<double>{11, 22}));
}

TEST(CompileReplay, InputsMustMatchTheTracedSpecs) {
  Runtime rt({.num_cpu_devices = 1});
  const Mesh mesh = Mesh::create({{"core", 1}});
  std::shared_ptr<const Graph> graph;
  {
    Tracer tracer(mesh, rt);
    graph = std::make_shared<const Graph>(
        tracer.finish({relu(tracer.add_input(0, replicated_spec(mesh, Shape{2})))}));
  }
  SingleReplicaCollectives collectives;
  const ReplayPlan plan(graph, mesh, rt);
  EXPECT_TESSEL_ERROR(plan.run({}, collectives), ErrorCode::kInvalidArgument,
                      "compiled for 1 inputs, got 0");
  EXPECT_TESSEL_ERROR(
      plan.run({copy_to_mesh(host({1, 2, 3}, Shape{3}), Layout::replicated(mesh, 1), rt)},
               collectives),
      ErrorCode::kInvalidArgument, "input 0 is [3] f32 but the computation was compiled for [2] f32");
  EXPECT_TESSEL_ERROR(ReplayPlan(graph, Mesh::create({{"core", 1}, {"y", 1}}), rt),
                      ErrorCode::kInvalidArgument, "whose dimensions differ");
}

}  // namespace
}  // namespace tessel
