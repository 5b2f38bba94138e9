// AllReduceCrossDeviceOps, NcclAllReduce, HierarchicalCopyAllReduce (reference §A.7): num_packs
// validation and packing counts, MEAN count = number of destinations, fallbacks.
#include <gtest/gtest.h>

#include "distribute/distribute_test_util.h"
#include "distribute/gpu_values_util.h"

namespace tessel {
namespace {

using testing::cpu;
using testing::filled;
using testing::floats;
using testing::kBounded;
using testing::vec;

// n tensors of different shapes per device; tensor k on device d holds (d + 1) * (k + 1).
std::vector<ValueDestinationPair> batch(int devices, int n) {
  std::vector<ValueDestinationPair> pairs;
  for (int k = 0; k < n; ++k) {
    std::vector<std::string> names;
    std::vector<Value> values;
    for (int d = 0; d < devices; ++d) {
      names.push_back(cpu(d));
      values.push_back(Tensor::full(Shape{k + 1, 2}, DType::kF32, (d + 1) * (k + 1)));
    }
    PerReplica v(names, values);
    pairs.emplace_back(v, v);
  }
  return pairs;
}

int count_steps(const CrossDevicePlan& plan, const std::string& kind) {
  int n = 0;
  for (const PlanStep& s : plan.steps) n += s.kind == kind;
  return n;
}

TEST(CrossDeviceAllReduce, NumPacksMustBeNonNegative) {
  Runtime rt({.num_cpu_devices = 2});
  EXPECT_TESSEL_ERROR(NcclAllReduce(-1, rt), ErrorCode::kInvalidArgument,
                      "NCCL all-reduce requires num_packs >= 0, but -1 is specified");
  EXPECT_TESSEL_ERROR(HierarchicalCopyAllReduce(-2, rt), ErrorCode::kInvalidArgument,
                      "HierarchicalCopy requires num_packs >= 0, but -2 is specified");
  EXPECT_TESSEL_ERROR(AllReduceCrossDeviceOps("nccl", -3, rt), ErrorCode::kInvalidArgument,
                      "requires num_packs >= 0, but -3 is specified");
  EXPECT_TESSEL_ERROR(AllReduceCrossDeviceOps("butterfly", 1, rt), ErrorCode::kInvalidArgument,
                      "unknown all_reduce_alg 'butterfly'");
  EXPECT_EQ(NcclAllReduce(0, rt).num_packs(), 0);
  EXPECT_EQ(HierarchicalCopyAllReduce(3, rt).all_reduce_alg(), "hierarchical_copy");
}

TEST(CrossDeviceAllReduce, NumPacksIssuesExactlyThatManyAllReduces) {
  Runtime rt({.num_cpu_devices = 3});
  for (int num_packs : {1, 2, 3, 7}) {
    NcclAllReduce ops(num_packs, rt);
    const auto out = ops.batch_reduce(ReduceOp::kSum, batch(3, 5), kBounded);
    const CrossDevicePlan plan = ops.last_plan();
    EXPECT_EQ(plan.path, "all_reduce");
    EXPECT_EQ(plan.num_collectives(), num_packs);
    EXPECT_EQ(ops.num_collectives(), num_packs);
    // 5 tensors of 2, 4, 6, 8, 10 elements = 30: packs of 30 / K, the last with the remainder.
    int64_t total = 0;
    for (const PlanStep& s : plan.steps) {
      EXPECT_EQ(s.kind, "all_reduce");
      EXPECT_EQ(s.num_tensors, 5);
      EXPECT_EQ(s.devices, (std::vector<std::string>{cpu(0), cpu(1), cpu(2)}));
      total += s.num_elements;
    }
    EXPECT_EQ(total, 30);
    EXPECT_EQ(plan.steps.back().num_elements, 30 - (num_packs - 1) * (30 / num_packs));
    ASSERT_EQ(out.size(), 5u);
    for (int k = 0; k < 5; ++k) {  // (1 + 2 + 3) * (k + 1), shapes restored
      EXPECT_EQ(out[static_cast<size_t>(k)].tensor(2).shape(), (Shape{k + 1, 2}));
      testing::expect_mirrored(
          out[static_cast<size_t>(k)], {cpu(0), cpu(1), cpu(2)},
          std::vector<float>(static_cast<size_t>(2 * (k + 1)), 6.0f * (k + 1)));
    }
  }
}

TEST(CrossDeviceAllReduce, NumPacksZeroIsOneAllReducePerTensor) {
  Runtime rt({.num_cpu_devices = 2});
  NcclAllReduce ops(0, rt);
  const auto out = ops.batch_reduce(ReduceOp::kMean, batch(2, 4), kBounded);
  EXPECT_EQ(ops.last_plan().num_collectives(), 4);
  for (int k = 0; k < 4; ++k) {
    testing::expect_mirrored(out[static_cast<size_t>(k)], {cpu(0), cpu(1)},
                             std::vector<float>(static_cast<size_t>(2 * (k + 1)), 1.5f * (k + 1)));
  }
}

TEST(CrossDeviceAllReduce, EachDtypeIsPackedSeparately) {
  Runtime rt({.num_cpu_devices = 2});
  NcclAllReduce ops(2, rt);
  auto pairs = batch(2, 2);
  const PerReplica ints({cpu(0), cpu(1)}, {Tensor::from_vector<int32_t>({1, 2, 3}, Shape{3}),
                                           Tensor::from_vector<int32_t>({4, 5, 6}, Shape{3})});
  pairs.insert(pairs.begin() + 1, {ints, ints});
  const auto out = ops.batch_reduce(ReduceOp::kSum, pairs, kBounded);
  EXPECT_EQ(ops.last_plan().num_collectives(), 4);  // 2 packs of f32, 2 of i32
  EXPECT_EQ(out[1].tensor(0).to_vector<int32_t>(), (std::vector<int32_t>{5, 7, 9}));
  testing::expect_mirrored(out[2], {cpu(0), cpu(1)}, std::vector<float>(4, 6));
}

TEST(CrossDeviceAllReduce, MeanDividesByTheNumberOfDestinations) {
  Runtime rt({.num_cpu_devices = 4});
  NcclAllReduce ops(1, rt);
  const PerReplica v = filled(4, Shape{3});  // 1 + 2 + 3 + 4 = 10
  testing::expect_mirrored(ops.reduce(ReduceOp::kMean, v, v, kBounded),
                           {cpu(0), cpu(1), cpu(2), cpu(3)}, {2.5, 2.5, 2.5});
  EXPECT_EQ(ops.last_plan().mean_divisors, std::vector<int64_t>{4});
  // Destinations that are not the value's devices fall back to ReductionToOneDevice, whose
  // count is the number of values.
  const PerReplica three = filled(3, Shape{1});
  testing::expect_mirrored(ops.reduce(ReduceOp::kMean, three, cpu(3), kBounded), {cpu(3)}, {2});
  EXPECT_EQ(ops.last_plan().path, "reduce_to_one_device");
  EXPECT_EQ(ops.last_plan().mean_divisors, std::vector<int64_t>{3});
}

TEST(CrossDeviceAllReduce, CpuDestinationsStillAllReduce) {
  // TF falls back to ReductionToOneDevice whenever a destination is a CPU; tessel's devices are
  // CPUs, so it does not (docs/compatibility.md).
  Runtime rt({.num_cpu_devices = 2});
  NcclAllReduce ops(1, rt);
  const PerReplica v = filled(2, Shape{2});
  ops.reduce(ReduceOp::kSum, v, v, kBounded);
  EXPECT_EQ(ops.last_plan().path, "all_reduce");
  EXPECT_EQ(ops.last_plan().steps.at(0).algorithm, "direct");
}

TEST(CrossDeviceAllReduce, HierarchicalCopyAndNamedAlgorithms) {
  Runtime rt({.num_cpu_devices = 4});
  const PerReplica v = filled(4, Shape{5});
  HierarchicalCopyAllReduce hier(1, rt);
  testing::expect_mirrored(hier.reduce(ReduceOp::kSum, v, v, kBounded),
                           {cpu(0), cpu(1), cpu(2), cpu(3)}, std::vector<float>(5, 10));
  EXPECT_EQ(hier.last_plan().steps.at(0).algorithm, "hierarchical");
  for (const char* alg : {"ring", "halving_doubling", "reduce_to_one", "direct"}) {
    AllReduceCrossDeviceOps ops(alg, 1, rt);
    testing::expect_mirrored(ops.reduce(ReduceOp::kMax, v, v, kBounded),
                             {cpu(0), cpu(1), cpu(2), cpu(3)}, std::vector<float>(5, 4));
    EXPECT_EQ(ops.last_plan().steps.at(0).algorithm, alg);
  }
}

TEST(CrossDeviceAllReduce, IndexedSlicesGoThroughOneDevicePerValue) {
  Runtime rt({.num_cpu_devices = 2});
  NcclAllReduce ops(1, rt);
  const IndexedSlices s0(vec({1, 2}).reshape(Shape{1, 2}),
                         Tensor::from_vector<int64_t>({1}, Shape{1}), Shape{3, 2});
  const IndexedSlices s1(vec({3, 4}).reshape(Shape{1, 2}),
                         Tensor::from_vector<int64_t>({1}, Shape{1}), Shape{3, 2});
  const PerReplica sparse({cpu(0), cpu(1)}, {s0, s1});
  const PerReplica dense = filled(2, Shape{2});
  const auto out = ops.batch_reduce(ReduceOp::kMean, {{sparse, sparse}, {dense, dense}}, kBounded);
  const CrossDevicePlan plan = ops.last_plan();
  EXPECT_EQ(plan.path, "all_reduce");
  EXPECT_EQ(count_steps(plan, "all_reduce"), 1);     // the dense value
  EXPECT_EQ(count_steps(plan, "reduce_to_one"), 1);  // the sparse one
  EXPECT_EQ(plan.mean_divisors, (std::vector<int64_t>{2, 2}));
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ(out[0].indexed_slices(d).values().to_vector<float>(),
              (std::vector<float>{0.5, 1, 1.5, 2}));
    EXPECT_EQ(out[0].indexed_slices(d).indices().to_vector<int64_t>(),
              (std::vector<int64_t>{1, 1}));
  }
  testing::expect_mirrored(out[1], {cpu(0), cpu(1)}, {1.5, 1.5});
}

TEST(CrossDeviceAllReduce, MismatchedBatchesRunPerPair) {
  Runtime rt({.num_cpu_devices = 3});
  NcclAllReduce ops(1, rt);
  const PerReplica a = filled(2, Shape{1});
  const PerReplica b = filled(3, Shape{1});
  const auto out = ops.batch_reduce(ReduceOp::kSum, {{a, a}, {b, b}, {a, cpu(2)}}, kBounded);
  EXPECT_EQ(ops.last_plan().path, "per_pair");
  EXPECT_EQ(count_steps(ops.last_plan(), "all_reduce"), 2);
  EXPECT_EQ(count_steps(ops.last_plan(), "reduce_to_one"), 1);
  testing::expect_mirrored(out[0], {cpu(0), cpu(1)}, {3});
  testing::expect_mirrored(out[1], {cpu(0), cpu(1), cpu(2)}, {6});
  testing::expect_mirrored(out[2], {cpu(2)}, {3});
}

TEST(CrossDeviceAllReduce, GatherFallsBackToOneDevice) {
  Runtime rt({.num_cpu_devices = 2});
  NcclAllReduce ops(1, rt);
  const PerReplica v({cpu(0), cpu(1)}, {vec({1}), vec({2, 3})});
  testing::expect_mirrored(ops.gather(v, v, 0, kBounded), {cpu(0), cpu(1)}, {1, 2, 3});
  EXPECT_EQ(ops.last_plan().path, "reduce_to_one_device");
}

TEST(CrossDeviceAllReduce, CommunicatorsAreCachedPerDeviceSet) {
  Runtime rt({.num_cpu_devices = 2});
  NcclAllReduce ops(1, rt);
  const PerReplica v = filled(2, Shape{4});
  for (int i = 0; i < 20; ++i) {
    testing::expect_mirrored(ops.reduce(ReduceOp::kSum, v, v, kBounded), {cpu(0), cpu(1)},
                             {3, 3, 3, 3});
  }
  EXPECT_EQ(ops.num_collectives(), 20);
}

TEST(CrossDeviceAllReduce, PacksOfGpuValuesLiveInTheGpusMemory) {
  // NcclAllReduce's num_packs packing over simulated GPUs: packs split inside tensors, three
  // dtypes, uneven sizes; the same plan and results as on CPU devices, the packed buffers in the
  // GPUs' memory and the inputs copied into them there.
  Runtime rt({.num_cpu_devices = 3, .num_simulated_gpu_devices = 3});
  std::vector<Device*> cpus;
  for (int d = 0; d < 3; ++d) cpus.push_back(&rt.device(cpu(d)));
  for (int num_packs : {0, 1, 2, 3, 7}) {
    NcclAllReduce gpu_ops(num_packs, rt);
    NcclAllReduce cpu_ops(num_packs, rt);
    for (DType dtype : {DType::kF32, DType::kF64, DType::kI32}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean}) {
        SCOPED_TRACE("num_packs " + std::to_string(num_packs));
        testing::expect_gpu_batch_matches_cpu(gpu_ops, cpu_ops, rt.gpu_devices(), cpus, dtype, op,
                                              kBounded);
      }
    }
    EXPECT_EQ(gpu_ops.last_plan().num_collectives(), num_packs == 0 ? 5 : num_packs);
  }
}

}  // namespace
}  // namespace tessel
