// A rank that leaves a direct collective early (its deadline passes in the closing barrier, or
// it fails) must not return while peers still read or write its buffers: its caller frees them
// right after. Without the drain in Transport::fail this crashed (use after free).
#include <gtest/gtest.h>

#include <algorithm>

#include "tessel/comm/communicator.h"
#include "testing/run_ranks.h"

namespace tessel {
namespace {

// One broadcast of `elements` f32 from root 0, whose deadline (1 ms) is far shorter than the
// readers' copies; returns each rank's error.
std::vector<std::exception_ptr> broadcast_with_impatient_root(int64_t elements) {
  constexpr int kRanks = 4;
  auto comms = make_in_process_communicators(kRanks);
  return testing::run_ranks(kRanks, [&](int r) {
    CollectiveOptions slow;
    slow.timeout = std::chrono::seconds(20);
    comms[r]->barrier(slow);  // start together
    Tensor x = Tensor::full({elements}, DType::kF32, r);
    CollectiveOptions o;
    o.timeout = r == 0 ? std::chrono::milliseconds(1) : std::chrono::seconds(20);
    comms[r]->broadcast(x, 0, o);
    // x is freed here; a reader still copying from the root's x would crash.
  });
}

TEST(EarlyExit, RootTimingOutInTheClosingBarrierWaitsForReaders) {
  // The readers usually need several milliseconds; on a fast moment they may finish within the
  // root's millisecond, which exercises nothing, so try a few times with growing buffers.
  bool root_timed_out = false;
  for (int attempt = 0; attempt < 6 && !root_timed_out; ++attempt) {
    const auto errors = broadcast_with_impatient_root(int64_t{8 << 20} << std::min(attempt, 2));
    const testing::RankError root = testing::error_of(errors[0]);
    if (!root.thrown) continue;
    root_timed_out = true;
    EXPECT_EQ(root.code, ErrorCode::kDeadlineExceeded) << root.what;
    for (size_t r = 1; r < errors.size(); ++r) {
      const testing::RankError e = testing::error_of(errors[r]);
      // A reader either finished before the abort (no error) or saw it at the closing barrier.
      if (e.thrown) {
        EXPECT_EQ(e.code, ErrorCode::kAborted) << e.what;
      }
    }
  }
  EXPECT_TRUE(root_timed_out) << "the root never timed out, so the early exit was not exercised";
}

}  // namespace
}  // namespace tessel
