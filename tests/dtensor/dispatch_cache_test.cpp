// The dispatch cache (src/dtensor/framework/dispatch_cache.h): a repeated op call reuses its plan, and
// anything its plan depends on (op, input shapes, dtypes and layouts, attrs, runtime) makes a
// new one; calls that took the sharding fallback are kept and counted per call; the kernel of a cached call gets
// the call's own attrs and data. OpAttrs: equality, and its field list (every field, each hashed
// by the call key). Also: DTensor copies share their data.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "dtensor/framework/dispatch_cache.h"
#include "dtensor/framework/op_util.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/sharding_fallback.h"
#include "testing/expect_error.h"
#include "testing/op_check.h"

namespace tessel {
namespace {

using testing::values;

std::atomic<int> g_rule_runs{0};

// Registers (once) an identity op named `name` with the sharding rule `shard`.
void register_identity_op(const char* name, decltype(OpDef::shard) shard) {
  if (OpRegistry::global().contains(name)) return;
  OpDef def;
  def.name = name;
  def.num_inputs = 1;
  def.infer = [](const std::vector<TensorSpec>& in, const OpAttrs&) { return in[0]; };
  def.shard = std::move(shard);
  def.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs&,
                  const LocalContext&) { out.copy_from(in[0]); };
  OpRegistry::global().add(std::move(def));
}

// An identity op that counts how often its sharding rule runs.
constexpr const char* kCounting = "test_dispatch_cache_counting_identity";
void register_counting_op() {
  register_identity_op(kCounting, [](const std::vector<TensorSpec>& in, const TensorSpec&,
                                     const OpAttrs&) {
    ++g_rule_runs;
    return ShardingDecision{{in[0].layout}, in[0].layout};
  });
}

// An identity op whose rule accepts only replicated inputs.
constexpr const char* kPicky = "test_dispatch_cache_picky_identity";
void register_picky_op() {
  register_identity_op(kPicky, [](const std::vector<TensorSpec>& in, const TensorSpec&,
                                  const OpAttrs&) {
    if (!in[0].layout.is_fully_replicated()) detail::no_rule("only replicated inputs");
    return ShardingDecision{{in[0].layout}, in[0].layout};
  });
}

// How many times the counting op's rule runs for `call`.
template <typename F>
int rule_runs(F&& call) {
  const int before = g_rule_runs;
  call();
  return g_rule_runs - before;
}

TEST(DispatchCache, ARepeatedCallRunsTheRuleOnceAndAnyDifferenceRunsItAgain) {
  register_counting_op();
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const Tensor host = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, Shape{8});
  const DTensor x = copy_to_mesh(host, Layout({"x"}, mesh), rt);
  EXPECT_EQ(rule_runs([&] { call_op(kCounting, {x}); }), 1);
  DTensor y;
  EXPECT_EQ(rule_runs([&] {
              for (int i = 0; i < 3; ++i) y = call_op(kCounting, {x});
            }),
            0);
  EXPECT_EQ(values(y), host.to_doubles());
  // Other data of the same spec: the same plan, the new data.
  const Tensor other = Tensor::from_vector<float>({8, 7, 6, 5, 4, 3, 2, 1}, Shape{8});
  EXPECT_EQ(rule_runs([&] { y = call_op(kCounting, {copy_to_mesh(other, Layout({"x"}, mesh), rt)}); }),
            0);
  EXPECT_EQ(values(y), other.to_doubles());
  // A different shape, layout, dtype, attrs or runtime each make a new plan.
  const Tensor twelve = Tensor::full(Shape{12}, DType::kF32, 2.0);
  EXPECT_EQ(rule_runs([&] { call_op(kCounting, {copy_to_mesh(twelve, Layout({"x"}, mesh), rt)}); }),
            1);
  EXPECT_EQ(rule_runs([&] { call_op(kCounting, {copy_to_mesh(host, Layout::replicated(mesh, 1), rt)}); }),
            1);
  const Tensor f64 = Tensor::full(Shape{8}, DType::kF64, 2.0);
  EXPECT_EQ(rule_runs([&] { call_op(kCounting, {copy_to_mesh(f64, Layout({"x"}, mesh), rt)}); }), 1);
  OpAttrs seeded;
  seeded.seed = 1;
  EXPECT_EQ(rule_runs([&] { call_op(kCounting, {x}, seeded); }), 1);
  EXPECT_EQ(rule_runs([&] { call_op(kCounting, {x}, seeded); }), 0);
  Runtime second({.num_cpu_devices = 4});
  const DTensor x2 = copy_to_mesh(host, Layout({"x"}, mesh), second);
  EXPECT_EQ(rule_runs([&] { y = call_op(kCounting, {x2}); }), 1);
  EXPECT_EQ(&y.runtime(), &second);
  EXPECT_EQ(values(y), host.to_doubles());
}

TEST(DispatchCache, AFallbackCallIsKeptAndCountedPerCallAndStrictModeMakesItFailAgain) {
  register_picky_op();
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const Tensor host = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, Shape{8});
  const DTensor sharded = copy_to_mesh(host, Layout({"x"}, mesh), rt);
  reset_sharding_fallbacks();
  DTensor out;
  for (int i = 0; i < 3; ++i) out = call_op(kPicky, {sharded});
  EXPECT_TRUE(out.layout().is_fully_replicated());
  EXPECT_EQ(values(out), host.to_doubles());
  // The second and third calls came from the cache and were counted all the same.
  std::vector<FallbackRecord> records = sharding_fallbacks();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].count, 3);
  // An all-gather of 8 floats over 4 devices: each device sends its 2 to the 3 others.
  EXPECT_EQ(records[0].bytes, 3 * (4 * 3 * 2 * 4));
  set_sharding_fallback_strict(true);
  EXPECT_TESSEL_ERROR(call_op(kPicky, {sharded}), ErrorCode::kUnimplemented,
                      "no sharding rule for input 0: [8] f32 in sharding_specs:x on mesh x=4");
  set_sharding_fallback_strict(false);
  EXPECT_EQ(values(call_op(kPicky, {sharded})), host.to_doubles());
  records = sharding_fallbacks();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].count, 4);  // the strict call did not count
  reset_sharding_fallbacks();
}

TEST(DispatchCache, ACachedCallsKernelGetsTheCallsOwnAttrs) {
  Runtime rt({.num_cpu_devices = 2});
  const Mesh mesh = Mesh::create({{"x", 2}});
  const DTensor zeros =
      copy_to_mesh(Tensor::full(Shape{4}, DType::kF32, -0.0), Layout({"x"}, mesh), rt);
  // -0.0 == 0.0, so the second call finds the first's plan; its kernel must add -0.0 all the
  // same: -0 + 0 is +0, -0 + -0 is -0.
  const Tensor plus = to_host(add(zeros, 0.0));
  const Tensor minus = to_host(add(zeros, -0.0));
  for (double v : plus.to_doubles()) EXPECT_FALSE(std::signbit(v));
  for (double v : minus.to_doubles()) EXPECT_TRUE(std::signbit(v));
  EXPECT_EQ(values(multiply(add(zeros, 3.0), 2.0)), (std::vector<double>{6, 6, 6, 6}));
  EXPECT_EQ(values(multiply(add(zeros, 3.0), 5.0)), (std::vector<double>{15, 15, 15, 15}));
}

TEST(DispatchCache, CallsBeyondTheCacheStayCorrect) {
  Runtime rt({.num_cpu_devices = 2});
  const Mesh mesh = Mesh::create({{"x", 2}});
  // More distinct calls than the cache has slots, twice over: every one evicted and planned
  // again, each still right.
  for (int round = 0; round < 2; ++round) {
    for (int n = 1; n <= 1100; ++n) {
      const DTensor x = copy_to_mesh(Tensor::full(Shape{2 * n}, DType::kF32, 1.0),
                                     Layout({"x"}, mesh), rt);
      const Tensor y = to_host(add(x, x));
      ASSERT_EQ(y.shape(), Shape{2 * n});
      ASSERT_EQ(y.to_doubles().front(), 2.0);
      ASSERT_EQ(y.to_doubles().back(), 2.0);
    }
  }
}

TEST(OpAttrs, EqualWhenEveryFieldIs) {
  OpAttrs a, b;
  EXPECT_EQ(a, b);
  b.axes = {1};
  EXPECT_NE(a, b);
  a.axes = {1};
  a.operand = 0.0;
  b.operand = -0.0;
  EXPECT_EQ(a, b);  // as doubles compare
  a.operand = std::nan("");
  b.operand = std::nan("");
  EXPECT_NE(a, b);
}

// The number of fields of the aggregate T: the most initializers T{...} takes.
struct AnyField {
  template <typename T>
  operator T() const;  // NOLINT(google-explicit-constructor): stands for any field's value
};
template <typename T, size_t... I>
constexpr bool takes_initializers(std::index_sequence<I...>) {
  return requires { T{(static_cast<void>(I), AnyField{})...}; };
}
template <typename T, size_t N = 0>
constexpr size_t aggregate_field_count() {
  if constexpr (takes_initializers<T>(std::make_index_sequence<N + 1>{})) {
    return aggregate_field_count<T, N + 1>();
  } else {
    return N;
  }
}

constexpr size_t listed_field_count() {
  size_t n = 0;
  OpAttrs::for_each_field([&](const char*, auto) { ++n; });
  return n;
}

// The printer, the hash and the Python binding see only the fields the list names.
static_assert(listed_field_count() == aggregate_field_count<OpAttrs>(),
              "OpAttrs::for_each_field must list every field of OpAttrs");

TEST(OpAttrs, TheFieldListNamesEachFieldOnce) {
  std::set<std::string> names;
  OpAttrs::for_each_field(
      [&](const char* name, auto) { EXPECT_TRUE(names.insert(name).second) << name; });
  EXPECT_EQ(names.size(), aggregate_field_count<OpAttrs>());
  EXPECT_EQ(names.count("axes") + names.count("seed") + names.count("runtime"), 3u);
}

// A value other than the default, per field type.
struct SetOther {
  Runtime* runtime;
  void operator()(std::vector<int64_t>& v) const { v = {3}; }
  void operator()(std::optional<int64_t>& v) const { v = 0; }
  void operator()(std::optional<uint64_t>& v) const { v = 0; }
  void operator()(std::optional<double>& v) const { v = 0.0; }
  void operator()(std::string& v) const { v = "ij->i"; }
  void operator()(DType& v) const { v = DType::kF64; }
  void operator()(bool& v) const { v = true; }
  void operator()(std::optional<Layout>& v) const {
    v = Layout({"x"}, Mesh::create({{"x", 2}}));
  }
  void operator()(Runtime*& v) const { v = runtime; }
};

TEST(OpAttrs, TheCallKeyHashesEveryFieldAndEqualAttrsHashEqually) {
  Runtime rt({.num_cpu_devices = 2});
  const DTensor x = copy_to_mesh(Tensor::full(Shape{4}, DType::kF32, 1.0),
                                 Layout({"x"}, Mesh::create({{"x", 2}})), rt);
  const OpDef& def = OpRegistry::global().get("negative");
  const size_t plain = detail::call_key(def, {x}, OpAttrs{}, 0);
  OpAttrs::for_each_field([&](const char* name, auto member) {
    OpAttrs attrs;
    SetOther{&rt}(attrs.*member);
    EXPECT_NE(attrs, OpAttrs{}) << name;
    EXPECT_NE(detail::call_key(def, {x}, attrs, 0), plain) << name;
  });
  OpAttrs zero, minus_zero;
  zero.operand = 0.0;
  minus_zero.operand = -0.0;
  ASSERT_EQ(zero, minus_zero);
  EXPECT_EQ(detail::call_key(def, {x}, zero, 0), detail::call_key(def, {x}, minus_zero, 0));
}

TEST(DTensor, CopiesShareTheirData) {
  Runtime rt({.num_cpu_devices = 2});
  const Mesh mesh = Mesh::create({{"x", 2}});
  const DTensor a = copy_to_mesh(Tensor::full(Shape{4}, DType::kF32, 1.0), Layout({"x"}, mesh), rt);
  const DTensor b = a;  // NOLINT(performance-unnecessary-copy-initialization): the copy is tested
  EXPECT_EQ(&b.layout(), &a.layout());
  EXPECT_EQ(&b.components(), &a.components());
  EXPECT_EQ(b.id(), a.id());
  const DTensor null;
  const DTensor null_copy = null;  // NOLINT(performance-unnecessary-copy-initialization)
  EXPECT_FALSE(null_copy.defined());
  EXPECT_TRUE(null_copy.layout().is_empty());
  EXPECT_EQ(null_copy.shape().rank(), 0);
}

}  // namespace
}  // namespace tessel
