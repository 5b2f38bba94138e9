// Temporary memory of an all-reduce, read from the per-device accounting: with each rank's
// scratch allocator set to its device's, the peak above the rank's own input and output is
// zero for the direct algorithm and at most one segment for the others.
#include <gtest/gtest.h>

#include "tessel/comm/communicator.h"
#include "tessel/runtime/runtime.h"
#include "testing/run_ranks.h"

namespace tessel {
namespace {

constexpr int kRanks = 4;
constexpr int64_t kCount = 1 << 16;       // 256 KiB of f32 per rank
constexpr size_t kSegment = 16 << 10;     // 16 KiB: many segments

int64_t temporary_peak(Algorithm algorithm) {
  Runtime rt({.num_cpu_devices = kRanks});
  std::vector<std::string> names;
  for (Device* d : rt.devices()) names.push_back(d->name());
  auto comms = make_in_process_communicators(kRanks, names);
  std::vector<int64_t> extra(kRanks, 0);
  auto errors = testing::run_ranks(kRanks, [&](int r) {
    Device& device = rt.device(r);
    comms[r]->set_scratch_allocator(device.allocator());
    Tensor in = device.allocate({kCount}, DType::kF32);
    Tensor out = device.allocate({kCount}, DType::kF32);
    in.fill(r);
    device.reset_peak_memory();
    const int64_t own = device.memory_stats().live_bytes;
    CollectiveOptions o;
    o.algorithm = algorithm;
    o.segment_bytes = kSegment;
    o.timeout = std::chrono::seconds(20);
    comms[r]->all_reduce(in, out, ReduceOp::kSum, o);
    extra[r] = device.memory_stats().peak_bytes - own;
    if (out.to_vector<float>()[kCount - 1] != 0 + 1 + 2 + 3) throw std::runtime_error("wrong sum");
  });
  EXPECT_EQ(testing::first_error(errors), "");
  return *std::max_element(extra.begin(), extra.end());
}

TEST(AllReduceMemory, DirectAllocatesNoTemporaries) {
  EXPECT_EQ(temporary_peak(Algorithm::kDirect), 0);
}

TEST(AllReduceMemory, SegmentedAlgorithmsAllocateAtMostOneSegment) {
  for (Algorithm a : {Algorithm::kRing, Algorithm::kHalvingDoubling, Algorithm::kReduceToOne}) {
    const int64_t peak = temporary_peak(a);
    EXPECT_GT(peak, 0) << algorithm_name(a);  // the scratch really comes from the device
    EXPECT_LE(peak, static_cast<int64_t>(kSegment)) << algorithm_name(a);
  }
}

}  // namespace
}  // namespace tessel
