// parallel.h: every index covered once, the split bounded by the threads, errors rethrown in the
// caller, nested and concurrent calls, and the cores shared among the CPU devices.
#include "tessel/core/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "tessel/core/error.h"

namespace tessel {
namespace {

// Fixes intra_op_threads() for one test and restores the automatic share after it.
class FixedThreads {
 public:
  explicit FixedThreads(int n) { set_intra_op_threads(n); }
  ~FixedThreads() { set_intra_op_threads(0); }
};

void expect_each_index_once(int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::atomic<int> ranges{0};
  parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    ASSERT_LT(begin, end);
    ranges.fetch_add(1);
    for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "index " << i;
  EXPECT_LE(ranges.load(), intra_op_threads());
  if (n > 0) {
    EXPECT_GE(ranges.load(), 1);
  }
}

TEST(ParallelFor, CoversEveryIndexOnceForAnySplit) {
  for (int threads : {1, 2, 3, 7}) {
    FixedThreads fixed(threads);
    for (int64_t n : {0, 1, 5, 16, 17, 1000, 4099}) {
      for (int64_t grain : {1, 4, 100}) expect_each_index_once(n, grain);
    }
  }
}

TEST(ParallelFor, SmallWorkRunsOnTheCallingThread) {
  FixedThreads fixed(4);
  const auto caller = std::this_thread::get_id();
  parallel_for(10, 8, [&](int64_t begin, int64_t end) {
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 10);
    EXPECT_EQ(std::this_thread::get_id(), caller);
  });
}

TEST(ParallelFor, AnExceptionReachesTheCallerAfterTheOtherRanges) {
  FixedThreads fixed(3);
  std::atomic<int> finished{0};
  EXPECT_THROW(parallel_for(300, 10,
                            [&](int64_t begin, int64_t) {
                              if (begin == 0) throw std::runtime_error("range 0 failed");
                              finished.fetch_add(1);
                            }),
               std::runtime_error);
  EXPECT_EQ(finished.load(), 2);
}

TEST(ParallelFor, NestedCallsRunInlineAndStillCoverEverything) {
  FixedThreads fixed(2);
  std::vector<std::atomic<int>> hits(64 * 64);
  parallel_for(64, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      parallel_for(64, 1, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) hits[static_cast<size_t>(r * 64 + c)].fetch_add(1);
      });
    }
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(ParallelFor, SeveralCallersAtOnce) {
  FixedThreads fixed(2);
  std::vector<std::thread> callers;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      for (int round = 0; round < 50; ++round) {
        std::vector<int> out(1000, 0);
        parallel_for(1000, 10, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) out[static_cast<size_t>(i)] = static_cast<int>(i);
        });
        for (int i = 0; i < 1000; ++i) {
          if (out[static_cast<size_t>(i)] != i) failures.fetch_add(1);
        }
      }
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ParallelFor, TheCoresAreSharedAmongTheCpuDevices) {
  set_intra_op_threads(0);
  const int cores = machine_cores();
  ASSERT_GE(cores, 1);
  std::vector<std::unique_ptr<detail::CpuCoreShare>> devices;
  for (int d = 1; d <= 4; ++d) {
    devices.push_back(std::make_unique<detail::CpuCoreShare>());
    // Other tests' devices may be alive too: at most the share of the ones made here.
    EXPECT_LE(intra_op_threads(), std::max(1, cores / d));
    EXPECT_GE(intra_op_threads(), 1);
  }
  devices.clear();
}

TEST(ParallelFor, ABadThreadCountIsRefusedNamingIt) {
  try {
    set_intra_op_threads(-3);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("-3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessel
