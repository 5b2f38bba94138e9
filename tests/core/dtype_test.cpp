#include "tessel/core/dtype.h"

#include <gtest/gtest.h>

#include <vector>

#include "tessel/core/error.h"
#include "tessel/core/reduce_op.h"

namespace tessel {
namespace {

const std::vector<DType> kAllDTypes = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                                       DType::kI32, DType::kI64, DType::kU8,   DType::kBool};

TEST(DType, SizesAndNames) {
  const std::vector<size_t> sizes = {4, 8, 2, 2, 4, 8, 1, 1};
  const std::vector<std::string_view> names = {"f32", "f64", "bf16", "f16",
                                               "i32", "i64", "u8",   "bool"};
  for (size_t i = 0; i < kAllDTypes.size(); ++i) {
    EXPECT_EQ(dtype_size(kAllDTypes[i]), sizes[i]) << names[i];
    EXPECT_EQ(dtype_name(kAllDTypes[i]), names[i]);
    EXPECT_EQ(dtype_from_name(names[i]), kAllDTypes[i]);
  }
}

TEST(DType, FromNameAcceptsNumpyNames) {
  EXPECT_EQ(dtype_from_name("float32"), DType::kF32);
  EXPECT_EQ(dtype_from_name("float64"), DType::kF64);
  EXPECT_EQ(dtype_from_name("bfloat16"), DType::kBF16);
  EXPECT_EQ(dtype_from_name("float16"), DType::kF16);
  EXPECT_EQ(dtype_from_name("int32"), DType::kI32);
  EXPECT_EQ(dtype_from_name("int64"), DType::kI64);
  EXPECT_EQ(dtype_from_name("uint8"), DType::kU8);
  EXPECT_EQ(dtype_from_name("bool"), DType::kBool);
}

TEST(DType, ParseFailsOnUnknownNameNamingIt) {
  for (std::string_view bad : {"float", "F32", "int16", "", "f32 "}) {
    try {
      dtype_from_name(bad);
      ADD_FAILURE() << "no error for '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_EQ(e.component(), "DType");
      EXPECT_NE(e.message().find("'" + std::string(bad) + "'"), std::string::npos) << e.what();
    }
  }
}

// The dtypes TF's scoped allocator and cross-device ops take that tessel added: uint32, int8 and
// complex128 (sizes as numpy's itemsize; every size divides the scoped allocator's 64).
TEST(DType, Uint32Int8AndComplex128) {
  EXPECT_EQ(dtype_size(DType::kU32), 4u);
  EXPECT_EQ(dtype_size(DType::kI8), 1u);
  EXPECT_EQ(dtype_size(DType::kC128), 16u);
  EXPECT_EQ(dtype_from_name("uint32"), DType::kU32);
  EXPECT_EQ(dtype_from_name("int8"), DType::kI8);
  EXPECT_EQ(dtype_from_name("complex128"), DType::kC128);
  EXPECT_EQ(dtype_name(DType::kC128), "c128");
  EXPECT_TRUE(is_complex(DType::kC128));
  EXPECT_FALSE(is_complex(DType::kF64));
  EXPECT_FALSE(is_floating(DType::kC128));
  static_assert(dtype_of<uint32_t> == DType::kU32);
  static_assert(dtype_of<int8_t> == DType::kI8);
  static_assert(dtype_of<std::complex<double>> == DType::kC128);
  // The enum's existing values are unchanged (new dtypes are appended).
  EXPECT_EQ(static_cast<int>(DType::kBool), 7);
  EXPECT_EQ(static_cast<int>(DType::kC128), 10);
}

TEST(DType, IsFloatingAndDTypeOf) {
  EXPECT_TRUE(is_floating(DType::kF32));
  EXPECT_TRUE(is_floating(DType::kF64));
  EXPECT_TRUE(is_floating(DType::kBF16));
  EXPECT_TRUE(is_floating(DType::kF16));
  EXPECT_FALSE(is_floating(DType::kI32));
  EXPECT_FALSE(is_floating(DType::kI64));
  EXPECT_FALSE(is_floating(DType::kU8));
  EXPECT_FALSE(is_floating(DType::kBool));
  static_assert(dtype_of<float> == DType::kF32);
  static_assert(dtype_of<bfloat16> == DType::kBF16);
  static_assert(dtype_of<bool> == DType::kBool);
}

TEST(ReduceOp, NamesRoundTrip) {
  const std::vector<std::pair<ReduceOp, std::string_view>> ops = {{ReduceOp::kSum, "sum"},
                                                                  {ReduceOp::kMean, "mean"},
                                                                  {ReduceOp::kMax, "max"},
                                                                  {ReduceOp::kMin, "min"},
                                                                  {ReduceOp::kProd, "prod"}};
  for (const auto& [op, name] : ops) {
    EXPECT_EQ(reduce_op_name(op), name);
    EXPECT_EQ(reduce_op_from_name(name), op);
  }
}

TEST(ReduceOp, ParseAcceptsTensorFlowUpperCase) {
  EXPECT_EQ(reduce_op_from_name("SUM"), ReduceOp::kSum);
  EXPECT_EQ(reduce_op_from_name("MEAN"), ReduceOp::kMean);
  EXPECT_EQ(reduce_op_from_name("MAX"), ReduceOp::kMax);
  EXPECT_EQ(reduce_op_from_name("MIN"), ReduceOp::kMin);
  EXPECT_EQ(reduce_op_from_name("PROD"), ReduceOp::kProd);
}

TEST(ReduceOp, ParseFailsOnUnknownNameNamingIt) {
  for (std::string_view bad : {"avg", "Sum", "", "product"}) {
    try {
      reduce_op_from_name(bad);
      ADD_FAILURE() << "no error for '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_EQ(e.component(), "ReduceOp");
      EXPECT_NE(e.message().find("'" + std::string(bad) + "'"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tessel
