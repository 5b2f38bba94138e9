// train::DynamicLossScale (examples/train/loss_scale.h): growth after an interval of finite
// steps, backoff on overflow down to a floor of 1, and its checked options and saved state.
#include "loss_scale.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "testing/expect_error.h"

namespace tessel::train {
namespace {

TEST(DynamicLossScale, StartsAtPyTorchsGradScalerDefaults) {
  const DynamicLossScale s;
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.good_steps(), 0);
  EXPECT_EQ(s.skipped_steps(), 0);
}

TEST(DynamicLossScale, GrowsAfterEachIntervalOfFiniteSteps) {
  DynamicLossScale s({.initial = 8, .growth_interval = 3});
  EXPECT_TRUE(s.update(true));
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 8);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 16);
  EXPECT_EQ(s.good_steps(), 0);
  for (int i = 0; i < 3; ++i) s.update(true);
  EXPECT_EQ(s.scale(), 32);
}

TEST(DynamicLossScale, AnOverflowSkipsTheStepHalvesTheScaleAndRestartsTheCount) {
  DynamicLossScale s({.initial = 8, .growth_interval = 3});
  s.update(true);
  s.update(true);
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 4);
  EXPECT_EQ(s.good_steps(), 0);
  EXPECT_EQ(s.skipped_steps(), 1);
  s.update(true);
  s.update(true);
  EXPECT_EQ(s.scale(), 4) << "the count of good steps restarted at the overflow";
}

TEST(DynamicLossScale, NeverGoesBelowOneAndDoesNotSkipThere) {
  DynamicLossScale s({.initial = 3});
  EXPECT_TRUE(s.can_back_off());
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 1.5);
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_FALSE(s.can_back_off());
  // At 1 an overflow is the caller's divergence: not counted as skipped, the scale stays.
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_EQ(s.skipped_steps(), 2);
}

TEST(DynamicLossScale, DoesNotGrowPastTheLargestDouble) {
  DynamicLossScale s({.initial = std::numeric_limits<double>::max(), .growth_interval = 1});
  s.update(true);
  EXPECT_EQ(s.scale(), std::numeric_limits<double>::max());
}

TEST(DynamicLossScale, RefusesOptionsOutOfRangeNamingTheValue) {
  EXPECT_TESSEL_ERROR(DynamicLossScale({.initial = 0.5}), ErrorCode::kInvalidArgument,
                      "loss scale: the initial scale must be finite and >= 1, got 0.5");
  EXPECT_TESSEL_ERROR(DynamicLossScale({.initial = INFINITY}), ErrorCode::kInvalidArgument,
                      "the initial scale must be finite and >= 1, got inf");
  EXPECT_TESSEL_ERROR(DynamicLossScale({.growth_factor = 1}), ErrorCode::kInvalidArgument,
                      "the growth factor must be > 1, got 1");
  EXPECT_TESSEL_ERROR(DynamicLossScale({.backoff_factor = 1}), ErrorCode::kInvalidArgument,
                      "the backoff factor must be in (0, 1), got 1");
  EXPECT_TESSEL_ERROR(DynamicLossScale({.growth_interval = 0}), ErrorCode::kInvalidArgument,
                      "the growth interval must be >= 1 step, got 0");
}

TEST(DynamicLossScale, RestoresASavedStateAndRefusesABadOne) {
  DynamicLossScale s({.growth_interval = 4});
  s.restore(512, 3);
  EXPECT_EQ(s.scale(), 512);
  EXPECT_EQ(s.good_steps(), 3);
  s.update(true);
  EXPECT_EQ(s.scale(), 1024) << "the saved count carries on";
  EXPECT_TESSEL_ERROR(s.restore(0.25, 0), ErrorCode::kInvalidArgument,
                      "a saved scale must be finite and >= 1, got 0.25");
  EXPECT_TESSEL_ERROR(s.restore(2, -1), ErrorCode::kInvalidArgument,
                      "saved good steps must be >= 0, got -1");
  EXPECT_EQ(s.scale(), 1024) << "a refused state changes nothing";
}

}  // namespace
}  // namespace tessel::train
