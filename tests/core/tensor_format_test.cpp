#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "core/tensor_test_util.h"
#include "tessel/core/tensor.h"

namespace tessel {
namespace {

Tensor iota(const Shape& shape, DType dtype = DType::kI32) {
  std::vector<double> v(static_cast<size_t>(shape.num_elements()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return Tensor::from_vector(v, shape).astype(dtype);
}

TEST(TensorFormat, MatrixLikeNumpy) {
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  EXPECT_EQ(t.to_string(), "Tensor(shape=[2,3], dtype=f32,\n[[1, 2, 3],\n [4, 5, 6]])");
  std::ostringstream os;
  os << t;
  EXPECT_EQ(os.str(), t.to_string());
}

TEST(TensorFormat, ScalarPrintsTheValue) {
  EXPECT_EQ(Tensor::full(Shape{}, DType::kF32, 2.5).to_string(),
            "Tensor(shape=[], dtype=f32,\n2.5)");
  EXPECT_EQ(Tensor::full(Shape{}, DType::kI64, -7).to_string(), "Tensor(shape=[], dtype=i64,\n-7)");
}

TEST(TensorFormat, VectorAndEmpty) {
  EXPECT_EQ(iota(Shape{4}).to_string(), "Tensor(shape=[4], dtype=i32,\n[0, 1, 2, 3])");
  EXPECT_EQ(Tensor::zeros(Shape{0}, DType::kF32).to_string(), "Tensor(shape=[0], dtype=f32,\n[])");
  EXPECT_EQ(Tensor::zeros(Shape{2, 0}, DType::kF32).to_string(),
            "Tensor(shape=[2,0], dtype=f32,\n[[],\n []])");
}

TEST(TensorFormat, Rank3SeparatesBlocksWithABlankLine) {
  EXPECT_EQ(iota(Shape{2, 2, 2}).to_string(),
            "Tensor(shape=[2,2,2], dtype=i32,\n"
            "[[[0, 1],\n"
            "  [2, 3]],\n"
            "\n"
            " [[4, 5],\n"
            "  [6, 7]]])");
}

TEST(TensorFormat, FloatsAreCompact) {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor t = Tensor::from_vector<double>(
      {0.5, -0.1, 1e-7, 123456789.0, inf, -inf, std::nan(""), 1.0 / 3}, Shape{8});
  EXPECT_EQ(t.to_string(),
            "Tensor(shape=[8], dtype=f64,\n[0.5, -0.1, 1e-07, 1.23457e+08, inf, -inf, nan, "
            "0.333333])");
  EXPECT_EQ(Tensor::full(Shape{1}, DType::kBF16, 1.00390625).to_string(),
            "Tensor(shape=[1], dtype=bf16,\n[1])");
  EXPECT_EQ(Tensor::full(Shape{1}, DType::kF16, 0.1).to_string(),
            "Tensor(shape=[1], dtype=f16,\n[0.0999756])");
}

TEST(TensorFormat, BoolAndU8) {
  EXPECT_EQ(Tensor::from_vector<bool>({true, false}, Shape{2}).to_string(),
            "Tensor(shape=[2], dtype=bool,\n[true, false])");
  EXPECT_EQ(Tensor::from_vector<uint8_t>({0, 65, 255}, Shape{3}).to_string(),
            "Tensor(shape=[3], dtype=u8,\n[0, 65, 255])");
}

TEST(TensorFormat, StridedViewPrintsItsOwnElements) {
  Tensor t = iota(Shape{3, 3});
  EXPECT_EQ(t.slice(1, 1, 3).to_string(),
            "Tensor(shape=[3,2], dtype=i32,\n[[1, 2],\n [4, 5],\n [7, 8]])");
}

TEST(TensorFormat, LargeTensorsAreSummarised) {
  EXPECT_EQ(iota(Shape{1001}).to_string(),
            "Tensor(shape=[1001], dtype=i32,\n[0, 1, 2, ..., 998, 999, 1000])");
  EXPECT_EQ(iota(Shape{1001}).to_string(1), "Tensor(shape=[1001], dtype=i32,\n[0, ..., 1000])");
  // Exactly 1000 elements: printed in full.
  EXPECT_EQ(iota(Shape{1000}).to_string().find("..."), std::string::npos);
  EXPECT_EQ(iota(Shape{100, 20}).to_string(2),
            "Tensor(shape=[100,20], dtype=i32,\n"
            "[[0, 1, ..., 18, 19],\n"
            " [20, 21, ..., 38, 39],\n"
            " ...,\n"
            " [1960, 1961, ..., 1978, 1979],\n"
            " [1980, 1981, ..., 1998, 1999]])");
  // Short dimensions of a large tensor are kept whole.
  EXPECT_EQ(iota(Shape{2, 1000}).to_string(1),
            "Tensor(shape=[2,1000], dtype=i32,\n[[0, ..., 999],\n [1000, ..., 1999]])");
}

TEST(TensorFormat, ThrowsOnNonPositiveEdgeItems) {
  testing::expect_error([] { iota(Shape{2}).to_string(0); }, ErrorCode::kInvalidArgument, "Tensor",
                        "edge_items >= 1, got 0");
}

}  // namespace
}  // namespace tessel
