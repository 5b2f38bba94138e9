#include "tessel/alloc/fused_all_reduce.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "testing/expect_error.h"
#include "testing/recording_transport.h"
#include "testing/run_ranks.h"

namespace tessel {
namespace {

using testing::make_recording_group;
using testing::run_ranks;

CollectiveOptions bounded() {
  CollectiveOptions o;
  o.timeout = std::chrono::seconds(20);
  return o;
}

std::vector<FusionTensor> mixed(int n) {
  std::vector<FusionTensor> out;
  for (int i = 0; i < n; ++i) {
    std::string name = "t";  // built by append: gcc 12 warns falsely (-Wrestrict) on "t" + ...
    name += std::to_string(i);
    out.push_back({name, Shape{i % 7 + 1, 3}, DType::kF32, ""});
  }
  return out;
}

TEST(FusedAllReduce, KBucketsKCollectivesAndCorrectSums) {
  constexpr int kRanks = 4;
  constexpr int kTensors = 50;
  auto group = make_recording_group(kRanks);
  const auto tensors = mixed(kTensors);
  std::vector<std::string> reports(kRanks);
  std::vector<int> buckets(kRanks);
  auto errors = run_ranks(kRanks, [&](int r) {
    FusedAllReducer fused(*group.comms[static_cast<size_t>(r)], tensors, {.bytes_per_pack = 600});
    reports[static_cast<size_t>(r)] = fused.plan().report();
    buckets[static_cast<size_t>(r)] = fused.num_buckets();
    std::vector<Tensor> inputs;
    for (int i = 0; i < kTensors; ++i) {
      inputs.push_back(Tensor::full(tensors[static_cast<size_t>(i)].shape, DType::kF32, r + i));
    }
    const std::vector<Tensor>& out = fused.all_reduce(inputs, ReduceOp::kSum, bounded());
    for (int i = 0; i < kTensors; ++i) {
      const float expect = static_cast<float>(0 + 1 + 2 + 3 + kRanks * i);
      for (float v : out[static_cast<size_t>(i)].to_vector<float>()) ASSERT_EQ(v, expect);
      // A view into its bucket.
      ASSERT_TRUE(out[static_cast<size_t>(i)].shares_storage_with(
          fused.bucket(fused.plan().bucket_of[static_cast<size_t>(i)]).backing()));
    }
    EXPECT_GT(fused.last_copied_bytes(), 0);
  });
  ASSERT_EQ(testing::first_error(errors), "");
  EXPECT_GT(buckets[0], 1);
  EXPECT_LT(buckets[0], kTensors);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(reports[static_cast<size_t>(r)], reports[0]) << "rank " << r;
    EXPECT_EQ(group.recorders[static_cast<size_t>(r)]->collectives(), buckets[0]) << "rank " << r;
  }
  EXPECT_NE(group.recorders[0]->signatures()[0].find("all_reduce(f32"), std::string::npos);
}

TEST(FusedAllReduce, BucketViewsAreZeroCopyAndPersistent) {
  constexpr int kRanks = 2;
  auto group = make_recording_group(kRanks);
  const auto tensors = mixed(10);
  auto errors = run_ranks(kRanks, [&](int r) {
    TrackingAllocator tracked(host_allocator(), std::to_string(r));
    FusedAllReducer fused(*group.comms[static_cast<size_t>(r)], tensors, {.num_packs = 3},
                          &tracked);
    ASSERT_EQ(fused.num_buckets(), 3);
    const int64_t allocations = tracked.stats().num_allocations;
    EXPECT_EQ(allocations, 3);
    std::vector<Tensor> views;
    for (int i = 0; i < 10; ++i) views.push_back(fused.tensor_view(i));
    const void* first = views[0].data();
    for (int step = 0; step < 3; ++step) {
      for (int i = 0; i < 10; ++i) views[static_cast<size_t>(i)].fill(r + step);
      const std::vector<Tensor>& out = fused.all_reduce(views, ReduceOp::kSum, bounded());
      EXPECT_EQ(fused.last_copied_bytes(), 0);
      for (int i = 0; i < 10; ++i) {
        EXPECT_EQ(out[static_cast<size_t>(i)].data(), views[static_cast<size_t>(i)].data());
        EXPECT_EQ(out[static_cast<size_t>(i)].at({0, 0}), 1 + 2 * step);
      }
      EXPECT_EQ(out[0].data(), first);
    }
    EXPECT_EQ(tracked.stats().num_allocations, allocations);  // buckets reused across steps
    EXPECT_EQ(fused.steps(), 3);
  });
  ASSERT_EQ(testing::first_error(errors), "");
  EXPECT_EQ(group.recorders[0]->collectives(), 9);  // 3 steps x 3 buckets
  EXPECT_EQ(group.recorders[1]->collectives(), 9);
}

TEST(FusedAllReduce, AllReduceBucketsReducesInPlace) {
  constexpr int kRanks = 3;
  auto group = make_recording_group(kRanks);
  const auto tensors = mixed(7);
  auto errors = run_ranks(kRanks, [&](int r) {
    FusedAllReducer fused(*group.comms[static_cast<size_t>(r)], tensors, {.num_packs = 2});
    for (int i = 0; i < 7; ++i) fused.tensor_view(i).fill(r * 10 + i);
    const std::vector<Tensor>& out = fused.all_reduce_buckets(ReduceOp::kSum, bounded());
    for (int i = 0; i < 7; ++i) {
      EXPECT_EQ(out[static_cast<size_t>(i)].data(), fused.tensor_view(i).data());
      EXPECT_EQ(out[static_cast<size_t>(i)].at({0, 0}), 30 + 3 * i);
    }
    EXPECT_EQ(fused.last_copied_bytes(), 0);
  });
  ASSERT_EQ(testing::first_error(errors), "");
  EXPECT_EQ(group.recorders[2]->collectives(), 2);
}

TEST(FusedAllReduce, InputErrors) {
  auto group = make_recording_group(1);
  FusedAllReducer fused(*group.comms[0], mixed(2));
  EXPECT_TESSEL_ERROR(fused.all_reduce({Tensor::zeros(Shape{1, 3}, DType::kF32)}, ReduceOp::kSum),
                      ErrorCode::kInvalidArgument, "got 1 inputs for 2 planned tensors");
  EXPECT_TESSEL_ERROR(fused.all_reduce({Tensor::zeros(Shape{1, 3}, DType::kF32),
                                        Tensor::zeros(Shape{2, 3}, DType::kF64)},
                                       ReduceOp::kSum),
                      ErrorCode::kInvalidArgument, "input 1 (t1) is f64 [2,3], planned f32 [2,3]");
  EXPECT_EQ(group.recorders[0]->collectives(), 0);
}

}  // namespace
}  // namespace tessel
