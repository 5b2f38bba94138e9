// ReductionToOneDevice (reference §A.6): reduce device, MEAN count = number of values,
// accumulation_fn, IndexedSlices by concatenation, gather with unequal sizes.
#include <gtest/gtest.h>

#include "distribute/distribute_test_util.h"

namespace tessel {
namespace {

using testing::cpu;
using testing::filled;
using testing::floats;
using testing::kBounded;
using testing::vec;

IndexedSlices slices(std::vector<float> values, std::vector<int64_t> indices, int64_t rows,
                     int64_t width) {
  const auto k = static_cast<int64_t>(indices.size());
  return IndexedSlices(Tensor::from_vector<float>(values, Shape{k, width}),
                       Tensor::from_vector<int64_t>(indices, Shape{k}), Shape{rows, width});
}

TEST(CrossDeviceReductionToOne, MeanDividesByTheNumberOfValues) {
  Runtime rt({.num_cpu_devices = 4});
  ReductionToOneDevice ops("", nullptr, rt);
  const PerReplica v = filled(3, Shape{2});  // 1, 2, 3
  // Destinations elsewhere (CPU:3 holds no value): count is still len(values) = 3.
  const Mirrored m = ops.reduce(ReduceOp::kMean, v, {cpu(3), cpu(0)}, kBounded);
  testing::expect_mirrored(m, {cpu(3), cpu(0)}, {2, 2});
  const CrossDevicePlan plan = ops.last_plan();
  EXPECT_EQ(plan.method, "reduce");
  EXPECT_EQ(plan.path, "reduce_to_one_device");
  EXPECT_EQ(plan.mean_divisors, std::vector<int64_t>{3});
  ASSERT_EQ(plan.steps.size(), 2u);
  EXPECT_EQ(plan.steps[0].kind, "reduce_to_one");
  EXPECT_EQ(plan.steps[0].algorithm, cpu(3));  // the first destination
  EXPECT_EQ(plan.steps[1].kind, "copy");
  EXPECT_EQ(plan.num_collectives(), 0);
}

TEST(CrossDeviceReductionToOne, ReduceToDeviceOverridesTheFirstDestination) {
  Runtime rt({.num_cpu_devices = 3});
  ReductionToOneDevice ops("/cpu:2", nullptr, rt);
  EXPECT_EQ(ops.reduce_to_device(), cpu(2));
  const PerReplica v = filled(2, Shape{1});
  testing::expect_mirrored(ops.reduce(ReduceOp::kSum, v, v, kBounded), {cpu(0), cpu(1)}, {3});
  EXPECT_EQ(ops.last_plan().steps[0].algorithm, cpu(2));
}

TEST(CrossDeviceReductionToOne, ExtendedOpsAndDtypes) {
  Runtime rt({.num_cpu_devices = 3});
  ReductionToOneDevice ops("", nullptr, rt);
  const PerReplica ints({cpu(0), cpu(1), cpu(2)}, {Tensor::from_vector<int32_t>({1, -4}, Shape{2}),
                                                   Tensor::from_vector<int32_t>({2, 5}, Shape{2}),
                                                   Tensor::from_vector<int32_t>({4, 6}, Shape{2})});
  EXPECT_EQ(ops.reduce(ReduceOp::kMean, ints, cpu(0), kBounded).tensor(0).to_vector<int32_t>(),
            (std::vector<int32_t>{2, 2}));  // 7/3 and 7/3 truncate (TF would return floats)
  EXPECT_EQ(ops.reduce(ReduceOp::kMax, ints, cpu(0), kBounded).tensor(0).to_vector<int32_t>(),
            (std::vector<int32_t>{4, 6}));
  EXPECT_EQ(ops.reduce(ReduceOp::kMin, ints, cpu(0), kBounded).tensor(0).to_vector<int32_t>(),
            (std::vector<int32_t>{1, -4}));
  EXPECT_EQ(ops.reduce(ReduceOp::kProd, ints, cpu(0), kBounded).tensor(0).to_vector<int32_t>(),
            (std::vector<int32_t>{8, -120}));
  const PerReplica halves = filled(3, Shape{4}, 0.5, 0, DType::kBF16);
  const Mirrored m = ops.reduce(ReduceOp::kSum, halves, cpu(0), kBounded);
  EXPECT_EQ(m.tensor(0).dtype(), DType::kBF16);
  EXPECT_EQ(floats(m.value(0)), (std::vector<float>{3, 3, 3, 3}));
}

TEST(CrossDeviceReductionToOne, AccumulationFnReplacesAddN) {
  Runtime rt({.num_cpu_devices = 2});
  int calls = 0;
  // A "sum" that also counts its calls and scales by 10, to see that it is used.
  ReductionToOneDevice ops(
      "",
      [&calls](const std::vector<Tensor>& xs) {
        ++calls;
        std::vector<float> out(static_cast<size_t>(xs[0].num_elements()), 0.0f);
        for (const Tensor& x : xs) {
          const auto v = x.to_vector<float>();
          for (size_t i = 0; i < out.size(); ++i) out[i] += 10 * v[i];
        }
        return Tensor::from_vector<float>(out, xs[0].shape());
      },
      rt);
  const PerReplica v = filled(2, Shape{2});
  EXPECT_EQ(floats(ops.reduce(ReduceOp::kSum, v, cpu(0), kBounded).value(0)),
            (std::vector<float>{30, 30}));
  EXPECT_EQ(floats(ops.reduce(ReduceOp::kMean, v, cpu(0), kBounded).value(0)),
            (std::vector<float>{15, 15}));
  EXPECT_EQ(calls, 2);
  // MAX does not use it.
  EXPECT_EQ(floats(ops.reduce(ReduceOp::kMax, v, cpu(0), kBounded).value(0)),
            (std::vector<float>{2, 2}));
  EXPECT_EQ(calls, 2);
  ReductionToOneDevice bad(
      "", [](const std::vector<Tensor>&) { return testing::vec({1}); }, rt);
  EXPECT_TESSEL_ERROR(bad.reduce(ReduceOp::kSum, v, cpu(0), kBounded), ErrorCode::kInvalidArgument,
                      "accumulation_fn returned [1] f32 for inputs of shape [2]");
}

TEST(CrossDeviceReductionToOne, IndexedSlicesConcatenateKeepingDuplicates) {
  Runtime rt({.num_cpu_devices = 2});
  ReductionToOneDevice ops("", nullptr, rt);
  const PerReplica v({cpu(0), cpu(1)},
                     {slices({1, 2, 3, 4}, {0, 2}, 4, 2), slices({10, 20}, {2}, 4, 2)});
  const Mirrored sum = ops.reduce(ReduceOp::kSum, v, v, kBounded);
  for (int d = 0; d < 2; ++d) {
    const IndexedSlices& s = sum.indexed_slices(d);
    EXPECT_EQ(s.indices().to_vector<int64_t>(), (std::vector<int64_t>{0, 2, 2}));  // 2 twice
    EXPECT_EQ(s.values().to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 10, 20}));
    EXPECT_EQ(s.dense_shape(), (Shape{4, 2}));
    EXPECT_EQ(s.to_dense().to_vector<float>(), (std::vector<float>{1, 2, 0, 0, 13, 24, 0, 0}));
  }
  const Mirrored mean = ops.reduce(ReduceOp::kMean, v, cpu(1), kBounded);
  const IndexedSlices& s = mean.indexed_slices(0);
  EXPECT_EQ(s.values().to_vector<float>(), (std::vector<float>{0.5, 1, 1.5, 2, 5, 10}));
  EXPECT_EQ(s.indices().to_vector<int64_t>(), (std::vector<int64_t>{0, 2, 2}));  // untouched
  EXPECT_EQ(ops.last_plan().mean_divisors, std::vector<int64_t>{2});
  EXPECT_TRUE(std::holds_alternative<IndexedSlices>(regroup(mean)));
}

TEST(CrossDeviceReductionToOne, DenseAndSparseComponentsAddDensely) {
  Runtime rt({.num_cpu_devices = 2});
  ReductionToOneDevice ops("", nullptr, rt);
  const PerReplica v({cpu(0), cpu(1)},
                     {Tensor::full(Shape{3, 1}, DType::kF32, 1), slices({5}, {1}, 3, 1)});
  const Mirrored m = ops.reduce(ReduceOp::kSum, v, cpu(0), kBounded);
  EXPECT_EQ(floats(m.value(0)), (std::vector<float>{1, 6, 1}));
}

TEST(CrossDeviceReductionToOne, GatherConcatenatesUnequalSizesInComponentOrder) {
  Runtime rt({.num_cpu_devices = 3});
  ReductionToOneDevice ops("", nullptr, rt);
  const PerReplica v({cpu(2), cpu(0)}, {Tensor::from_vector<float>({1, 2, 3, 4}, Shape{2, 2}),
                                        Tensor::from_vector<float>({5, 6}, Shape{2, 1})});
  const Mirrored m = ops.gather(v, {cpu(1), cpu(2)}, 1, kBounded);
  ASSERT_EQ(m.devices(), (std::vector<std::string>{cpu(1), cpu(2)}));
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ(m.tensor(d).shape(), (Shape{2, 3}));
    EXPECT_EQ(floats(m.value(d)), (std::vector<float>{1, 2, 5, 3, 4, 6}));
  }
  EXPECT_EQ(ops.last_plan().steps[0].kind, "gather_to_one");
  EXPECT_EQ(ops.last_plan().steps[0].algorithm, cpu(1));
}

TEST(CrossDeviceReductionToOne, BatchReduceIsOneReducePerPair) {
  Runtime rt({.num_cpu_devices = 2});
  ReductionToOneDevice ops("", nullptr, rt);
  const PerReplica a = filled(2, Shape{1});
  const PerReplica b = filled(2, Shape{2}, 10);
  const auto out = ops.batch_reduce(ReduceOp::kSum, {{a, a}, {b, cpu(1)}}, kBounded);
  ASSERT_EQ(out.size(), 2u);
  testing::expect_mirrored(out[0], {cpu(0), cpu(1)}, {3});
  testing::expect_mirrored(out[1], {cpu(1)}, {30, 30});
  int reductions = 0;
  for (const PlanStep& s : ops.last_plan().steps) reductions += s.kind == "reduce_to_one";
  EXPECT_EQ(reductions, 2);  // no fusion
}

TEST(CrossDeviceReductionToOne, AnAccumulationFnCallingBackFailsInsteadOfDeadlocking) {
  // The accumulation runs on a device stream: a cross-device call from there (BR-70-05) fails.
  Runtime rt({.num_cpu_devices = 2});
  ReductionToOneDevice* self = nullptr;
  const PerReplica v = filled(2, Shape{1});
  ReductionToOneDevice ops(
      "",
      [&self, &v](const std::vector<Tensor>& xs) {
        self->reduce(ReduceOp::kSum, v, cpu(0), kBounded);
        return xs[0];
      },
      rt);
  self = &ops;
  EXPECT_TESSEL_ERROR(ops.reduce(ReduceOp::kSum, v, cpu(1), kBounded),
                      ErrorCode::kFailedPrecondition,
                      "reduce_to_one on " + cpu(1) +
                          " failed: CrossDeviceOps: reduce must be called from the controller");
}

}  // namespace
}  // namespace tessel
