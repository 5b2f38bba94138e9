#include "tessel/alloc/fusion.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "testing/expect_error.h"

namespace tessel {
namespace {

std::vector<FusionTensor> floats(int n, int64_t elements) {
  std::vector<FusionTensor> out;
  for (int i = 0; i < n; ++i) {
    std::string name = "t";  // built by append: gcc 12 warns falsely (-Wrestrict) on "t" + ...
    name += std::to_string(i);
    out.push_back({name, Shape{elements}, DType::kF32, ""});
  }
  return out;
}

std::vector<std::vector<int>> groups(const FusionPlan& plan) {
  std::vector<std::vector<int>> out;
  for (const auto& b : plan.buckets) out.push_back(b.tensors);
  return out;
}

TEST(FusionPlanner, BytesPerPackGreedy) {
  // 4 tensors of 400 bytes, threshold 500: a new pack only after the current one exceeds 500.
  FusionPlan plan = plan_fusion(floats(4, 100), {.bytes_per_pack = 500});
  EXPECT_EQ(groups(plan), (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(plan.buckets[0].bytes, 800);
  EXPECT_EQ(plan.buckets[0].padded_bytes, 896);  // each field 400 -> 448 bytes (64-aligned)
  EXPECT_EQ(plan.bucket_of, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(plan.field_of, (std::vector<int>{0, 1, 0, 1}));
}

TEST(FusionPlanner, NumPacksRemainderInLast) {
  FusionPlan plan = plan_fusion(floats(10, 4), {.num_packs = 3});
  EXPECT_EQ(groups(plan), (std::vector<std::vector<int>>{{0, 1, 2}, {3, 4, 5}, {6, 7, 8, 9}}));
  // Fewer tensors than packs: empty packs dropped.
  EXPECT_EQ(plan_fusion(floats(2, 4), {.num_packs = 3}).buckets.size(), 1u);
}

TEST(FusionPlanner, DefaultOneBucketPerDtypeAndGroup) {
  std::vector<FusionTensor> t = {{"a", Shape{2}, DType::kF32, ""},
                                 {"b", Shape{2}, DType::kF64, ""},
                                 {"c", Shape{2}, DType::kF32, "g"},
                                 {"d", Shape{2}, DType::kF32, ""},
                                 {"e", Shape{2}, DType::kF64, ""}};
  FusionPlan plan = plan_fusion(t, {});
  EXPECT_EQ(groups(plan), (std::vector<std::vector<int>>{{0, 3}, {1, 4}, {2}}));
  EXPECT_EQ(plan.buckets[1].dtype, DType::kF64);
  EXPECT_EQ(plan.buckets[2].group, "g");
  EXPECT_EQ(plan.report(),
            "bucket 0: f32 group \"\" 2 tensors 16 bytes (128 padded): a d\n"
            "bucket 1: f64 group \"\" 2 tensors 32 bytes (128 padded): b e\n"
            "bucket 2: f32 group \"g\" 1 tensors 8 bytes (64 padded): c\n");
}

TEST(FusionPlanner, SameOrderEverywhere) {
  auto t = floats(100, 37);
  FusionPlan a = plan_fusion(t, {.bytes_per_pack = 1000});
  FusionPlan b = plan_fusion(t, {.bytes_per_pack = 1000});
  EXPECT_EQ(groups(a), groups(b));
  EXPECT_EQ(a.report(), b.report());
}

TEST(FusionPlanner, Errors) {
  EXPECT_TESSEL_ERROR(plan_fusion(floats(2, 1), {.bytes_per_pack = -1}),
                      ErrorCode::kInvalidArgument, "bytes_per_pack must be non-negative");
  EXPECT_TESSEL_ERROR(plan_fusion(floats(2, 1), {.num_packs = -1}), ErrorCode::kInvalidArgument,
                      "num_packs must be non-negative");
  EXPECT_TESSEL_ERROR(plan_fusion(floats(2, 1), {.bytes_per_pack = 1, .num_packs = 1}),
                      ErrorCode::kInvalidArgument, "not both");
}

}  // namespace
}  // namespace tessel
