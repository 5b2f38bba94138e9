// TF's helpers around cross-device ops: ReduceOp.from_variable_aggregation, the deprecated
// CollectiveHints, select_cross_device_ops, CollectiveKeys, HierarchicalCopyAllReduce's DGX-1
// copy plan and group_by_size over tensors of unknown shape.
#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

#include "tessel/alloc/fusion_rules.h"
#include "tessel/distribute/collective_keys.h"
#include "tessel/distribute/tf_helpers.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

TEST(TfHelpers, ReduceOpFromVariableAggregationIsTfsMapping) {
  EXPECT_EQ(reduce_op_from_variable_aggregation(VariableAggregation::kSum), ReduceOp::kSum);
  EXPECT_EQ(reduce_op_from_variable_aggregation(VariableAggregation::kMean), ReduceOp::kMean);
  // NONE and ONLY_FIRST_REPLICA have no reduce op in TF (its text lacks a space after "to").
  EXPECT_TESSEL_ERROR(reduce_op_from_variable_aggregation(VariableAggregation::kNone),
                      ErrorCode::kInvalidArgument,
                      "Could not convert from `tf.VariableAggregation` VariableAggregation.NONE "
                      "to`tf.distribute.ReduceOp` type");
  EXPECT_TESSEL_ERROR(reduce_op_from_variable_aggregation(VariableAggregation::kOnlyFirstReplica),
                      ErrorCode::kInvalidArgument, "VariableAggregation.ONLY_FIRST_REPLICA");
}

TEST(TfHelpers, CollectiveHintsAreCommunicationOptions) {
  EXPECT_EQ(collective_hints(), CommunicationOptions());
  EXPECT_EQ(collective_hints(4096, 5.0), CommunicationOptions(4096, 5.0));
  EXPECT_TESSEL_ERROR(collective_hints(-1), ErrorCode::kInvalidArgument,
                      "bytes_per_pack must be non-negative");
}

TEST(TfHelpers, SelectCrossDeviceOpsPicksNcclOnlyForGpus) {
  EXPECT_NE(dynamic_cast<NcclAllReduce*>(select_cross_device_ops({"/gpu:0", "/gpu:1"}).get()),
            nullptr);
  EXPECT_NE(dynamic_cast<ReductionToOneDevice*>(
                select_cross_device_ops({"/job:localhost/replica:0/task:0/device:GPU:0", "/cpu:0"})
                    .get()),
            nullptr);
  EXPECT_NE(dynamic_cast<ReductionToOneDevice*>(select_cross_device_ops({"/cpu:0"}).get()),
            nullptr);
  EXPECT_TESSEL_ERROR(select_cross_device_ops({}), ErrorCode::kInvalidArgument,
                      "devices must not be empty");
  EXPECT_TESSEL_ERROR(select_cross_device_ops({"/gpu:x"}), ErrorCode::kInvalidArgument, "gpu:x");
}

TEST(TfHelpers, CollectiveKeysFollowTfsSequence) {
  CollectiveKeys keys;
  EXPECT_EQ(keys.get_group_key({"/cpu:0", "/cpu:1"}), 1);
  EXPECT_EQ(keys.get_group_key({"/cpu:1"}), 2);
  EXPECT_EQ(keys.get_group_key({"/cpu:0", "/cpu:1"}), 1);  // the same list: the same key
  EXPECT_EQ(keys.get_group_key({"/cpu:1", "/cpu:0"}), 3);  // TF joins the list in its order
  EXPECT_EQ(keys.get_instance_key(1, "/cpu:0"), 100);
  EXPECT_EQ(keys.get_instance_key(1, "/cpu:0"), 101);
  EXPECT_EQ(keys.get_instance_key(1, "/cpu:1"), 100);  // per device
  CollectiveKeys copy(keys);                            // TF's deepcopy: counters carry over
  EXPECT_EQ(copy.get_instance_key(1, "/cpu:0"), 102);
  EXPECT_EQ(keys.get_instance_key(1, "/cpu:0"), 102);
  EXPECT_EQ(CollectiveKeys(7).get_group_key({"/cpu:0"}), 7);
  EXPECT_TESSEL_ERROR(keys.get_instance_key(9, "/cpu:0"), ErrorCode::kInvalidArgument,
                      "Group 9 is not found.");
  EXPECT_TESSEL_ERROR(keys.get_instance_key(2, "/cpu:0"), ErrorCode::kInvalidArgument,
                      "Device /cpu:0 is not present in group 2");
}

TEST(TfHelpers, CollectiveKeysAreThreadSafe) {
  CollectiveKeys keys;
  const int64_t group = keys.get_group_key({"/cpu:0"});
  std::vector<int64_t> seen[4];
  std::vector<std::thread> threads;
  for (auto& out : seen) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) out.push_back(keys.get_instance_key(group, "/cpu:0"));
    });
  }
  for (auto& t : threads) t.join();
  std::set<int64_t> all;
  for (const auto& s : seen) all.insert(s.begin(), s.end());
  EXPECT_EQ(all.size(), 400u);
  EXPECT_EQ(*all.begin(), 100);
  EXPECT_EQ(*all.rbegin(), 499);
}

TEST(TfHelpers, HierarchicalCopyPlanIsTfsDgx1Tree) {
  const auto plan = hierarchical_copy_plan(8, 6);
  ASSERT_EQ(plan.size(), 6u);
  // Tensor 0: groups 0-3 (main 0) and 4-7 (main 4); devices copy from their own group's main.
  EXPECT_EQ(plan[0].group_0_main, 0);
  EXPECT_EQ(plan[0].group_1_main, 4);
  EXPECT_EQ(plan[0].group_0, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(plan[0].group_1, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(plan[0].copy_from, (std::vector<int>{0, 0, 0, 0, 4, 4, 4, 4}));
  // Tensor 5: the main rotates (5, then 1); group 0 is the one holding device 5.
  EXPECT_EQ(plan[5].group_0_main, 5);
  EXPECT_EQ(plan[5].group_1_main, 1);
  EXPECT_EQ(plan[5].group_0, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(plan[5].group_1, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(plan[5].copy_from, (std::vector<int>{1, 1, 1, 1, 5, 5, 5, 5}));
  // Every device is summed exactly once.
  for (const auto& step : plan) {
    std::set<int> summed(step.group_0.begin(), step.group_0.end());
    summed.insert(step.group_1.begin(), step.group_1.end());
    EXPECT_EQ(summed.size(), 8u);
  }
  EXPECT_TESSEL_ERROR(hierarchical_copy_plan(3, 1), ErrorCode::kInvalidArgument,
                      "even number of devices");
}

TEST(TfHelpers, GroupBySizeOfAnUnknownShapeIsOnePack) {
  EXPECT_EQ(group_by_size({400, kUnknownTensorBytes, 400, 400}, 100),
            (std::vector<std::vector<int>>{{0, 1, 2, 3}}));
  EXPECT_TESSEL_ERROR(group_by_size({400, -2}, 100), ErrorCode::kInvalidArgument,
                      "negative size -2");
}

}  // namespace
}  // namespace tessel
