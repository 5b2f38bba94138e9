// Resuming GPT training from a checkpoint (GptTrainer::state / restore, docs/checkpoints.md):
// on the same mesh the resumed run is bit for bit the uninterrupted one (parameters, losses);
// on another mesh it agrees to 1e-5 relative; fully sharded and replicated runs restore each
// other's checkpoints.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "char_dataset.h"
#include "gpt_trainer.h"
#include "tessel/checkpoint/checkpoint_manager.h"
#include "tessel/dtensor/dtensor_api.h"
#include "testing/batch_model_mesh.h"
#include "testing/expect_error.h"

namespace tessel::gpt {
namespace {

const std::string kText = std::string(TESSEL_SOURCE_DIR) + "/data/shakespeare_char/input.txt";

using testing::batch_model_mesh;

GptConfig config() {
  GptConfig c = GptConfig::preset("test");
  c.dropout = 0.1;  // the masks must follow the step across the restart too
  return c;
}

std::string temp_dir() {
  std::string pattern =
      (std::filesystem::temp_directory_path() / "tessel-gpt-ckpt-XXXXXX").string();
  return ::mkdtemp(pattern.data());
}

double max_relative(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_doubles(), y = b.to_doubles();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    worst = std::max(worst, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return scale > 0 ? worst / scale : worst;
}

TEST(GptCheckpoint, ResumesBitForBitOnTheSameMeshAndWithin1e5OnAnother) {
  Runtime rt({.num_cpu_devices = 4});
  const CharDataset data = CharDataset::load(kText);
  const std::string dir = temp_dir();
  checkpoint::CheckpointManager manager(dir);

  GptTrainer straight(config(), batch_model_mesh(2, 2, rt), data, &rt);
  std::vector<double> losses;
  for (int s = 0; s < 4; ++s) {
    losses.push_back(straight.step().loss);
    if (s == 1) manager.save(straight.next_step(), straight.state());
  }

  for (auto [batch, model] : {std::pair{2, 2}, std::pair{1, 4}}) {
    GptTrainer resumed(config(), batch_model_mesh(batch, model, rt), data, &rt);
    resumed.restore(manager.step_directory(*manager.latest_step()));
    EXPECT_EQ(resumed.next_step(), 2);
    const bool same_mesh = batch == 2;
    for (int s = 2; s < 4; ++s) {
      const double loss = resumed.step().loss;
      if (same_mesh) {
        EXPECT_EQ(loss, losses[static_cast<size_t>(s)]) << "step " << s;
      } else {
        EXPECT_NEAR(loss, losses[static_cast<size_t>(s)],
                    1e-5 * std::abs(losses[static_cast<size_t>(s)]));
      }
    }
    for (size_t i = 0; i < straight.params().size(); ++i) {
      const Tensor want = to_host(straight.params()[i]);
      const Tensor got = to_host(resumed.params()[i]);
      if (same_mesh) {
        EXPECT_EQ(std::memcmp(want.data(), got.data(), want.nbytes()), 0) << "parameter " << i;
      } else {
        EXPECT_LT(max_relative(got, want), 1e-5) << "parameter " << i;
      }
    }
  }

  GptConfig other = config();
  other.seed = 7;
  GptTrainer wrong_seed(other, batch_model_mesh(2, 2, rt), data, &rt);
  EXPECT_TESSEL_ERROR(wrong_seed.restore(manager.step_directory(2)), ErrorCode::kInvalidArgument,
                      "seed");
  std::filesystem::remove_all(dir);
}

// A checkpoint of a fully sharded run (fsdp: every tensor sharded over batch) restores onto a
// replicated run and that one's back onto a sharded run: restore lays each tensor out as the
// trainer holds it, and the losses follow the uninterrupted sharded run.
TEST(GptCheckpoint, FullyShardedAndReplicatedRunsRestoreEachOther) {
  Runtime rt({.num_cpu_devices = 4});
  const CharDataset data = CharDataset::load(kText);
  const std::string dir = temp_dir();
  checkpoint::CheckpointManager manager(dir);
  GptConfig sharded = config();
  sharded.fsdp = true;
  const Mesh mesh = batch_model_mesh(2, 2, rt);
  GptTrainer straight(sharded, mesh, data, &rt);
  std::vector<double> losses;
  for (int s = 0; s < 6; ++s) {
    losses.push_back(straight.step().loss);
    if (s == 1) manager.save(straight.next_step(), straight.state());
  }
  const auto expect_losses = [&](GptTrainer& trainer, int from, int to) {
    for (int s = from; s < to; ++s) {
      const double want = losses[static_cast<size_t>(s)];
      EXPECT_NEAR(trainer.step().loss, want, 1e-6 * std::abs(want)) << "step " << s;
    }
  };
  const auto expect_layouts = [](const GptTrainer& trainer) {
    const std::vector<Layout>& layouts = trainer.model().layouts();
    for (size_t i = 0; i < layouts.size(); ++i) {
      EXPECT_EQ(trainer.params()[i].layout(), layouts[i]) << trainer.model().names()[i];
      for (const auto& [slot, moments] : trainer.optimizer().slots()) {
        EXPECT_EQ(moments[i].layout(), layouts[i]) << slot;
      }
    }
  };
  GptTrainer plain(config(), mesh, data, &rt);
  plain.restore(manager.step_directory(2));
  expect_layouts(plain);
  expect_losses(plain, 2, 4);
  manager.save(plain.next_step(), plain.state());

  GptTrainer back(sharded, mesh, data, &rt);
  back.restore(manager.step_directory(4));
  ASSERT_TRUE(back.model().fsdp());
  expect_layouts(back);
  expect_losses(back, 4, 6);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessel::gpt
