// matmul and einsum on bf16 operands (ops_matmul.cpp over blas.h's gemm_bf16): the output is bf16,
// the f32 sums rounded once. Checked against the f64 product of the same (rounded) inputs on
// meshes 1, 2 and 2x2 with random layouts, every transpose, batched operands, the einsum forms
// the VJP uses (and the local kernel's rearranging paths), the autocast chain's gradients (cast to
// bf16, matmul, cast back to f32), and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/ops.h"
#include "testing/expect_error.h"
#include "testing/op_check.h"

namespace tessel {
namespace {

using testing::random_op_layout;
using testing::small_meshes;

Tensor random_bf16(const Shape& shape, uint64_t seed) {
  return Tensor::random_uniform(shape, DType::kF32, seed, -2.0, 2.0).astype(DType::kBF16);
}

// The einsum of the host values in f64 on one device: exact products of bf16 inputs, sums to
// f64 precision. `absolute`: the same of |a| and |b|, the scale of the rounding errors.
struct Reference {
  std::vector<double> value, absolute;
};
Reference reference(const std::string& equation, const Tensor& a, const Tensor& b, Runtime& rt) {
  const Mesh one = Mesh::create({{"x", 1}});
  const auto put = [&](const Tensor& t, bool absolute) {
    DTensor d = copy_to_mesh(t.astype(DType::kF64), Layout::replicated(one, t.shape().rank()), rt);
    return absolute ? abs(d) : d;
  };
  return {to_host(einsum(equation, put(a, false), put(b, false))).to_doubles(),
          to_host(einsum(equation, put(a, true), put(b, true))).to_doubles()};
}

// got within one bf16 rounding (2^-8 relative) of the exact value, plus f32 summation error;
// `extra_roundings` more bf16 roundings of terms up to the sum of |a b| (a Partial output's
// per-device sums, a summed-out letter's additions).
void expect_bf16_close(const DTensor& got, const Reference& want, int extra_roundings,
                       const std::string& what) {
  ASSERT_EQ(got.dtype(), DType::kBF16) << what;
  const std::vector<double> values = to_host(got).to_doubles();
  ASSERT_EQ(values.size(), want.value.size()) << what;
  for (size_t i = 0; i < values.size(); ++i) {
    const double tolerance = std::ldexp(std::abs(want.value[i]), -8) +
                             std::ldexp(want.absolute[i], -8) * extra_roundings +
                             1e-6 * want.absolute[i];
    ASSERT_NEAR(values[i], want.value[i], tolerance) << what << " at " << i;
  }
}

struct EinsumCase {
  std::string equation;
  Shape a, b;
  bool sums_out = false;  // a letter of one operand only, summed before the product
};

// The matmuls as einsums (every transpose, batched, a missing batch dim broadcast), the forms the
// VJP calls, outputs in a rearranged order, and a summed-out letter.
std::vector<EinsumCase> cases() {
  return {{"mk,kn->mn", {5, 7}, {7, 6}},          {"km,kn->mn", {7, 5}, {7, 6}},
          {"mk,nk->mn", {5, 7}, {6, 7}},          {"km,nk->mn", {7, 5}, {6, 7}},
          {"bmk,kn->bmn", {4, 3, 8}, {8, 5}},     {"bmk,bkn->bmn", {4, 3, 8}, {4, 8, 2}},
          {"mn,kn->mk", {6, 4}, {9, 4}},          {"bmk,bmn->kn", {4, 3, 8}, {4, 3, 5}},
          {"mk,kn->nm", {5, 7}, {7, 6}},          {"bmk,kn->mbn", {4, 3, 8}, {8, 5}},
          {"mkj,kn->mn", {5, 7, 3}, {7, 6}, true}};
}

TEST(MatmulBf16, EinsumMatchesTheF64ProductOfTheRoundedInputsOnRandomLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(33);
  uint64_t seed = 1;
  for (const Mesh& mesh : small_meshes()) {
    for (const EinsumCase& c : cases()) {
      for (int trial = 0; trial < 4; ++trial) {
        const Tensor a = random_bf16(c.a, seed++);
        const Tensor b = random_bf16(c.b, seed++);
        const Layout la = random_op_layout(mesh, c.a.rank(), rng);
        const Layout lb = random_op_layout(mesh, c.b.rank(), rng);
        const DTensor out = einsum(c.equation, copy_to_mesh(a, la, rt), copy_to_mesh(b, lb, rt));
        const int extra = (out.layout().partial().empty() ? 0 : 2) + (c.sums_out ? 3 : 0);
        expect_bf16_close(out, reference(c.equation, a, b, rt), extra,
                          c.equation + " on " + std::to_string(mesh.size()) + " a " +
                              la.to_string() + " b " + lb.to_string());
      }
    }
  }
}

TEST(MatmulBf16, MatmulTransposesAgreeWithTheEinsum) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(7);
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Tensor a = random_bf16(ta ? Shape{3, 6, 5} : Shape{3, 5, 6}, 11);
      const Tensor b = random_bf16(tb ? Shape{4, 6} : Shape{6, 4}, 12);
      const DTensor out = matmul(copy_to_mesh(a, random_op_layout(mesh, 3, rng), rt),
                                 copy_to_mesh(b, random_op_layout(mesh, 2, rng), rt), ta, tb);
      const std::string eq =
          std::string("b") + (ta ? "km" : "mk") + "," + (tb ? "nk" : "kn") + "->bmn";
      expect_bf16_close(out, reference(eq, a, b, rt), out.layout().partial().empty() ? 0 : 2,
                        "matmul ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
    }
  }
}

// Mixed precision as the GPT runs it: f32 tensors cast to bf16 for the product, the product cast
// back. The gradients come back in f32 (cast's VJP), computed by bf16 einsums of the rounded
// incoming gradient.
TEST(MatmulBf16, AutocastChainGivesF32GradientsOfTheBf16Products) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(5);
  for (const Mesh& mesh : small_meshes()) {
    const Tensor a = Tensor::random_uniform({6, 8}, DType::kF32, 21, -2.0, 2.0);
    const Tensor b = Tensor::random_uniform({8, 5}, DType::kF32, 22, -2.0, 2.0);
    const Tensor g = Tensor::random_uniform({6, 5}, DType::kF32, 23, -2.0, 2.0);
    const DTensor da = copy_to_mesh(a, random_op_layout(mesh, 2, rng), rt);
    const DTensor db = copy_to_mesh(b, random_op_layout(mesh, 2, rng), rt);
    GradientTape tape;
    tape.watch(da);
    tape.watch(db);
    const DTensor y = cast(matmul(cast(da, DType::kBF16), cast(db, DType::kBF16)), DType::kF32);
    ASSERT_EQ(y.dtype(), DType::kF32);
    const DTensor dg = copy_to_mesh(g, Layout::replicated(mesh, 2), rt);
    const std::vector<DTensor> grads = tape.gradient(y, {da, db}, dg);
    const Tensor a16 = a.astype(DType::kBF16), b16 = b.astype(DType::kBF16);
    const Tensor g16 = g.astype(DType::kBF16);
    const std::pair<std::string, Reference> want[] = {
        {"mn,kn->mk", reference("mn,kn->mk", g16, b16, rt)},
        {"mk,mn->kn", reference("mk,mn->kn", a16, g16, rt)}};
    for (size_t i = 0; i < 2; ++i) {
      ASSERT_EQ(grads[i].dtype(), DType::kF32);
      ASSERT_EQ(grads[i].layout(), (i == 0 ? da : db).layout());
      // The gradient einsum may run sharded (Partial, summed in bf16) before the cast back.
      expect_bf16_close(cast(grads[i], DType::kBF16), want[i].second, 2,
                        want[i].first + " on " + std::to_string(mesh.size()));
    }
  }
}

// A row-parallel bf16 product is Partial(sum); the widening cast back to f32 keeps the sum
// pending, so the devices' bf16 sums are added in f32 (the mixed-precision gradient and activation
// reduction), while a narrowing cast reduces first.
TEST(MatmulBf16, WideningCastKeepsThePartialSumForTheF32Reduction) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Tensor a = random_bf16({6, 8}, 31), b = random_bf16({8, 4}, 32);
  const DTensor product = matmul(copy_to_mesh(a, Layout({"x", "y"}, mesh), rt),
                                 copy_to_mesh(b, Layout({"y", "unsharded"}, mesh), rt));
  ASSERT_EQ(product.layout().partial(), (std::vector<PartialDim>{{"y", ReduceOp::kSum}}));
  const DTensor wide = cast(product, DType::kF32);
  EXPECT_EQ(wide.layout().partial(), product.layout().partial());
  const Reference want = reference("mk,kn->mn", a, b, rt);
  const std::vector<double> got = to_host(wide).to_doubles();
  for (size_t i = 0; i < got.size(); ++i) {
    // Each device's sum rounded to bf16 once, the two added exactly in f32.
    EXPECT_NEAR(got[i], want.value[i], std::ldexp(want.absolute[i], -8)) << i;
  }
  EXPECT_TRUE(cast(wide, DType::kBF16).layout().partial().empty());
}

TEST(MatmulBf16, MixedOrIntegerDtypesAreRefusedAndF16IsAccepted) {
  Runtime rt({.num_cpu_devices = 1});
  const Mesh one = Mesh::create({{"x", 1}});
  const auto put = [&](DType dtype) {
    return copy_to_mesh(random_bf16({2, 2}, 1).astype(dtype), Layout::replicated(one, 2), rt);
  };
  EXPECT_TESSEL_ERROR(matmul(put(DType::kBF16), put(DType::kF32)), ErrorCode::kInvalidArgument,
                      "different dtypes: [2,2] bf16 and [2,2] f32");
  EXPECT_TESSEL_ERROR(matmul(put(DType::kI32), put(DType::kI32)), ErrorCode::kUnimplemented,
                      "no kernel for dtype i32");
  // f16 runs gemm_f16 (blas.h); its values are checked in python/tests/test_blas.py.
  EXPECT_EQ(matmul(put(DType::kF16), put(DType::kF16)).dtype(), DType::kF16);
}

}  // namespace
}  // namespace tessel
