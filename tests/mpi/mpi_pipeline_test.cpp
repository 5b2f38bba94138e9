// The pipelined GPT (examples/gpt/gpt_pipeline.h) with its stages on different processes: a stage
// whose processes stall should be named, with the microbatch and the direction, in the
// DeadlineExceeded of the processes waiting for it, within the deadline + 10 %.
//
// DISABLED: it fails today (2026-11-29), a defect below the pipeline. With stage 1's process
// stalled (its controller thread asleep before its first forward), stage 0's process waits in the
// relayout that sends the activation across processes until the peer arrives, not until the
// relayout's 0.5 s deadline (measured: 1.5 s for a 1.5 s stall, 4.0 s for a 4 s stall), and the
// error it then throws is a local group's "waited 0.000 s" naming its own devices, so the
// pipeline blames stage 0. The in-process version (tests/gpt/gpt_pipeline_test.cpp,
// AStalledStageIsNamedWithTheMicrobatchAndDirection) passes. Run it with
// --gtest_also_run_disabled_tests once cross-process relayouts honour their deadline.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gpt_pipeline.h"
#include "mpi/mpi_client.h"
#include "tessel/core/error.h"

namespace tessel {
namespace {

using namespace std::chrono_literals;

TEST(MpiPipeline, DISABLED_AStalledStageIsNamedOnTheOtherStagesProcesses) {
  const int processes = mpi_size();
  if (processes % 2 != 0) GTEST_SKIP() << "two stages need an even number of processes";
  // stage=2 x batch=processes: each stage on half of the processes (their two devices each).
  const Mesh mesh = testing::client_mesh({{"stage", 2}, {"batch", processes}, {"model", 1}});
  gpt::GptConfig config = gpt::GptConfig::preset("test");
  config.batch_size = 2 * processes;
  const auto timeout = 500ms;
  const bool stalls = mpi_rank() >= processes / 2;  // stage 1's processes
  std::chrono::steady_clock::time_point start;
  gpt::PipelineOptions options{.schedule = train::ScheduleKind::k1F1B, .microbatches = 2};
  options.timeout = timeout;
  options.before_action = [&](const train::PipelineAction& a) {
    if (a.stage == 1 && a.microbatch == 0 && a.pass == train::Pass::kForward) {
      start = std::chrono::steady_clock::now();
      if (stalls) std::this_thread::sleep_for(3 * timeout);
    }
  };
  const gpt::GptPipeline pipe(config, mesh, options, &testing::client_runtime());
  const std::vector<DTensor> params = pipe.init(1);
  std::vector<int32_t> ids(static_cast<size_t>(config.batch_size * config.block_size));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i % 65);
  const Tensor idx = Tensor::from_vector(ids, Shape{config.batch_size, config.block_size});
  try {
    pipe.gradients(params, idx, idx, {});
    ADD_FAILURE() << "the step ended without an error";
  } catch (const Error& e) {
    const auto took = std::chrono::steady_clock::now() - start;
    if (stalls) {
      // Its peers gave up on it: whatever the transfer it reaches then reports.
      EXPECT_TRUE(e.code() == ErrorCode::kDeadlineExceeded || e.code() == ErrorCode::kAborted)
          << e.what();
    } else {
      EXPECT_EQ(e.code(), ErrorCode::kDeadlineExceeded) << e.what();
      EXPECT_NE(std::string(e.what()).find("the forward activation of microbatch 0 from stage 0 "
                                           "to stage 1 did not arrive within 500 ms (stage 1 is "
                                           "late)"),
                std::string::npos)
          << e.what();
      EXPECT_GE(took, 480ms);
      EXPECT_LT(took, 1.1 * timeout + 50ms + 300ms);
    }
  }
  std::this_thread::sleep_for(3 * timeout);  // the stalled processes' errors come in meanwhile
}

}  // namespace
}  // namespace tessel
