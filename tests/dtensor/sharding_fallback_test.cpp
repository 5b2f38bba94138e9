// The sharding fallback (tessel/dtensor/sharding_fallback.h): an op whose rule has no answer for
// its inputs' layouts runs on the nearest layouts the rule accepts and gives the replicated
// computation's result and gradients; each (op, layouts) pair is counted with its bytes and warned
// about once; strict mode raises naming the op and the layouts; genuine rule errors still raise;
// ops with rules never count.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dtensor/framework/op_util.h"
#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/optimizers.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/dtensor/sharding_fallback.h"
#include "tessel/replicate/compile.h"
#include "testing/expect_error.h"
#include "testing/op_check.h"

namespace tessel {
namespace {

using testing::random_host;
using testing::values;

// cumsum along axis 0 (attrs.axis unset): its rule has no answer for a sharded dim 0.
constexpr const char* kCumsum = "cumsum";

// The running sum down dim 0 of a host tensor [rows, cols] in f64, computed here.
std::vector<double> host_cumsum(const Tensor& x) {
  const std::vector<double> v = x.to_doubles();
  const int64_t rows = x.shape().dim(0);
  const int64_t cols = x.num_elements() / rows;
  std::vector<double> out(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      out[r * cols + c] = v[r * cols + c] + (r == 0 ? 0.0 : out[(r - 1) * cols + c]);
    }
  }
  return out;
}

// Registers (once) a two-input op returning input 0 whose rule accepts the inputs only when one
// of them is entirely unsharded (output: input 0's layout); the fallback must gather the cheaper.
constexpr const char* kEitherWhole = "test_fallback_either_whole";
// And one whose rule has no answer for anything, one whose rule reports a genuine error, and an
// identity whose rule has no answer for a Partial input (keeping any sharding).
constexpr const char* kNoLayout = "test_fallback_no_layout";
constexpr const char* kBadRule = "test_fallback_bad_rule";
constexpr const char* kNoPartial = "test_fallback_no_partial";
void register_test_ops() {
  static const bool done = [] {
    const auto identity_kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs&,
                                    const LocalContext&) { out.copy_from(in[0]); };
    OpDef either;
    either.name = kEitherWhole;
    either.num_inputs = 2;
    either.infer = [](const std::vector<TensorSpec>& in, const OpAttrs&) { return in[0]; };
    either.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
      const auto whole = [](const Layout& l) {
        return l.sharded_mesh_dims().empty() && !l.is_partial();
      };
      if (!whole(in[0].layout) && !whole(in[1].layout)) detail::no_rule("neither input whole");
      return ShardingDecision{{in[0].layout, in[1].layout}, in[0].layout};
    };
    either.kernel = identity_kernel;
    OpRegistry::global().add(either);
    OpDef none = either;
    none.name = kNoLayout;
    none.num_inputs = 1;
    none.shard = [](const std::vector<TensorSpec>&, const TensorSpec&,
                    const OpAttrs&) -> ShardingDecision { detail::no_rule("no layout works"); };
    OpRegistry::global().add(none);
    OpDef bad = none;
    bad.name = kBadRule;
    bad.shard = [](const std::vector<TensorSpec>&, const TensorSpec&,
                   const OpAttrs&) -> ShardingDecision {
      detail::throw_invalid(kBadRule, "the rule's own error");
    };
    OpRegistry::global().add(bad);
    OpDef whole_sums = none;
    whole_sums.name = kNoPartial;
    whole_sums.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
      if (in[0].layout.is_partial()) detail::no_rule("a Partial input");
      return ShardingDecision{{in[0].layout}, in[0].layout};
    };
    OpRegistry::global().add(whole_sums);
    return true;
  }();
  (void)done;
}

class ShardingFallback : public testing::FallbackScopedTest {
 protected:
  void SetUp() override {
    register_test_ops();
    FallbackScopedTest::SetUp();
  }
};

TEST_F(ShardingFallback, ResultEqualsTheReplicatedComputationOnMeshes2And2x2) {
  Runtime rt({.num_cpu_devices = 4});
  const Tensor host = random_host(Shape{6, 4}, DType::kF64, 1);
  struct Case {
    Mesh mesh;
    std::vector<std::string> specs;
    std::vector<std::string> output;  // the nearest layout the rule accepts
  };
  const Mesh two = Mesh::create_on_devices({{"x", 2}}, {"CPU:0", "CPU:1"});
  const Mesh square = Mesh::create({{"x", 2}, {"y", 2}});
  for (const Case& c : {Case{two, {"x", "unsharded"}, {"unsharded", "unsharded"}},
                        Case{square, {"x", "y"}, {"unsharded", "y"}},
                        Case{square, {"x+y", "unsharded"}, {"unsharded", "unsharded"}}}) {
    const Layout layout(c.specs, c.mesh);
    const DTensor x = copy_to_mesh(host, layout, rt);
    const DTensor replicated = copy_to_mesh(host, Layout::replicated(c.mesh, 2), rt);
    const DTensor got = call_op(kCumsum, {x});
    EXPECT_EQ(got.layout(), Layout(c.output, c.mesh)) << layout.to_string();
    EXPECT_EQ(values(got), values(call_op(kCumsum, {replicated}))) << layout.to_string();
    EXPECT_EQ(values(got), host_cumsum(host)) << layout.to_string();
  }
  // Three pairs fell back, once each; the replicated calls have a rule and did not.
  EXPECT_EQ(sharding_fallbacks().size(), 3u);
}

TEST_F(ShardingFallback, APartialInputIsReducedAndKeepsItsSharding) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(2);
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Tensor host = random_host(Shape{5, 4}, DType::kF64, 3);
  const Layout partial = Layout({"unsharded", "y"}, mesh).with_partial({{"x", ReduceOp::kSum}});
  const DTensor got = call_op(kNoPartial, {testing::distribute(host, partial, rt, rng)});
  EXPECT_EQ(got.layout(), Layout({"unsharded", "y"}, mesh));
  const std::vector<double> want = host.to_doubles();
  const std::vector<double> have = values(got);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(have[i], want[i], 1e-12) << i;
}

TEST_F(ShardingFallback, TheCheaperInputIsGatheredWhenEitherWouldDo) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const Tensor big = random_host(Shape{64, 4}, DType::kF32, 4);
  const Tensor small = random_host(Shape{4, 4}, DType::kF32, 5);
  const Layout sharded({"x", "unsharded"}, mesh);
  const DTensor out =
      call_op(kEitherWhole, {copy_to_mesh(big, sharded, rt), copy_to_mesh(small, sharded, rt)});
  EXPECT_EQ(out.layout(), sharded);  // input 0 stayed sharded: the small input was gathered
  EXPECT_EQ(values(out), big.to_doubles());
  const std::vector<FallbackRecord> records = sharding_fallbacks();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(
      records[0].bytes,
      plan_relayout(Shape{4, 4}, sharded, Layout::replicated(mesh, 2), DType::kF32).bytes_total());
}

TEST_F(ShardingFallback, GradientsComeBackInTheInputsLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(6);
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const auto fn = [](const std::vector<DTensor>& in) { return call_op(kCumsum, {tanh(in[0])}); };
  const Tensor host = random_host(Shape{5, 3}, DType::kF64, 7);
  for (const Layout& layout : {Layout({"x", "y"}, mesh), Layout({"y", "unsharded"}, mesh),
                               Layout({"x+y", "unsharded"}, mesh)}) {
    testing::expect_vjp_matches_finite_differences(fn, {host}, {layout}, rt, rng);
  }
  // Only the forward calls fell back: each gradient arrives in its output's layout, which the
  // gradient op's rule accepts, and autodiff relays the result out to the input's layout.
  const std::vector<FallbackRecord> records = sharding_fallbacks();
  EXPECT_EQ(records.size(), 3u);
  for (const FallbackRecord& r : records) EXPECT_EQ(r.op, kCumsum);
}

TEST_F(ShardingFallback, EachPairIsCountedWithItsBytesAndWarnedAboutOnce) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Tensor host = random_host(Shape{8, 4}, DType::kF32, 8);
  const Layout rows({"x", "unsharded"}, mesh);
  const Layout both({"x", "y"}, mesh);
  const DTensor a = copy_to_mesh(host, rows, rt);
  const DTensor b = copy_to_mesh(host, both, rt);
  const RelayoutStats before = relayout_stats();
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) call_op(kCumsum, {a});  // the first plans, the others hit the cache
  for (int i = 0; i < 2; ++i) call_op(kCumsum, {b});
  const std::string warned = ::testing::internal::GetCapturedStderr();
  const RelayoutStats after = relayout_stats();
  const auto occurrences = [&](const std::string& text) {
    size_t n = 0;
    for (size_t at = warned.find(text); at != std::string::npos; at = warned.find(text, at + 1))
      ++n;
    return n;
  };
  EXPECT_EQ(occurrences("tessel: warning: op 'cumsum'"), 2u) << warned;
  EXPECT_EQ(occurrences("[8,4] f32 in sharding_specs:x,unsharded on mesh x=2,y=2"), 1u) << warned;
  EXPECT_EQ(occurrences("[8,4] f32 in sharding_specs:x,y on mesh x=2,y=2"), 1u) << warned;
  const std::vector<FallbackRecord> records = sharding_fallbacks();
  ASSERT_EQ(records.size(), 2u);
  int64_t bytes = 0;
  for (const FallbackRecord& r : records) {
    EXPECT_EQ(r.op, kCumsum);
    ASSERT_EQ(r.layouts.size(), 1u);
    const bool is_rows = r.layouts[0] == rows;
    EXPECT_TRUE(is_rows || r.layouts[0] == both);
    EXPECT_EQ(r.count, is_rows ? 3 : 2);
    const int64_t per_call =
        plan_relayout(Shape{8, 4}, r.layouts[0],
                      Layout({"unsharded", is_rows ? "unsharded" : "y"}, mesh), DType::kF32)
            .bytes_total();
    EXPECT_GT(per_call, 0);
    EXPECT_EQ(r.bytes, r.count * per_call);
    bytes += r.bytes;
  }
  EXPECT_EQ(bytes, after.bytes - before.bytes);  // what the relayouts themselves counted
  EXPECT_NE(sharding_fallbacks_text().find("cumsum (input 0: "), std::string::npos);
  // After a reset the list is empty and the next fallback warns again.
  reset_sharding_fallbacks();
  EXPECT_TRUE(sharding_fallbacks().empty());
  EXPECT_EQ(sharding_fallbacks_text(), "");
  ::testing::internal::CaptureStderr();
  call_op(kCumsum, {a});
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("tessel: warning"), std::string::npos);
  EXPECT_EQ(sharding_fallbacks().at(0).count, 1);
}

TEST_F(ShardingFallback, StrictModeRaisesNamingTheOpAndLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout layout({"x", "y"}, mesh);
  const DTensor x = copy_to_mesh(random_host(Shape{4, 4}, DType::kF32, 9), layout, rt);
  call_op(kCumsum, {x});  // planned and cached before strict mode comes on
  set_sharding_fallback_strict(true);
  EXPECT_TRUE(sharding_fallback_strict());
  const std::string expected =
      "cumsum: no sharding rule for input 0: [4,4] f32 in sharding_specs:x,y on mesh "
      "x=2,y=2";
  EXPECT_TESSEL_ERROR(call_op(kCumsum, {x}), ErrorCode::kUnimplemented, expected);
  EXPECT_TESSEL_ERROR(call_op(kCumsum, {x}), ErrorCode::kUnimplemented, "strict sharding is on");
  EXPECT_TESSEL_ERROR(plan_op(kCumsum, {{Shape{4, 4}, DType::kF32, layout}}),
                      ErrorCode::kUnimplemented, expected);
  EXPECT_EQ(sharding_fallbacks().at(0).count, 1);  // the refused calls count nothing
  // Calls with a rule still run.
  EXPECT_EQ(call_op(kCumsum, {relayout(x, Layout({"unsharded", "y"}, mesh))}).layout(),
            Layout({"unsharded", "y"}, mesh));
}

TEST_F(ShardingFallback, GenuineErrorsStillRaiseAndCountNothing) {
  Runtime rt({.num_cpu_devices = 2});
  const Mesh mesh = Mesh::create({{"x", 2}});
  const DTensor x = copy_to_mesh(random_host(Shape{4}, DType::kF32, 10), Layout({"x"}, mesh), rt);
  EXPECT_TESSEL_ERROR(call_op(kNoLayout, {x}), ErrorCode::kUnimplemented,
                      "no sharding rule for input 0: [4] f32 in sharding_specs:x on mesh x=2");
  EXPECT_TESSEL_ERROR(call_op(kNoLayout, {x}), ErrorCode::kUnimplemented,
                      "not even for replicated inputs");
  EXPECT_TESSEL_ERROR(call_op(kBadRule, {x}), ErrorCode::kInvalidArgument, "the rule's own error");
  const DTensor scalar =
      copy_to_mesh(Tensor::full(Shape{}, DType::kF32, 1), Layout::replicated(mesh, 0), rt);
  EXPECT_TESSEL_ERROR(call_op(kCumsum, {scalar}), ErrorCode::kInvalidArgument,
                      "axis 0 is out of range for rank 0");
  // plan_op moves nothing, so it counts nothing.
  EXPECT_EQ(plan_op(kCumsum, {{Shape{4}, DType::kF32, Layout({"x"}, mesh)}}).output,
            Layout::replicated(mesh, 1));
  EXPECT_TRUE(sharding_fallbacks().empty());
}

TEST_F(ShardingFallback, CallsFromManyThreadsAreAllCounted) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const Tensor host = random_host(Shape{8, 2}, DType::kF32, 11);
  const DTensor x = copy_to_mesh(host, Layout({"x", "unsharded"}, mesh), rt);
  const std::vector<double> want = host_cumsum(host);
  constexpr int kThreads = 4;
  constexpr int kCalls = 5;
  std::vector<std::thread> threads;
  std::vector<int> wrong(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        const std::vector<double> got = values(call_op(kCumsum, {x}));
        for (size_t k = 0; k < want.size(); ++k) wrong[t] += std::abs(got[k] - want[k]) > 1e-5;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
  const std::vector<FallbackRecord> records = sharding_fallbacks();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].count, kThreads * kCalls);
}

TEST_F(ShardingFallback, ACompiledFunctionCountsItsFallbackOnceWhenTraced) {
  static Runtime* rt = new Runtime({.num_cpu_devices = 4});  // outlives its streams' tasks
  CompileOptions options;
  options.replicate.metadata.num_replicas = 1;
  options.replicate.metadata.num_cores_per_replica = 2;
  options.replicate.metadata.use_spmd_for_xla_partitioning = true;
  options.replicate.runtime = rt;
  options.replicate.timeout = std::chrono::seconds(60);
  const auto body = [](ReplicaContext&, const std::vector<DTensor>& in) {
    return std::vector<DTensor>{call_op(kCumsum, {in[0]})};
  };
  const CompilationResult r = compile(Function("cumsum", body),
                                      {{Shape{4, 2}, DType::kF32, {"core", "unsharded"}}}, options);
  ASSERT_TRUE(r.ok()) << r.status_string();
  ASSERT_EQ(sharding_fallbacks().size(), 1u);
  EXPECT_EQ(sharding_fallbacks()[0].count, 1);
  const Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, Shape{4, 2});
  for (int run = 0; run < 2; ++run) {
    EXPECT_EQ(values(r.computation()->run({{a}})[0][0]), host_cumsum(a));
  }
  EXPECT_EQ(sharding_fallbacks()[0].count, 1);  // the replays repeat what the trace counted
}

TEST_F(ShardingFallback, OpsWithRulesNeverFallBack) {
  // A small GPT-like step on a 2x2 (batch x model) mesh: embedding, layer norm, column- and
  // row-parallel matmuls, causal attention scores, GELU, cross-entropy, gradients and an update.
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"batch", 2}, {"model", 2}});
  const int64_t vocab = 8, width = 8, tokens = 4, batch = 2;
  const Layout rep1 = Layout::replicated(mesh, 1);
  std::vector<DTensor> params = {
      random_normal(Shape{vocab, width}, Layout({"model", "unsharded"}, mesh), 1, 0, 0.1,
                    DType::kF32, &rt),
      ones(Shape{width}, rep1, DType::kF32, &rt),
      random_normal(Shape{width, 2 * width}, Layout({"unsharded", "model"}, mesh), 2, 0, 0.1,
                    DType::kF32, &rt),
      random_normal(Shape{2 * width, width}, Layout({"model", "unsharded"}, mesh), 3, 0, 0.1,
                    DType::kF32, &rt),
      random_normal(Shape{width, vocab}, Layout({"unsharded", "model"}, mesh), 4, 0, 0.1,
                    DType::kF32, &rt)};
  const Tensor ids_host =
      Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 6, 7, 0}, Shape{batch, tokens});
  const DTensor ids = copy_to_mesh(ids_host, Layout({"batch", "unsharded"}, mesh), rt);
  const DTensor labels = copy_to_mesh(ids_host, Layout({"batch", "unsharded"}, mesh), rt);
  const auto loss = [&](const std::vector<DTensor>& p) {
    DTensor h = embedding_lookup(p[0], ids);  // [b, t, w]
    h = layer_norm(h, p[1]);
    const DTensor scores = causal_softmax(matmul(h, h, false, true), 0.5);  // [b, t, t]
    h = add(h, matmul(scores, h));
    h = add(h, matmul(gelu(matmul(h, p[2])), p[3]));
    const DTensor logits = matmul(h, p[4]);
    return reduce_mean(sparse_softmax_cross_entropy_with_logits(labels, logits));
  };
  Adam adam(1e-3);
  for (int step = 0; step < 2; ++step) {
    auto [value, grads] = value_and_grad(loss, params);
    adam.apply(params, grads);
    EXPECT_TRUE(std::isfinite(values(value)[0]));
  }
  EXPECT_TRUE(sharding_fallbacks().empty()) << sharding_fallbacks_text();
}

}  // namespace
}  // namespace tessel
