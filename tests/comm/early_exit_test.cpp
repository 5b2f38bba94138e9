// A rank that leaves a direct collective early (its deadline passes in the closing barrier, or
// it fails) must not return while peers still read or write its buffers: its caller frees them
// right after. Without the drain in Transport::fail this crashed (use after free).
#include <gtest/gtest.h>

#include "testing/run_ranks.h"
#include "tessel/communicator.h"

namespace tessel {
namespace {

TEST(EarlyExit, RootTimingOutInTheClosingBarrierWaitsForReaders) {
  constexpr int kRanks = 4;
  auto comms = make_in_process_communicators(kRanks);
  auto errors = testing::run_ranks(kRanks, [&](int r) {
    CollectiveOptions slow;
    slow.timeout = std::chrono::seconds(20);
    comms[r]->barrier(slow);  // start together
    // 32 MiB per rank: the readers need several milliseconds to copy the root's buffer.
    Tensor x = Tensor::full({8 << 20}, DType::kF32, r);
    CollectiveOptions o;
    o.timeout = r == 0 ? std::chrono::milliseconds(1) : std::chrono::seconds(20);
    comms[r]->broadcast(x, 0, o);
    // x is freed here; a reader still copying from the root's x would crash.
  });
  const testing::RankError root = testing::error_of(errors[0]);
  ASSERT_TRUE(root.thrown);
  EXPECT_EQ(root.code, ErrorCode::kDeadlineExceeded) << root.what;
  for (int r = 1; r < kRanks; ++r) {
    const testing::RankError e = testing::error_of(errors[r]);
    // A reader either finished before the abort (no error) or saw it at the closing barrier.
    if (e.thrown) {
      EXPECT_EQ(e.code, ErrorCode::kAborted) << e.what;
    }
  }
}

}  // namespace
}  // namespace tessel
