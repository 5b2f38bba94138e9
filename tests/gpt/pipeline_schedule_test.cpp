// Pipeline schedules as data (examples/train/pipeline_schedule.h): the action lists of GPipe,
// 1F1B and interleaved 1F1B written out by hand for small sizes, every schedule of a range of
// sizes free of deadlocks with the formula's bubble, the activations each keeps, the checker
// finding broken schedules, and the refusals naming the values.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pipeline_schedule.h"
#include "tessel/core/error.h"

namespace tessel::train {
namespace {

std::string labels(const PipelineSchedule& s, int stage) {
  std::string out;
  for (const PipelineAction& a : s.per_stage[static_cast<size_t>(stage)]) {
    out += (out.empty() ? "" : " ") + a.label(s.chunks > 1);
  }
  return out;
}

template <typename Fn>
void expect_error(Fn&& fn, ErrorCode code, const std::vector<std::string>& parts) {
  try {
    fn();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
        << "'" << p << "' not in: " << e.what();
  }
}

TEST(PipelineSchedule, OneFOneBByHand) {
  const PipelineSchedule s = make_schedule(ScheduleKind::k1F1B, 2, 4);
  EXPECT_EQ(labels(s, 0), "F0 F1 B0 F2 B1 F3 B2 B3");
  EXPECT_EQ(labels(s, 1), "F0 B0 F1 B1 F2 B2 F3 B3");
  const ScheduleSimulation sim = simulate(s);
  EXPECT_EQ(sim.max_in_flight, (std::vector<int>{2, 1}));
  EXPECT_DOUBLE_EQ(sim.makespan, 3.0 * (4 + 2 - 1));
}

TEST(PipelineSchedule, GPipeByHand) {
  const PipelineSchedule s = make_schedule(ScheduleKind::kGPipe, 3, 2);
  for (int st = 0; st < 3; ++st) EXPECT_EQ(labels(s, st), "F0 F1 B0 B1");
  EXPECT_EQ(simulate(s).max_in_flight, (std::vector<int>{2, 2, 2}));
}

TEST(PipelineSchedule, InterleavedByHand) {
  // Megatron-LM's order for p = 2, v = 2, m = 4: stage 0 warms up with (p - 1) * 2 + (v - 1) * p
  // = 4 forwards, stage 1 with 2.
  const PipelineSchedule s = make_schedule(ScheduleKind::kInterleaved1F1B, 2, 4, 2);
  EXPECT_EQ(labels(s, 0), "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 "
                          "B2.0 B3.0");
  EXPECT_EQ(labels(s, 1), "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 "
                          "B2.0 B3.0");
  check_schedule(s);
}

TEST(PipelineSchedule, ZeroBubbleByHand) {
  // ZB-H1: 1f1b's forwards and input backwards; stage s's weight backwards s backwards late.
  const PipelineSchedule s = make_schedule(ScheduleKind::kZeroBubble, 2, 4);
  EXPECT_EQ(labels(s, 0), "F0 F1 B0 W0 F2 B1 W1 F3 B2 W2 B3 W3");
  EXPECT_EQ(labels(s, 1), "F0 B0 F1 B1 W0 F2 B2 W1 F3 B3 W2 W3");
  const ScheduleSimulation sim = simulate(s);
  EXPECT_EQ(sim.max_in_flight, (std::vector<int>{2, 2}));
  EXPECT_DOUBLE_EQ(sim.makespan, 3.0 * 4 + 1);  // 1f1b's: 3 * 4 + 3
  EXPECT_TRUE(s.splits_backward());
  EXPECT_FALSE(make_schedule(ScheduleKind::k1F1B, 2, 4).splits_backward());
}

// Zero-bubble for p in 1..8, m in 1..16: runs to its end; idles exactly (p - 1) / (3 m + p - 1)
// on its idlest stage once m >= p, less than 1f1b whenever 1f1b has a bubble; keeps at most
// min(p, m) microbatches on every stage (1f1b's stage 0).
TEST(PipelineSchedule, ZeroBubbleCutsOneFOneBsBubble) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 16; ++m) {
      const PipelineSchedule s = make_schedule(ScheduleKind::kZeroBubble, p, m);
      const ScheduleSimulation sim = simulate(s);
      const std::string where = "p=" + std::to_string(p) + " m=" + std::to_string(m);
      if (m >= p) {
        EXPECT_NEAR(sim.max_idle_fraction(), bubble_formula(ScheduleKind::kZeroBubble, p, m),
                    1e-12)
            << where;
      }
      if (p > 1) {
        EXPECT_LT(sim.max_idle_fraction(), bubble_formula(ScheduleKind::k1F1B, p, m)) << where;
      }
      for (int in_flight : sim.max_in_flight) EXPECT_LE(in_flight, std::min(p, m)) << where;
    }
  }
}

// Every schedule of p in 1..6, m in 1..12 (interleaved: v in 2..3 and m a multiple of p) runs to
// its end; gpipe and 1f1b idle exactly the formula's bubble on every stage, interleaved at most
// its formula's plus 20 % (the formula is Narayanan et al.'s approximation); 1f1b keeps at most
// p microbatches per stage, gpipe m.
TEST(PipelineSchedule, EverySizeRunsWithTheFormulasBubble) {
  for (int p = 1; p <= 6; ++p) {
    for (int m = 1; m <= 12; ++m) {
      for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
        const PipelineSchedule s = make_schedule(kind, p, m);
        const ScheduleSimulation sim = simulate(s);
        for (int st = 0; st < p; ++st) {
          EXPECT_NEAR(sim.idle_fraction[static_cast<size_t>(st)], bubble_formula(kind, p, m), 1e-12)
              << schedule_kind_name(kind) << " p=" << p << " m=" << m << " stage " << st;
          EXPECT_EQ(sim.max_in_flight[static_cast<size_t>(st)],
                    kind == ScheduleKind::kGPipe ? m : std::min(p - st, m));
        }
      }
      if (m % p != 0) continue;
      for (int v = 2; v <= 3; ++v) {
        const PipelineSchedule s = make_schedule(ScheduleKind::kInterleaved1F1B, p, m, v);
        const ScheduleSimulation sim = simulate(s);
        const double formula = bubble_formula(ScheduleKind::kInterleaved1F1B, p, m, v);
        EXPECT_LE(sim.max_idle_fraction(), 1.2 * formula + 1e-12)
            << "p=" << p << " m=" << m << " v=" << v;
        // Fewer idle than 1f1b's with the same microbatches whenever there is a bubble.
        if (p > 1) {
          EXPECT_LT(sim.max_idle_fraction(), bubble_formula(ScheduleKind::k1F1B, p, m));
        }
      }
    }
  }
}

TEST(PipelineSchedule, TimelineOrderRespectsDependencies) {
  const PipelineSchedule s = make_schedule(ScheduleKind::kInterleaved1F1B, 4, 8, 2);
  const ScheduleSimulation sim = simulate(s);
  ASSERT_EQ(sim.timeline.size(), static_cast<size_t>(2 * 4 * 8 * 2));
  for (size_t i = 1; i < sim.timeline.size(); ++i) {
    EXPECT_LE(sim.timeline[i - 1].start, sim.timeline[i].start);
  }
  // Replaying the timeline in order on a one-thread executor: each action's inputs are there.
  PipelineSchedule replay = s;
  for (auto& actions : replay.per_stage) actions.clear();
  for (const TimedAction& t : sim.timeline) {
    replay.per_stage[static_cast<size_t>(t.action.stage)].push_back(t.action);
  }
  EXPECT_EQ(replay.per_stage, s.per_stage);  // each stage's order is kept
}

TEST(PipelineSchedule, CheckerFindsADeadlock) {
  PipelineSchedule s = make_schedule(ScheduleKind::k1F1B, 2, 2);
  // Stage 1 wants microbatch 1 first; stage 0 sends it only after B0, which needs stage 1.
  s.per_stage[0] = {{0, 0, 0, Pass::kForward}, {0, 0, 0, Pass::kBackward},
                    {0, 0, 1, Pass::kForward}, {0, 0, 1, Pass::kBackward}};
  s.per_stage[1] = {{1, 0, 1, Pass::kForward}, {1, 0, 0, Pass::kForward},
                    {1, 0, 0, Pass::kBackward}, {1, 0, 1, Pass::kBackward}};
  expect_error([&] { check_schedule(s); }, ErrorCode::kFailedPrecondition,
               {"deadlock", "stage 0 at B0 waits for B0 of stage 1",
                "stage 1 at F1 waits for F1 of stage 0"});
}

TEST(PipelineSchedule, CheckerFindsBadActions) {
  const PipelineSchedule good = make_schedule(ScheduleKind::kGPipe, 2, 2);
  PipelineSchedule missing = good;
  missing.per_stage[1].pop_back();
  expect_error([&] { check_schedule(missing); }, ErrorCode::kFailedPrecondition,
               {"B1 of stage 1 is missing"});
  PipelineSchedule twice = good;
  twice.per_stage[0][1] = twice.per_stage[0][0];
  expect_error([&] { check_schedule(twice); }, ErrorCode::kFailedPrecondition,
               {"stage 0 runs F0 twice"});
  PipelineSchedule backward_first = good;
  std::swap(backward_first.per_stage[1][0], backward_first.per_stage[1][2]);
  expect_error([&] { check_schedule(backward_first); }, ErrorCode::kFailedPrecondition,
               {"stage 1 runs B0 before its forward"});
  PipelineSchedule elsewhere = good;
  elsewhere.per_stage[0][0].stage = 1;
  expect_error([&] { check_schedule(elsewhere); }, ErrorCode::kFailedPrecondition,
               {"stage 0 lists F0 of stage 1"});
  PipelineSchedule weight_in_1f1b = make_schedule(ScheduleKind::k1F1B, 2, 2);
  weight_in_1f1b.per_stage[1].push_back({1, 0, 0, Pass::kWeight});
  expect_error([&] { check_schedule(weight_in_1f1b); }, ErrorCode::kFailedPrecondition,
               {"stage 1 lists W0", "1f1b does not split backwards"});
  const PipelineSchedule zb = make_schedule(ScheduleKind::kZeroBubble, 2, 2);
  PipelineSchedule no_weight = zb;
  no_weight.per_stage[0].pop_back();
  expect_error([&] { check_schedule(no_weight); }, ErrorCode::kFailedPrecondition,
               {"W1 of stage 0 is missing"});
  PipelineSchedule weight_first = zb;  // stage 1: F0 B0 F1 B1 W0 W1 -> W0 before B0
  std::swap(weight_first.per_stage[1][1], weight_first.per_stage[1][4]);
  expect_error([&] { check_schedule(weight_first); }, ErrorCode::kFailedPrecondition,
               {"stage 1 runs W0 before its input backward"});
}

TEST(PipelineSchedule, RefusesSizesNamingTheValues) {
  expect_error([] { make_schedule(ScheduleKind::kInterleaved1F1B, 4, 6, 2); },
               ErrorCode::kInvalidArgument, {"microbatches (6)", "stages (4)"});
  expect_error([] { make_schedule(ScheduleKind::kInterleaved1F1B, 2, 4, 1); },
               ErrorCode::kInvalidArgument, {">= 2 chunks", "got 1"});
  expect_error([] { make_schedule(ScheduleKind::k1F1B, 2, 4, 2); }, ErrorCode::kInvalidArgument,
               {"1f1b", "got 2 chunks"});
  expect_error([] { make_schedule(ScheduleKind::kGPipe, 0, 4); }, ErrorCode::kInvalidArgument,
               {"stages (0)"});
  expect_error([] { bubble_formula(ScheduleKind::kGPipe, 2, 0); }, ErrorCode::kInvalidArgument,
               {"microbatches (0)"});
  expect_error([] { parse_schedule_kind("zb"); }, ErrorCode::kInvalidArgument,
               {"'zb'", "gpipe, 1f1b, interleaved or zero-bubble"});
  EXPECT_EQ(parse_schedule_kind("interleaved"), ScheduleKind::kInterleaved1F1B);
  EXPECT_EQ(parse_schedule_kind("zero-bubble"), ScheduleKind::kZeroBubble);
  expect_error([] { make_schedule(ScheduleKind::kZeroBubble, 2, 4, 2); },
               ErrorCode::kInvalidArgument, {"zero-bubble", "got 2 chunks"});
}

TEST(PipelineSchedule, PrintsActionsBubbleAndChart) {
  const std::string text = make_schedule(ScheduleKind::k1F1B, 2, 4).to_string();
  EXPECT_NE(text.find("schedule 1f1b: 2 stages x 1 chunk, 4 microbatches"), std::string::npos)
      << text;
  EXPECT_NE(text.find("(p-1)/(m+p-1) = 0.2000"), std::string::npos) << text;
  EXPECT_NE(text.find("stage 0: F0 F1 B0 F2 B1 F3 B2 B3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("stage 1 |. |F0|B0|B0|F1|"), std::string::npos) << text;
  EXPECT_NE(text.find("at most: 2, 1 microbatches"), std::string::npos) << text;
  const std::string zb = make_schedule(ScheduleKind::kZeroBubble, 2, 4).to_string();
  EXPECT_NE(zb.find("(p-1)/(3*m+p-1) = 0.0769, simulated idle 0.0769"), std::string::npos) << zb;
  EXPECT_NE(zb.find("stage 1 |. |F0|B0|F1|B1|W0|"), std::string::npos) << zb;
}

}  // namespace
}  // namespace tessel::train
