// The GPT on a mesh of the real GPU(s): the float64 JAX reference check (logits, loss, every
// gradient, 10 AdamW steps; f32 losses within 1e-4) with matmuls on cuBLAS and the other ops
// host-staged until they have GPU kernels.
#include <gtest/gtest.h>

#include <iostream>

#include "gpt_reference.h"
#include "gpu_test_util.h"
#include "tessel/dtensor/op_registry.h"

namespace tessel {
namespace {

using testing::GpuTest;

const std::string kReference =
    std::string(TESSEL_SOURCE_DIR) + "/examples/gpt/reference/gpt_small_reference.safetensors";

TEST_F(GpuTest, TheGptMatchesTheJaxReferenceOnOneGpu) {
  const Mesh mesh = Mesh::create_on_devices({{"batch", 1}, {"model", 1}}, {gpu().name()});
  for (DType dtype : {DType::kF32, DType::kF64}) {
    const gpt::ReferenceErrors e = gpt::check_reference(kReference, mesh, dtype, &runtime());
    EXPECT_TRUE(e.passes()) << dtype_name(dtype) << ": " << e.to_string();
    std::cout << dtype_name(dtype) << ": " << e.to_string() << "\n";
  }
  std::cout << "ops run host-staged on the GPU:";
  for (const auto& [op, calls] : host_staged_kernel_calls()) std::cout << " " << op << "=" << calls;
  std::cout << "\n";
}

}  // namespace
}  // namespace tessel
