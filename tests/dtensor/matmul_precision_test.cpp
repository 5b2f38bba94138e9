// The float32 matmul precision switch (tessel/core/matmul_precision.h): the setting, TF's names
// for it, the names and their errors, and that CPU matmuls are float32 under either setting.
// (TESSEL_MATMUL_PRECISION is checked through `tessel info`: tools/CMakeLists.txt; the TF32
// GEMMs on a GPU: tests/gpu/gpu_op_kernels_test.cpp.)
#include "tessel/core/matmul_precision.h"

#include <gtest/gtest.h>

#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/ops.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

// Restores the process's setting after each test.
class MatmulPrecisionTest : public ::testing::Test {
 protected:
  void TearDown() override { set_matmul_precision(saved_); }
  MatmulPrecision saved_ = matmul_precision();
};

TEST_F(MatmulPrecisionTest, SetAndReadBackUnderBothNames) {
  set_matmul_precision(MatmulPrecision::kHighest);
  EXPECT_EQ(matmul_precision(), MatmulPrecision::kHighest);
  EXPECT_FALSE(tensor_float_32_execution_enabled());
  enable_tensor_float_32_execution(true);
  EXPECT_EQ(matmul_precision(), MatmulPrecision::kHigh);
  EXPECT_TRUE(tensor_float_32_execution_enabled());
  enable_tensor_float_32_execution(false);
  EXPECT_EQ(matmul_precision(), MatmulPrecision::kHighest);
}

TEST_F(MatmulPrecisionTest, NamesRoundTripAndAnUnknownOneIsRefusedNamingIt) {
  for (MatmulPrecision p : {MatmulPrecision::kHighest, MatmulPrecision::kHigh}) {
    EXPECT_EQ(matmul_precision_from_name(matmul_precision_name(p)), p);
  }
  EXPECT_EQ(matmul_precision_name(MatmulPrecision::kHigh), "high");
  EXPECT_TESSEL_ERROR(
      matmul_precision_from_name("medium"), ErrorCode::kInvalidArgument,
      "matmul_precision: unknown float32 matmul precision 'medium' (highest or high)");
  EXPECT_TESSEL_ERROR(set_matmul_precision(static_cast<MatmulPrecision>(7)),
                      ErrorCode::kInvalidArgument, "unknown MatmulPrecision value 7");
}

TEST_F(MatmulPrecisionTest, CpuMatmulsAreFloat32UnderEitherSetting) {
  const Mesh mesh = Mesh::create({{"x", 1}});
  const Tensor a = Tensor::random_uniform(Shape({33, 70}), DType::kF32, 1, 0.5, 1.5);
  const Tensor b = Tensor::random_uniform(Shape({70, 21}), DType::kF32, 2, 0.5, 1.5);
  const auto product = [&] {
    return to_host(matmul(copy_to_mesh(a, Layout::replicated(mesh, 2)),
                          copy_to_mesh(b, Layout::replicated(mesh, 2))))
        .to_vector<float>();
  };
  set_matmul_precision(MatmulPrecision::kHigh);
  const std::vector<float> high = product();
  set_matmul_precision(MatmulPrecision::kHighest);
  EXPECT_EQ(product(), high);
  // And float32, not TF32: against a double-precision sum.
  const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
  for (int i = 0; i < 33; ++i) {
    for (int j = 0; j < 21; ++j) {
      double want = 0;
      for (int k = 0; k < 70; ++k) want += double(av[i * 70 + k]) * double(bv[k * 21 + j]);
      EXPECT_NEAR(high[static_cast<size_t>(i * 21 + j)], want, 1e-5 * want);
    }
  }
}

}  // namespace
}  // namespace tessel
