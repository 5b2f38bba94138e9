// The one median (tessel/core/median.h): the middle value of an odd count, the mean of the two
// middle values of an even one, NaN with a NaN in the sample, and an error for no values.
#include "tessel/core/median.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "testing/expect_error.h"

namespace tessel {
namespace {

TEST(Median, OddCountIsTheMiddleValue) {
  EXPECT_EQ(median({7.0}), 7.0);
  EXPECT_EQ(median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(median({5.0, -1.0, 5.0, 9.0, 0.5}), 5.0);
}

TEST(Median, EvenCountIsTheMeanOfTheMiddleTwo) {
  EXPECT_EQ(median({0.5, 0.25}), 0.375);
  EXPECT_EQ(median({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_EQ(median({5.0, 5.0, 1.0, 9.0}), 5.0);
  EXPECT_EQ(median({-2.0, 6.0, -8.0, 10.0, 0.0, 1.0}), 0.5);
}

TEST(Median, InfinitiesAreValuesAndNanMakesItNan) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(median({kInf, 1.0, -kInf}), 1.0);
  EXPECT_TRUE(std::isnan(median({1.0, std::nan(""), 2.0})));
}

TEST(Median, NoValuesIsInvalidArgument) {
  EXPECT_TESSEL_ERROR(median({}), ErrorCode::kInvalidArgument,
                      "median: no values: an empty sample has no median");
}

}  // namespace
}  // namespace tessel
