// The GPT on a mesh of the real GPU(s): the float64 JAX reference check (logits, loss, every
// gradient, 10 AdamW steps; f32 losses within 1e-4) with matmuls on cuBLAS and the other ops
// host-staged until they have GPU kernels.
#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

#include "gpt_model.h"
#include "gpt_reference.h"
#include "gpu_test_util.h"
#include "tessel/dtensor/autodiff.h"
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

// The "test" configuration above is small; this is the baby GPT at the sizes it trains at
// (6 layers, width 384, context 256, batch 64: 16384 rows): one training step's loss and
// gradients on the GPU against a CPU device's, with dropout 0.2 (as trained) and without.
TEST_F(GpuTest, TheBabyGptsLossAndGradientsMatchTheCpuDeviceAtTrainingSizes) {
  gpt::GptConfig config = gpt::GptConfig::preset("baby");
  const Shape batch({config.batch_size, config.block_size});
  const Tensor ids = Tensor::random_uniform(batch, DType::kF64, 5, 0, 65).astype(DType::kI32);
  const Tensor next = Tensor::random_uniform(batch, DType::kF64, 6, 0, 65).astype(DType::kI32);
  const Mesh gpu_mesh = Mesh::create_on_devices({{"batch", 1}, {"model", 1}}, {gpu().name()});
  const Mesh cpu_mesh =
      Mesh::create_on_devices({{"batch", 1}, {"model", 1}}, {runtime().device(0).name()});
  for (double dropout : {0.0, 0.2}) {
    config.dropout = dropout;
    std::vector<Tensor> result[2];  // loss, then the gradients; GPU then CPU
    std::vector<std::string> names;  // the parameters', in the gradients' order
    for (int m = 0; m < 2; ++m) {
      const gpt::GptModel model(config, m == 0 ? gpu_mesh : cpu_mesh, &runtime());
      names = model.names();
      const DTensor idx = model.tokens(ids), targets = model.tokens(next);
      gpt::ForwardOptions options;
      options.training = true;
      options.dropout_seed = 11;
      auto [loss, grads] = value_and_grad(
          [&](const std::vector<DTensor>& p) { return model.loss(p, idx, targets, options); },
          model.init(1337));
      result[m].push_back(gpt::host_value(loss));
      for (const DTensor& g : grads) result[m].push_back(gpt::host_value(g));
    }
    std::cout << "dropout " << dropout << ": loss GPU " << result[0][0].to_doubles()[0] << ", CPU "
              << result[1][0].to_doubles()[0] << "\n";
    EXPECT_LE(gpt::relative_error(result[0][0], result[1][0]), 1e-5) << "loss, dropout " << dropout;
    for (size_t i = 1; i < result[0].size(); ++i) {
      const double err = gpt::relative_error(result[0][i], result[1][i]);
      std::cout << "  " << names[i - 1] << " " << err << "\n";
      EXPECT_LE(err, 1e-4) << names[i - 1] << ", dropout " << dropout;
    }
  }
}

}  // namespace
}  // namespace tessel
