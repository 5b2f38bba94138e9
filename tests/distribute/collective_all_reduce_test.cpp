// CollectiveAllReduce (reference §A.8): constructor checks, bytes_per_pack packs, MEAN over the
// whole group, several workers (one Runtime and thread each), IndexedSlices, gather.
#include <gtest/gtest.h>

#include <functional>
#include <future>

#include "distribute/distribute_test_util.h"
#include "distribute/gpu_values_util.h"

namespace tessel {
namespace {

using testing::cpu;
using testing::filled;
using testing::floats;
using testing::kBounded;
using testing::vec;

// Runs fn(worker) on one thread per worker and waits for all of them, bounded.
void run_workers(int n, const std::function<void(int)>& fn) {
  std::vector<std::future<void>> done;
  for (int w = 0; w < n; ++w) done.push_back(std::async(std::launch::async, fn, w));
  for (auto& f : done) {
    ASSERT_EQ(f.wait_for(std::chrono::seconds(30)), std::future_status::ready);
    f.get();
  }
}

TEST(CrossDeviceCollective, ConstructorChecks) {
  Runtime rt({.num_cpu_devices = 4});
  EXPECT_TESSEL_ERROR(CollectiveAllReduce({cpu(0), cpu(1), cpu(2)}, 4, {}, rt),
                      ErrorCode::kInvalidArgument,
                      "group_size must be divisible by the number of devices.");
  EXPECT_TESSEL_ERROR(CollectiveAllReduce({}, 1, {}, rt), ErrorCode::kInvalidArgument,
                      "devices must not be empty");
  EXPECT_TESSEL_ERROR(CollectiveAllReduce({cpu(0)}, 0, {}, rt), ErrorCode::kInvalidArgument,
                      "group_size must be >= 1");
  EXPECT_TESSEL_ERROR(CollectiveAllReduce({cpu(0), "/cpu:0"}, 2, {}, rt),
                      ErrorCode::kInvalidArgument, "is given twice");
  EXPECT_TESSEL_ERROR(CollectiveAllReduce({"/cpu:5"}, 1, {}, rt), ErrorCode::kNotFound, "/cpu:5");
  const CollectiveAllReduce ok({"/cpu:1", "/cpu:0"}, 4, {}, rt);
  EXPECT_EQ(ok.devices(), (std::vector<std::string>{cpu(1), cpu(0)}));
  EXPECT_EQ(ok.num_between_graph_workers(), 2);
}

TEST(CrossDeviceCollective, MeanDividesByGroupSize) {
  Runtime rt({.num_cpu_devices = 3});
  CollectiveAllReduce ops({cpu(0), cpu(1), cpu(2)}, 3, {}, rt);
  const PerReplica v = filled(3, Shape{2}, 2.0);  // 2 + 4 + 6
  testing::expect_mirrored(ops.reduce(ReduceOp::kMean, v, v, kBounded), {cpu(0), cpu(1), cpu(2)},
                           {4, 4});
  EXPECT_EQ(ops.last_plan().path, "collective");
  EXPECT_EQ(ops.last_plan().mean_divisors, std::vector<int64_t>{3});
  testing::expect_mirrored(ops.reduce(ReduceOp::kSum, v, v, kBounded), {cpu(0), cpu(1), cpu(2)},
                           {12, 12});
}

TEST(CrossDeviceCollective, BytesPerPackGroupsGreedily) {
  Runtime rt({.num_cpu_devices = 2});
  // Four tensors of 100 f32 (400 bytes) each.
  std::vector<ValueDestinationPair> pairs;
  for (int k = 0; k < 4; ++k) {
    const PerReplica v({cpu(0), cpu(1)}, {Tensor::full(Shape{100}, DType::kF32, k),
                                          Tensor::full(Shape{100}, DType::kF32, 10 * k)});
    pairs.emplace_back(v, v);
  }
  struct Case {
    int64_t bytes_per_pack;
    int collectives;
  };
  for (const Case c :
       {Case{0, 1}, Case{500, 2}, Case{1, 4}, Case{399, 4},
        Case{400, 2} /* a pack closes only when MORE than full */, Case{1 << 20, 1}}) {
    CollectiveAllReduce ops({cpu(0), cpu(1)}, 2, {}, rt);
    const auto out =
        ops.batch_reduce(ReduceOp::kSum, pairs, CommunicationOptions(c.bytes_per_pack, 10.0));
    EXPECT_EQ(ops.last_plan().num_collectives(), c.collectives) << c.bytes_per_pack;
    for (int k = 0; k < 4; ++k) {
      testing::expect_mirrored(out[static_cast<size_t>(k)], {cpu(0), cpu(1)},
                               std::vector<float>(100, 11.0f * k));
    }
  }
  // The batch is packed in reverse: with 500 bytes per pack, tensors {3, 2} then {1, 0}.
  CollectiveAllReduce ops({cpu(0), cpu(1)}, 2, CommunicationOptions(500), rt);
  pairs.front() = {filled(2, Shape{25}), filled(2, Shape{25})};  // 100 bytes
  ops.batch_reduce(ReduceOp::kSum, pairs, kBounded);             // instance options apply (merge)
  const auto steps = ops.last_plan().steps;
  ASSERT_EQ(steps.size(), 2u);
  // Each pack is one scoped backing, fields padded to 64 bytes: 400 B -> 448 B, 100 B -> 128 B.
  EXPECT_EQ(steps[0].num_elements, 224);  // tensors 3 and 2
  EXPECT_EQ(steps[1].num_elements, 144);  // tensors 1 and 0
}

TEST(CrossDeviceCollective, ImplementationPicksTheAlgorithm) {
  Runtime rt({.num_cpu_devices = 2});
  const PerReplica v = filled(2, Shape{8});
  struct Case {
    CommunicationImplementation implementation;
    const char* algorithm;
  };
  for (const Case c : {Case{CommunicationImplementation::kAuto, "direct"},
                       Case{CommunicationImplementation::kRing, "ring"},
                       Case{CommunicationImplementation::kNccl, "ring"}}) {  // TF's CPU fallback
    CollectiveAllReduce ops({cpu(0), cpu(1)}, 2, CommunicationOptions(0, 10.0, c.implementation),
                            rt);
    testing::expect_mirrored(ops.reduce(ReduceOp::kSum, v, v), {cpu(0), cpu(1)},
                             std::vector<float>(8, 3));
    EXPECT_EQ(ops.last_plan().steps.at(0).algorithm, c.algorithm);
  }
}

TEST(CrossDeviceCollective, ValuesMustLiveOnTheObjectsDevices) {
  Runtime rt({.num_cpu_devices = 3});
  CollectiveAllReduce ops({cpu(0), cpu(1)}, 2, {}, rt);
  const PerReplica other({cpu(1), cpu(2)}, {vec({1}), vec({2})});
  EXPECT_TESSEL_ERROR(ops.reduce(ReduceOp::kSum, other, other, kBounded),
                      ErrorCode::kInvalidArgument, "are not this object's devices");
}

TEST(CrossDeviceCollective, OtherDestinationsGetACopyOfTheFirstResult) {
  Runtime rt({.num_cpu_devices = 4});
  CollectiveAllReduce ops({cpu(1), cpu(0)}, 2, {}, rt);
  const PerReplica v({cpu(0), cpu(1)}, {vec({1, 2}), vec({3, 4})});
  const Mirrored m = ops.reduce(ReduceOp::kSum, v, {cpu(3), cpu(0)}, kBounded);
  testing::expect_mirrored(m, {cpu(3), cpu(0)}, {4, 6});
  EXPECT_EQ(ops.last_plan().steps.back().kind, "copy");
  EXPECT_EQ(ops.last_plan().steps.back().devices, std::vector<std::string>{cpu(3)});
  // A batch whose destinations differ runs pair by pair.
  const auto out = ops.batch_reduce(ReduceOp::kSum, {{v, v}, {v, cpu(2)}}, kBounded);
  EXPECT_EQ(ops.last_plan().path, "per_pair");
  testing::expect_mirrored(out[1], {cpu(2)}, {4, 6});
}

TEST(CrossDeviceCollective, IndexedSlicesWithEqualRowCountsAreGathered) {
  Runtime rt({.num_cpu_devices = 2});
  CollectiveAllReduce ops({cpu(0), cpu(1)}, 2, {}, rt);
  const IndexedSlices a(vec({1, 2}).reshape(Shape{1, 2}),
                        Tensor::from_vector<int64_t>({2}, Shape{1}), Shape{4, 2});
  const IndexedSlices b(vec({3, 4}).reshape(Shape{1, 2}),
                        Tensor::from_vector<int64_t>({2}, Shape{1}), Shape{4, 2});
  const PerReplica v({cpu(0), cpu(1)}, {a, b});
  const Mirrored m = ops.reduce(ReduceOp::kMean, v, v, kBounded);
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ(m.indexed_slices(d).indices().to_vector<int64_t>(), (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(m.indexed_slices(d).values().to_vector<float>(),
              (std::vector<float>{0.5, 1, 1.5, 2}));
  }
  const CrossDevicePlan plan = ops.last_plan();
  EXPECT_EQ(plan.num_collectives(), 3);  // row counts, values, indices
  EXPECT_EQ(plan.mean_divisors, std::vector<int64_t>{2});
}

TEST(CrossDeviceCollective, IndexedSlicesWithUnequalRowCountsAreDensified) {
  Runtime rt({.num_cpu_devices = 2});
  CollectiveAllReduce ops({cpu(0), cpu(1)}, 2, {}, rt);
  const IndexedSlices a(vec({1, 2, 3, 4}).reshape(Shape{2, 2}),
                        Tensor::from_vector<int64_t>({0, 2}, Shape{2}), Shape{3, 2});
  const IndexedSlices b(vec({10, 20}).reshape(Shape{1, 2}),
                        Tensor::from_vector<int64_t>({2}, Shape{1}), Shape{3, 2});
  const PerReplica v({cpu(0), cpu(1)}, {a, b});
  const Mirrored m = ops.reduce(ReduceOp::kSum, v, v, kBounded);
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ(m.indexed_slices(d).indices().to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2}));
    EXPECT_EQ(m.indexed_slices(d).values().to_vector<float>(),
              (std::vector<float>{1, 2, 0, 0, 13, 24}));
  }
  EXPECT_EQ(ops.last_plan().steps.back().kind, "all_reduce");
}

TEST(CrossDeviceCollective, GatherSupportsUnequalSizesAlongTheAxis) {
  Runtime rt({.num_cpu_devices = 3});
  CollectiveAllReduce ops({cpu(0), cpu(1), cpu(2)}, 3, {}, rt);
  const PerReplica rows({cpu(0), cpu(1), cpu(2)}, {Tensor::full(Shape{1, 2}, DType::kF32, 1),
                                                   Tensor::full(Shape{3, 2}, DType::kF32, 2),
                                                   Tensor::full(Shape{0, 2}, DType::kF32, 3)});
  const Mirrored m = ops.gather(rows, rows, 0, kBounded);
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(m.tensor(d).shape(), (Shape{4, 2}));
    EXPECT_EQ(floats(m.value(d)), (std::vector<float>{1, 1, 2, 2, 2, 2, 2, 2}));
  }
  EXPECT_EQ(ops.last_plan().steps.at(0).kind, "all_gather");
  const PerReplica cols({cpu(0), cpu(1), cpu(2)},
                        {Tensor::from_vector<float>({1, 2}, Shape{2, 1}),
                         Tensor::from_vector<float>({3, 4, 5, 6}, Shape{2, 2}),
                         Tensor::from_vector<float>({7, 8}, Shape{2, 1})});
  testing::expect_mirrored(ops.gather(cols, cpu(2), 1, kBounded), {cpu(2)},
                           {1, 3, 4, 7, 2, 5, 6, 8});
}

TEST(CrossDeviceCollective, WorkersFormOneGroup) {
  // Two workers (task 0 and task 1), two devices each, group_size 4: sums and MEAN run over all
  // four devices; MEAN divides by group_size, not by the local count.
  Runtime task0({.num_cpu_devices = 2, .task = 0});
  Runtime task1({.num_cpu_devices = 2, .task = 1});
  Runtime* runtimes[] = {&task0, &task1};
  std::vector<std::vector<float>> sums(2);
  std::vector<std::vector<float>> means(2);
  std::vector<std::vector<float>> gathered(2);
  run_workers(2, [&](int w) {
    Runtime& rt = *runtimes[w];
    CollectiveAllReduce ops({cpu(0, w), cpu(1, w)}, 4, CommunicationOptions(0, 10.0), rt);
    EXPECT_EQ(ops.num_between_graph_workers(), 2);
    const PerReplica v({cpu(0, w), cpu(1, w)}, {vec({1.0f + 2 * w}), vec({2.0f + 2 * w})});
    sums[w] = floats(ops.reduce(ReduceOp::kSum, v, v).value(1));
    means[w] = floats(ops.reduce(ReduceOp::kMean, v, v).value(0));
    EXPECT_EQ(ops.last_plan().mean_divisors, std::vector<int64_t>{4});
    gathered[w] = floats(ops.gather(v, v, 0).value(0));
  });
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(sums[w], std::vector<float>{10});
    EXPECT_EQ(means[w], std::vector<float>{2.5});
    EXPECT_EQ(gathered[w], (std::vector<float>{1, 2, 3, 4}));  // rank order: task, then device
  }
}

TEST(CrossDeviceCollective, SeveralWorkersDisableTheSingleReplicaShortcut) {
  Runtime task0({.num_cpu_devices = 1, .task = 0});
  Runtime task1({.num_cpu_devices = 1, .task = 1});
  Runtime* runtimes[] = {&task0, &task1};
  std::vector<std::string> paths(2);
  std::vector<std::vector<float>> out(2);
  run_workers(2, [&](int w) {
    CollectiveAllReduce ops({cpu(0, w)}, 2, CommunicationOptions(0, 10.0), *runtimes[w]);
    const PerReplica one({cpu(0, w)}, {vec({5.0f * (w + 1)})});
    out[w] = floats(ops.reduce(ReduceOp::kSum, one, one).value(0));
    paths[w] = ops.last_plan().path;
  });
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(paths[w], "collective");
    EXPECT_EQ(out[w], std::vector<float>{15});
  }
}

TEST(CrossDeviceCollective, AMissingWorkerIsADeadline) {
  Runtime rt({.num_cpu_devices = 2, .task = 3});
  CollectiveAllReduce ops({cpu(0, 3), cpu(1, 3)}, 4, CommunicationOptions(0, 0.2), rt);
  const PerReplica v({cpu(0, 3), cpu(1, 3)}, {vec({1}), vec({2})});
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TESSEL_ERROR(ops.reduce(ReduceOp::kSum, v, v), ErrorCode::kDeadlineExceeded,
                      "only 2 of 4 devices joined before the deadline");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(CrossDeviceCollective, PackedResultsAreFieldsOfOneScopedBacking) {
  // Seed 135 through tf.distribute: a bytes_per_pack pack is one scoped allocation, one
  // collective, and the results are that allocation's 64-byte-aligned fields (no copy out).
  Runtime rt({.num_cpu_devices = 2});
  std::vector<ValueDestinationPair> pairs;
  for (int k = 0; k < 3; ++k) {
    const PerReplica v({cpu(0), cpu(1)}, {Tensor::full(Shape{3 + k}, DType::kF32, k),
                                          Tensor::full(Shape{3 + k}, DType::kF32, 1)});
    pairs.emplace_back(v, v);
  }
  CollectiveAllReduce ops({cpu(0), cpu(1)}, 2, {}, rt);
  const auto out = ops.batch_reduce(ReduceOp::kSum, pairs, CommunicationOptions(0, 10.0));
  ASSERT_EQ(ops.last_plan().num_collectives(), 1);
  for (int d = 0; d < 2; ++d) {
    const Tensor first = out[0].tensor(d);
    for (int k = 0; k < 3; ++k) {
      const Tensor t = out[static_cast<size_t>(k)].tensor(d);
      EXPECT_TRUE(t.shares_storage_with(first)) << "tensor " << k << " device " << d;
      EXPECT_EQ(t.storage_offset() * 4 % 64, 0) << "tensor " << k;
      EXPECT_EQ(t.to_vector<float>(), std::vector<float>(static_cast<size_t>(3 + k), k + 1.0f));
    }
    EXPECT_FALSE(first.shares_storage_with(out[0].tensor(1 - d)));  // one backing per device
  }
}

TEST(CrossDeviceCollective, ScopedBucketsOfGpuValuesLiveInTheGpusMemory) {
  // Several packs (bytes_per_pack 0: one; 64 and 200: several, some of one tensor), three
  // dtypes, uneven sizes: the same plan and results as on CPU devices, the buckets in the GPUs'
  // memory and the inputs copied into them there.
  Runtime rt({.num_cpu_devices = 3, .num_simulated_gpu_devices = 3});
  std::vector<std::string> gpu_names;
  std::vector<std::string> cpu_names;
  std::vector<Device*> cpus;
  for (int d = 0; d < 3; ++d) {
    gpu_names.push_back(rt.gpu_devices()[static_cast<size_t>(d)]->name());
    cpu_names.push_back(cpu(d));
    cpus.push_back(&rt.device(cpu(d)));
  }
  for (int64_t bytes_per_pack : {0, 64, 200}) {
    CollectiveAllReduce gpu_ops(gpu_names, 3, {}, rt);
    CollectiveAllReduce cpu_ops(cpu_names, 3, {}, rt);
    for (DType dtype : {DType::kF32, DType::kF64, DType::kI32}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean}) {
        SCOPED_TRACE("bytes_per_pack " + std::to_string(bytes_per_pack));
        testing::expect_gpu_batch_matches_cpu(gpu_ops, cpu_ops, rt.gpu_devices(), cpus, dtype, op,
                                              CommunicationOptions(bytes_per_pack, 10.0));
      }
    }
    if (bytes_per_pack == 64) {
      EXPECT_GT(gpu_ops.last_plan().num_collectives(), 1);
    }
  }
}

}  // namespace
}  // namespace tessel
