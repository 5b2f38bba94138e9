// The memory plan (memory_plan.h): the planned parameter, gradient and optimizer bytes equal
// what training then holds on each device (memory_report, counted from the allocated blocks),
// with and without fsdp, on uneven shards; a device limit below the training state with one
// layer gathered is refused before anything is allocated, naming the device, the layer, its
// bytes and the limit.
#include <gtest/gtest.h>

#include "char_dataset.h"
#include "gpt_memory.h"
#include "gpt_model.h"
#include "gpt_trainer.h"
#include "memory_plan.h"
#include "testing/batch_model_mesh.h"
#include "testing/expect_error.h"

namespace tessel::gpt {
namespace {

const std::string kText = std::string(TESSEL_SOURCE_DIR) + "/data/shakespeare_char/input.txt";

using testing::batch_model_mesh;

GptConfig uneven(bool fsdp) {  // odd sizes on every axis fsdp shards
  GptConfig c = GptConfig::preset("test");
  c.n_layer = 2;
  c.n_head = 3;
  c.n_embd = 21;
  c.block_size = 15;
  c.fsdp = fsdp;
  return c;
}

class MemoryPlan : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(MemoryPlan, StateBytesAreWhatTrainingHolds) {
  Runtime rt({.num_cpu_devices = 4});
  const CharDataset data = CharDataset::load(kText);
  const auto [batch, model] = GetParam();
  const Mesh mesh = batch_model_mesh(batch, model, rt);
  for (bool fsdp : {false, true}) {
    GptConfig c = uneven(fsdp);
    c.vocab_size = data.vocab_size();
    const std::vector<DeviceMemoryPlan> plan = plan_memory(GptModel(c, mesh, &rt), 0);
    GptTrainer trainer(c, mesh, data, &rt);
    trainer.step();  // AdamW's moments exist after the first update
    const std::vector<DeviceMemory> held = memory_report(trainer);
    ASSERT_EQ(plan.size(), held.size());
    for (size_t d = 0; d < plan.size(); ++d) {
      EXPECT_EQ(plan[d].device, held[d].device);
      EXPECT_EQ(plan[d].parameter_bytes, held[d].parameter_bytes) << plan[d].device;
      EXPECT_EQ(plan[d].gradient_bytes, held[d].gradient_bytes);
      EXPECT_EQ(plan[d].optimizer_bytes, held[d].optimizer_bytes);
      EXPECT_EQ(plan[d].limit_bytes, rt.device(plan[d].device).memory_limit());
      const bool gathers = fsdp && batch > 1;
      EXPECT_EQ(plan[d].largest_layer.empty(), !gathers);
      if (gathers) {
        EXPECT_EQ(plan[d].largest_layer, "h.0");  // the blocks are alike; the first one wins
      }
      if (gathers && 21 % model == 0) {
        // q, k, v, proj (4 C^2), the MLP (8 C^2) over `model`, the two norms (C each).
        EXPECT_EQ(plan[d].largest_layer_bytes, 4 * (12 * 21 * 21 / model + 2 * 21));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Meshes, MemoryPlan,
                         ::testing::Values(std::pair{1, 1}, std::pair{2, 1}, std::pair{4, 1},
                                           std::pair{1, 3}));

TEST(MemoryPlanLimits, AStateThatCannotFitIsRefusedBeforeAnythingIsAllocated) {
  GptConfig c = GptConfig::preset("test");
  c.n_embd = 64;
  c.fsdp = true;
  const CharDataset data = CharDataset::load(kText);
  // A limit above the fsdp shards of the state (about 406 KiB), below the state plus one
  // gathered layer (193 KiB).
  Runtime rt({.num_cpu_devices = 4, .memory_limit = 500 * 1024});
  const Mesh mesh = batch_model_mesh(4, 1, rt);
  EXPECT_TESSEL_ERROR(GptTrainer(c, mesh, data, &rt), ErrorCode::kResourceExhausted,
                      "gpt: the training state does not fit on "
                      "/job:localhost/replica:0/task:0/device:CPU:0: parameters, gradients and "
                      "AdamW's moments take");
  EXPECT_TESSEL_ERROR(GptTrainer(c, mesh, data, &rt), ErrorCode::kResourceExhausted,
                      "and layer 'h.0' gathered 0.2 MiB (197120 bytes) there, more than its "
                      "memory limit of 0.5 MiB (512000 bytes)");
  for (int d = 0; d < 4; ++d) EXPECT_EQ(rt.device(d).memory_stats().live_bytes, 0);
}

}  // namespace
}  // namespace tessel::gpt
