// The GPT on meshes of GPU devices (testing/gpu_devices.h: on the visible GPUs where there are
// any, several devices sharing a GPU, its ops on their GPU kernels; else simulated GPUs: host
// memory kept apart as device memory, every op host-staged), against the same float64 JAX
// reference as on CPU devices, so that the GPU code paths (device memory, copies, staged
// collectives, kernels) run on every machine. tests/gpu/gpt_gpu_test.cpp runs the check on one
// real GPU with the float64 step losses too.
#include <gtest/gtest.h>

#include "gpt_reference.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/runtime/runtime.h"
#include "testing/gpu_devices.h"

namespace tessel::gpt {
namespace {

const std::string kReference =
    std::string(TESSEL_SOURCE_DIR) + "/examples/gpt/reference/gpt_small_reference.safetensors";

Mesh gpu_mesh_of(int64_t batch, int64_t model, const Runtime& rt) {
  std::vector<std::string> names;
  for (int64_t i = 0; i < batch * model; ++i) names.push_back(rt.gpu_devices()[i]->name());
  return Mesh::create_on_devices({{"batch", batch}, {"model", model}}, names);
}

class GptOnGpuDevices : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(GptOnGpuDevices, MatchesTheJaxReference) {
  const auto [b, m] = GetParam();
  Runtime rt(testing::options_with_gpu_devices(b * m));
  const Mesh mesh = gpu_mesh_of(b, m, rt);
  EXPECT_EQ(mesh.device_type(), "GPU");
  const int64_t staged_before = host_staged_kernel_calls()["matmul"];
  const ReferenceErrors e = check_reference(kReference, mesh, DType::kF32, &rt);
  EXPECT_TRUE(e.passes()) << e.to_string();
  // It ran on the GPU devices: a simulated GPU stages every op through the host, a real one runs
  // matmul on cuBLAS.
  if (testing::gpu_devices_are_real()) {
    EXPECT_EQ(host_staged_kernel_calls()["matmul"], staged_before);
  } else {
    EXPECT_GT(host_staged_kernel_calls()["matmul"], staged_before);
  }
}

INSTANTIATE_TEST_SUITE_P(Meshes, GptOnGpuDevices,
                         ::testing::Values(std::pair{1, 1}, std::pair{2, 2}));

}  // namespace
}  // namespace tessel::gpt
