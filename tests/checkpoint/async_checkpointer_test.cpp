// Asynchronous saves: the state may change as soon as save returns, the commit is the
// synchronous save's, the staging budget bounds host memory, a background failure is thrown by
// the next save or wait naming the step, waits have deadlines, and the caller's collectives on
// the same devices run while the writer writes (a TSan target).
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "tessel/checkpoint/async_checkpointer.h"
#include "tessel/checkpoint/checkpoint_manager.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/relayout.h"
#include "testing/expect_error.h"
#include "testing/temp_dir.h"

namespace tessel::checkpoint {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

using testing::TempDir;

struct Fixture {
  Runtime rt{{.num_cpu_devices = 4}};
  Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  Layout layout{{"x", "y"}, mesh};
  Tensor host = Tensor::random_uniform(Shape({33, 10}), DType::kF32, 7, -1.0, 1.0);
  DTensor w = copy_to_mesh(host, layout, rt);
  TempDir dir{"tessel-async-ckpt"};

  Tensor load(const std::string& path) const {
    const State back = restore(path, Target{{"w", layout}}, {.runtime = const_cast<Runtime*>(&rt)});
    return to_host(std::get<DTensor>(back.at("w")));
  }
};

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// Overwrites every local component of `d` in place (what a training step does to parameters).
void scribble(const DTensor& d) {
  for (Tensor c : unpack(d)) std::memset(c.data(), 0x7f, c.nbytes());
}

TEST(AsyncCheckpointer, StateMayChangeOnceSaveReturns) {
  Fixture f;
  AsyncCheckpointer saver;
  saver.save(f.dir / "c", {{"w", f.w}, {"step", int64_t{3}}});
  EXPECT_TRUE(saver.saving());
  scribble(f.w);
  saver.wait_until_finished(milliseconds(60000));
  EXPECT_FALSE(saver.saving());
  EXPECT_TRUE(same_bytes(f.load(f.dir / "c"), f.host));
  EXPECT_EQ(saver.staging_bytes_allocated(), static_cast<int64_t>(f.host.nbytes()));
  verify(f.dir / "c");
  saver.close();
  EXPECT_EQ(saver.staging_bytes_allocated(), 0);
}

TEST(AsyncCheckpointer, StagingAreaIsReusedAndBounded) {
  Fixture f;
  AsyncCheckpointer saver({.staging_bytes = static_cast<int64_t>(f.host.nbytes()), .save = {}});
  saver.save(f.dir / "a", {{"w", f.w}});
  saver.save(f.dir / "b", {{"w", f.w}});  // waits for "a", reuses its area
  saver.wait_until_finished();
  EXPECT_EQ(saver.staging_bytes_allocated(), static_cast<int64_t>(f.host.nbytes()));
  EXPECT_TRUE(same_bytes(f.load(f.dir / "a"), f.host));
  EXPECT_TRUE(same_bytes(f.load(f.dir / "b"), f.host));

  AsyncCheckpointer small({.staging_bytes = 100, .save = {}});
  EXPECT_TESSEL_ERROR(small.save(f.dir / "c", {{"w", f.w}}), ErrorCode::kResourceExhausted,
                      "staging budget");
  EXPECT_FALSE(fs::exists(f.dir / "c"));
  EXPECT_FALSE(fs::exists(f.dir / ".c.tmp"));
  EXPECT_EQ(small.staging_bytes_allocated(), 0);
  EXPECT_TESSEL_ERROR(AsyncCheckpointer({.staging_bytes = -1, .save = {}}),
                      ErrorCode::kInvalidArgument, "-1");
}

TEST(AsyncCheckpointer, BackgroundFailureSurfacesAtTheNextSaveOrWaitNamingTheStep) {
  Fixture f;
  const auto fail_at_manifest = [](std::string_view step) {
    if (step == "manifest") throw Error(ErrorCode::kUnavailable, "test", "disk went away");
  };
  CheckpointManager manager(f.dir.path().string(),
                            {.max_to_keep = 0, .save = {.on_step = fail_at_manifest}});
  manager.save(5, {{"w", f.w}}, /*async=*/true);
  EXPECT_TESSEL_ERROR(manager.wait_until_finished(), ErrorCode::kUnavailable, "step 5");
  manager.save(6, {{"w", f.w}}, /*async=*/true);
  EXPECT_TESSEL_ERROR(manager.save(7, {{"w", f.w}}, /*async=*/true), ErrorCode::kUnavailable,
                      "disk went away");
  manager.close();  // the failure was taken by save(7), which did not start
  EXPECT_TRUE(manager.all_steps().empty());
  for (const auto& e : fs::directory_iterator(f.dir.path()))
    EXPECT_FALSE(e.path().filename().string().ends_with(".tmp")) << e.path();
}

TEST(AsyncCheckpointer, WaitHasADeadline) {
  Fixture f;
  std::atomic<bool> release{false};
  AsyncCheckpointer saver(
      {.staging_bytes = 1 << 20, .save = {.on_step = [&](std::string_view step) {
                                   while (step == "written" && !release) {
                                     std::this_thread::sleep_for(milliseconds(1));
                                   }
                                 }}});
  saver.save(f.dir / "c", {{"w", f.w}});
  EXPECT_TESSEL_ERROR(saver.wait_until_finished(milliseconds(20)), ErrorCode::kDeadlineExceeded,
                      "'" + (f.dir / "c") + "'");
  EXPECT_TRUE(saver.saving());
  release = true;
  saver.wait_until_finished(milliseconds(60000));
  EXPECT_TRUE(same_bytes(f.load(f.dir / "c"), f.host));
}

TEST(AsyncCheckpointer, ManagerPrunesAndPointsLatestAfterTheBackgroundCommit) {
  Fixture f;
  CheckpointManager manager(f.dir.path().string(), {.max_to_keep = 2, .save = {}});
  for (int64_t step : {1, 2, 3}) manager.save(step, {{"w", f.w}}, /*async=*/true);
  manager.save(4, {{"w", f.w}});  // synchronous: waits for step 3 first
  EXPECT_EQ(manager.all_steps(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(manager.latest_step(), 4);
  EXPECT_TRUE(same_bytes(f.load(manager.step_directory(3)), f.host));
  manager.close();
}

// The caller's collectives (relayouts on the same devices) run while the writer thread writes:
// the writer runs none, so they neither interleave nor wait for each other.
TEST(AsyncCheckpointer, CallerCollectivesRunDuringTheBackgroundWrite) {
  Fixture f;
  CheckpointManager manager(f.dir.path().string(), {.max_to_keep = 1, .save = {}});
  DTensor w = f.w;
  const Layout other({"y", "x"}, f.mesh);
  for (int64_t step = 0; step < 4; ++step) {
    manager.save(step, {{"w", w}}, /*async=*/true);
    for (int i = 0; i < 3; ++i) w = relayout(relayout(w, other), f.layout);
  }
  manager.wait_until_finished(milliseconds(60000));
  EXPECT_EQ(manager.all_steps(), std::vector<int64_t>{3});
  EXPECT_TRUE(same_bytes(f.load(manager.step_directory(3)), f.host));
}

}  // namespace
}  // namespace tessel::checkpoint
