#include "tessel/core/device_name.h"

#include <gtest/gtest.h>

#include "core/tensor_test_util.h"

namespace tessel {
namespace {

TEST(DeviceName, ParsesFullName) {
  DeviceName d = DeviceName::parse("/job:localhost/replica:0/task:0/device:CPU:3");
  EXPECT_EQ(d.job, "localhost");
  EXPECT_EQ(d.replica, 0);
  EXPECT_EQ(d.task, 0);
  EXPECT_EQ(d.type, "CPU");
  EXPECT_EQ(d.id, 3);
  EXPECT_TRUE(d.is_fully_specified());
  EXPECT_EQ(d.to_string(), "/job:localhost/replica:0/task:0/device:CPU:3");
  EXPECT_EQ(d, DeviceName::make("localhost", 0, 0, "CPU", 3));
}

TEST(DeviceName, ParsesPartialNames) {
  DeviceName a = DeviceName::parse("/job:worker/task:1");
  EXPECT_EQ(a.job, "worker");
  EXPECT_EQ(a.task, 1);
  EXPECT_FALSE(a.replica);
  EXPECT_FALSE(a.type);
  EXPECT_FALSE(a.is_fully_specified());
  EXPECT_EQ(a.to_string(), "/job:worker/task:1");

  DeviceName b = DeviceName::parse("/task:0/device:XLA_CPU:1");
  EXPECT_EQ(b.type, "XLA_CPU");
  EXPECT_EQ(b.id, 1);
  EXPECT_EQ(b.to_string(), "/task:0/device:XLA_CPU:1");

  DeviceName c = DeviceName::parse("/device:TPU");  // a type with no id
  EXPECT_EQ(c.type, "TPU");
  EXPECT_FALSE(c.id);
  EXPECT_EQ(c.to_string(), "/device:TPU:*");
  EXPECT_EQ(DeviceName::parse("/job:a_1/replica:12").to_string(), "/job:a_1/replica:12");
}

TEST(DeviceName, LeadingSlashIsOptional) {
  EXPECT_EQ(DeviceName::parse("job:worker/task:1"), DeviceName::parse("/job:worker/task:1"));
  EXPECT_EQ(DeviceName::parse("device:GPU:0").type, "GPU");
}

TEST(DeviceName, ParsesLegacyCpuAndGpu) {
  for (const char* text : {"/cpu:0", "/CPU:0"}) {
    DeviceName d = DeviceName::parse(text);
    EXPECT_EQ(d.type, "CPU") << text;
    EXPECT_EQ(d.id, 0) << text;
    EXPECT_EQ(d.to_string(), "/device:CPU:0");
  }
  for (const char* text : {"/gpu:1", "/GPU:1"}) {
    EXPECT_EQ(DeviceName::parse(text).to_string(), "/device:GPU:1") << text;
  }
  EXPECT_EQ(DeviceName::parse("/job:w/replica:0/task:2/gpu:*").to_string(),
            "/job:w/replica:0/task:2/device:GPU:*");
}

TEST(DeviceName, WildcardsAreAbsentValues) {
  DeviceName d = DeviceName::parse("/job:*/replica:*/task:*/device:GPU:*");
  EXPECT_FALSE(d.job);
  EXPECT_FALSE(d.replica);
  EXPECT_FALSE(d.task);
  EXPECT_EQ(d.type, "GPU");
  EXPECT_FALSE(d.id);
  EXPECT_EQ(d.to_string(), "/device:GPU:*");
  DeviceName any = DeviceName::parse("/device:*");
  EXPECT_EQ(any, DeviceName{});
  DeviceName id_only = DeviceName::parse("/device:*:3");
  EXPECT_FALSE(id_only.type);
  EXPECT_EQ(id_only.id, 3);
  EXPECT_EQ(id_only.to_string(), "/device:*:3");
}

TEST(DeviceName, EmptyNames) {
  EXPECT_EQ(DeviceName::parse(""), DeviceName{});
  EXPECT_EQ(DeviceName::parse("/"), DeviceName{});
  EXPECT_EQ(DeviceName{}.to_string(), "");
}

TEST(DeviceName, PartsInAnyOrderPrintCanonically) {
  EXPECT_EQ(DeviceName::parse("/device:CPU:0/task:1/job:w").to_string(),
            "/job:w/task:1/device:CPU:0");
}

TEST(DeviceName, RoundTrips) {
  for (const char* text :
       {"/job:localhost/replica:0/task:0/device:CPU:0", "/job:worker", "/replica:3",
        "/task:7/device:GPU:2", "/device:TPU_SYSTEM:0", "/device:GPU:*", "/device:*:1",
        "/job:ps/device:CPU:*", "", "/job:w/replica:2147483647"}) {
    DeviceName d = DeviceName::parse(text);
    EXPECT_EQ(d.to_string(), text);
    EXPECT_EQ(DeviceName::parse(d.to_string()), d);
  }
}

TEST(DeviceName, ParseFailsOnMalformedNames) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"/job:1abc", "bad job name '1abc'"},
      {"/job:", "bad job name ''"},
      {"/job:a-b", "bad job name 'a-b'"},
      {"/replica:x", "replica needs a number or '*', got 'x'"},
      {"/replica:-1", "replica needs a number"},
      {"/replica:1x", "expected '/' before 'x'"},
      {"/task:99999999999", "task number is larger than 2147483647"},
      {"/device:cpu:0", "bad device type 'cpu'"},
      {"/device:CPU:a", "device id needs a number"},
      {"/device:", "bad device type ''"},
      {"/cpu:", "device id needs a number"},
      {"/cpu", "unknown part 'cpu'"},
      {"/foo:1", "unknown part 'foo:1'"},
      {"/job:a/", "unknown part ''"},
      {"//job:a", "unknown part ''"},
      {"/job:a//task:0", "unknown part ''"},
      {"/job:a/job:b", "part 'job' is given twice"},
      {"/task:0/task:0", "part 'task' is given twice"},
      {"/device:CPU:0/gpu:1", "part 'device' is given twice"},
      {"/job:a task:0", "bad job name 'a task:0'"},
  };
  for (const auto& entry : cases) {
    const std::string text = entry.first;  // named copies: clang 14 cannot capture bindings
    const std::string why = entry.second;
    testing::expect_error([&] { DeviceName::parse(text); }, ErrorCode::kInvalidArgument,
                          "DeviceName", std::string("cannot parse '") + text + "': " + why);
    EXPECT_FALSE(DeviceName::try_parse(text)) << text;
  }
}

TEST(DeviceName, TryParseReturnsTheName) {
  std::optional<DeviceName> d = DeviceName::try_parse("/job:w/device:GPU:0");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->to_string(), "/job:w/device:GPU:0");
}

TEST(DeviceName, MakeValidatesItsParts) {
  testing::expect_error([] { DeviceName::make("1job", 0, 0, "CPU", 0); },
                        ErrorCode::kInvalidArgument, "DeviceName", "bad job name '1job'");
  testing::expect_error([] { DeviceName::make("w", 0, 0, "cpu", 0); }, ErrorCode::kInvalidArgument,
                        "DeviceName", "bad device type 'cpu'");
  testing::expect_error([] { DeviceName::make("w", 0, -1, "CPU", 0); }, ErrorCode::kInvalidArgument,
                        "DeviceName", "task -1");
}

TEST(DeviceName, MatchesWhenEveryPresentPartAgrees) {
  const DeviceName full = DeviceName::parse("/job:w/replica:0/task:1/device:GPU:2");
  EXPECT_TRUE(DeviceName{}.matches(full));
  EXPECT_TRUE(DeviceName::parse("/job:w/device:GPU:*").matches(full));
  EXPECT_TRUE(DeviceName::parse("/task:1/gpu:2").matches(full));
  EXPECT_FALSE(DeviceName::parse("/job:ps").matches(full));
  EXPECT_FALSE(DeviceName::parse("/device:CPU:*").matches(full));
  EXPECT_FALSE(full.matches(DeviceName::parse("/job:w")));  // other lacks parts
  EXPECT_TRUE(full.matches(full));
}

}  // namespace
}  // namespace tessel
