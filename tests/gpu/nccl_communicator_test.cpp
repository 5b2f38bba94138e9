// NCCL communicators on the visible GPUs (one rank per GPU, a thread each): every collective's
// result against values computed here on the host, errors, and a stalled GPU that ends in
// kDeadlineExceeded instead of a hang. With one GPU the groups have one rank; the multi-rank
// cases (send/recv, a late rank) need two GPUs and skip otherwise.
#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <thread>

#include <cuda_runtime_api.h>
#include <gmock/gmock.h>

#include "gpu_test_util.h"
#include "testing/run_ranks.h"
#include "tessel/comm/nccl.h"
#include "tessel/distribute/cross_device_ops.h"
#include "tessel/core/box.h"
#include "tessel/core/error.h"

namespace tessel {
namespace {

using ::testing::HasSubstr;
using testing::GpuTest;

class NcclTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    comms_ = make_nccl_communicators(runtime().gpu_devices());
  }
  // Runs fn(rank) on one thread per rank; rethrows the first failure.
  void on_every_rank(const std::function<void(int)>& fn) {
    for (const std::exception_ptr& e : testing::run_ranks(num_gpus(), fn)) {
      if (e) std::rethrow_exception(e);
    }
  }
  // Rank r's input: r + 1 + i % 7 (exact in every dtype used here).
  Tensor input_on(int r, const Shape& shape, DType dtype) {
    Tensor host = Tensor::zeros(shape, DType::kF64);
    std::vector<double> v(static_cast<size_t>(shape.num_elements()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = r + 1 + static_cast<double>(i % 7);
    Tensor t = gpu(r).allocate(shape, dtype, false);
    t.copy_from(Tensor::from_vector(v, shape).astype(dtype));
    return t;
  }
  std::vector<std::unique_ptr<Communicator>> comms_;
};

TEST_F(NcclTest, AllReduceMatchesTheHostSumMaxAndMean) {
  const int n = num_gpus();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kI32, DType::kF64}) {
    on_every_rank([&](int r) {
      Tensor x = input_on(r, Shape{1000, 3}, dtype);
      Tensor sum = gpu(r).allocate(x.shape(), dtype, false);
      comms_[r]->all_reduce(x, sum, ReduceOp::kSum);
      comms_[r]->all_reduce(x, x, ReduceOp::kMax);  // in place
      const std::vector<double> s = sum.to_doubles();
      const std::vector<double> m = x.to_doubles();
      for (size_t i = 0; i < s.size(); ++i) {
        const double base = static_cast<double>(i % 7);
        ASSERT_EQ(s[i], n * (n + 1) / 2 + n * base) << dtype_name(dtype) << " at " << i;
        ASSERT_EQ(m[i], n + base) << dtype_name(dtype) << " at " << i;
      }
    });
  }
  on_every_rank([&](int r) {
    Tensor x = input_on(r, Shape{64}, DType::kF32);
    comms_[r]->all_reduce(x, x, ReduceOp::kMean);
    EXPECT_FLOAT_EQ(static_cast<float>(x.at({5})), (n + 1) / 2.0f + 5);
  });
}

TEST_F(NcclTest, BroadcastReduceAllGatherReduceScatterAndAllToAll) {
  const int n = num_gpus();
  on_every_rank([&](int r) {
    Tensor b = input_on(r, Shape{10}, DType::kF32);
    comms_[r]->broadcast(b, n - 1);
    EXPECT_EQ(b.at({0}), n);  // the root's first element

    Tensor x = input_on(r, Shape{10}, DType::kF32);
    Tensor out = gpu(r).allocate(Shape{10}, DType::kF32);
    comms_[r]->reduce(x, out, ReduceOp::kSum, 0);
    if (r == 0) {
      EXPECT_EQ(out.at({0}), n * (n + 1) / 2);
    }

    // Uneven blocks along axis 1: rank r contributes r + 1 columns.
    Tensor part = input_on(r, Shape{2, r + 1}, DType::kF32);
    Tensor gathered = comms_[r]->all_gather(part, 1);
    EXPECT_EQ(gathered.shape(), Shape({2, n * (n + 1) / 2}));
    EXPECT_EQ(gathered.memory_space(), gpu(r).memory_space());
    int64_t column = 0;
    for (int q = 0; q < n; ++q) {
      for (int c = 0; c <= q; ++c, ++column) {
        EXPECT_EQ(gathered.at({1, column}), q + 1 + (q + 1 + c) % 7);  // row 1 of rank q's block
      }
    }

    // reduce_scatter with counts: rank r keeps r + 1 rows.
    const int64_t rows = n * (n + 1) / 2;
    std::vector<int64_t> counts;
    for (int q = 0; q < n; ++q) counts.push_back(q + 1);
    Tensor whole = input_on(r, Shape{rows, 2}, DType::kF32);
    Tensor mine = comms_[r]->reduce_scatter(whole, ReduceOp::kSum, counts);
    EXPECT_EQ(mine.shape(), Shape({r + 1, 2}));
    const int64_t first_row = r * (r + 1) / 2;
    EXPECT_EQ(mine.at({0, 1}), n * (n + 1) / 2 + n * ((first_row * 2 + 1) % 7));

    // all_to_all: rank r sends q + 1 rows to rank q.
    Tensor sent = input_on(r, Shape{rows, 1}, DType::kI64);
    Tensor received = comms_[r]->all_to_all(sent, counts);
    EXPECT_EQ(received.shape(), Shape({n * (r + 1), 1}));
    EXPECT_EQ(received.at({0, 0}), 1 + (first_row % 7));  // rank 0's block for r
  });
}

TEST_F(NcclTest, SendAndRecvBetweenTwoGpus) {
  if (num_gpus() < 2) GTEST_SKIP() << "skipped: needs 2 GPUs";
  on_every_rank([&](int r) {
    if (r > 1) return;
    Tensor t = input_on(r, Shape{100}, DType::kF32);
    if (r == 0) comms_[0]->send(t, 1, 3);
    if (r == 1) {
      comms_[1]->recv(t, 0, 3);
      EXPECT_EQ(t.at({0}), 1);
    }
  });
}

TEST_F(NcclTest, HostTensorsStillTakeTheHostTransport) {
  on_every_rank([&](int r) {
    Tensor x = Tensor::full(Shape{8}, DType::kF32, r + 1);
    comms_[r]->all_reduce(x, x, ReduceOp::kSum);
    EXPECT_EQ(x.at({3}), num_gpus() * (num_gpus() + 1) / 2);
  });
}

TEST_F(NcclTest, OneRankPerGpu) {
  try {
    (void)make_nccl_communicators({&gpu(), &gpu()});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("one rank per GPU"));
  }
}

TEST_F(NcclTest, GpuTensorsOnAHostGroupAndBlockCollectivesGoThroughTheHost) {
  auto host = make_in_process_communicators(1);
  Tensor x = input_on(0, Shape{4}, DType::kF32);
  host[0]->all_reduce(x, x, ReduceOp::kSum);
  EXPECT_EQ(x.memory_space(), MemorySpace::cuda(0));
  EXPECT_EQ(x.at({2}), 3);
  Tensor gathered = host[0]->all_gather(x);
  EXPECT_EQ(gathered.memory_space(), MemorySpace::cuda(0));
  EXPECT_EQ(gathered.to_host().to_doubles(), x.to_host().to_doubles());
  // A block collective on the NCCL group: staged through host copies too.
  Tensor out = gpu().allocate(Shape{4}, DType::kF32);
  comms_[0]->transfer_boxes(x, {{0}}, out, {{0}}, {{0, 0, Box{{1}, {2}}}}, "send_recv");
  EXPECT_EQ(out.to_host().to_doubles(), (std::vector<double>{0, 2, 3, 0}));
}

TEST_F(NcclTest, AGroupJoinedOverAHostCommunicatorWorks) {
  if (num_gpus() != 1) GTEST_SKIP() << "skipped: the one-rank case";
  auto host = make_in_process_communicators(1, {"host rank 0"});
  std::unique_ptr<Communicator> comm = make_nccl_communicator(std::move(host[0]), gpu());
  Tensor x = input_on(0, Shape{16}, DType::kF32);
  comm->all_reduce(x, x, ReduceOp::kSum);
  EXPECT_EQ(x.at({1}), 2);
  EXPECT_EQ(comm->sequence_number(), 2u);  // the id's broadcast, then the all_reduce
}

// tf.distribute's NcclAllReduce over the GPU devices: a batch of three tensors in two packs, summed
// by the group service's NCCL group (one rank per GPU; with one GPU, TF's single-replica
// shortcut), the results left in the GPUs' memory.
TEST_F(NcclTest, TfDistributesNcclAllReduceReducesGpuValues) {
  std::vector<std::string> names;
  for (Device* d : runtime().gpu_devices()) names.push_back(d->name());
  std::vector<ValueDestinationPair> pairs;
  for (int k = 0; k < 3; ++k) {
    std::vector<Value> values;
    for (int d = 0; d < num_gpus(); ++d) {  // each value in its GPU's memory
      Tensor value = gpu(d).allocate(Shape{k + 1, 3}, DType::kF32, /*zero_fill=*/false);
      value.copy_from(Tensor::full(Shape{k + 1, 3}, DType::kF32, (d + 1) * (k + 1)));
      values.push_back(value);
    }
    PerReplica v(names, values);
    pairs.emplace_back(v, v);
  }
  NcclAllReduce ops(/*num_packs=*/2, runtime());
  const std::vector<Mirrored> out = ops.batch_reduce(ReduceOp::kSum, pairs);
  ASSERT_EQ(out.size(), 3u);
  const double ranks = num_gpus() * (num_gpus() + 1) / 2.0;
  for (int k = 0; k < 3; ++k) {
    const Tensor& t = out[static_cast<size_t>(k)].tensor(0);
    EXPECT_EQ(t.memory_space(), gpu(0).memory_space());
    EXPECT_EQ(t.shape(), Shape({k + 1, 3}));
    EXPECT_EQ(t.to_host().to_doubles(), std::vector<double>(static_cast<size_t>(3 * (k + 1)),
                                                            ranks * (k + 1)));
  }
  // One GPU is one replica: TF's shortcut returns the values as they are, with no collective.
  EXPECT_EQ(ops.last_plan().path, num_gpus() > 1 ? "all_reduce" : "single_replica_shortcut");
}

// A host callback that blocks the GPU's stream until released: the GPU never reaches the NCCL
// call queued behind it, as when a peer GPU stalls.
void CUDART_CB block_until_released(void* flag) {
  auto* released = static_cast<std::atomic<bool>*>(flag);
  while (!released->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

TEST_F(NcclTest, AStalledGpuEndsInDeadlineExceededNotAHang) {
  if (num_gpus() != 1) GTEST_SKIP() << "skipped: the one-rank case";
  Tensor x = input_on(0, Shape{1024}, DType::kF32);  // before the stall: copies wait for it
  // Static: the callback may still read it after this test returns, until the stream drains.
  static std::atomic<bool> released;
  released.store(false);
  auto stream = static_cast<cudaStream_t>(gpu().cuda_stream());
  ASSERT_EQ(cudaLaunchHostFunc(stream, block_until_released, &released), cudaSuccess);
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  std::optional<ErrorCode> code;
  CollectiveOptions options;
  options.timeout = std::chrono::milliseconds(500);
  try {
    comms_[0]->all_reduce(x, x, ReduceOp::kSum, options);
  } catch (const Error& e) {
    code = e.code();
    message = e.what();
  }
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  released.store(true);
  EXPECT_EQ(code, std::optional<ErrorCode>(ErrorCode::kDeadlineExceeded)) << message;
  EXPECT_THAT(message, HasSubstr("all_reduce"));
  EXPECT_THAT(message, HasSubstr("aborted"));
  EXPECT_LT(waited, 5.0);
  try {  // the group stays aborted
    comms_[0]->all_reduce(x, x, ReduceOp::kSum);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kAborted) << e.what();
  }
}

// Several GPUs: rank 1 never calls; every other rank's all_reduce ends in kDeadlineExceeded
// naming rank 1's device by the deadline (the host meeting before the NCCL launch waits for it),
// not a hang. Written without two GPUs at hand (this workplace lends one): not yet run.
TEST_F(NcclTest, ALateRankIsNamedByTheOthersDeadlineNotAHang) {
  if (num_gpus() < 2) GTEST_SKIP() << "skipped: needs 2 GPUs";
  CollectiveOptions options;
  options.timeout = std::chrono::milliseconds(500);
  const std::string late = gpu(1).name();
  on_every_rank([&](int r) {
    if (r == 1) return;
    Tensor x = input_on(r, Shape{1024}, DType::kF32);
    const auto start = std::chrono::steady_clock::now();
    try {
      comms_[r]->all_reduce(x, x, ReduceOp::kSum, options);
      ADD_FAILURE() << "rank " << r << ": the all_reduce without rank 1 returned";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kDeadlineExceeded) << e.what();
      EXPECT_THAT(e.what(), HasSubstr("all_reduce"));
      EXPECT_THAT(e.what(), HasSubstr(late));
    }
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(waited, 5.0) << "rank " << r;
  });
}

}  // namespace
}  // namespace tessel
