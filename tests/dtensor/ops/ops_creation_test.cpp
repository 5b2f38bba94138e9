// The creation ops (ops_creation.cpp): values and layouts, Partial layouts holding the named
// value, random tensors equal bit for bit across layouts and device counts, errors.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/ops.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous();
  const Tensor y = b.contiguous();
  return x.shape() == y.shape() && x.dtype() == y.dtype() &&
         std::memcmp(x.data(), y.data(), x.nbytes()) == 0;
}

TEST(CreationValues, ZerosOnesFillInTheirLayout) {
  Runtime rt({.num_cpu_devices = 4});
  const Layout l({"x", "unsharded"}, Mesh::create({{"x", 4}}));
  const DTensor z = zeros({5, 2}, l, DType::kF32, &rt);
  EXPECT_EQ(z.layout(), l);
  EXPECT_EQ(z.shape(), (Shape{5, 2}));
  EXPECT_EQ(z.dtype(), DType::kF32);
  EXPECT_EQ(&z.runtime(), &rt);
  EXPECT_EQ(to_host(z).to_doubles(), std::vector<double>(10, 0.0));
  EXPECT_EQ(to_host(ones({5, 2}, l, DType::kF64, &rt)).to_doubles(), std::vector<double>(10, 1.0));
  EXPECT_EQ(to_host(fill({5, 2}, -2.5, l, DType::kF64, &rt)).to_doubles(),
            std::vector<double>(10, -2.5));
  // Every dtype: a fill converts like Tensor::fill.
  EXPECT_EQ(to_host(fill({3}, 7.9, Layout({"x"}, l.mesh()), DType::kI32, &rt)).to_vector<int32_t>(),
            (std::vector<int32_t>{7, 7, 7}));
  EXPECT_EQ(to_host(ones({2}, Layout({"x"}, l.mesh()), DType::kBool, &rt)).to_vector<bool>(),
            (std::vector<bool>{true, true}));
  // Components are the blocks: 2, 2, 1, 0 rows.
  EXPECT_EQ(z.component(2).shape(), (Shape{1, 2}));
  EXPECT_EQ(z.component(3).shape(), (Shape{0, 2}));
}

TEST(CreationValues, ScalarAndEmptyShapes) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  EXPECT_EQ(to_host(fill({}, 3.0, Layout::replicated(mesh, 0), DType::kF64, &rt)).to_doubles(),
            (std::vector<double>{3.0}));
  EXPECT_EQ(to_host(ones({0, 3}, Layout({"x", "y"}, mesh), DType::kF32, &rt)).num_elements(), 0);
}

TEST(CreationValues, DefaultRuntimeIsTheGlobalOne) {
  const Layout l = Layout::replicated(Mesh::create({{"x", 1}}), 1);
  const DTensor z = zeros({3}, l);
  EXPECT_EQ(&z.runtime(), &Runtime::global());
}

TEST(CreationPartial, OnesOfPartialSumHoldOneOnTheFirstDeviceOfEachGroup) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout l = Layout({"x"}, mesh).with_partial({{"y", ReduceOp::kSum}});
  const DTensor o = ones({4}, l, DType::kF64, &rt);
  EXPECT_EQ(o.layout(), l);
  EXPECT_EQ(to_host(o).to_doubles(), (std::vector<double>{1, 1, 1, 1}));
  // Device offsets (x, y): y == 0 holds the value, y == 1 holds 0.
  const std::vector<Tensor> parts = unpack(o);
  EXPECT_EQ(parts[0].to_doubles(), (std::vector<double>{1, 1}));
  EXPECT_EQ(parts[1].to_doubles(), (std::vector<double>{0, 0}));
  EXPECT_EQ(parts[2].to_doubles(), (std::vector<double>{1, 1}));
  EXPECT_EQ(parts[3].to_doubles(), (std::vector<double>{0, 0}));
}

TEST(CreationPartial, OtherReduceOpsHoldTheValueEverywhere) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  for (ReduceOp op : {ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd}) {
    const Layout l = Layout::replicated(mesh, 1).with_partial({{"x", op}});
    const DTensor f = fill({3}, -2.0, l, DType::kF64, &rt);
    EXPECT_EQ(to_host(f).to_doubles(), (std::vector<double>(3, op == ReduceOp::kProd ? 16.0 : -2.0)))
        << reduce_op_name(op);
    for (const Tensor& part : unpack(f)) EXPECT_EQ(part.to_doubles(), std::vector<double>(3, -2.0));
  }
}

TEST(CreationPartial, OnesLikeAndZerosLikeKeepEverything) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const Layout l = Layout({"unsharded", "unsharded"}, mesh).with_partial({{"x", ReduceOp::kSum}});
  std::vector<Tensor> terms(4, Tensor::full({2, 3}, DType::kF32, 0.25));
  const DTensor x = pack(terms, l, rt);
  const DTensor o = ones_like(x);
  EXPECT_EQ(o.layout(), l);
  EXPECT_EQ(o.shape(), x.shape());
  EXPECT_EQ(o.dtype(), DType::kF32);
  EXPECT_EQ(&o.runtime(), &rt);
  EXPECT_EQ(to_host(o).to_doubles(), std::vector<double>(6, 1.0));
  EXPECT_EQ(unpack(o)[1].to_doubles(), std::vector<double>(6, 0.0));
  const DTensor z = zeros_like(x);
  EXPECT_EQ(z.layout(), l);
  EXPECT_EQ(to_host(z).to_doubles(), std::vector<double>(6, 0.0));
}

// Five layouts on meshes of 1, 2, 3 and 4 devices: every to_host is bit-identical to the
// single-host tensor of the same seed.
std::vector<Layout> random_layouts() {
  const Mesh m1 = Mesh::create({{"x", 1}});
  const Mesh m2 = Mesh::create({{"x", 2}});
  const Mesh m3 = Mesh::create({{"x", 3}});
  const Mesh m4 = Mesh::create({{"x", 4}});
  const Mesh m22 = Mesh::create({{"x", 2}, {"y", 2}});
  return {
      Layout({"x", "unsharded"}, m1),
      Layout({"unsharded", "x"}, m2),
      Layout({"x", "unsharded"}, m3),
      Layout({"unsharded", "x"}, m3),
      Layout({"x", "unsharded"}, m4),
      Layout({"x", "y"}, m22),
      Layout({"y", "x"}, m22),
      Layout({"x+y", "unsharded"}, m22),
      Layout::replicated(m4, 2),
      Layout({"x", "unsharded"}, m22).with_partial({{"y", ReduceOp::kSum}}),
  };
}

TEST(CreationRandom, UniformIsTheSameGlobalTensorForEveryLayoutAndDeviceCount) {
  Runtime rt({.num_cpu_devices = 4});
  const Shape shape{7, 5};
  for (DType dtype : {DType::kF32, DType::kF64, DType::kI32}) {
    const Tensor want = Tensor::random_uniform(shape, dtype, 42, -3.0, 9.0);
    for (const Layout& l : random_layouts()) {
      const DTensor r = random_uniform(shape, l, 42, -3.0, 9.0, dtype, &rt);
      EXPECT_EQ(r.layout(), l);
      EXPECT_TRUE(same_bits(to_host(r), want)) << l.to_string() << " " << dtype_name(dtype);
    }
  }
}

TEST(CreationRandom, NormalIsTheSameGlobalTensorForEveryLayoutAndDeviceCount) {
  Runtime rt({.num_cpu_devices = 4});
  const Shape shape{6, 9};
  for (DType dtype : {DType::kF32, DType::kF64}) {
    const Tensor want = Tensor::random_normal(shape, dtype, 7, 1.0, 0.5);
    for (const Layout& l : random_layouts()) {
      const DTensor r = random_normal(shape, l, 7, 1.0, 0.5, dtype, &rt);
      EXPECT_TRUE(same_bits(to_host(r), want)) << l.to_string() << " " << dtype_name(dtype);
    }
  }
}

TEST(CreationRandom, SeedsDifferAndUniformStaysInRange) {
  Runtime rt({.num_cpu_devices = 4});
  const Layout l({"x"}, Mesh::create({{"x", 4}}));
  const std::vector<double> a = to_host(random_uniform({1000}, l, 1, 2.0, 3.0, DType::kF64, &rt)).to_doubles();
  const std::vector<double> b = to_host(random_uniform({1000}, l, 2, 2.0, 3.0, DType::kF64, &rt)).to_doubles();
  EXPECT_NE(a, b);
  double mean = 0;
  for (double v : a) {
    EXPECT_GE(v, 2.0);
    EXPECT_LT(v, 3.0);
    mean += v / 1000;
  }
  EXPECT_NEAR(mean, 2.5, 0.05);
}

TEST(CreationRegistry, OpsAreRegisteredWithoutInputsOrVjp) {
  for (const char* name : {"zeros", "ones", "fill", "random_uniform", "random_normal"}) {
    const OpDef& def = OpRegistry::global().get(name);
    EXPECT_EQ(def.num_inputs, 0) << name;
    EXPECT_FALSE(static_cast<bool>(def.vjp)) << name;
  }
}

TEST(CreationRule, OutputIsTheRequestedLayout) {
  const Layout l = Layout({"x", "unsharded"}, Mesh::create({{"x", 2}, {"y", 2}}))
                       .with_partial({{"y", ReduceOp::kSum}});
  OpAttrs attrs;
  attrs.layout = l;
  attrs.shape = {4, 4};
  const ShardingDecision d = plan_op("fill", {}, attrs);
  EXPECT_TRUE(d.inputs.empty());
  EXPECT_EQ(d.output, l);
}

TEST(CreationErrors, ShapeAndLayoutRanksDiffer) {
  Runtime rt({.num_cpu_devices = 4});
  const Layout l({"x", "unsharded"}, Mesh::create({{"x", 4}}));
  EXPECT_TESSEL_ERROR(zeros({4}, l, DType::kF32, &rt), ErrorCode::kInvalidArgument,
                      "zeros: layout sharding_specs:x,unsharded");
  EXPECT_TESSEL_ERROR(random_uniform({4, 4, 4}, l, 1, 0, 1, DType::kF32, &rt),
                      ErrorCode::kInvalidArgument, "has rank 2 but shape [4,4,4] has rank 3");
}

TEST(CreationErrors, NegativeDimension) {
  Runtime rt({.num_cpu_devices = 4});
  const Layout l({"x", "unsharded"}, Mesh::create({{"x", 4}}));
  OpAttrs attrs;
  attrs.layout = l;
  attrs.shape = {4, -1};
  EXPECT_TESSEL_ERROR(call_op("ones", {}, attrs), ErrorCode::kInvalidArgument,
                      "ones: shape [4,-1] has a negative dimension");
}

TEST(CreationErrors, NoLayoutOrNoConcreteSpecs) {
  OpAttrs attrs;
  attrs.shape = {4};
  EXPECT_TESSEL_ERROR(call_op("fill", {}, attrs), ErrorCode::kInvalidArgument,
                      "fill: needs an output layout");
  attrs.layout = Layout::create(LayoutType::kStatic, {ShardingSpec::any()}, Mesh::create({{"x", 4}}));
  EXPECT_TESSEL_ERROR(call_op("fill", {}, attrs), ErrorCode::kInvalidArgument, "'any' spec");
  attrs.layout = Layout();
  attrs.shape = {};
  EXPECT_TESSEL_ERROR(call_op("fill", {}, attrs), ErrorCode::kInvalidArgument,
                      "not a tensor layout");
}

TEST(CreationErrors, BadRandomParametersFailAtDispatch) {
  Runtime rt({.num_cpu_devices = 4});
  const Layout l({"x"}, Mesh::create({{"x", 4}}));
  EXPECT_TESSEL_ERROR(random_uniform({4}, l, 1, 2.0, 1.0, DType::kF32, &rt),
                      ErrorCode::kInvalidArgument, "random_uniform: random_uniform needs low <= high");
  EXPECT_TESSEL_ERROR(random_uniform({4}, l, 1, 0.0, std::numeric_limits<double>::infinity(), DType::kF32, &rt),
                      ErrorCode::kInvalidArgument, "finite");
  EXPECT_TESSEL_ERROR(random_uniform({4}, l, 1, 0.2, 0.7, DType::kI32, &rt),
                      ErrorCode::kInvalidArgument, "non-empty integer range");
  EXPECT_TESSEL_ERROR(random_normal({4}, l, 1, 0.0, -1.0, DType::kF32, &rt),
                      ErrorCode::kInvalidArgument, "random_normal: random_normal needs stddev >= 0");
  EXPECT_TESSEL_ERROR(random_normal({4}, l, 1, 0.0, 1.0, DType::kI64, &rt),
                      ErrorCode::kInvalidArgument, "floating dtype");
}

TEST(CreationErrors, LikeOfANullDTensor) {
  EXPECT_TESSEL_ERROR(zeros_like(DTensor()), ErrorCode::kInvalidArgument, "zeros_like");
  EXPECT_TESSEL_ERROR(ones_like(DTensor()), ErrorCode::kInvalidArgument, "ones_like");
}

}  // namespace
}  // namespace tessel
