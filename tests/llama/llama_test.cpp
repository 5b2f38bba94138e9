// The Llama example (examples/llama): against the float64 JAX reference on every mesh shape
// (logits, loss, every gradient, 10 AdamW steps; tied and untied embeddings), the kv heads'
// layouts, the configuration's checks and parameter budget, and training that lowers the loss
// and resumes from a checkpoint on another mesh; fully sharded parameters.
#include <gtest/gtest.h>

#include <cmath>

#include "char_dataset.h"
#include "gpt_config.h"
#include "llama_model.h"
#include "llama_reference.h"
#include "llama_trainer.h"
#include "tessel/checkpoint/checkpoint_manager.h"
#include "tessel/core/error.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/mesh/sharding_spec.h"
#include "testing/batch_model_mesh.h"
#include "testing/expect_error.h"
#include "testing/temp_dir.h"

namespace tessel::llama {
namespace {

using testing::batch_model_mesh;

const std::string kReference =
    std::string(TESSEL_SOURCE_DIR) + "/examples/llama/reference/llama_small_reference.safetensors";
const std::string kText = std::string(TESSEL_SOURCE_DIR) + "/data/shakespeare_char/input.txt";

class LlamaReference : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(LlamaReference, MatchesTheJaxReferenceInF32) {
  Runtime rt({.num_cpu_devices = 4});
  const auto [b, m] = GetParam();
  const gpt::ReferenceErrors e =
      check_reference(kReference, batch_model_mesh(b, m, rt), DType::kF32, &rt);
  EXPECT_TRUE(e.passes()) << b << "x" << m << ": " << e.to_string();
}

TEST_P(LlamaReference, MatchesTheJaxReferenceInF64) {
  Runtime rt({.num_cpu_devices = 4});
  const auto [b, m] = GetParam();
  const gpt::ReferenceErrors e =
      check_reference(kReference, batch_model_mesh(b, m, rt), DType::kF64, &rt);
  // The step losses differ by ~1e-9: the reference clips as PyTorch does (max_norm / (norm +
  // 1e-6)), tessel as TF does (clip_norm / max(norm, clip_norm)); the 10 steps clip in all but
  // the last four.
  EXPECT_TRUE(e.passes(1e-10, 1e-8)) << b << "x" << m << ": " << e.to_string();
}

// 1x4: two kv heads on a model dimension of 4, so wk and wv are replicated.
INSTANTIATE_TEST_SUITE_P(EveryMesh, LlamaReference,
                         ::testing::Values(std::pair{1, 1}, std::pair{2, 1}, std::pair{1, 2},
                                           std::pair{2, 2}, std::pair{1, 4}),
                         [](const auto& info) {
                           return std::to_string(info.param.first) + "x" +
                                  std::to_string(info.param.second);
                         });

TEST(Llama, KvHeadsAreShardedWhenTheyDivideTheModelDimensionElseReplicated) {
  Runtime rt({.num_cpu_devices = 4});
  const LlamaConfig c = LlamaConfig::preset("test");  // 4 heads, 2 kv heads
  const LlamaModel two(c, batch_model_mesh(1, 2, rt), &rt),
      four(c, batch_model_mesh(1, 4, rt), &rt);
  EXPECT_TRUE(two.kv_heads_sharded());
  EXPECT_FALSE(four.kv_heads_sharded());
  const size_t wk = two.index("layers.0.attention.wk"), wq = two.index("layers.0.attention.wq");
  EXPECT_EQ(two.layouts()[wk].sharding_spec_strings()[1], "model");
  EXPECT_EQ(four.layouts()[wk].sharding_spec_strings()[1], kUnsharded);
  EXPECT_EQ(four.layouts()[wq].sharding_spec_strings()[1], "model");
  EXPECT_EQ(two.layouts()[two.index("layers.1.feed_forward.w2")].sharding_spec_strings()[0],
            "model");
  EXPECT_EQ(two.layouts()[two.index("output")].sharding_spec_strings()[0], "model");
}

TEST(Llama, TinyHasTheGptTinysParameterCount) {
  const LlamaConfig c = LlamaConfig::preset("tiny");
  EXPECT_EQ(c.num_parameters(), gpt::GptConfig::preset("tiny").num_parameters());
  Runtime rt({.num_cpu_devices = 1});
  const LlamaModel model(c, batch_model_mesh(1, 1, rt), &rt);
  int64_t count = 0;
  for (const Shape& s : model.shapes()) count += s.num_elements();
  EXPECT_EQ(count, c.num_parameters());
  EXPECT_EQ(count, 795904);
}

TEST(Llama, InitialisationIsTheSameOnEveryMesh) {
  Runtime rt({.num_cpu_devices = 4});
  const LlamaConfig c = LlamaConfig::preset("test");
  const std::vector<DTensor> a = LlamaModel(c, batch_model_mesh(1, 1, rt), &rt).init(9);
  const std::vector<DTensor> b = LlamaModel(c, batch_model_mesh(2, 2, rt), &rt).init(9);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(to_host(a[i]).to_doubles(), to_host(b[i]).to_doubles()) << i;
}

TEST(Llama, ConfigurationErrorsNameTheField) {
  EXPECT_TESSEL_ERROR(LlamaConfig::preset("huge"), ErrorCode::kInvalidArgument, "tiny, test");
  const auto invalid = [](auto change, const std::string& message) {
    LlamaConfig c = LlamaConfig::preset("test");
    change(c);
    EXPECT_TESSEL_ERROR(c.validate(), ErrorCode::kInvalidArgument, message);
  };
  invalid([](LlamaConfig& c) { c.n_kv_head = 3; }, "n_head 4 is not a multiple of n_kv_head 3");
  invalid([](LlamaConfig& c) { c.n_embd = 36; }, "head_dim 9");
  invalid([](LlamaConfig& c) { c.n_embd = 30; }, "n_embd 30 is not a multiple of n_head 4");
  invalid([](LlamaConfig& c) { c.ffn_hidden = 0; }, "ffn_hidden must be positive");
  invalid([](LlamaConfig& c) { c.rope_theta = 0; }, "rope_theta");
  Runtime rt({.num_cpu_devices = 4});
  LlamaConfig three = LlamaConfig::preset("test");
  three.n_head = 6;
  three.n_kv_head = 3;
  three.n_embd = 36;
  EXPECT_TESSEL_ERROR(LlamaModel(three, batch_model_mesh(1, 4, rt), &rt),
                      ErrorCode::kInvalidArgument, "n_head 6 is not a multiple of the model");
}

TEST(Llama, TrainingLowersTheLossAndGenerates) {
  Runtime rt({.num_cpu_devices = 4});
  LlamaConfig c = LlamaConfig::preset("test");
  c.warmup_iters = 2;
  c.lr_decay_iters = 30;
  c.learning_rate = 3e-3;
  c.eval_iters = 2;
  LlamaTrainer trainer(c, batch_model_mesh(2, 2, rt), gpt::CharDataset::load(kText), &rt);
  double first = 0, last = 0;
  for (int s = 0; s < 30; ++s) {
    const gpt::StepReport r = trainer.step();
    ASSERT_TRUE(std::isfinite(r.loss) && std::isfinite(r.grad_norm));
    if (s == 0) first = r.loss;
    last = r.loss;
  }
  EXPECT_NEAR(first, std::log(65.0), 0.3);  // uniform predictions at the start
  EXPECT_LT(last, first - 0.5);
  // Generation runs the model on contexts shorter than the block, a batch of one row.
  EXPECT_EQ(trainer.generate("\n", 20).size(), 20u);
  EXPECT_EQ(trainer.name(), "llama");
}

TEST(Llama, ResumesFromACheckpointOnAnotherMesh) {
  Runtime rt({.num_cpu_devices = 4});
  const gpt::CharDataset data = gpt::CharDataset::load(kText);
  const LlamaConfig c = LlamaConfig::preset("test");
  testing::TempDir dir("tessel-llama-ckpt");
  checkpoint::CheckpointManager manager(dir.path().string());
  LlamaTrainer straight(c, batch_model_mesh(1, 2, rt), data, &rt);
  std::vector<double> losses;
  for (int s = 0; s < 3; ++s) {
    losses.push_back(straight.step().loss);
    if (s == 0) manager.save(straight.next_step(), straight.state());
  }
  // From a mesh whose kv heads are sharded to one where they are replicated.
  LlamaTrainer resumed(c, batch_model_mesh(1, 4, rt), data, &rt);
  resumed.restore(manager.step_directory(1));
  EXPECT_EQ(resumed.next_step(), 1);
  for (int s = 1; s < 3; ++s) {
    EXPECT_NEAR(resumed.step().loss, losses[static_cast<size_t>(s)],
                1e-5 * losses[static_cast<size_t>(s)]);
  }
}

// Fully sharded parameters (LlamaConfig::fsdp, docs/memory.md): every parameter and moment
// stored sharded over batch, gathered where used; the replicated run's losses within 1e-6, tied
// and untied, with kv heads sharded (2x2) or not (2x1).
TEST(Llama, FullyShardedParametersTrainAsTheReplicatedOnes) {
  Runtime rt({.num_cpu_devices = 4});
  const gpt::CharDataset data = gpt::CharDataset::load(kText);
  for (auto [batch, model] : {std::pair{2, 1}, std::pair{2, 2}}) {
    for (bool tied : {false, true}) {
      std::vector<std::vector<double>> losses;
      for (bool fsdp : {false, true}) {
        LlamaConfig c = LlamaConfig::preset("test");
        c.tie_embeddings = tied;
        c.fsdp = fsdp;
        LlamaTrainer trainer(c, batch_model_mesh(batch, model, rt), data, &rt);
        losses.emplace_back();
        for (int s = 0; s < 20; ++s) losses.back().push_back(trainer.step().loss);
        for (const DTensor& p : trainer.params()) {
          bool sharded_over_batch = false;
          for (const ShardingSpec& spec : p.layout().sharding_specs())
            sharded_over_batch = sharded_over_batch || spec.uses("batch");
          EXPECT_EQ(sharded_over_batch, fsdp);
        }
      }
      for (size_t s = 0; s < losses[0].size(); ++s) {
        EXPECT_NEAR(losses[1][s], losses[0][s], 1e-6 * losses[0][s])
            << batch << "x" << model << (tied ? " tied" : " untied") << ", step " << s;
      }
    }
  }
}


// Mixed precision (TrainingConfig::dtype, as the GPT's: docs/gpt.md): the matmuls of activations
// by weights in bf16 (f32 sums) or f16 (MKL's hgemm, the loss scaled by 1024), the rest f32; 10
// steps' losses within 2e-3 relative of the f32 run's (the GPT's bound: half a bf16 unit), on
// every mesh shape; parameters stay f32 and no f16 step is skipped.
TEST(Llama, MixedPrecisionLossesFollowTheF32Run) {
  Runtime rt({.num_cpu_devices = 4});
  const gpt::CharDataset data = gpt::CharDataset::load(kText);
  for (auto [batch, model] : {std::pair{1, 1}, std::pair{2, 1}, std::pair{1, 2}, std::pair{2, 2}}) {
    std::vector<std::vector<double>> losses;
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      LlamaConfig c = LlamaConfig::preset("test");
      c.dtype = dtype;
      c.loss_scale = dtype == DType::kF16 ? 1024 : 0;
      LlamaTrainer trainer(c, batch_model_mesh(batch, model, rt), data, &rt);
      losses.emplace_back();
      int skipped = 0;
      for (int s = 0; s < 10; ++s) {
        const auto report = trainer.step();
        losses.back().push_back(report.loss);
        skipped += report.skipped ? 1 : 0;
      }
      EXPECT_EQ(skipped, 0);
      for (const DTensor& p : trainer.params()) EXPECT_EQ(p.dtype(), DType::kF32);
    }
    for (size_t run = 1; run < losses.size(); ++run) {
      double largest = 0;
      for (size_t s = 0; s < losses[0].size(); ++s) {
        const double rel = std::abs(losses[run][s] - losses[0][s]) / losses[0][s];
        largest = std::max(largest, rel);
        EXPECT_LE(rel, 2e-3) << batch << "x" << model << ", run " << run << ", step " << s;
      }
      EXPECT_GT(largest, 0.0) << "the 16-bit matmuls did not run";  // rounding moves the losses
    }
    EXPECT_LT(losses[1].back(), losses[1].front());  // and they train
  }
}

}  // namespace
}  // namespace tessel::llama
