// Tensor::astype, fill and at: the element conversion rules documented in tensor.h.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tessel/core/tensor.h"

namespace tessel {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(TensorConvert, FloatToBF16RoundsToNearestEven) {
  Tensor t = Tensor::from_vector<float>({1.00390625f, 1.01171875f, -1.00390625f}, Shape{3});
  EXPECT_EQ(t.astype(DType::kBF16).to_doubles(), (std::vector<double>{1.0, 1.015625, -1.0}));
}

TEST(TensorConvert, DoubleToHalfHasNoDoubleRounding) {
  // Just above a 16-bit tie, but rounding to float first would land exactly on the tie.
  Tensor t = Tensor::from_vector<double>({1 + 0x1p-8 + 0x1p-40, 1 + 0x1p-11 + 0x1p-40}, Shape{2});
  EXPECT_EQ(t.slice(0, 0, 1).astype(DType::kBF16).at({0}), 1 + 0x1p-7);
  EXPECT_EQ(t.slice(0, 1, 2).astype(DType::kF16).at({0}), 1 + 0x1p-10);
  // Huge doubles overflow to Inf rather than clamping at the float maximum.
  Tensor big = Tensor::from_vector<double>({1e300, -1e300}, Shape{2});
  EXPECT_EQ(big.astype(DType::kBF16).to_doubles(), (std::vector<double>{INFINITY, -INFINITY}));
  EXPECT_EQ(big.astype(DType::kF16).to_doubles(), (std::vector<double>{INFINITY, -INFINITY}));
  EXPECT_TRUE(std::isnan(Tensor::full(Shape{}, DType::kF64, kNaN).astype(DType::kBF16).at({})));
}

TEST(TensorConvert, IntegerToHalfHasNoDoubleRounding) {
  const int64_t above_tie = (int64_t{1} << 40) + (int64_t{1} << 32) + 1;
  Tensor t = Tensor::from_vector<int64_t>({257, 259, above_tie, -above_tie}, Shape{4});
  EXPECT_EQ(t.astype(DType::kBF16).to_doubles(),
            (std::vector<double>{256, 260, 0x1p40 + 0x1p33, -(0x1p40 + 0x1p33)}));
  EXPECT_EQ(
      Tensor::from_vector<int32_t>({2049, 2051, 70000}, Shape{3}).astype(DType::kF16).to_doubles(),
      (std::vector<double>{2048, 2052, INFINITY}));
}

TEST(TensorConvert, FloatToIntTruncatesTowardZeroAndSaturates) {
  Tensor t = Tensor::from_vector<float>({2.7f, -2.7f, NAN, 1e10f, -1e10f, -0.5f}, Shape{6});
  EXPECT_EQ(t.astype(DType::kI32).to_vector<int32_t>(),
            (std::vector<int32_t>{2, -2, 0, std::numeric_limits<int32_t>::max(),
                                  std::numeric_limits<int32_t>::min(), 0}));
  EXPECT_EQ(t.astype(DType::kI64).to_vector<int64_t>()[3], 10000000000);
  Tensor u = Tensor::from_vector<double>({-1.5, 300.7, 255.9, 1e300}, Shape{4});
  EXPECT_EQ(u.astype(DType::kU8).to_vector<uint8_t>(), (std::vector<uint8_t>{0, 255, 255, 255}));
  Tensor huge = Tensor::from_vector<double>({9.3e18, -9.3e18}, Shape{2});
  EXPECT_EQ(huge.astype(DType::kI64).to_vector<int64_t>(),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::max(),
                                  std::numeric_limits<int64_t>::min()}));
}

TEST(TensorConvert, IntToIntWrapsLikeCpp) {
  Tensor t = Tensor::from_vector<int32_t>({300, -1, 255}, Shape{3});
  EXPECT_EQ(t.astype(DType::kU8).to_vector<uint8_t>(), (std::vector<uint8_t>{44, 255, 255}));
  EXPECT_EQ(Tensor::from_vector<int64_t>({(int64_t{1} << 32) + 5}, Shape{1})
                .astype(DType::kI32)
                .to_vector<int32_t>(),
            (std::vector<int32_t>{5}));
  // i64 -> i64 and i64 -> f64 of large values: exact / correctly rounded.
  const int64_t big = (int64_t{1} << 62) + 1;
  Tensor b = Tensor::from_vector<int64_t>({big}, Shape{1});
  EXPECT_EQ(b.astype(DType::kI64).to_vector<int64_t>()[0], big);
  EXPECT_EQ(b.astype(DType::kF64).to_vector<double>()[0], 0x1p62);
}

TEST(TensorConvert, BoolIsNonZero) {
  Tensor t = Tensor::from_vector<double>({0.0, -0.0, 0.5, kNaN, -3}, Shape{5});
  EXPECT_EQ(t.astype(DType::kBool).to_vector<bool>(),
            (std::vector<bool>{false, false, true, true, true}));
  Tensor b = Tensor::from_vector<bool>({true, false}, Shape{2});
  EXPECT_EQ(b.astype(DType::kF32).to_vector<float>(), (std::vector<float>{1, 0}));
  EXPECT_EQ(b.astype(DType::kBF16).to_doubles(), (std::vector<double>{1, 0}));
  EXPECT_EQ(b.astype(DType::kI64).to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(b.at({0}), 1.0);
}

TEST(TensorConvert, HalfToHalfAndBack) {
  Tensor t = Tensor::from_vector<float>({0.1f, 65504.0f, 1e-6f, -2.0f}, Shape{4});
  Tensor h = t.astype(DType::kF16);
  EXPECT_EQ(h.to_vector<float16>()[1].bits, 0x7BFF);
  Tensor b = h.astype(DType::kBF16);
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(b.at({i}), static_cast<double>(float(bfloat16(float(h.to_vector<float16>()[i])))));
  }
  EXPECT_EQ(h.astype(DType::kF32).astype(DType::kF16).to_vector<float16>()[0].bits,
            h.to_vector<float16>()[0].bits);
}

TEST(TensorConvert, AstypeOfStridedView) {
  Tensor t = Tensor::from_vector<int32_t>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  Tensor v = t.slice(1, 1, 3).astype(DType::kF64);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_FALSE(v.shares_storage_with(t));
  EXPECT_EQ(v.to_vector<double>(), (std::vector<double>{2, 3, 5, 6}));
  EXPECT_FALSE(t.astype(DType::kI32).shares_storage_with(t));  // same dtype still copies
}

TEST(TensorConvert, FillConvertsTheValue) {
  Tensor h = Tensor::zeros(Shape{2}, DType::kBF16);
  h.fill(1.00390625);
  EXPECT_EQ(h.to_doubles(), (std::vector<double>{1.0, 1.0}));
  Tensor i = Tensor::zeros(Shape{2}, DType::kI32);
  i.fill(-7.9);
  EXPECT_EQ(i.to_vector<int32_t>(), (std::vector<int32_t>{-7, -7}));
  Tensor u = Tensor::full(Shape{1}, DType::kU8, 1000);
  EXPECT_EQ(u.to_vector<uint8_t>()[0], 255);
}

}  // namespace
}  // namespace tessel
