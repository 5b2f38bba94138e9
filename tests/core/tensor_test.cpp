#include "tessel/core/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/tensor_test_util.h"

namespace tessel {
namespace {

using testing::expect_error;

Tensor iota(const Shape& shape) {
  std::vector<float> v(static_cast<size_t>(shape.num_elements()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return Tensor::from_vector(v, shape);
}

TEST(Tensor, FromVectorRoundTrips) {
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.dtype(), DType::kF32);
  EXPECT_EQ(t.rank(), 2);
  EXPECT_EQ(t.num_elements(), 6);
  EXPECT_EQ(t.nbytes(), 24u);
  EXPECT_EQ(t.strides(), (std::vector<int64_t>{3, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(t.at({1, 2}), 6.0);
  EXPECT_EQ(t.data<float>()[4], 5.0f);
}

TEST(Tensor, FreshStorageIs64ByteAligned) {
  for (DType dtype : {DType::kF32, DType::kU8, DType::kF64, DType::kBool}) {
    for (int64_t n : {0, 1, 3, 17, 1000}) {
      Tensor t = Tensor::zeros(Shape{n}, dtype);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u) << n;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.clone().data()) % 64, 0u);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.astype(DType::kI64).data()) % 64, 0u);
    }
  }
}

TEST(Tensor, ZerosFullAndTypedVectors) {
  EXPECT_EQ(Tensor::zeros(Shape{3}, DType::kI32).to_vector<int32_t>(),
            (std::vector<int32_t>{0, 0, 0}));
  EXPECT_EQ(Tensor::full(Shape{2}, DType::kF64, 2.5).to_vector<double>(),
            (std::vector<double>{2.5, 2.5}));
  EXPECT_EQ(Tensor::full(Shape{2}, DType::kBool, 3.0).to_vector<bool>(),
            (std::vector<bool>{true, true}));
  Tensor scalar = Tensor::full(Shape{}, DType::kI64, 7);
  EXPECT_EQ(scalar.num_elements(), 1);
  EXPECT_EQ(scalar.at({}), 7.0);
  EXPECT_EQ(Tensor::from_vector<bool>({true, false}, Shape{2}).to_vector<bool>(),
            (std::vector<bool>{true, false}));
}

TEST(Tensor, CopiesShareStorage) {
  Tensor a = iota(Shape{4});
  Tensor b = a;
  b.fill(1);
  EXPECT_TRUE(a.shares_storage_with(b));
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1, 1, 1, 1}));
  EXPECT_FALSE(a.shares_storage_with(a.clone()));
}

TEST(Tensor, SliceIsAStridedViewSharingStorage) {
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  Tensor col = t.slice(1, 1, 2);
  EXPECT_EQ(col.shape(), (Shape{2, 1}));
  EXPECT_TRUE(col.shares_storage_with(t));
  EXPECT_EQ(col.storage_offset(), 1);
  EXPECT_EQ(col.strides(), (std::vector<int64_t>{3, 1}));
  EXPECT_FALSE(col.is_contiguous());
  EXPECT_EQ(col.to_vector<float>(), (std::vector<float>{2, 5}));
  col.fill(0);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 0, 3, 4, 0, 6}));
  // Row slices stay contiguous, at an offset.
  Tensor row = t.slice(0, 1, 2);
  EXPECT_TRUE(row.is_contiguous());
  EXPECT_EQ(row.storage_offset(), 3);
  EXPECT_EQ(static_cast<const float*>(row.data()), t.data<float>() + 3);
  EXPECT_EQ(t.slice(-1, 0, 2).shape(), (Shape{2, 2}));
}

TEST(Tensor, BlockOfABlockComposesOffsets) {
  Tensor t = iota(Shape{4, 5});
  Tensor b = t.block({1, 1}, {3, 3}).block({1, 1}, {2, 2});
  EXPECT_EQ(b.storage_offset(), 12);
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{12, 13, 17, 18}));
  EXPECT_EQ(b.at({1, 0}), 17.0);
  EXPECT_EQ(t.block({4, 5}, {0, 0}).num_elements(), 0);
}

TEST(Tensor, FillAndCopyFromWorkOnStridedViews) {
  Tensor t = Tensor::zeros(Shape{3, 4}, DType::kI32);
  t.block({0, 1}, {3, 2}).fill(7);
  EXPECT_EQ(t.to_vector<int32_t>(), (std::vector<int32_t>{0, 7, 7, 0, 0, 7, 7, 0, 0, 7, 7, 0}));
  Tensor src = Tensor::from_vector<int32_t>({1, 2, 3, 4, 5, 6}, Shape{3, 2});
  t.block({0, 2}, {3, 2}).copy_from(src);
  EXPECT_EQ(t.to_vector<int32_t>(), (std::vector<int32_t>{0, 7, 1, 2, 0, 7, 3, 4, 0, 7, 5, 6}));
  // Strided source into a contiguous destination.
  Tensor dst = Tensor::zeros(Shape{3, 1}, DType::kI32);
  dst.copy_from(t.slice(1, 3, 4));
  EXPECT_EQ(dst.to_vector<int32_t>(), (std::vector<int32_t>{2, 4, 6}));
}

TEST(Tensor, CopyFromOverlappingViewOfItself) {
  Tensor t = Tensor::from_vector<float>({0, 1, 2, 3, 4}, Shape{5});
  t.slice(0, 1, 5).copy_from(t.slice(0, 0, 4));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 0, 1, 2, 3}));
}

TEST(Tensor, CopyFromThrowsOnShapeOrDTypeMismatch) {
  Tensor t = Tensor::zeros(Shape{2, 2}, DType::kF32);
  expect_error([&] { t.copy_from(Tensor::zeros(Shape{4}, DType::kF32)); },
               ErrorCode::kInvalidArgument, "Tensor", "[4] f32 into a [2,2] f32");
  expect_error(
      [&] {
        t.copy_from(Tensor::zeros(Shape{2, 2}, DType::kF64));
      },
      ErrorCode::kInvalidArgument, "Tensor", "f64 into a [2,2] f32");
}

TEST(Tensor, ReshapeSharesStorage) {
  Tensor t = iota(Shape{2, 3});
  Tensor r = t.reshape(Shape{3, 2});
  EXPECT_TRUE(r.shares_storage_with(t));
  EXPECT_EQ(r.strides(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(r.at({2, 1}), 5.0);
  EXPECT_EQ(t.slice(0, 1, 2).reshape(Shape{3}).to_vector<float>(), (std::vector<float>{3, 4, 5}));
}

TEST(Tensor, ReshapeThrowsOnCountMismatchOrStridedView) {
  Tensor t = iota(Shape{2, 3});
  expect_error([&] { t.reshape(Shape{4}); }, ErrorCode::kInvalidArgument, "Tensor",
               "[2,3] (6 elements) to [4] (4 elements)");
  expect_error([&] { t.slice(1, 0, 2).reshape(Shape{4}); }, ErrorCode::kFailedPrecondition,
               "Tensor", "non-contiguous");
}

TEST(Tensor, CloneAndContiguousCopy) {
  Tensor t = iota(Shape{3, 3});
  Tensor view = t.slice(1, 1, 3);
  Tensor c = view.contiguous();
  EXPECT_FALSE(c.shares_storage_with(t));
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{1, 2, 4, 5, 7, 8}));
  EXPECT_TRUE(t.contiguous().shares_storage_with(t));
  Tensor k = t.clone();
  k.fill(0);
  EXPECT_EQ(t.at({2, 2}), 8.0);
}

TEST(Tensor, SliceAndBlockThrowOutOfRange) {
  Tensor t = iota(Shape{2, 3});
  expect_error([&] { t.slice(2, 0, 1); }, ErrorCode::kOutOfRange, "Tensor", "axis 2");
  expect_error([&] { t.slice(1, 2, 4); }, ErrorCode::kOutOfRange, "Tensor", "[2, 4) along axis 1");
  expect_error([&] { t.slice(0, 1, 0); }, ErrorCode::kOutOfRange, "Tensor", "[1, 0)");
  expect_error([&] { t.slice(0, -1, 1); }, ErrorCode::kOutOfRange, "Tensor", "[-1, 1)");
  expect_error([&] { t.block({0}, {1}); }, ErrorCode::kInvalidArgument, "Tensor",
               "needs 2 offsets");
  expect_error(
      [&] {
        t.block({1, 1}, {2, 1});
      },
      ErrorCode::kOutOfRange, "Tensor",
      "offsets [1,1] extents [2,1] exceed shape [2,3] in dimension 0");
}

TEST(Tensor, AtChecksBounds) {
  Tensor t = iota(Shape{2, 3});
  expect_error(
      [&] {
        t.at({2, 0});
      },
      ErrorCode::kOutOfRange, "Tensor", "index [2,0] is out of range for shape [2,3]");
  expect_error([&] { t.at({0, -1}); }, ErrorCode::kOutOfRange, "Tensor", "[0,-1]");
  expect_error([&] { t.at({0}); }, ErrorCode::kInvalidArgument, "Tensor", "1 indices");
}

TEST(Tensor, TypedAccessChecksDType) {
  Tensor t = Tensor::zeros(Shape{2}, DType::kI32);
  expect_error([&] { t.to_vector<float>(); }, ErrorCode::kInvalidArgument, "Tensor",
               "to_vector<f32> on a tensor of dtype i32");
  expect_error([&] { t.data<double>(); }, ErrorCode::kInvalidArgument, "Tensor",
               "data<f64> on a tensor of dtype i32");
  EXPECT_EQ(t.to_vector<int32_t>().size(), 2u);
}

TEST(Tensor, FromBytesChecksByteCount) {
  const std::vector<float> v = {1, 2, 3};
  expect_error(
      [&] {
        Tensor::from_bytes(v.data(), 12, Shape{2, 3}, DType::kF32);
      },
      ErrorCode::kInvalidArgument, "Tensor",
      "from_bytes got 12 bytes but shape [2,3] of f32 needs 24 bytes");
  expect_error([&] { Tensor::from_vector(v, Shape{2}); }, ErrorCode::kInvalidArgument, "Tensor",
               "12 bytes but shape [2]");
  Tensor t = Tensor::from_bytes(v.data(), 12, Shape{3}, DType::kF32);
  EXPECT_EQ(t.to_vector<float>(), v);
  const uint8_t raw[] = {0, 2, 255};
  // kBool is stored as one byte 0/1: other non-zero bytes are normalised to 1.
  Tensor flags = Tensor::from_bytes(raw, 3, Shape{3}, DType::kBool);
  EXPECT_EQ(flags.to_vector<bool>(), (std::vector<bool>{false, true, true}));
  const auto* bytes = static_cast<const uint8_t*>(flags.data());
  EXPECT_EQ(std::vector<uint8_t>(bytes, bytes + 3), (std::vector<uint8_t>{0, 1, 1}));
}

TEST(Tensor, NullTensorThrowsFailedPrecondition) {
  Tensor null;
  EXPECT_FALSE(null.defined());
  EXPECT_EQ(null.to_string(), "Tensor(null)");
  const auto expect_null = [](auto&& fn, const std::string& what) {
    expect_error(fn, ErrorCode::kFailedPrecondition, "Tensor", what + " on a null tensor");
  };
  expect_null([&] { null.data(); }, "data");
  expect_null([&] { null.data<float>(); }, "data");
  expect_null([&] { null.to_vector<float>(); }, "to_vector");
  expect_null([&] { null.to_doubles(); }, "to_doubles");
  expect_null([&] { null.at({}); }, "at");
  expect_null([&] { null.slice(0, 0, 0); }, "slice");
  expect_null([&] { null.block({}, {}); }, "block");
  expect_null([&] { null.reshape(Shape{}); }, "reshape");
  expect_null([&] { null.clone(); }, "clone");
  expect_null([&] { null.contiguous(); }, "contiguous");
  expect_null([&] { null.astype(DType::kF64); }, "astype");
  expect_null([&] { null.fill(1); }, "fill");
  expect_null([&] { null.is_contiguous(); }, "is_contiguous");
  Tensor t = Tensor::zeros(Shape{}, DType::kF32);
  expect_null([&] { null.copy_from(t); }, "copy_from");
  expect_null([&] { t.copy_from(null); }, "copy_from (source)");
  expect_null([&] { allclose(null, t); }, "allclose");
}

TEST(Tensor, AllcloseFollowsNumpy) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  Tensor a = Tensor::from_vector<double>({1.0, 2.0, inf}, Shape{3});
  EXPECT_TRUE(allclose(a, Tensor::from_vector<double>({1.0 + 1e-6, 2.0, inf}, Shape{3})));
  EXPECT_FALSE(allclose(a, Tensor::from_vector<double>({1.001, 2.0, inf}, Shape{3})));
  EXPECT_TRUE(allclose(a, Tensor::from_vector<double>({1.001, 2.0, inf}, Shape{3}), 1e-2));
  EXPECT_FALSE(allclose(a, Tensor::from_vector<double>({1.0, 2.0, -inf}, Shape{3})));
  // Dtypes may differ.
  EXPECT_TRUE(allclose(Tensor::from_vector<int32_t>({1, 2}, Shape{2}),
                       Tensor::from_vector<float>({1, 2}, Shape{2})));
  Tensor n = Tensor::from_vector<double>({nan}, Shape{1});
  EXPECT_FALSE(allclose(n, n));
  EXPECT_TRUE(allclose(n, n, 1e-5, 1e-8, /*equal_nan=*/true));
  // atol only applies near zero; rtol is relative to b.
  Tensor z = Tensor::from_vector<double>({0.0}, Shape{1});
  EXPECT_TRUE(allclose(z, Tensor::from_vector<double>({1e-9}, Shape{1})));
  EXPECT_FALSE(allclose(z, Tensor::from_vector<double>({1e-7}, Shape{1})));
  expect_error([&] { allclose(a, z); }, ErrorCode::kInvalidArgument, "Tensor",
               "allclose of shapes [3] and [1]");
}

TEST(Tensor, AllcloseComparesStridedViews) {
  Tensor t = iota(Shape{3, 3});
  Tensor expected = Tensor::from_vector<float>({1, 4, 7}, Shape{3, 1});
  EXPECT_TRUE(allclose(t.slice(1, 1, 2), expected));
}

}  // namespace
}  // namespace tessel
