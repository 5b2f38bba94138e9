// The GPT on meshes of GPU devices, simulated (TESSEL_SIMULATED_GPUS' devices: host memory kept
// apart as device memory, every op host-staged), against the same float64 JAX reference as on
// CPU devices: the GPU code paths (device memory, copies, staged collectives and kernels) run on
// every machine. tests/gpu/gpt_gpu_test.cpp runs the same check on a real GPU.
#include <gtest/gtest.h>

#include "gpt_reference.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/runtime/runtime.h"

namespace tessel::gpt {
namespace {

const std::string kReference =
    std::string(TESSEL_SOURCE_DIR) + "/examples/gpt/reference/gpt_small_reference.safetensors";

Mesh gpu_mesh_of(int64_t batch, int64_t model, const Runtime& rt) {
  std::vector<std::string> names;
  for (int64_t i = 0; i < batch * model; ++i) names.push_back(rt.gpu_devices()[i]->name());
  return Mesh::create_on_devices({{"batch", batch}, {"model", model}}, names);
}

class GptOnSimulatedGpus : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(GptOnSimulatedGpus, MatchesTheJaxReference) {
  const auto [b, m] = GetParam();
  Runtime rt({.num_cpu_devices = 1, .num_simulated_gpu_devices = b * m});
  const Mesh mesh = gpu_mesh_of(b, m, rt);
  EXPECT_EQ(mesh.device_type(), "GPU");
  const int64_t staged_before = host_staged_kernel_calls()["matmul"];
  const ReferenceErrors e = check_reference(kReference, mesh, DType::kF32, &rt);
  EXPECT_TRUE(e.passes()) << e.to_string();
  EXPECT_GT(host_staged_kernel_calls()["matmul"], staged_before);  // it ran on the GPU devices
}

INSTANTIATE_TEST_SUITE_P(Meshes, GptOnSimulatedGpus,
                         ::testing::Values(std::pair{1, 1}, std::pair{2, 2}));

}  // namespace
}  // namespace tessel::gpt
