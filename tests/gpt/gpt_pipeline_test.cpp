// The pipelined GPT (examples/gpt/gpt_pipeline.h) in one process: the losses of every schedule
// on stage=2, stage=4, stage=2 x batch=2 and stage=2 x model=2 meshes equal the non-pipelined
// run's on the same global batch (within 1e-5, 5 steps here; 50 steps in the slow test), uneven
// layer splits, the parameters on their stages' sub-meshes, 1F1B keeping fewer activations than
// GPipe, checkpoints moving between pipelined and plain runs, and the refusals naming the values.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "char_dataset.h"
#include "gpt_pipeline_trainer.h"
#include "gpt_trainer.h"
#include "tessel/checkpoint/checkpoint_manager.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/tape_memory.h"
#include "testing/batch_model_mesh.h"
#include "testing/expect_error.h"

namespace tessel::gpt {
namespace {

const std::string kText = std::string(TESSEL_SOURCE_DIR) + "/data/shakespeare_char/input.txt";

using train::ScheduleKind;

// The `test` model with 8 layers (interleaved on 4 stages needs 8 pieces) and a batch of 8.
GptConfig config(int n_layer = 8) {
  GptConfig c = GptConfig::preset("test");
  c.n_layer = n_layer;
  c.batch_size = 8;
  c.dropout = 0;  // the pipelined run keys its masks per microbatch
  return c;
}

Mesh pipeline_mesh(int64_t stages, int64_t batch, int64_t model, const Runtime& rt) {
  std::vector<std::string> names;
  for (int64_t i = 0; i < stages * batch * model; ++i) {
    names.push_back(rt.device(static_cast<int>(i)).name());
  }
  return Mesh::create_on_devices({{"stage", stages}, {"batch", batch}, {"model", model}}, names);
}

std::vector<double> plain_losses(const GptConfig& c, int64_t batch, int64_t model, Runtime& rt,
                                 const CharDataset& data, int steps) {
  GptTrainer trainer(c, testing::batch_model_mesh(batch, model, rt), data, &rt);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) losses.push_back(trainer.step().loss);
  return losses;
}

std::vector<double> pipelined_losses(const GptConfig& c, const Mesh& mesh, PipelineOptions options,
                                     Runtime& rt, const CharDataset& data, int steps) {
  GptPipelineTrainer trainer(c, mesh, options, data, &rt);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) losses.push_back(trainer.step().loss);
  return losses;
}

struct MeshCase {
  int64_t stages, batch, model;
};

std::string mesh_name(const MeshCase& m) {
  return fmt::format("stage{}_batch{}_model{}", m.stages, m.batch, m.model);
}

PipelineOptions options_for(ScheduleKind kind) {
  return {.schedule = kind,
          .microbatches = 4,
          .chunks = kind == ScheduleKind::kInterleaved1F1B ? 2 : 1};
}

void expect_same_losses(const MeshCase& m, int steps) {
  Runtime rt({.num_cpu_devices = 8});
  const CharDataset data = CharDataset::load(kText);
  const std::vector<double> want = plain_losses(config(), m.batch, m.model, rt, data, steps);
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B,
                            ScheduleKind::kInterleaved1F1B, ScheduleKind::kZeroBubble}) {
    const std::vector<double> got =
        pipelined_losses(config(), pipeline_mesh(m.stages, m.batch, m.model, rt), options_for(kind),
                         rt, data, steps);
    ASSERT_EQ(got.size(), want.size());
    for (size_t s = 0; s < want.size(); ++s) {
      EXPECT_NEAR(got[s], want[s], 1e-5)
          << schedule_kind_name(kind) << " on " << mesh_name(m) << ", step " << s;
    }
  }
}

class GptPipelineLosses : public ::testing::TestWithParam<MeshCase> {};

TEST_P(GptPipelineLosses, EqualThePlainRunsForEverySchedule) { expect_same_losses(GetParam(), 5); }

// The 50 steps (label slow: ctest gpt_pipeline_50_steps).
TEST_P(GptPipelineLosses, DISABLED_FiftySteps) { expect_same_losses(GetParam(), 50); }

INSTANTIATE_TEST_SUITE_P(Meshes, GptPipelineLosses,
                         ::testing::Values(MeshCase{2, 1, 1}, MeshCase{4, 1, 1}, MeshCase{2, 2, 1},
                                           MeshCase{2, 1, 2}),
                         [](const auto& info) { return mesh_name(info.param); });

TEST(GptPipeline, UnevenLayersPerStage) {
  Runtime rt({.num_cpu_devices = 4});
  const CharDataset data = CharDataset::load(kText);
  const GptConfig c = config(5);  // 3 + 2 layers on two stages, 2 + 1 + 1 + 1 on four
  const std::vector<double> want = plain_losses(c, 1, 1, rt, data, 3);
  for (int64_t stages : {2, 4}) {
    GptPipeline pipe(c, pipeline_mesh(stages, 1, 1, rt), options_for(ScheduleKind::k1F1B), &rt);
    EXPECT_EQ(pipe.layers(0), (std::pair<int, int>{0, stages == 2 ? 3 : 2}));
    const std::vector<double> got = pipelined_losses(c, pipeline_mesh(stages, 1, 1, rt),
                                                     options_for(ScheduleKind::k1F1B), rt, data, 3);
    for (size_t s = 0; s < want.size(); ++s) EXPECT_NEAR(got[s], want[s], 1e-5) << stages;
  }
}

// Within a stage, the GPT's other options: recomputation, fully sharded parameters over the
// stage's batch dimension, sequence parallelism over its model dimension and bf16 matmuls give
// the plain run's losses with the same options, under 1f1b and zero-bubble (1e-5; bf16 within
// 2e-3 relative, as gpt_mixed_precision_test's bound).
TEST(GptPipeline, CombinesWithTheGptsOtherOptions) {
  Runtime rt({.num_cpu_devices = 8});
  const CharDataset data = CharDataset::load(kText);
  struct Case {
    std::string name;
    GptConfig config;
    bool sp;
    double tolerance;
  };
  std::vector<Case> cases;
  for (Recompute r : {Recompute::kSelective, Recompute::kFull}) {
    GptConfig c = config(4);
    c.recompute = r;
    cases.push_back({std::string(recompute_name(r)), c, false, 1e-5});
  }
  GptConfig fsdp = config(4);
  fsdp.fsdp = true;
  cases.push_back({"fsdp", fsdp, false, 1e-5});
  cases.push_back({"sp", config(4), true, 1e-5});
  GptConfig bf16 = config(4);
  bf16.dtype = DType::kBF16;
  cases.push_back({"bf16", bf16, false, 2e-3 * 4.2});
  // Zero-bubble's split backward passes too: recomputed blocks (their gradients in the input
  // half), gathered fsdp weights (the gathers' gradients in the weight half).
  for (ScheduleKind kind : {ScheduleKind::k1F1B, ScheduleKind::kZeroBubble}) {
    for (const Case& k : cases) {
      GptTrainer plain(k.config, testing::batch_model_mesh(2, 2, rt), data, &rt, k.sp);
      GptPipelineTrainer piped(k.config, pipeline_mesh(2, 2, 2, rt), options_for(kind), data, &rt,
                               k.sp);
      for (int s = 0; s < 3; ++s) {
        EXPECT_NEAR(piped.step().loss, plain.step().loss, k.tolerance)
            << schedule_kind_name(kind) << ", " << k.name << " step " << s;
      }
    }
  }
}

TEST(GptPipeline, ParametersLiveOnTheirStages) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = pipeline_mesh(2, 1, 2, rt);
  GptPipeline pipe(config(4), mesh, options_for(ScheduleKind::kInterleaved1F1B), &rt);
  // Four virtual stages of one layer: layers 0 and 2 on stage 0, 1 and 3 on stage 1.
  const std::vector<DTensor> params = pipe.init(1);
  const GptModel& plain = pipe.stage_model(0);
  const auto mesh_of = [&](const std::string& name) {
    return params[plain.index(name)].layout().mesh();
  };
  EXPECT_EQ(mesh_of("wte"), pipe.stage_mesh(0));
  EXPECT_EQ(mesh_of("wpe"), pipe.stage_mesh(0));
  EXPECT_EQ(mesh_of("h.0.attn.wq"), pipe.stage_mesh(0));
  EXPECT_EQ(mesh_of("h.1.attn.wq"), pipe.stage_mesh(1));
  EXPECT_EQ(mesh_of("h.2.mlp.c_fc"), pipe.stage_mesh(0));
  EXPECT_EQ(mesh_of("h.3.ln_2.weight"), pipe.stage_mesh(1));
  EXPECT_EQ(mesh_of("ln_f.weight"), pipe.stage_mesh(1));
  // Within a stage the tensor-parallel layouts are GptModel's: columns over model.
  EXPECT_EQ(params[plain.index("h.1.attn.wq")].layout().sharding_spec_strings(),
            (std::vector<std::string>{"unsharded", "model"}));
  EXPECT_EQ(pipe.stage_mesh(1).local_devices(),
            (std::vector<std::string>{rt.device(2).name(), rt.device(3).name()}));
}

// What the tapes keep at once: 1F1B at most p microbatches' activations per stage, GPipe m;
// zero-bubble at most p on every stage, until each microbatch's weight backward (the inputs of
// the matmuls and the norms' statistics only, after its input backward, with the output
// gradients the weight backward reads).
TEST(GptPipeline, OneFOneBKeepsFewerActivationsThanGPipe) {
  Runtime rt({.num_cpu_devices = 2});
  const CharDataset data = CharDataset::load(kText);
  GptConfig c = config(2);
  c.batch_size = 16;
  // The most each stage's device kept, under GPipe then 1F1B.
  std::vector<std::vector<int64_t>> peaks;
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kZeroBubble}) {
    GptPipelineTrainer trainer(c, pipeline_mesh(2, 1, 1, rt), {.schedule = kind, .microbatches = 8},
                               data, &rt);
    reset_tape_memory_peak();
    trainer.step();
    peaks.emplace_back(2, 0);
    for (const TapeMemoryStats& s : tape_memory_stats()) {
      for (int d = 0; d < 2; ++d) {
        if (s.device == rt.device(d).name()) peaks.back()[static_cast<size_t>(d)] = s.peak_bytes;
      }
    }
  }
  // Stage 0 keeps 8 microbatches under GPipe and 2 (p) under 1F1B; stage 1 8 and 1: at most
  // p / m of GPipe's, plus 10 %.
  for (size_t stage = 0; stage < 2; ++stage) {
    EXPECT_GT(peaks[0][stage], 0);
    EXPECT_LE(static_cast<double>(peaks[1][stage]), 1.1 * 2.0 / 8.0 * peaks[0][stage])
        << "stage " << stage << ": gpipe " << peaks[0][stage] << ", 1f1b " << peaks[1][stage];
    // Zero-bubble keeps at most 2 (p) microbatches' activations on both stages and, between a
    // microbatch's B and its W, the output gradients its matmuls' weight gradients read (about
    // half a microbatch's activations each): within (p + 1) / m of GPipe's.
    EXPECT_LE(static_cast<double>(peaks[2][stage]), 1.1 * 3.0 / 8.0 * peaks[0][stage])
        << "stage " << stage << ": gpipe " << peaks[0][stage] << ", zero-bubble "
        << peaks[2][stage];
    std::cout << "stage " << stage << ": tape peak gpipe " << peaks[0][stage] << ", 1f1b "
              << peaks[1][stage] << ", zero-bubble " << peaks[2][stage] << "\n";
  }
}

std::string temp_dir() {
  std::string pattern =
      (std::filesystem::temp_directory_path() / "tessel-gpt-pipeline-XXXXXX").string();
  return ::mkdtemp(pattern.data());
}

TEST(GptPipeline, CheckpointsMoveBetweenPipelinedAndPlainRuns) {
  Runtime rt({.num_cpu_devices = 4});
  const CharDataset data = CharDataset::load(kText);
  const std::vector<double> losses = plain_losses(config(4), 1, 2, rt, data, 6);
  const std::string dir = temp_dir();
  checkpoint::CheckpointManager manager(dir);
  GptPipelineTrainer piped(config(4), pipeline_mesh(2, 1, 2, rt), options_for(ScheduleKind::k1F1B),
                           data, &rt);
  for (int s = 0; s < 2; ++s) piped.step();
  manager.save(piped.next_step(), piped.state());
  GptTrainer plain(config(4), testing::batch_model_mesh(1, 2, rt), data, &rt);
  plain.restore(manager.step_directory(2));
  for (int s = 2; s < 4; ++s) EXPECT_NEAR(plain.step().loss, losses[static_cast<size_t>(s)], 1e-5);
  manager.save(plain.next_step(), plain.state());
  GptPipelineTrainer back(config(4), pipeline_mesh(4, 1, 1, rt), options_for(ScheduleKind::kGPipe),
                          data, &rt);
  back.restore(manager.step_directory(4));
  const std::vector<Layout> layouts = back.pipeline().layouts();
  for (size_t i = 0; i < layouts.size(); ++i) EXPECT_EQ(back.params()[i].layout(), layouts[i]);
  for (int s = 4; s < 6; ++s) EXPECT_NEAR(back.step().loss, losses[static_cast<size_t>(s)], 1e-5);
  std::filesystem::remove_all(dir);
}

// The stall tests run with the single controller and with the default (a thread per stage in
// one process).
class GptPipelineStalls : public ::testing::TestWithParam<Controllers> {
 protected:
  bool threads() const { return GetParam() != Controllers::kOneController; }
  // How long after the stall the step may end: the deadline + 10 % (+ 50 ms) and `slack` for a
  // loaded machine. With stage threads the step ends once every stage's thread has: a thread
  // inside a launch or a transfer on the stalled device when another stage's wait ran out ends
  // by that one's own deadline, which may have started up to a deadline later.
  std::chrono::nanoseconds bound(std::chrono::milliseconds timeout,
                                 std::chrono::milliseconds slack) const {
    using namespace std::chrono_literals;
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
        (threads() ? 2 : 1) * (1.1 * timeout + 50ms) + slack);
  }
};

// kDeadlineExceeded naming `stage` as the late one (`want`, the single controller's words) or,
// with stage threads, also a launch on its device `device` that ran out: the stage threads'
// waits overlap, and which of them runs out first depends on their timing.
void expect_stage_named(const std::function<void()>& step, bool threads, const std::string& want,
                        int stage, const std::string& device) {
  try {
    step();
    ADD_FAILURE() << "the step did not fail";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kDeadlineExceeded) << what;
    const bool named =
        what.find(want) != std::string::npos ||
        (threads &&
         (what.find(fmt::format("(stage {} is late)", stage)) != std::string::npos ||
          what.find(device + ": the device's stream made no room") != std::string::npos));
    EXPECT_TRUE(named) << what << "\nexpected: " << want;
  }
}

INSTANTIATE_TEST_SUITE_P(Controllers, GptPipelineStalls,
                         ::testing::Values(Controllers::kOneController, Controllers::kAuto),
                         [](const auto& info) {
                           return info.param == Controllers::kAuto ? "Default" : "OneController";
                         });

// A stage that stalls is named on its neighbour's transfer, with the microbatch and the
// direction, within the deadline + 10 % (+ 50 ms, and some slack for a loaded machine), in every
// schedule: stage 0 stalls as stage 1 is about to take microbatch 0's activation (forward), and
// as stage 1 is about to send back microbatch 0's gradient (backward).
TEST_P(GptPipelineStalls, AStalledStageIsNamedWithTheMicrobatchAndDirection) {
  using namespace std::chrono_literals;
  const auto timeout = 400ms;
  const CharDataset data = CharDataset::load(kText);
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B,
                            ScheduleKind::kInterleaved1F1B, ScheduleKind::kZeroBubble}) {
    for (train::Pass pass : {train::Pass::kForward, train::Pass::kBackward}) {
      Runtime rt({.num_cpu_devices = 2});
      std::chrono::steady_clock::time_point stalled;
      PipelineOptions options = options_for(kind);
      options.microbatches = 2;
      options.timeout = timeout;
      options.controllers = GetParam();
      options.before_action = [&](const train::PipelineAction& a) {
        if (a.stage == 1 && a.microbatch == 0 && a.pass == pass &&
            a.chunk == (kind == ScheduleKind::kInterleaved1F1B && pass == train::Pass::kBackward)) {
          stalled = std::chrono::steady_clock::now();
          rt.device(0).stream().enqueue("stall", [] { std::this_thread::sleep_for(1s); });
        }
      };
      GptPipelineTrainer trainer(config(4), pipeline_mesh(2, 1, 1, rt), options, data, &rt);
      ASSERT_EQ(trainer.pipeline().stage_threads(), threads());
      const bool forward = pass == train::Pass::kForward;
      expect_stage_named([&] { trainer.step(); }, threads(),
                         forward ? "the forward activation of microbatch 0 from stage 0 to stage "
                                   "1 did not arrive within 400 ms (stage 0 is late)"
                                 : "the backward gradient of microbatch 0 from stage 1 to stage 0 "
                                   "did not arrive within 400 ms (stage 0 is late)",
                         0, rt.device(0).name());
      const auto took = std::chrono::steady_clock::now() - stalled;
      EXPECT_GE(took, 380ms) << schedule_kind_name(kind);
      EXPECT_LT(took, bound(timeout, 150ms)) << schedule_kind_name(kind);
      rt.synchronize(std::chrono::seconds(10));
    }
  }
}

// A stage's own collectives have the transfers' deadline (RelayoutTimeoutScope), not the 60 s
// default: on stage=2 x model=2, stage 0's second device stalls 2 s as stage 0 starts the first
// forward, whose embedding lookup sums its vocabulary shards over model.
TEST_P(GptPipelineStalls, AStageDeviceStalledInsideTheStageIsNamedWithinTheDeadline) {
  using namespace std::chrono_literals;
  const auto timeout = 400ms;
  const CharDataset data = CharDataset::load(kText);
  Runtime rt({.num_cpu_devices = 4});
  std::chrono::steady_clock::time_point stalled;
  PipelineOptions options = options_for(ScheduleKind::k1F1B);
  options.timeout = timeout;
  options.controllers = GetParam();
  options.before_action = [&](const train::PipelineAction& a) {
    if (a.stage == 0 && a.microbatch == 0 && a.pass == train::Pass::kForward) {
      stalled = std::chrono::steady_clock::now();
      rt.device(1).stream().enqueue("stall", [] { std::this_thread::sleep_for(2s); });
    }
  };
  GptPipelineTrainer trainer(config(4), pipeline_mesh(2, 1, 2, rt), options, data, &rt);
  // With stage threads too: stage 1's wait for the activation runs out first and names stage 0,
  // but stage 0's own error (its collective over model waiting for the device) is preferred.
  EXPECT_TESSEL_ERROR(trainer.step(), ErrorCode::kDeadlineExceeded, rt.device(1).name());
  const auto took = std::chrono::steady_clock::now() - stalled;
  EXPECT_GE(took, 380ms);
  EXPECT_LT(took, bound(timeout, 300ms));
  rt.synchronize(std::chrono::seconds(10));
}

// A one-device stage stalled in the middle of its forward (no collective inside the stage to
// notice): the launches that wait for room on its stream give up by the stage's deadline and
// name the device, in every schedule; before, dispatch waited up to 60 s there.
TEST_P(GptPipelineStalls, AOneDeviceStageStalledInsideItsForwardIsNamedWithinTheDeadline) {
  using namespace std::chrono_literals;
  const auto timeout = 400ms;
  const CharDataset data = CharDataset::load(kText);
  for (ScheduleKind kind : {ScheduleKind::k1F1B, ScheduleKind::kZeroBubble}) {
    Runtime rt({.num_cpu_devices = 2});
    std::chrono::steady_clock::time_point stalled;
    PipelineOptions options = options_for(kind);
    options.timeout = timeout;
    options.controllers = GetParam();
    options.before_action = [&](const train::PipelineAction& a) {
      if (a.stage == 0 && a.microbatch == 0 && a.pass == train::Pass::kForward) {
        stalled = std::chrono::steady_clock::now();
        rt.device(0).stream().enqueue("stall", [] { std::this_thread::sleep_for(1500ms); });
      }
    };
    GptPipelineTrainer trainer(config(4), pipeline_mesh(2, 1, 1, rt), options, data, &rt);
    expect_stage_named([&] { trainer.step(); }, threads(),
                       rt.device(0).name() + ": the device's stream made no room within 400 ms", 0,
                       rt.device(0).name());
    const auto took = std::chrono::steady_clock::now() - stalled;
    EXPECT_GE(took, 380ms) << schedule_kind_name(kind);
    EXPECT_LT(took, bound(timeout, 300ms)) << schedule_kind_name(kind);
    rt.synchronize(std::chrono::seconds(10));
  }
}

TEST(GptPipeline, RefusesBadConfigurationsBeforeTheFirstStep) {
  Runtime rt({.num_cpu_devices = 8});
  const Mesh four = pipeline_mesh(4, 1, 1, rt);
  EXPECT_TESSEL_ERROR(GptPipeline(config(3), four, options_for(ScheduleKind::k1F1B), &rt),
                      ErrorCode::kInvalidArgument, "3 layers do not fill 4 virtual stages");
  EXPECT_TESSEL_ERROR(
      GptPipeline(config(8), four, {.schedule = ScheduleKind::k1F1B, .microbatches = 3}, &rt),
      ErrorCode::kInvalidArgument, "batch of 8 rows does not split into 3 microbatches");
  EXPECT_TESSEL_ERROR(
      GptPipeline(config(8), four,
                  {.schedule = ScheduleKind::kInterleaved1F1B, .microbatches = 2, .chunks = 2},
                  &rt),
      ErrorCode::kInvalidArgument, "microbatches (2) to be a multiple of the stages (4)");
  EXPECT_TESSEL_ERROR(GptPipeline(config(8), testing::batch_model_mesh(2, 2, rt),
                                  options_for(ScheduleKind::k1F1B), &rt),
                      ErrorCode::kInvalidArgument, "`stage` as its first dimension");
}

// f16 matmuls with the loss scaled (TrainingConfig::loss_scale): each microbatch's backward pass
// starts from its scaled loss, the gradients are clipped at the scaled bound and unscaled. The
// losses follow the plain f16 run's and the f32 run's within the mixed-precision tests' 2e-3
// (gpt_mixed_precision_test.cpp), no step skipped at 1024; at 2^40 the scaled gradients overflow
// f16, so the first steps are skipped (parameters untouched) and the scale backs off.
TEST(GptPipeline, F16WithLossScalingFollowsThePlainRun) {
  Runtime rt({.num_cpu_devices = 8});
  const CharDataset data = CharDataset::load(kText);
  GptConfig f16 = config(4);
  f16.dtype = DType::kF16;
  f16.loss_scale = 1024;
  const std::vector<double> f32 = plain_losses(config(4), 1, 1, rt, data, 5);
  const std::vector<double> plain = plain_losses(f16, 1, 1, rt, data, 5);
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
    GptPipelineTrainer trainer(f16, pipeline_mesh(2, 1, 1, rt), options_for(kind), data, &rt);
    for (size_t s = 0; s < plain.size(); ++s) {
      const auto report = trainer.step();
      EXPECT_FALSE(report.skipped) << schedule_kind_name(kind) << ", step " << s;
      EXPECT_NEAR(report.loss, plain[s], 2e-3 * plain[s])
          << schedule_kind_name(kind) << ", step " << s;
      EXPECT_NEAR(report.loss, f32[s], 2e-3 * f32[s]) << schedule_kind_name(kind) << ", step " << s;
    }
  }
  GptConfig huge = f16;
  huge.loss_scale = std::ldexp(1.0, 40);
  GptPipelineTrainer trainer(huge, pipeline_mesh(2, 1, 1, rt), options_for(ScheduleKind::k1F1B),
                             data, &rt);
  const std::vector<DTensor> before = trainer.params();
  const auto first = trainer.step();
  EXPECT_TRUE(first.skipped);
  EXPECT_EQ(first.loss_scale, std::ldexp(1.0, 40));
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(to_host(trainer.params()[i]).to_doubles(), to_host(before[i]).to_doubles()) << i;
  }
  EXPECT_EQ(trainer.step().loss_scale, std::ldexp(1.0, 39));  // backed off by half
}

}  // namespace
}  // namespace tessel::gpt
