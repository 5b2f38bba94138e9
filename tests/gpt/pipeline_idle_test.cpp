// The measured bubble (examples/train/pipeline_idle.h): the arithmetic on hand-made stream
// readings, the meter on stages whose streams are given known busy intervals and one transfer,
// and the pipelined GPT measuring its schedule with PipelineOptions::measure_idle.
#include "pipeline_idle.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "char_dataset.h"
#include "gpt_pipeline_trainer.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/relayout.h"
#include "testing/expect_error.h"

namespace tessel::train {
namespace {

using namespace std::chrono_literals;

BusyTime times(double kernels, double communication) { return {kernels, communication, 0, 0}; }

// Stands for a kernel of `time` on `device`'s stream: a known busy interval.
void enqueue_kernel(Device& device, std::chrono::milliseconds time) {
  device.stream().enqueue("synthetic_kernel", [&device, time] {
    const auto start = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(time);
    detail::add_kernel_time(device, std::chrono::steady_clock::now() - start);
  });
}

TEST(PipelineIdle, StageIdleIsOneLessTheDevicesMeanComputingTimeOverTheWall) {
  // Device 0 ran kernels 0.5 s and collectives 0.1 s, device 1 kernels 0.4 s: 0.45 s mean.
  const StageIdle s =
      stage_idle({times(1.0, 0.2), times(3.0, 0.5)}, {times(1.5, 0.3), times(3.4, 0.5)}, 1.0, 0.05);
  EXPECT_EQ(s.devices, 2);
  EXPECT_NEAR(s.computing_seconds, 0.45, 1e-12);
  EXPECT_NEAR(s.communication_seconds, 0.05, 1e-12);
  EXPECT_NEAR(s.idle_fraction, 0.55, 1e-12);
  EXPECT_NEAR(s.transfer_seconds, 0.05, 1e-12);
  EXPECT_NEAR(s.transfer_fraction, 0.05, 1e-12);
}

TEST(PipelineIdle, ATransferTakesTheShortestCommunicationOfItsDevices) {
  // The early device waited 0.3 s for the late one, which moved the data in 0.02 s; a device
  // that did not communicate is not counted.
  EXPECT_NEAR(transfer_seconds({times(0, 0), times(0, 1.0), times(5, 2)},
                               {times(1, 0.3), times(0.1, 1.02), times(5, 2)}),
              0.02, 1e-12);
  EXPECT_EQ(transfer_seconds({times(0, 0)}, {times(1, 0)}), 0.0);
}

TEST(PipelineIdle, WindowsAddUpOverTheirTotalWallTime) {
  PipelineIdle total;
  PipelineIdle a{.wall_seconds = 1.0,
                 .stages = {stage_idle({times(0, 0)}, {times(0.8, 0)}, 1.0, 0.1)},
                 .transfers = 2,
                 .windows = 1,
                 .log = {}};
  PipelineIdle b{.wall_seconds = 3.0,
                 .stages = {stage_idle({times(0, 0)}, {times(1.2, 0)}, 3.0, 0.3)},
                 .transfers = 2,
                 .windows = 1,
                 .log = {}};
  total.add(a);
  total.add(b);
  EXPECT_EQ(total.windows, 2);
  EXPECT_EQ(total.transfers, 4);
  EXPECT_NEAR(total.wall_seconds, 4.0, 1e-12);
  EXPECT_NEAR(total.stages[0].idle_fraction, 1 - 2.0 / 4.0, 1e-12);
  EXPECT_NEAR(total.stages[0].transfer_fraction, 0.4 / 4.0, 1e-12);
  PipelineIdle two_stages = a;
  two_stages.stages.push_back(a.stages[0]);
  EXPECT_TESSEL_ERROR(total.add(two_stages), ErrorCode::kInvalidArgument,
                      "adding a window of 2 stages to one of 1");
}

// Under several processes each process logs its side of every transfer, its wait included:
// stage 0's process waited 0.5 s in the first transfer, stage 1's 0.01 s (it arrived last);
// each transfer counts its shorter side for both its stages; a side that is -1 (no device of
// that process took part) does not count.
TEST(PipelineIdle, ATransferAcrossProcessesCountsItsShorterSide) {
  const std::vector<TransferRecord> stage0 = {{0, 1, 0.5}, {1, 0, 0.02}, {1, 2, -1}};
  const std::vector<TransferRecord> stage1 = {{0, 1, 0.01}, {1, 0, 0.3}, {1, 2, 0.04}};
  const std::vector<TransferRecord> stage2 = {{0, 1, -1}, {1, 0, -1}, {1, 2, 0.2}};
  const std::vector<double> seconds = transfer_seconds_across({stage0, stage1, stage2});
  ASSERT_EQ(seconds.size(), 3u);
  EXPECT_NEAR(seconds[0], 0.01 + 0.02, 1e-12);
  EXPECT_NEAR(seconds[1], 0.01 + 0.02 + 0.04, 1e-12);
  EXPECT_NEAR(seconds[2], 0.04, 1e-12);
  EXPECT_TESSEL_ERROR(transfer_seconds_across({stage0, {{0, 1, 0.1}}, stage2}),
                      ErrorCode::kInvalidArgument, "the stages' transfer logs differ (3 and 1");
  EXPECT_TESSEL_ERROR(transfer_seconds_across({{{0, 5, 0.1}}}), ErrorCode::kInvalidArgument,
                      "transfer 0 is between stages 0 and 5, of 1");
}

// Windows of the same transfers add their logs' seconds; windows whose transfers differ leave no
// log (their transfers cannot be lined up).
TEST(PipelineIdle, WindowsOfTheSameTransfersAddTheirLogs) {
  PipelineIdle total;
  PipelineIdle a{.wall_seconds = 1.0,
                 .stages = {stage_idle({times(0, 0)}, {times(0.5, 0)}, 1.0, 0.1)},
                 .transfers = 2,
                 .windows = 1,
                 .log = {{0, 0, 0.05}, {0, 0, -1}}};
  total.add(a);
  total.add(a);
  ASSERT_EQ(total.log.size(), 2u);
  EXPECT_NEAR(total.log[0].seconds, 0.1, 1e-12);
  EXPECT_EQ(total.log[1].seconds, -1);
  PipelineIdle other = a;
  other.log[0].to = 1;
  total.add(other);
  EXPECT_TRUE(total.log.empty());
}

TEST(PipelineIdle, RefusesMismatchedReadingsAndAnEmptyWindow) {
  EXPECT_TESSEL_ERROR(stage_idle({times(0, 0)}, {}, 1.0, 0), ErrorCode::kInvalidArgument,
                      "got 1 and 0");
  EXPECT_TESSEL_ERROR(stage_idle({times(0, 0)}, {times(0, 0)}, 0.0, 0), ErrorCode::kInvalidArgument,
                      "a wall time > 0 (got 0 s)");
}

// Two stages of one device each: stage 0's stream runs a (synthetic) kernel of 120 ms, stage
// 1's one of 30 ms, then one transfer from stage 0 to stage 1 (a relayout: a send_recv on both
// streams).
TEST(PipelineIdleMeter, MeasuresKnownBusyIntervalsAndATransfer) {
  Runtime rt({.num_cpu_devices = 2});
  Device& d0 = rt.device(0);
  Device& d1 = rt.device(1);
  const Mesh m0 = Mesh::create_on_devices({{"batch", 1}}, {d0.name()});
  const Mesh m1 = Mesh::create_on_devices({{"batch", 1}}, {d1.name()});
  const DTensor x = copy_to_mesh(Tensor::full(Shape{256, 256}, DType::kF32, 1.0),
                                 Layout({"unsharded", "unsharded"}, m0), rt);
  PipelineIdleMeter meter({{&d0}, {&d1}}, std::chrono::steady_clock::now() + 10s);
  enqueue_kernel(d0, 120ms);
  enqueue_kernel(d1, 30ms);
  const DTensor y = meter.transfer(0, 1, [&] {
    return relayout(x, Layout({"unsharded", "unsharded"}, m1), RelayoutOptions{10s});
  });
  const PipelineIdle idle = meter.finish(std::chrono::steady_clock::now() + 10s);
  EXPECT_EQ(&y.device(0), &d1);
  ASSERT_EQ(idle.stages.size(), 2u);
  EXPECT_EQ(idle.transfers, 1);
  EXPECT_EQ(idle.windows, 1);
  EXPECT_GE(idle.wall_seconds, 0.120);
  const StageIdle& s0 = idle.stages[0];
  const StageIdle& s1 = idle.stages[1];
  // The kernels are the computing time (their sleeps overshoot on a loaded machine); the
  // transfer's copy is inside its collective: communication.
  EXPECT_GE(s0.computing_seconds, 0.120);
  EXPECT_LT(s0.computing_seconds, 0.120 + 0.3);
  EXPECT_GE(s1.computing_seconds, 0.030);
  EXPECT_LT(s1.computing_seconds, 0.030 + 0.3);
  EXPECT_NEAR(s0.idle_fraction, 1 - s0.computing_seconds / idle.wall_seconds, 1e-12);
  EXPECT_GT(s1.idle_fraction, s0.idle_fraction);
  // Device 1 waited in the send_recv for device 0's 120 ms: its communication holds the wait;
  // the transfer is the shorter side's, device 0's, which arrived last.
  EXPECT_GT(s1.communication_seconds, 0.05);
  EXPECT_GT(s0.transfer_seconds, 0.0);
  EXPECT_EQ(s0.transfer_seconds, s1.transfer_seconds);
  EXPECT_LT(s0.transfer_seconds, s1.communication_seconds);
  EXPECT_LE(s0.transfer_seconds, s0.communication_seconds + 1e-12);
  // The transfer's log: its stages and the time both sides' shorter one.
  ASSERT_EQ(idle.log.size(), 1u);
  EXPECT_EQ(idle.log[0].from, 0);
  EXPECT_EQ(idle.log[0].to, 1);
  EXPECT_EQ(idle.log[0].seconds, s0.transfer_seconds);
}

TEST(PipelineIdleMeter, NamesADeviceWhoseWorkDoesNotEndByTheDeadline) {
  Runtime rt({.num_cpu_devices = 1});
  Device& d0 = rt.device(0);
  d0.stream().enqueue("slow_op", [] { std::this_thread::sleep_for(300ms); });
  EXPECT_TESSEL_ERROR(PipelineIdleMeter({{&d0}}, std::chrono::steady_clock::now() + 50ms),
                      ErrorCode::kDeadlineExceeded,
                      "did not finish its work by the deadline "
                      "(running 'slow_op')");
  d0.stream().synchronize();
}

// The pipelined GPT with measure_idle: every stage measured, the transfers of a step counted
// (per microbatch one forward and one backward between the 2 stages, and the tied embedding's
// copy and gradient), the fractions within [0, 1].
TEST(PipelineIdleMeter, ThePipelinedGptMeasuresEachStepsSchedule) {
  Runtime rt({.num_cpu_devices = 2});
  gpt::GptConfig c = gpt::GptConfig::preset("test");
  c.batch_size = 8;
  c.dropout = 0;
  const Mesh mesh = Mesh::create_on_devices({{"stage", 2}, {"batch", 1}, {"model", 1}},
                                            {rt.device(0).name(), rt.device(1).name()});
  const gpt::CharDataset data =
      gpt::CharDataset::load(std::string(TESSEL_SOURCE_DIR) + "/data/shakespeare_char/input.txt");
  gpt::GptPipelineTrainer trainer(
      c, mesh, {.schedule = ScheduleKind::k1F1B, .microbatches = 4, .measure_idle = true}, data,
      &rt);
  trainer.step();
  trainer.step();
  ASSERT_TRUE(trainer.last_idle().has_value());
  const PipelineIdle& last = *trainer.last_idle();
  EXPECT_EQ(last.transfers, 2 * 4 + 2);
  ASSERT_EQ(last.stages.size(), 2u);
  for (const StageIdle& s : last.stages) {
    EXPECT_EQ(s.devices, 1);
    EXPECT_GT(s.computing_seconds, 0.0);
    EXPECT_GE(s.idle_fraction, 0.0);
    EXPECT_LT(s.idle_fraction, 1.0);
    EXPECT_GT(s.transfer_seconds, 0.0);
    EXPECT_LE(s.transfer_fraction, s.idle_fraction);
  }
  EXPECT_EQ(trainer.idle_total().windows, 2);
  trainer.reset_idle();
  EXPECT_EQ(trainer.idle_total().windows, 0);
}

}  // namespace
}  // namespace tessel::train
