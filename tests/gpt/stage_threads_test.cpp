// A controller thread per pipeline stage (examples/train/stage_threads.h and
// PipelineOptions::controllers): the threads run their jobs and report the first failure; the
// pipelined GPT run by them (asked for, or the default in one process) gives the single
// controller's losses bit for bit in every schedule on 2 and 4 stages and on stage=2 x model=2; a
// stage whose thread never sends is named by its neighbour within the deadline; the default
// takes them when every stage is in this process and not otherwise; asking for them on a mesh
// spanning processes is refused.
#include "stage_threads.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "char_dataset.h"
#include "gpt_pipeline_trainer.h"
#include "testing/expect_error.h"

namespace tessel::gpt {
namespace {

using namespace std::chrono_literals;
using train::ScheduleKind;
using train::StageThreads;

const std::string kText = std::string(TESSEL_SOURCE_DIR) + "/data/shakespeare_char/input.txt";

TEST(StageThreads, RunsEachJobOnItsOwnThreadAndWaitsForAll) {
  StageThreads threads(3);
  EXPECT_EQ(threads.size(), 3);
  for (int round = 0; round < 3; ++round) {
    std::vector<std::thread::id> ids(3);
    std::atomic<int> arrived{0};
    std::vector<std::function<void()>> jobs;
    for (size_t i = 0; i < 3; ++i) {
      jobs.emplace_back([&, i] {
        ids[i] = std::this_thread::get_id();
        ++arrived;
        // Every job waits for the others: they run at once, on different threads.
        const auto deadline = std::chrono::steady_clock::now() + 10s;
        while (arrived.load() < 3 && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::yield();
        }
      });
    }
    threads.run(std::move(jobs));
    EXPECT_EQ(arrived.load(), 3);
    EXPECT_NE(ids[0], ids[1]);
    EXPECT_NE(ids[1], ids[2]);
    EXPECT_NE(ids[0], std::this_thread::get_id());
  }
}

TEST(StageThreads, RethrowsTheFirstFailureAfterEveryJobEnded) {
  StageThreads threads(2);
  std::atomic<bool> other_finished{false};
  EXPECT_TESSEL_ERROR(threads.run({[] { throw Error(ErrorCode::kAborted, "job", "first"); },
                                   [&] {
                                     std::this_thread::sleep_for(50ms);
                                     other_finished = true;
                                   }}),
                      ErrorCode::kAborted, "first");
  EXPECT_TRUE(other_finished.load());
  threads.run({nullptr, [] {}});  // usable again; an empty job does nothing
  EXPECT_TESSEL_ERROR(threads.run({[] {}}), ErrorCode::kInvalidArgument, "1 jobs for 2 threads");
  EXPECT_TESSEL_ERROR(StageThreads(0), ErrorCode::kInvalidArgument, "at least one thread, got 0");
}

GptConfig config() {
  GptConfig c = GptConfig::preset("test");
  c.n_layer = 8;
  c.batch_size = 8;
  c.dropout = 0;
  return c;
}

Mesh pipeline_mesh(int64_t stages, int64_t model, const Runtime& rt) {
  std::vector<std::string> names;
  for (int64_t i = 0; i < stages * model; ++i)
    names.push_back(rt.device(static_cast<int>(i)).name());
  return Mesh::create_on_devices({{"stage", stages}, {"batch", 1}, {"model", model}}, names);
}

std::vector<double> losses(const Mesh& mesh, PipelineOptions options, Runtime& rt,
                           const CharDataset& data) {
  GptPipelineTrainer trainer(config(), mesh, options, data, &rt);
  std::vector<double> out;
  for (int s = 0; s < 4; ++s) out.push_back(trainer.step().loss);
  return out;
}

// Each stage's ops are the same, in the same order, whichever thread issues them: the losses are
// the single controller's bit for bit.
TEST(GptPipelineStageThreads, GiveTheSingleControllersLosses) {
  Runtime rt({.num_cpu_devices = 4});
  const CharDataset data = CharDataset::load(kText);
  for (const auto& [stages, model] : {std::pair<int64_t, int64_t>{2, 1}, {4, 1}, {2, 2}}) {
    for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B,
                              ScheduleKind::kInterleaved1F1B, ScheduleKind::kZeroBubble}) {
      PipelineOptions options{.schedule = kind,
                              .microbatches = 4,
                              .chunks = kind == ScheduleKind::kInterleaved1F1B ? 2 : 1,
                              .controllers = Controllers::kOneController};
      const Mesh mesh = pipeline_mesh(stages, model, rt);
      const std::vector<double> want = losses(mesh, options, rt, data);
      options.controllers = Controllers::kStageThreads;
      options.measure_idle = true;
      EXPECT_EQ(losses(mesh, options, rt, data), want)
          << schedule_kind_name(kind) << " on " << stages << " stages x model " << model;
      if (kind == ScheduleKind::k1F1B) {  // the default: stage threads here
        options.controllers = Controllers::kAuto;
        options.measure_idle = false;
        EXPECT_EQ(losses(mesh, options, rt, data), want) << stages << " stages x model " << model;
      }
    }
  }
}

// Stage 0's thread stalls 1 s before its first forward: stage 1 waits for the activation and
// ends the step with kDeadlineExceeded naming stage 0, the microbatch and the direction; asked
// for and as the default in one process.
class StageThreadsOrDefault : public ::testing::TestWithParam<Controllers> {};

TEST_P(StageThreadsOrDefault, AStageThatDoesNotSendIsNamed) {
  const CharDataset data = CharDataset::load(kText);
  Runtime rt({.num_cpu_devices = 2});
  const auto timeout = 400ms;
  std::chrono::steady_clock::time_point stalled;
  PipelineOptions options{.schedule = ScheduleKind::k1F1B,
                          .microbatches = 2,
                          .timeout = timeout,
                          .controllers = GetParam()};
  options.before_action = [&](const train::PipelineAction& a) {
    if (a.stage == 0 && a.microbatch == 0 && a.pass == train::Pass::kForward) {
      stalled = std::chrono::steady_clock::now();
      std::this_thread::sleep_for(1s);
    }
  };
  GptConfig c = config();
  c.n_layer = 4;
  GptPipelineTrainer trainer(c, pipeline_mesh(2, 1, rt), options, data, &rt);
  ASSERT_TRUE(trainer.pipeline().stage_threads());
  EXPECT_TESSEL_ERROR(trainer.step(), ErrorCode::kDeadlineExceeded,
                      "the forward activation of microbatch 0 from stage 0 to stage 1 did not "
                      "arrive within 400 ms (stage 0 is late)");
  // The step ends when the stalled thread comes back (1 s) and sees the failure: no hang (a
  // margin for a loaded machine and the sanitizer builds).
  const auto took = std::chrono::steady_clock::now() - stalled;
  EXPECT_GE(took, 1s);
  EXPECT_LT(took, 3s);
}

INSTANTIATE_TEST_SUITE_P(Controllers, StageThreadsOrDefault,
                         ::testing::Values(Controllers::kStageThreads, Controllers::kAuto),
                         [](const auto& info) {
                           return info.param == Controllers::kAuto ? "Default" : "AskedFor";
                         });

// The default (kAuto) takes stage threads when every stage is in this process and there are
// several; one controller when asked for or with one stage.
TEST(GptPipelineStageThreads, AreTheDefaultWhenEveryStageIsInThisProcess) {
  Runtime rt({.num_cpu_devices = 4});
  const auto taken = [&](const Mesh& mesh, Controllers c) {
    return GptPipeline(config(), mesh, {.microbatches = 4, .controllers = c}, &rt).stage_threads();
  };
  EXPECT_TRUE(taken(pipeline_mesh(2, 2, rt), Controllers::kAuto));
  EXPECT_TRUE(taken(pipeline_mesh(4, 1, rt), Controllers::kStageThreads));
  EXPECT_FALSE(taken(pipeline_mesh(2, 2, rt), Controllers::kOneController));
  EXPECT_FALSE(taken(pipeline_mesh(1, 2, rt), Controllers::kAuto));  // nothing to overlap
  // A mesh across processes (kAuto: one controller) is mpi.gpt_pipeline_np2's (its JSON).
  EXPECT_STREQ(controllers_name(Controllers::kAuto), "auto");
  EXPECT_STREQ(controllers_name(Controllers::kOneController), "one controller");
  EXPECT_STREQ(controllers_name(Controllers::kStageThreads), "stage threads");
}

TEST(GptPipelineStageThreads, RefuseAMeshAcrossProcesses) {
  Runtime rt({.num_cpu_devices = 2});
  // Two of the mesh's four devices are this process's.
  const Mesh mesh({"stage", "batch", "model"}, {2, 1, 2}, {0, 1, 2, 3}, {0, 1},
                  {rt.device(0).name(), rt.device(1).name()}, "");
  EXPECT_TESSEL_ERROR(GptPipeline(config(), mesh,
                                  {.schedule = ScheduleKind::k1F1B,
                                   .microbatches = 4,
                                   .controllers = Controllers::kStageThreads},
                                  &rt),
                      ErrorCode::kInvalidArgument,
                      "stage threads run every stage in this process; 2 of the "
                      "mesh's 4 devices are here");
}

}  // namespace
}  // namespace tessel::gpt
