// CommunicationOptions (reference §A.9), DistributedValues and regroup (§A.10), IndexedSlices,
// and the packing rules (§A.7, §A.8) as pure functions.
#include <gtest/gtest.h>

#include <cmath>

#include "distribute/distribute_test_util.h"
#include "tessel/alloc/fusion_rules.h"

namespace tessel {
namespace {

using testing::cpu;
using testing::vec;

TEST(CommunicationOptions, DefaultsAndValidation) {
  const CommunicationOptions d;
  EXPECT_EQ(d.bytes_per_pack(), 0);
  EXPECT_FALSE(d.timeout_seconds().has_value());
  EXPECT_EQ(d.implementation(), CommunicationImplementation::kAuto);
  EXPECT_EQ(d.to_string(),
            "CommunicationOptions(bytes_per_pack=0, timeout_seconds=None, implementation=AUTO)");
  EXPECT_TESSEL_ERROR(CommunicationOptions(-1), ErrorCode::kInvalidArgument,
                      "bytes_per_pack must be non-negative");
  EXPECT_TESSEL_ERROR(CommunicationOptions(0, -1.0), ErrorCode::kInvalidArgument,
                      "timeout_seconds must be a non-negative number");
  EXPECT_TESSEL_ERROR(CommunicationOptions(0, std::nan("")), ErrorCode::kInvalidArgument,
                      "timeout_seconds");
}

TEST(CommunicationOptions, ImplementationNamesAreCaseInsensitive) {
  EXPECT_EQ(CommunicationOptions(0, std::nullopt, "ring").implementation(),
            CommunicationImplementation::kRing);
  EXPECT_EQ(communication_implementation_from_name("Nccl"), CommunicationImplementation::kNccl);
  EXPECT_EQ(communication_implementation_from_name("AUTO"), CommunicationImplementation::kAuto);
  EXPECT_EQ(communication_implementation_name(CommunicationImplementation::kRing), "RING");
  EXPECT_TESSEL_ERROR(CommunicationOptions(0, std::nullopt, "gloo"), ErrorCode::kInvalidArgument,
                      "implementation should be a "
                      "tf.distribute.experimental.CommunicationImplementation");
}

TEST(CommunicationOptions, MergeTakesTheOtherNonDefaultFields) {
  const CommunicationOptions base(100, 5.0, CommunicationImplementation::kRing);
  EXPECT_EQ(base.merge(CommunicationOptions()), base);
  const CommunicationOptions m = base.merge(CommunicationOptions(0, 1.0));
  EXPECT_EQ(m.bytes_per_pack(), 100);
  EXPECT_EQ(m.timeout_seconds(), 1.0);
  EXPECT_EQ(m.implementation(), CommunicationImplementation::kRing);
  const CommunicationOptions n =
      CommunicationOptions().merge(CommunicationOptions(7, std::nullopt, "nccl"));
  EXPECT_EQ(n.bytes_per_pack(), 7);
  EXPECT_FALSE(n.timeout_seconds().has_value());
  EXPECT_EQ(n.implementation(), CommunicationImplementation::kNccl);
}

TEST(DistributedValues, ComponentsAndChecks) {
  const IndexedSlices s(vec({1, 2}).reshape(Shape{1, 2}),
                        Tensor::from_vector<int64_t>({0}, Shape{1}), Shape{2, 2});
  const PerReplica v({cpu(0), "/cpu:1"}, {vec({1}), s});
  EXPECT_EQ(v.size(), 2);
  EXPECT_TRUE(v.has_indexed_slices());
  EXPECT_EQ(v.tensor(0).to_vector<float>(), std::vector<float>{1});
  EXPECT_EQ(v.indexed_slices(1).num_slices(), 1);
  EXPECT_TESSEL_ERROR(v.tensor(1), ErrorCode::kInvalidArgument, "is an IndexedSlices");
  EXPECT_TESSEL_ERROR(v.indexed_slices(0), ErrorCode::kInvalidArgument, "is a dense tensor");
  EXPECT_TESSEL_ERROR(v.value(2), ErrorCode::kOutOfRange, "component 2 of 2");
  EXPECT_NE(v.to_string().find("PerReplica:{\n  0: " + cpu(0)), std::string::npos);
  EXPECT_TESSEL_ERROR(Mirrored({cpu(0)}, {}), ErrorCode::kInvalidArgument,
                      "1 devices for 0 values");
  EXPECT_TESSEL_ERROR(PerReplica({"cpu"}, {vec({1})}), ErrorCode::kInvalidArgument,
                      "is not a device name with a type and an id");
  EXPECT_TESSEL_ERROR(PerReplica({cpu(0)}, {Tensor()}), ErrorCode::kInvalidArgument, "null tensor");
  EXPECT_TRUE(PerReplica({}, {}).empty());
}

TEST(DistributedValues, RegroupUnwrapsOneObject) {
  const Tensor x = vec({1, 2});
  EXPECT_TRUE(std::holds_alternative<Tensor>(regroup(Mirrored({cpu(0)}, {x}))));
  // The same tensor on every device is one object (TF's "all the same object").
  const auto same = regroup(Mirrored({cpu(0), cpu(1)}, {x, x}));
  ASSERT_TRUE(std::holds_alternative<Tensor>(same));
  EXPECT_TRUE(std::get<Tensor>(same).shares_storage_with(x));
  EXPECT_TRUE(
      std::holds_alternative<Mirrored>(regroup(Mirrored({cpu(0), cpu(1)}, {x, x.clone()}))));
  EXPECT_TRUE(std::holds_alternative<PerReplica>(
      regroup(PerReplica({cpu(0), cpu(1)}, {x.slice(0, 0, 1), x.slice(0, 1, 2)}))));
}

TEST(IndexedSlices, ChecksAndDensify) {
  const Tensor values = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{3, 2});
  const IndexedSlices s(values, Tensor::from_vector<int32_t>({3, 0, 3}, Shape{3}), Shape{4, 2});
  EXPECT_EQ(s.indices().dtype(), DType::kI64);  // widened
  EXPECT_EQ(s.to_dense().to_vector<float>(), (std::vector<float>{3, 4, 0, 0, 0, 0, 6, 8}));
  EXPECT_EQ(s.to_string(),
            "IndexedSlices(indices=[3,0,3], values shape=[3,2], dense_shape=[4,2], "
            "dtype=f32)");
  const Tensor idx = Tensor::from_vector<int64_t>({0, 1, 2}, Shape{3});
  EXPECT_TESSEL_ERROR(IndexedSlices(values, idx, Shape{4, 3}), ErrorCode::kInvalidArgument,
                      "dense_shape [4,3] does not fit values of shape [3,2]");
  EXPECT_TESSEL_ERROR(IndexedSlices(values, idx, Shape{2, 2}), ErrorCode::kInvalidArgument,
                      "index 2 (entry 2) is outside [0, 2)");
  EXPECT_TESSEL_ERROR(IndexedSlices(values, idx.slice(0, 0, 2), Shape{4, 2}),
                      ErrorCode::kInvalidArgument, "2 indices for 3 rows");
  EXPECT_TESSEL_ERROR(IndexedSlices(values, vec({0, 1, 2}), Shape{4, 2}),
                      ErrorCode::kInvalidArgument, "indices must be i64 or i32");
  EXPECT_TESSEL_ERROR(IndexedSlices(Tensor::zeros(Shape{}, DType::kF32), idx, Shape{}),
                      ErrorCode::kInvalidArgument, "rank >= 1");
}

TEST(IndexedSlices, ConcatenationKeepsDuplicates) {
  const IndexedSlices a(vec({1, 2}).reshape(Shape{2, 1}),
                        Tensor::from_vector<int64_t>({1, 1}, Shape{2}), Shape{3, 1});
  const IndexedSlices b(vec({3}).reshape(Shape{1, 1}), Tensor::from_vector<int64_t>({1}, Shape{1}),
                        Shape{3, 1});
  const IndexedSlices c = concat_indexed_slices({a, b});
  EXPECT_EQ(c.indices().to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(c.values().to_vector<float>(), (std::vector<float>{1, 2, 3}));
  const IndexedSlices other(vec({3}).reshape(Shape{1, 1}),
                            Tensor::from_vector<int64_t>({1}, Shape{1}), Shape{5, 1});
  EXPECT_TESSEL_ERROR(concat_indexed_slices({a, other}), ErrorCode::kInvalidArgument,
                      "element 1 (f32, dense_shape [5,1]) does not match element 0");
  EXPECT_TESSEL_ERROR(concat_indexed_slices({}), ErrorCode::kInvalidArgument, "nothing");
}

TEST(CrossDevicePacking, SplitIntoPacksGivesTheRemainderToTheLast) {
  EXPECT_EQ(split_into_packs(10, 3), (std::vector<int64_t>{3, 3, 4}));
  EXPECT_EQ(split_into_packs(10, 1), (std::vector<int64_t>{10}));
  EXPECT_EQ(split_into_packs(2, 4), (std::vector<int64_t>{0, 0, 0, 2}));
  EXPECT_TESSEL_ERROR(split_into_packs(10, 0), ErrorCode::kInvalidArgument,
                      "num_packs must be greater than zero.");
  EXPECT_TESSEL_ERROR(split_into_packs(10, -1), ErrorCode::kInvalidArgument,
                      "num_packs must be greater than zero.");
}

TEST(CrossDevicePacking, GroupBySizeOpensAPackOnlyAfterTheCurrentOneExceedsTheLimit) {
  using Packs = std::vector<std::vector<int>>;
  EXPECT_EQ(group_by_size({400, 400, 400, 400}, 500), (Packs{{0, 1}, {2, 3}}));
  EXPECT_EQ(group_by_size({400, 400, 400, 400}, 400), (Packs{{0, 1}, {2, 3}}));
  EXPECT_EQ(group_by_size({400, 400, 400, 400}, 399), (Packs{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(group_by_size({10, 2000, 10, 10}, 100), (Packs{{0, 1}, {2, 3}}));
  EXPECT_EQ(group_by_size({1, 2, 3}, 0), (Packs{{0, 1, 2}}));
  EXPECT_TRUE(group_by_size({}, 10).empty());
  EXPECT_TESSEL_ERROR(group_by_size({1}, -1), ErrorCode::kInvalidArgument,
                      "bytes_per_pack must be non-negative");
}

}  // namespace
}  // namespace tessel
