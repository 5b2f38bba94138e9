// The one reader of environment variables (src/core/env.h): each typed reader's value, its
// default when the variable is unset or empty, and the error naming the variable and the value.
#include "core/env.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "testing/expect_error.h"
#include "testing/scoped_env.h"

namespace tessel::detail {
namespace {

using ::tessel::testing::ScopedEnv;

constexpr const char* kName = "TESSEL_ENV_TEST_VARIABLE";

TEST(Env, StringIsTheTextUnsetOrEmptyIsNothing) {
  {
    ScopedEnv env(kName, std::nullopt);
    EXPECT_EQ(env_string(kName), std::nullopt);
    EXPECT_EQ(env_raw(kName), std::nullopt);
  }
  {
    ScopedEnv env(kName, "");
    EXPECT_EQ(env_string(kName), std::nullopt);
    EXPECT_EQ(env_raw(kName), "");  // for a variable whose empty value means something
  }
  ScopedEnv env(kName, "a,b");
  EXPECT_EQ(env_string(kName), "a,b");
  EXPECT_EQ(env_raw(kName), "a,b");
}

TEST(Env, IntegerInItsRangeOrTheDefault) {
  {
    ScopedEnv env(kName, std::nullopt);
    EXPECT_EQ(env_int(kName, {1, 8}, "Test").value_or(4), 4);
  }
  {
    ScopedEnv env(kName, "");
    EXPECT_EQ(env_int(kName, {1, 8}, "Test").value_or(4), 4);
  }
  for (const auto& [text, value] : {std::pair<const char*, int64_t>{"1", 1}, {"8", 8}}) {
    ScopedEnv env(kName, text);
    EXPECT_EQ(env_int(kName, {1, 8}, "Test"), value);
  }
  ScopedEnv env(kName, "-9223372036854775808");
  EXPECT_EQ(env_int(kName, {}, "Test"), std::numeric_limits<int64_t>::min());
}

TEST(Env, IntegerGarbageOrOutOfRangeNamesTheVariableAndTheValue) {
  for (const char* bad : {"lots", "0", "9", "4x", " 4", "+4", "4.0", "99999999999999999999"}) {
    SCOPED_TRACE(bad);
    ScopedEnv env(kName, bad);
    EXPECT_TESSEL_ERROR(env_int(kName, {1, 8}, "Test"), ErrorCode::kInvalidArgument,
                        std::string("Test: TESSEL_ENV_TEST_VARIABLE='") + bad +
                            "' is not an integer in [1, 8]");
  }
  ScopedEnv env(kName, "lots");
  EXPECT_TESSEL_ERROR(env_int(kName, {1, 8}, "Runtime", "a positive integer up to 8"),
                      ErrorCode::kInvalidArgument,
                      "Runtime: TESSEL_ENV_TEST_VARIABLE='lots' is not a positive integer up to 8");
  EXPECT_TESSEL_ERROR(env_int(kName, {}, "Test"), ErrorCode::kInvalidArgument,
                      "'lots' is not an integer");
  EXPECT_TESSEL_ERROR(env_int(kName, {0}, "Test"), ErrorCode::kInvalidArgument,
                      "'lots' is not an integer >= 0");
}

TEST(Env, NumberInItsHalfOpenRange) {
  {
    ScopedEnv env(kName, std::nullopt);
    EXPECT_EQ(env_number(kName, {0.0, 1.0}, "Test").value_or(0.75), 0.75);
  }
  {
    ScopedEnv env(kName, "0.5");
    EXPECT_EQ(env_number(kName, {0.0, 1.0}, "Test"), 0.5);
  }
  {
    ScopedEnv env(kName, "1");  // the upper end is in the range
    EXPECT_EQ(env_number(kName, {0.0, 1.0}, "Test"), 1.0);
  }
  for (const char* bad : {"0", "1.5", "-0.25", "half", "nan", "inf", "0.5s"}) {
    SCOPED_TRACE(bad);
    ScopedEnv env(kName, bad);
    EXPECT_TESSEL_ERROR(env_number(kName, {0.0, 1.0}, "Test"), ErrorCode::kInvalidArgument,
                        std::string("Test: TESSEL_ENV_TEST_VARIABLE='") + bad +
                            "' is not a number in (0, 1]");
    EXPECT_TESSEL_ERROR(env_number(kName, {0.0, 1.0}, "Test", "a fraction in (0, 1]"),
                        ErrorCode::kInvalidArgument, "is not a fraction in (0, 1]");
  }
}

TEST(Env, ByteSizeWithUnitsOrAnError) {
  {
    ScopedEnv env(kName, std::nullopt);
    EXPECT_EQ(env_byte_size(kName, 1, "Test"), std::nullopt);
  }
  {
    ScopedEnv env(kName, "512MiB");
    EXPECT_EQ(env_byte_size(kName, 1, "Test"), int64_t{512} << 20);
  }
  {
    ScopedEnv env(kName, "0");  // 0 is a byte count, allowed when `min` is 0
    EXPECT_EQ(env_byte_size(kName, 0, "Test"), 0);
  }
  for (const char* bad : {"0", "lots", "1.5G", "-1", "4Q"}) {
    SCOPED_TRACE(bad);
    ScopedEnv env(kName, bad);
    EXPECT_TESSEL_ERROR(env_byte_size(kName, 1, "Allocator"), ErrorCode::kInvalidArgument,
                        std::string("Allocator: TESSEL_ENV_TEST_VARIABLE='") + bad +
                            "' is not a byte count of at least 1 (e.g. 4096, 512M, 4G)");
  }
}

TEST(Env, FlagIsASwitchOrTheDefault) {
  {
    ScopedEnv env(kName, std::nullopt);
    EXPECT_FALSE(env_flag(kName, false, "Test"));
    EXPECT_TRUE(env_flag(kName, true, "Test"));
  }
  {
    ScopedEnv env(kName, "");
    EXPECT_TRUE(env_flag(kName, true, "Test"));
  }
  for (const char* on : {"1", "true", "YES", "On"}) {
    ScopedEnv env(kName, on);
    EXPECT_TRUE(env_flag(kName, false, "Test")) << on;
  }
  for (const char* off : {"0", "FALSE", "no", "off"}) {
    ScopedEnv env(kName, off);
    EXPECT_FALSE(env_flag(kName, true, "Test")) << off;
  }
  ScopedEnv env(kName, "maybe");
  EXPECT_TESSEL_ERROR(env_flag(kName, false, "Reduce"), ErrorCode::kInvalidArgument,
                      "Reduce: TESSEL_ENV_TEST_VARIABLE='maybe' is not a switch");
}

}  // namespace
}  // namespace tessel::detail
