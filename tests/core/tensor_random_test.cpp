#include <gtest/gtest.h>

#include <cmath>

#include "core/tensor_test_util.h"
#include "tessel/core/tensor.h"

namespace tessel {
namespace {

using testing::expect_error;

struct Moments {
  double mean;
  double variance;
};

Moments moments(const Tensor& t) {
  const std::vector<double> v = t.to_doubles();
  double sum = 0;
  for (double x : v) sum += x;
  const double mean = sum / static_cast<double>(v.size());
  double sq = 0;
  for (double x : v) sq += (x - mean) * (x - mean);
  return {mean, sq / static_cast<double>(v.size())};
}

TEST(TensorRandom, SameSeedSameTensorDifferentSeedDifferentTensor) {
  Tensor a = Tensor::random_uniform(Shape{64, 33}, DType::kF32, 42);
  Tensor b = Tensor::random_uniform(Shape{64, 33}, DType::kF32, 42);
  Tensor c = Tensor::random_uniform(Shape{64, 33}, DType::kF32, 43);
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  EXPECT_NE(a.to_vector<float>(), c.to_vector<float>());
  EXPECT_EQ(Tensor::random_normal(Shape{100}, DType::kF64, 7).to_vector<double>(),
            Tensor::random_normal(Shape{100}, DType::kF64, 7).to_vector<double>());
}

TEST(TensorRandom, ElementDependsOnlyOnSeedAndFlatIndex) {
  // The same flat index gives the same value whatever the shape around it.
  Tensor flat = Tensor::random_uniform(Shape{24}, DType::kF64, 9, -1, 1);
  Tensor cube = Tensor::random_uniform(Shape{2, 3, 4}, DType::kF64, 9, -1, 1);
  EXPECT_EQ(flat.to_vector<double>(), cube.to_vector<double>());
  Tensor prefix = Tensor::random_normal(Shape{10}, DType::kF64, 9);
  EXPECT_EQ(prefix.to_vector<double>(),
            Tensor::random_normal(Shape{30}, DType::kF64, 9).slice(0, 0, 10).to_vector<double>());
}

TEST(TensorRandom, BlockEqualsTheSameBlockOfTheWholeTensor) {
  const Shape global{7, 9, 5};
  const std::vector<int64_t> offsets = {2, 3, 1};
  const std::vector<int64_t> extents = {4, 5, 3};
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kI32, DType::kBool}) {
    Tensor whole = Tensor::random_uniform(global, dtype, 123, 0, 10);
    Tensor block = Tensor::random_uniform_block(global, offsets, extents, dtype, 123, 0, 10);
    EXPECT_EQ(block.shape(), Shape(extents));
    EXPECT_EQ(block.to_doubles(), whole.block(offsets, extents).to_doubles()) << dtype_name(dtype);
  }
  Tensor whole = Tensor::random_normal(global, DType::kF16, 5, 1, 2);
  Tensor block = Tensor::random_normal_block(global, offsets, extents, DType::kF16, 5, 1, 2);
  EXPECT_EQ(block.to_doubles(), whole.block(offsets, extents).to_doubles());
  // Blocks that tile the tensor reassemble it.
  Tensor assembled = Tensor::zeros(Shape{4, 6}, DType::kF32);
  for (int64_t r = 0; r < 4; r += 2) {
    for (int64_t c = 0; c < 6; c += 3) {
      assembled.block({r, c}, {2, 3})
          .copy_from(Tensor::random_uniform_block(Shape{4, 6}, {r, c}, {2, 3}, DType::kF32, 77));
    }
  }
  EXPECT_EQ(assembled.to_vector<float>(),
            Tensor::random_uniform(Shape{4, 6}, DType::kF32, 77).to_vector<float>());
}

TEST(TensorRandom, UniformDistribution) {
  Tensor t = Tensor::random_uniform(Shape{100000}, DType::kF64, 1, 2, 6);
  const std::vector<double> v = t.to_vector<double>();
  for (double x : v) {
    ASSERT_GE(x, 2.0);
    ASSERT_LT(x, 6.0);
  }
  const Moments m = moments(t);
  EXPECT_NEAR(m.mean, 4.0, 0.03);            // sd of the mean ~ 0.0037
  EXPECT_NEAR(m.variance, 16.0 / 12, 0.03);  // (b - a)^2 / 12
}

TEST(TensorRandom, NormalDistribution) {
  Tensor t = Tensor::random_normal(Shape{100000}, DType::kF32, 2, 3, 0.5);
  const Moments m = moments(t);
  EXPECT_NEAR(m.mean, 3.0, 0.01);  // sd of the mean ~ 0.0016
  EXPECT_NEAR(m.variance, 0.25, 0.01);
  // About 68% within one sigma.
  int inside = 0;
  for (double x : t.to_doubles()) inside += std::fabs(x - 3.0) < 0.5;
  EXPECT_NEAR(inside / 100000.0, 0.6827, 0.01);
}

TEST(TensorRandom, IntegersCoverTheHalfOpenRange) {
  Tensor t = Tensor::random_uniform(Shape{10000}, DType::kI32, 3, -2, 3);
  std::vector<int> counts(5, 0);
  for (int32_t x : t.to_vector<int32_t>()) {
    ASSERT_GE(x, -2);
    ASSERT_LT(x, 3);
    ++counts[static_cast<size_t>(x + 2)];
  }
  for (int c : counts) EXPECT_NEAR(c, 2000, 200);
  Tensor bytes = Tensor::random_uniform(Shape{5000}, DType::kU8, 4, 0, 256);
  int high = 0;
  for (uint8_t x : bytes.to_vector<uint8_t>()) high += x >= 128;
  EXPECT_NEAR(high, 2500, 200);
  Tensor flags = Tensor::random_uniform(Shape{10000}, DType::kBool, 5);
  int ones = 0;
  for (bool b : flags.to_vector<bool>()) ones += b;
  EXPECT_NEAR(ones, 5000, 250);
}

TEST(TensorRandom, ThrowsOnBadParameters) {
  expect_error([] { Tensor::random_uniform(Shape{2}, DType::kF32, 0, 1, 0); },
               ErrorCode::kInvalidArgument, "Tensor", "low 1 > high 0");
  expect_error([] { Tensor::random_uniform(Shape{2}, DType::kF32, 0, 0, INFINITY); },
               ErrorCode::kInvalidArgument, "Tensor", "finite");
  expect_error([] { Tensor::random_uniform(Shape{2}, DType::kI32, 0, 1, 1); },
               ErrorCode::kInvalidArgument, "Tensor", "non-empty integer range");
  expect_error([] { Tensor::random_uniform(Shape{2}, DType::kU8, 0, 0, 300); },
               ErrorCode::kInvalidArgument, "Tensor", "u8");
  expect_error([] { Tensor::random_normal(Shape{2}, DType::kI32, 0); }, ErrorCode::kInvalidArgument,
               "Tensor", "floating dtype, got i32");
  expect_error([] { Tensor::random_normal(Shape{2}, DType::kF32, 0, 0, -1); },
               ErrorCode::kInvalidArgument, "Tensor", "stddev >= 0, got -1");
  expect_error(
      [] {
        Tensor::random_uniform_block(Shape{4, 4}, {0}, {4}, DType::kF32, 0);
      },
      ErrorCode::kInvalidArgument, "Tensor", "needs 2 offsets");
  expect_error(
      [] {
        Tensor::random_uniform_block(Shape{4, 4}, {2, 0}, {3, 4}, DType::kF32, 0);
      },
      ErrorCode::kOutOfRange, "Tensor", "exceed shape [4,4] in dimension 0");
}

}  // namespace
}  // namespace tessel
