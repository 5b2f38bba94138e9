// Resuming GPT training from a checkpoint (GptTrainer::state / restore, docs/checkpoints.md):
// on the same mesh the resumed run is bit for bit the uninterrupted one (parameters, losses);
// on another mesh it agrees to 1e-5 relative.
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

}  // namespace
}  // namespace tessel::gpt
