// compile(): trace once, replay on every replica, the cache, and every compile error reported in
// CompilationResult before anything runs (compile.h; seed 105's TPUCompilationResult).
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

#include "dtensor/framework/op_util.h"
#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/ops.h"
#include "tessel/mesh/topology.h"
#include "tessel/replicate/compile.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

// Four CPU devices of the compile tests' own (never destroyed: streams outlive the tests).
Runtime& four_devices() {
  static Runtime* runtime = new Runtime(RuntimeOptions{.num_cpu_devices = 4});
  return *runtime;
}

CompileOptions options_for(int replicas, int cores = 1) {
  CompileOptions options;
  options.replicate.metadata.num_replicas = replicas;
  options.replicate.metadata.num_cores_per_replica = cores;
  options.replicate.metadata.use_spmd_for_xla_partitioning = cores > 1;
  options.replicate.runtime = &four_devices();
  options.replicate.timeout = std::chrono::seconds(60);
  return options;
}

std::vector<float> values(const DTensor& d) { return to_host(d).to_vector<float>(); }

Tensor matrix(Shape shape, uint64_t seed) { return Tensor::random_normal(shape, DType::kF32, seed); }

// A data-parallel SGD step of a linear model: x [8,4], y [8,2], w [4,2] (broadcast); returns the
// replica's loss and the new w. Counts its calls.
struct SgdStep {
  std::shared_ptr<std::atomic<int>> calls = std::make_shared<std::atomic<int>>(0);

  std::vector<DTensor> operator()(ReplicaContext& ctx, const std::vector<DTensor>& in) const {
    ++*calls;
    const DTensor& x = in[0];
    const DTensor& y = in[1];
    const DTensor& w = in[2];
    GradientTape tape;
    tape.watch(w);
    const DTensor err = subtract(matmul(x, w), y);
    const DTensor loss = reduce_mean(multiply(err, err));
    const DTensor grad = ctx.all_reduce(tape.gradient(loss, {w})[0], ReduceOp::kMean);
    return {loss, subtract(w, multiply(grad, 0.1))};
  }
};

const InputSignature kSgdSignature = {{Shape{8, 4}}, {Shape{8, 2}}, {Shape{4, 2}}};

struct SgdData {
  std::vector<std::vector<Tensor>> per_replica;  // [input][replica]
  std::vector<Tensor> broadcast;
};

SgdData sgd_data(int replicas) {
  SgdData d;
  d.per_replica.resize(2);
  for (int r = 0; r < replicas; ++r) {
    d.per_replica[0].push_back(matrix(Shape{8, 4}, 10 + r));
    d.per_replica[1].push_back(matrix(Shape{8, 2}, 20 + r));
  }
  d.broadcast = {matrix(Shape{4, 2}, 30)};
  return d;
}

void expect_same_outputs(const std::vector<std::vector<DTensor>>& a,
                         const std::vector<std::vector<DTensor>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t r = 0; r < a.size(); ++r) {
    ASSERT_EQ(a[r].size(), b[r].size());
    for (size_t k = 0; k < a[r].size(); ++k) {
      EXPECT_EQ(a[r][k].layout(), b[r][k].layout()) << "replica " << r << " output " << k;
      EXPECT_EQ(values(a[r][k]), values(b[r][k])) << "replica " << r << " output " << k;
    }
  }
}

// A single-replica context of the tests' own (the base class implements one replica).
class OneReplicaContext : public ReplicaContext {
 public:
  OneReplicaContext(Mesh mesh, Runtime& runtime) : ReplicaContext(0, 1, std::move(mesh), runtime) {}
};

TEST(Compile, TracesOnceAndReplaysWithoutCallingTheFunctionAgain) {
  SgdStep step;
  const Function fn("sgd", step);
  const CompilationResult r = compile(fn, kSgdSignature, options_for(4));
  ASSERT_TRUE(r.ok()) << r.status_string();
  EXPECT_EQ(r.status_string(), "OK");
  EXPECT_EQ(*step.calls, 1);
  const SgdData data = sgd_data(4);
  const auto eager = replicate(step, data.per_replica, data.broadcast, {}, {}, options_for(4).replicate);
  EXPECT_EQ(*step.calls, 5);
  for (int run = 0; run < 3; ++run) {
    expect_same_outputs(r.computation()->run(data.per_replica, data.broadcast), eager);
  }
  EXPECT_EQ(*step.calls, 5);  // three compiled runs: the function was not called again
}

TEST(Compile, TheGraphPrintsWhatEveryReplicaRuns) {
  const CompilationResult r = compile(Function("sgd", SgdStep{}), kSgdSignature, options_for(2));
  ASSERT_TRUE(r.ok()) << r.status_string();
  const Graph& g = r.computation()->graph();
  EXPECT_EQ(g.num_inputs(), 3);
  EXPECT_EQ(g.outputs().size(), 2u);
  EXPECT_EQ(g.count(GraphNodeKind::kCollective), 1);
  const std::string text = g.to_string();
  EXPECT_NE(text.find("graph on mesh replica_0|core=1|"), std::string::npos) << text;
  // d/dy (subtract's VJP gives it); matmul's VJP no longer computes d/dx, which no watched
  // tensor flows into (VjpArgs::wanted).
  EXPECT_NE(text.find("nodes (1 unused removed)"), std::string::npos) << text;
  EXPECT_NE(text.find("%3 = matmul(%0 {unsharded,unsharded}, %2 {unsharded,unsharded}) -> [8,2] f32"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("all_reduce[mean]("), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), static_cast<long>(g.nodes().size()) + 1);
}

TEST(Compile, CacheHitReturnsTheCompiledComputationWithoutTracing) {
  SgdStep step;
  const Function fn("sgd", step);
  const CompileCacheStats before = compile_cache_stats();
  const CompilationResult first = compile(fn, kSgdSignature, options_for(2));
  const CompilationResult second = compile(fn, kSgdSignature, options_for(2));
  const Function copy = fn;  // copies share the identity
  const CompilationResult third = compile(copy, kSgdSignature, options_for(2));
  ASSERT_TRUE(first.ok() && second.ok() && third.ok());
  EXPECT_FALSE(first.cache_hit());
  EXPECT_TRUE(second.cache_hit());
  EXPECT_TRUE(third.cache_hit());
  EXPECT_EQ(first.computation(), second.computation());
  EXPECT_EQ(first.computation(), third.computation());
  EXPECT_EQ(*step.calls, 1);
  const CompileCacheStats after = compile_cache_stats();
  EXPECT_EQ(after.hits - before.hits, 2);
  EXPECT_EQ(after.misses - before.misses, 1);
}

TEST(Compile, CacheKeyIsFunctionSignatureAndOptions) {
  SgdStep step;
  const Function fn("sgd", step);
  ASSERT_TRUE(compile(fn, kSgdSignature, options_for(2)).ok());
  InputSignature bigger = kSgdSignature;
  bigger[0].shape = Shape{16, 4};
  bigger[1].shape = Shape{16, 2};
  EXPECT_FALSE(compile(fn, bigger, options_for(2)).cache_hit());
  EXPECT_FALSE(compile(fn, kSgdSignature, options_for(4)).cache_hit());
  CompileOptions typed = options_for(2);
  typed.output_types = std::vector<DType>{DType::kF32, DType::kF32};
  EXPECT_FALSE(compile(fn, kSgdSignature, typed).cache_hit());
  CompileOptions marked = options_for(2);
  marked.replicate.metadata.step_marker_location = "STEP_MARK_NONE";
  EXPECT_FALSE(compile(fn, kSgdSignature, marked).cache_hit());
  EXPECT_EQ(*step.calls, 5);
  EXPECT_TRUE(compile(fn, bigger, options_for(2)).cache_hit());
  EXPECT_EQ(*step.calls, 5);
}

TEST(Compile, AnotherFunctionOfTheSameCallableAndNameIsAnotherKey) {
  SgdStep step;
  const CompilationResult a = compile(Function("sgd", step), kSgdSignature, options_for(2));
  const CompilationResult b = compile(Function("sgd", step), kSgdSignature, options_for(2));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE(b.cache_hit());  // no stale hit by name or by callable
  EXPECT_NE(a.computation(), b.computation());
  EXPECT_EQ(*step.calls, 2);
}

TEST(Compile, CacheEntriesDieWithTheirFunction) {
  const int64_t before = compile_cache_stats().entries;
  std::shared_ptr<const CompiledComputation> kept;
  {
    const Function fn("sgd", SgdStep{});
    kept = compile(fn, kSgdSignature, options_for(2)).computation();
    EXPECT_EQ(compile_cache_stats().entries, before + 1);
  }
  EXPECT_EQ(compile_cache_stats().entries, before);
  const SgdData data = sgd_data(2);
  EXPECT_EQ(kept->run(data.per_replica, data.broadcast).size(), 2u);  // still usable
}

// The error of compiling `body` (which must fail), after checking nothing ran on a replica.
Error compile_error(const std::function<std::vector<DTensor>(ReplicaContext&, const std::vector<DTensor>&)>& body,
                    const InputSignature& signature, CompileOptions options = options_for(2)) {
  auto replica_runs = std::make_shared<std::atomic<int>>(0);
  const Function fn("bad", [body, replica_runs](ReplicaContext& ctx, const std::vector<DTensor>& in) {
    if (!in.empty() && !in[0].is_abstract()) ++*replica_runs;
    return body(ctx, in);
  });
  const CompilationResult r = compile(fn, signature, options);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.computation(), nullptr);
  EXPECT_EQ(*replica_runs, 0);
  EXPECT_EQ(compile(fn, signature, options).cache_hit(), false);  // failures are not cached
  return r.ok() ? Error(ErrorCode::kInternal, "test", "compiled") : r.error();
}

void expect_error(const Error& e, ErrorCode code, const std::string& substring) {
  EXPECT_EQ(error_code_name(e.code()), error_code_name(code)) << e.what();
  EXPECT_NE(std::string(e.what()).find(substring), std::string::npos)
      << "message: " << e.what() << "\nexpected to contain: " << substring;
}

TEST(CompileErrors, ShapeMismatchIsTheOpsInferenceError) {
  const Error e = compile_error(
      [](ReplicaContext&, const std::vector<DTensor>& in) {
        return std::vector<DTensor>{matmul(in[0], in[1])};
      },
      {{Shape{8, 4}}, {Shape{3, 2}}});
  expect_error(e, ErrorCode::kInvalidArgument, "compile: function 'bad': matmul");
}

TEST(CompileErrors, UnknownOpIsNotFound) {
  const Error e = compile_error(
      [](ReplicaContext&, const std::vector<DTensor>& in) {
        return std::vector<DTensor>{call_op("no_such_op", {in[0]})};
      },
      {{Shape{2}}});
  expect_error(e, ErrorCode::kNotFound, "no_such_op");
}

void register_ruleless_op() {
  static bool done = [] {
    OpDef def;
    def.name = "test_compile_without_rule";
    def.num_inputs = 1;
    def.infer = [](const std::vector<TensorSpec>& in, const OpAttrs&) { return in[0]; };
    def.shard = [](const std::vector<TensorSpec>&, const TensorSpec&, const OpAttrs&) -> ShardingDecision {
      detail::no_rule("no layout works");
    };
    def.kernel = [](const std::vector<Tensor>&, Tensor&, const OpAttrs&, const LocalContext&) {};
    OpRegistry::global().add(std::move(def));
    return true;
  }();
  (void)done;
}

TEST(CompileErrors, NoShardingRuleIsUnimplemented) {
  register_ruleless_op();
  const Error e = compile_error(
      [](ReplicaContext&, const std::vector<DTensor>& in) {
        return std::vector<DTensor>{call_op("test_compile_without_rule", {in[0]})};
      },
      {{Shape{2}}});
  expect_error(e, ErrorCode::kUnimplemented, "no sharding rule");
}

TEST(CompileErrors, BR_105_03_BadDeviceAssignmentOrMetadataIsReportedBeforeTracing) {
  const auto body = [](ReplicaContext&, const std::vector<DTensor>& in) {
    return std::vector<DTensor>{in[0]};
  };
  CompileOptions outside = options_for(1);
  outside.replicate.metadata.topology = Topology::for_hosts(1, 8).serialized();
  outside.replicate.metadata.device_assignment = {6, 0, 0, 0};
  expect_error(compile_error(body, {{Shape{2}}}, outside), ErrorCode::kInvalidArgument,
               "is not a device of this runtime");
  expect_error(compile_error(body, {{Shape{2}}}, options_for(8)), ErrorCode::kInvalidArgument,
               "8 replicas x 1 cores per replica need 8 devices; the runtime has 4");
  expect_error(compile_error(body, {{Shape{2}}}, options_for(0)), ErrorCode::kInvalidArgument,
               "num_replicas must be >= 1");
  CompileOptions no_spmd = options_for(2, 2);
  no_spmd.replicate.metadata.use_spmd_for_xla_partitioning = false;
  EXPECT_EQ(compile_error(body, {{Shape{2}}}, no_spmd).code(), ErrorCode::kUnimplemented);
}

TEST(CompileErrors, OutputsOtherThanOutputTypes) {
  CompileOptions typed = options_for(2);
  typed.output_types = std::vector<DType>{DType::kF32, DType::kF32};
  const auto one_output = [](ReplicaContext&, const std::vector<DTensor>& in) {
    return std::vector<DTensor>{relu(in[0])};
  };
  expect_error(compile_error(one_output, {{Shape{2}}}, typed), ErrorCode::kInvalidArgument,
               "the computation returned 1 outputs; output_types has 2");
  typed.output_types = std::vector<DType>{DType::kI32};
  expect_error(compile_error(one_output, {{Shape{2}}}, typed), ErrorCode::kInvalidArgument,
               "output 0 is f32; output_types says i32");
  expect_error(compile_error([](ReplicaContext&, const std::vector<DTensor>&) {
                 return std::vector<DTensor>{DTensor()};
               },
                             {{Shape{2}}}),
               ErrorCode::kInvalidArgument, "output 0 of the computation is a null DTensor");
}

TEST(CompileErrors, AnExceptionOfTheTracedFunctionKeepsItsCode) {
  expect_error(compile_error([](ReplicaContext&, const std::vector<DTensor>&) -> std::vector<DTensor> {
                 throw Error(ErrorCode::kOutOfRange, "model", "layer 7 of 3");
               },
                             {}),
               ErrorCode::kOutOfRange, "compile: function 'bad': model: layer 7 of 3");
  expect_error(compile_error([](ReplicaContext&, const std::vector<DTensor>&) -> std::vector<DTensor> {
                 throw std::runtime_error("boom");
               },
                             {}),
               ErrorCode::kInternal, "the traced function threw: boom");
}

TEST(CompileErrors, BadCollectiveArgumentsAreCaughtWhileTracing) {
  expect_error(compile_error([](ReplicaContext& ctx, const std::vector<DTensor>& in) {
                 return std::vector<DTensor>{ctx.broadcast(in[0], 7)};
               },
                             {{Shape{2}}}),
               ErrorCode::kInvalidArgument, "root_replica 7 must lie in [0, 2)");
  expect_error(compile_error([](ReplicaContext& ctx, const std::vector<DTensor>& in) {
                 return std::vector<DTensor>{ctx.all_gather(in[0], 3)};
               },
                             {{Shape{2}}}),
               ErrorCode::kInvalidArgument, "axis 3 is out of range");
}

TEST(CompileErrors, BR_74_05_PackInTheTracedFunctionIsAnError) {
  const Error e = compile_error(
      [](ReplicaContext& ctx, const std::vector<DTensor>&) {
        return std::vector<DTensor>{pack({Tensor::zeros(Shape{2}, DType::kF32)},
                                         Layout::replicated(ctx.mesh(), 1), ctx.runtime())};
      },
      {});
  expect_error(e, ErrorCode::kFailedPrecondition, "pack() is eager-only (BR-74-05)");
}

TEST(CompileErrors, BR_74_05_UnpackInTheTracedFunctionIsAnError) {
  const Error e = compile_error(
      [](ReplicaContext&, const std::vector<DTensor>& in) {
        unpack(in[0]);
        return std::vector<DTensor>{in[0]};
      },
      {{Shape{2}}});
  expect_error(e, ErrorCode::kFailedPrecondition, "unpack() is eager-only (BR-74-05)");
}

TEST(CompileErrors, ReadingATracedValueIsEagerOnly) {
  const Error e = compile_error(
      [](ReplicaContext&, const std::vector<DTensor>& in) {
        to_host(in[0]);
        return std::vector<DTensor>{in[0]};
      },
      {{Shape{2}}});
  expect_error(e, ErrorCode::kFailedPrecondition, "eager-only");
}

TEST(CompileErrors, BadInputSpecNamesTheInput) {
  const auto body = [](ReplicaContext&, const std::vector<DTensor>& in) {
    return std::vector<DTensor>{in[0]};
  };
  expect_error(compile_error(body, {{Shape{4, 2}, DType::kF32, {"x", "unsharded"}}}),
               ErrorCode::kInvalidArgument, "input 0 ([4,2] f32 {x,unsharded})");
  expect_error(compile_error(body, {{Shape{4, 2}, DType::kF32, {"core"}}}),
               ErrorCode::kInvalidArgument, "has 1 sharding specs for rank 2");
}

TEST(CompiledRun, InputsAreCheckedAgainstTheSignatureBeforeRunning) {
  SgdStep step;
  const CompilationResult r = compile(Function("sgd", step), kSgdSignature, options_for(2));
  ASSERT_TRUE(r.ok());
  SgdData data = sgd_data(2);
  EXPECT_TESSEL_ERROR(r.computation()->run(data.per_replica, {}), ErrorCode::kInvalidArgument,
                      "'sgd' was compiled for 3 inputs; got 2 (2 per-replica, 0 broadcast");
  data.per_replica[1][1] = matrix(Shape{8, 3}, 1);
  EXPECT_TESSEL_ERROR(r.computation()->run(data.per_replica, data.broadcast),
                      ErrorCode::kInvalidArgument,
                      "'sgd': input 1 (replica 1) is [8,3] f32; it was compiled for [8,2] f32");
}

TEST(CompiledRun, CollectivesAreTracedAndReplayedOnEveryReplica) {
  const auto body = [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
    const DTensor sum = ctx.all_reduce(in[0]);
    const DTensor all = ctx.all_gather(in[0], 0);
    const DTensor root = ctx.broadcast(in[0], 2);
    ctx.barrier();
    return std::vector<DTensor>{sum, all, root, ctx.all_reduce(in[0], ReduceOp::kMax)};
  };
  const CompilationResult r = compile(Function("collectives", body), {{Shape{2}}}, options_for(4));
  ASSERT_TRUE(r.ok()) << r.status_string();
  EXPECT_EQ(r.computation()->graph().count(GraphNodeKind::kCollective), 5);
  EXPECT_NE(r.computation()->graph().to_string().find("\n  barrier()\n"), std::string::npos)
      << r.computation()->graph();
  std::vector<Tensor> xs;
  for (int k = 0; k < 4; ++k) xs.push_back(Tensor::from_vector<float>({float(k), float(10 * k)}, Shape{2}));
  const auto outs = r.computation()->run({xs});
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(values(outs[k][0]), (std::vector<float>{6, 60}));
    EXPECT_EQ(values(outs[k][1]), (std::vector<float>{0, 0, 1, 10, 2, 20, 3, 30}));
    EXPECT_EQ(values(outs[k][2]), (std::vector<float>{2, 20}));
    EXPECT_EQ(values(outs[k][3]), (std::vector<float>{3, 30}));
    EXPECT_EQ(outs[k][0].device(0).index(), k);  // replica k ran on its own device
  }
}

TEST(CompiledRun, ShardedInputSpecsRelayoutOnEntryOverTheReplicasCores) {
  const auto body = [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
    EXPECT_EQ(in[0].layout().sharding_spec_strings(), (std::vector<std::string>{"core", "unsharded"}));
    return std::vector<DTensor>{ctx.all_reduce(reduce_sum(multiply(in[0], 2.0), {0}))};
  };
  const CompilationResult r = compile(Function("sharded", body),
                                      {{Shape{4, 2}, DType::kF32, {"core", "unsharded"}}},
                                      options_for(2, 2));
  ASSERT_TRUE(r.ok()) << r.status_string();
  const Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, Shape{4, 2});
  const auto outs = r.computation()->run({{a, a}});
  for (int k = 0; k < 2; ++k) EXPECT_EQ(values(outs[k][0]), (std::vector<float>{64, 80}));
}

TEST(CompiledRun, ReplayOnASingleReplicaContextOfOnesOwn) {
  SgdStep step;
  const CompilationResult r = compile(Function("sgd", step), kSgdSignature, options_for(1));
  ASSERT_TRUE(r.ok());
  const Mesh mesh = Mesh::create_on_devices({{"core", 1}}, {"CPU:3"});
  OneReplicaContext ctx(mesh, four_devices());
  const SgdData data = sgd_data(1);
  std::vector<DTensor> inputs;
  for (const Tensor& t : {data.per_replica[0][0], data.per_replica[1][0], data.broadcast[0]}) {
    inputs.push_back(copy_to_mesh(t, Layout::replicated(mesh, 2), four_devices()));
  }
  const std::vector<DTensor> replayed = r.computation()->replay(ctx, inputs);
  const std::vector<DTensor> eager = step(ctx, inputs);
  EXPECT_EQ(replayed[1].layout().mesh(), mesh);
  EXPECT_EQ(values(replayed[0]), values(eager[0]));
  EXPECT_EQ(values(replayed[1]), values(eager[1]));
  EXPECT_EQ(*step.calls, 2);  // the trace and the eager call
}

}  // namespace
}  // namespace tessel
