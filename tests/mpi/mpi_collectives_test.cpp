// The MPI transport's conformance, run by every process under mpirun (-np 2 and -np 4): the
// all-reduce algorithms that move data point to point (ring, halving_doubling, reduce_to_one)
// and MPI's own (mpi, and auto, which picks it) on every dtype, reduce op and count of the
// in-process conformance suite (tests/comm/all_reduce_conformance_test.cpp), with the same
// reference values; send/recv, barrier and transfer_boxes; and the other collectives (reduce,
// broadcast, all_gather, gather, reduce_scatter, all_to_all, scatter, reduce_scatter_boxes),
// which run point to point, against the references of testing/collective_checks.h, with whole
// blocks and with 40-byte messages, and with a rank that never arrives.
#include <gtest/gtest.h>

#include <unistd.h>

#include <numeric>
#include <set>
#include <thread>

#include "comm/mpi/mpi_transport.h"
#include "mpi_testing.h"
#include "tessel/comm/communicator.h"
#include "tessel/comm/mpi.h"
#include "tessel/core/box.h"
#include "testing/collective_checks.h"
#include "testing/expect_error.h"
#include "testing/reduction_reference.h"

namespace tessel {
namespace {

using testing::mpi_options;
using testing::reduction_expected;
using testing::reduction_input;
using testing::tensor_of;

const DType kDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                         DType::kI32, DType::kI64, DType::kU8,   DType::kBool};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin,
                         ReduceOp::kProd};
// 5000 f32 elements with 256-byte segments: many segments per chunk of the ring.
const int64_t kCounts[] = {0, 1, 7, 1023, 5000};

TEST(MpiEnvironmentTest, AvailableVersionAndThreadLevel) {
  EXPECT_TRUE(mpi_available());
  EXPECT_NE(mpi_library_version().find("MPI"), std::string::npos) << mpi_library_version();
  // A second environment finds MPI initialised: it does not own it (and will not finalize it).
  MpiEnvironment again;
  EXPECT_FALSE(again.owns_mpi());
  EXPECT_EQ(mpi_thread_level_name(again.thread_level()), "multiple");
  EXPECT_GE(mpi_size(), 1);
  EXPECT_LT(mpi_rank(), mpi_size());
}

TEST(MpiCommunicatorTest, RanksAreProcessesNamedByHostAndPid) {
  auto comm = make_mpi_communicator();
  EXPECT_EQ(comm->rank(), mpi_rank());
  EXPECT_EQ(comm->size(), mpi_size());
  ASSERT_EQ(static_cast<int>(comm->members().size()), mpi_size());
  const std::string mine = comm->members()[comm->rank()];
  const std::string pid = std::to_string(getpid());
  EXPECT_TRUE(testing::contains(mine, std::string(":").append(pid))) << mine;
  for (int r = 0; r < comm->size(); ++r) {
    for (int s = r + 1; s < comm->size(); ++s) EXPECT_NE(comm->members()[r], comm->members()[s]);
  }
}

TEST(MpiCommunicatorTest, NamesComeFromTheOptions) {
  MpiCommunicatorOptions o;
  o.name = "/job:worker/replica:0/task:" + std::to_string(mpi_rank()) + "/device:CPU:0";
  auto comm = make_mpi_communicator(o);
  for (int r = 0; r < comm->size(); ++r) {
    EXPECT_EQ(comm->members()[r], "/job:worker/replica:0/task:" + std::to_string(r) + "/device:CPU:0");
  }
}

// ---- all_reduce ------------------------------------------------------------------------------

class MpiAllReduceConformance : public ::testing::TestWithParam<Algorithm> {};

TEST_P(MpiAllReduceConformance, EveryDTypeOpAndCount) {
  const Algorithm algorithm = GetParam();
  auto comm = make_mpi_communicator();
  const int n = comm->size(), r = comm->rank();
  CollectiveOptions options = mpi_options(algorithm);
  options.segment_bytes = 256;
  for (DType dtype : kDTypes) {
    for (ReduceOp op : kOps) {
      if (dtype == DType::kBool && op == ReduceOp::kMean) continue;
      for (int64_t count : kCounts) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + std::string(reduce_op_name(op)) +
                     " count " + std::to_string(count));
        Tensor in = tensor_of(count, dtype, [&](int64_t i) { return reduction_input(op, dtype, r, i); });
        const Tensor want = tensor_of(count, dtype, [&](int64_t i) { return reduction_expected(op, dtype, n, i); });
        Tensor out = Tensor::zeros(in.shape(), dtype);
        comm->all_reduce(in, out, op, options);  // out of place
        ASSERT_EQ(out.to_doubles(), want.to_doubles()) << "out of place";
        comm->all_reduce(in, in, op, options);  // in place
        ASSERT_EQ(in.to_doubles(), want.to_doubles()) << "in place";
      }
    }
  }
}

// 4 MiB of f32 (many 1 MiB segments on every algorithm), exact integer sums.
TEST_P(MpiAllReduceConformance, FourMiBSumIsExact) {
  auto comm = make_mpi_communicator();
  const int n = comm->size(), r = comm->rank();
  const int64_t count = int64_t{1} << 20;
  Tensor x = tensor_of(count, DType::kF32, [&](int64_t i) { return static_cast<double>((i + 3 * r) % 8 + 1); });
  comm->all_reduce(x, x, ReduceOp::kSum, mpi_options(GetParam()));
  const auto got = x.to_doubles();
  int64_t wrong = 0;
  for (int64_t i = 0; i < count; ++i) {
    double want = 0;
    for (int k = 0; k < n; ++k) want += (i + 3 * k) % 8 + 1;
    wrong += got[static_cast<size_t>(i)] != want;
  }
  EXPECT_EQ(wrong, 0);
}

// Above 64 KiB MPI's own all-reduce runs libnbc's ring (src/comm/mpi/mpi_all_reduce.cpp): every dtype and op,
// in place and out of place, on 70000 elements (64 KiB and more even for u8 and bool).
TEST(MpiAllReduce, MpiAlgorithmOnLargeBuffersEveryDTypeAndOp) {
  auto comm = make_mpi_communicator();
  const int n = comm->size(), r = comm->rank();
  const int64_t count = 70000;
  for (DType dtype : kDTypes) {
    for (ReduceOp op : kOps) {
      if (dtype == DType::kBool && op == ReduceOp::kMean) continue;
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + std::string(reduce_op_name(op)));
      Tensor in = tensor_of(count, dtype, [&](int64_t i) { return reduction_input(op, dtype, r, i); });
      const Tensor want = tensor_of(count, dtype, [&](int64_t i) { return reduction_expected(op, dtype, n, i); });
      Tensor out = Tensor::zeros(in.shape(), dtype);
      comm->all_reduce(in, out, op, mpi_options(Algorithm::kMpi));
      ASSERT_EQ(out.to_doubles(), want.to_doubles()) << "out of place";
      comm->all_reduce(in, in, op, mpi_options(Algorithm::kMpi));
      ASSERT_EQ(in.to_doubles(), want.to_doubles()) << "in place";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, MpiAllReduceConformance,
                         ::testing::Values(Algorithm::kRing, Algorithm::kHalvingDoubling,
                                           Algorithm::kReduceToOne, Algorithm::kMpi,
                                           Algorithm::kAuto),
                         [](const auto& info) { return std::string(algorithm_name(info.param)); });

// kAuto over MPI is kMpi: the ranks' signatures name the algorithm kAuto chose, so auto on some
// ranks and mpi on the others agree, while auto against ring is a mismatch.
// kAuto is kHierarchical (the hosts' shared memory, src/comm/mpi/host_shm.h) where two processes
// share a host, else kMpi.
TEST(MpiAllReduce, AutoPicksSharedMemoryOnOneHostElseMpi) {
  auto comm = make_mpi_communicator();
  Tensor x = Tensor::full({1000}, DType::kF32, 1);
  const auto& peers = dynamic_cast<detail::MpiTransport&>(comm->transport()).peers();
  std::set<std::string> hosts;
  for (const auto& p : peers) hosts.insert(p.host);
  const bool shared_host = hosts.size() < peers.size();
  const Algorithm automatic = shared_host ? Algorithm::kHierarchical : Algorithm::kMpi;
  const Algorithm mine = comm->rank() == 0 ? Algorithm::kAuto : automatic;
  comm->all_reduce(x, x, ReduceOp::kSum, mpi_options(mine));
  EXPECT_EQ(x.to_doubles(), std::vector<double>(1000, comm->size()));
  const Algorithm other = comm->rank() == 0 ? Algorithm::kAuto : Algorithm::kRing;
  if (!shared_host) {
    EXPECT_TESSEL_ERROR(comm->all_reduce(x, x, ReduceOp::kSum, mpi_options(other)),
                        ErrorCode::kFailedPrecondition, "collectives differ");
    return;
  }
  // Through shared memory the ranks do not meet over MPI (that is the point), so a rank calling
  // a collective over MPI instead is not seen as a different call: it is named as late, by the
  // deadline (or, on the ranks the deadline reaches second, by the abort that follows).
  const testing::Caught c = testing::catch_error(
      [&] { comm->all_reduce(x, x, ReduceOp::kSum, mpi_options(other, std::chrono::seconds(1))); });
  EXPECT_TRUE(c.code == ErrorCode::kDeadlineExceeded || c.code == ErrorCode::kAborted) << c.what;
  const int named = comm->rank() == 0 ? 1 : 0;
  EXPECT_TRUE(testing::contains(c.what, "rank " + std::to_string(named) + " (") ||
              testing::contains(c.what, "ranks [" + std::to_string(named) + " ("))
      << c.what;
  EXPECT_LT(c.seconds, 5.0);
}

TEST(MpiAllReduce, DirectNeedsSharedMemory) {
  auto comm = make_mpi_communicator();
  Tensor x = Tensor::full({8}, DType::kF32, 1);
  EXPECT_TESSEL_ERROR(comm->all_reduce(x, x, ReduceOp::kSum, mpi_options(Algorithm::kDirect)),
                      ErrorCode::kInvalidArgument, "needs an in-process group");
}

TEST(MpiAllReduce, MpiAlgorithmNeedsAnMpiCommunicator) {
  auto comms = make_in_process_communicators(1);
  Tensor x = Tensor::full({8}, DType::kF32, 1);
  EXPECT_TESSEL_ERROR(comms[0]->all_reduce(x, x, ReduceOp::kSum, mpi_options(Algorithm::kMpi)),
                      ErrorCode::kInvalidArgument, "needs a communicator over MPI");
}

// Many back-to-back small calls alternate algorithms on one group (sequence numbers, tags and
// buffered sends stay consistent).
TEST(MpiAllReduce, ManyBackToBackCallsAcrossAlgorithms) {
  auto comm = make_mpi_communicator();
  const int n = comm->size();
  const Algorithm algorithms[] = {Algorithm::kRing, Algorithm::kMpi, Algorithm::kHalvingDoubling,
                                  Algorithm::kReduceToOne};
  for (int i = 0; i < 200; ++i) {
    Tensor x = Tensor::full({33}, DType::kI64, comm->rank() + i);
    comm->all_reduce(x, x, ReduceOp::kSum, mpi_options(algorithms[i % 4]));
    ASSERT_EQ(x.to_doubles()[32], static_cast<double>(n * i + n * (n - 1) / 2)) << "call " << i;
  }
  EXPECT_EQ(comm->sequence_number(), 200u);
}

// ---- point to point, barrier, transfer_boxes ---------------------------------------------------

TEST(MpiPointToPoint, RingExchangeKeepsOrderPerTag) {
  auto comm = make_mpi_communicator();
  const int n = comm->size(), r = comm->rank();
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  const auto o = mpi_options();
  // Two tags interleaved; per tag, messages arrive in the order sent.
  for (int k = 0; k < 3; ++k) {
    comm->send(Tensor::full({4}, DType::kI32, 100 * r + k), right, 7, o);
    comm->send(Tensor::full({2}, DType::kF64, -(100 * r + k)), right, 9, o);
  }
  for (int k = 0; k < 3; ++k) {
    Tensor b = Tensor::zeros({2}, DType::kF64);
    comm->recv(b, left, 9, o);
    EXPECT_EQ(b.to_doubles(), std::vector<double>(2, -(100 * left + k)));
  }
  for (int k = 0; k < 3; ++k) {
    Tensor a = Tensor::zeros({4}, DType::kI32);
    comm->recv(a, left, 7, o);
    EXPECT_EQ(a.to_doubles(), std::vector<double>(4, 100 * left + k));
  }
}

TEST(MpiPointToPoint, LargeMessageAndEmptyMessage) {
  auto comm = make_mpi_communicator();
  const int n = comm->size(), r = comm->rank();
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  const int64_t count = 3 << 20;  // 12 MiB of f32
  comm->send(tensor_of(count, DType::kF32, [&](int64_t i) { return static_cast<double>((i + r) % 1000); }),
             right, 1, mpi_options());
  comm->send(Tensor::zeros({0}, DType::kF32), right, 2, mpi_options());
  Tensor big = Tensor::zeros({count}, DType::kF32);
  comm->recv(big, left, 1, mpi_options());
  const auto got = big.to_doubles();
  int64_t wrong = 0;
  for (int64_t i = 0; i < count; ++i) wrong += got[static_cast<size_t>(i)] != (i + left) % 1000;
  EXPECT_EQ(wrong, 0);
  Tensor empty = Tensor::zeros({0}, DType::kF32);
  comm->recv(empty, left, 2, mpi_options());
}

// A message longer or shorter than the receive: kInvalidArgument at the receiver (which then
// aborts the group, like any failed call), naming both sizes.
TEST(MpiPointToPoint, SizeMismatchIsInvalidArgumentAtTheReceiver) {
  for (int64_t sent : {5, 3}) {
    auto comm = make_mpi_communicator();
    if (comm->size() < 2) GTEST_SKIP() << "needs two processes";
    if (comm->rank() == 0) comm->send(Tensor::zeros({sent}, DType::kF32), 1, 3, mpi_options());
    if (comm->rank() == 1) {
      Tensor four = Tensor::zeros({4}, DType::kF32);
      EXPECT_TESSEL_ERROR(comm->recv(four, 0, 3, mpi_options()), ErrorCode::kInvalidArgument,
                          "expected 16 bytes from rank 0 (" + comm->members()[0] + ") (tag 3) but " +
                              (sent == 5 ? std::string("more than 16") : std::string("12")) + " were sent");
    }
    testing::world_barrier();
  }
}

TEST(MpiBarrier, ReleasesNobodyEarly) {
  auto comm = make_mpi_communicator();
  // The last rank arrives 200 ms late; nobody may leave the barrier before it arrived.
  if (comm->rank() == comm->size() - 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double before = MPI_Wtime();
  comm->barrier(mpi_options());
  const double after = MPI_Wtime();
  double arrived_last = comm->rank() == comm->size() - 1 ? before : 0, latest = 0;
  MPI_Allreduce(&arrived_last, &latest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  // MPI_Wtime is global on one host (MPI_WTIME_IS_GLOBAL aside, same clock source).
  EXPECT_GE(after, latest - 1e-3);
  for (int i = 0; i < 100; ++i) comm->barrier(mpi_options());
  EXPECT_EQ(comm->sequence_number(), 101u);
}

// transfer_boxes runs point to point when memory is not shared: an all-gather of row blocks.
TEST(MpiTransferBoxes, AllGatherOfRowBlocks) {
  auto comm = make_mpi_communicator();
  const int n = comm->size(), r = comm->rank();
  const std::vector<int64_t> dims = {static_cast<int64_t>(3 * n + 1), 5};
  auto rows = [&](int k) {
    const int64_t base = dims[0] / n, extra = dims[0] % n;
    const int64_t offset = k * base + std::min<int64_t>(k, extra);
    return Box{{offset, 0}, {base + (k < extra ? 1 : 0), dims[1]}};
  };
  auto global = [&](const Box& b) {
    return tensor_of(b.num_elements(), DType::kF32, [&](int64_t i) {
             const int64_t row = b.offsets[0] + i / b.extents[1], col = i % b.extents[1];
             return static_cast<double>(row * dims[1] + col);
           }).reshape(Shape(b.extents));
  };
  std::vector<std::vector<int64_t>> in_origins, out_origins;
  std::vector<Communicator::BoxTransfer> transfers;
  const Box whole{{0, 0}, dims};
  for (int f = 0; f < n; ++f) {
    in_origins.push_back(rows(f).offsets);
    out_origins.push_back({0, 0});
    for (int t = 0; t < n; ++t) transfers.push_back({f, t, rows(f)});
  }
  Tensor input = global(rows(r));
  Tensor output = Tensor::full(Shape(dims), DType::kF32, -1);
  comm->transfer_boxes(input, in_origins, output, out_origins, transfers, "all_gather", mpi_options());
  EXPECT_EQ(output.to_doubles(), global(whole).to_doubles());
}

// ---- the other collectives, point to point ------------------------------------------------------

// Each check of testing/collective_checks.h on every process, with whole blocks per message
// and with 40-byte messages (many per block, a broadcast down the chain). A failing check aborts
// the group, so that the other processes stop at once (with kAborted quoting it) instead of
// waiting out their deadline.
class MpiCollectives : public ::testing::TestWithParam<testing::CheckParam> {};

TEST_P(MpiCollectives, MatchesTheReference) {
  const auto& [check, segment_bytes] = GetParam();
  auto comm = make_mpi_communicator();
  CollectiveOptions o = mpi_options();
  o.segment_bytes = segment_bytes;
  try {
    check.check(*comm, o, nullptr);
  } catch (const std::exception& e) {
    comm->abort("rank " + std::to_string(comm->rank()) + " failed a check: " + e.what());
    ADD_FAILURE() << e.what();
  }
  testing::world_barrier();
}

INSTANTIATE_TEST_SUITE_P(EveryCollective, MpiCollectives, testing::every_check_and_segment(),
                         testing::check_param_name);

// 4 MiB buffers: several default (1 MiB) segments per block, exact integer values.
TEST(MpiCollectivesLarge, FourMiBReduceScatterAllGatherAndBroadcast) {
  auto comm = make_mpi_communicator();
  const int n = comm->size(), r = comm->rank();
  const int64_t count = int64_t{1} << 20;
  const auto o = mpi_options();
  auto value = [](int rank, int64_t i) { return static_cast<double>((i + 3 * rank) % 8 + 1); };
  const Tensor x = tensor_of(count, DType::kF32, [&](int64_t i) { return value(r, i); });
  const Tensor reduced = comm->reduce_scatter(x, ReduceOp::kSum, {}, o);
  const Tensor gathered = comm->all_gather(reduced, 0, o);
  ASSERT_EQ(gathered.num_elements(), count);
  const auto got = gathered.to_doubles();
  int64_t wrong = 0;
  for (int64_t i = 0; i < count; ++i) {
    double want = 0;
    for (int k = 0; k < n; ++k) want += value(k, i);
    wrong += got[static_cast<size_t>(i)] != want;
  }
  EXPECT_EQ(wrong, 0);
  Tensor b = r == n - 1 ? x.clone() : Tensor::zeros({count}, DType::kF32);
  comm->broadcast(b, n - 1, o);
  const auto broadcast = b.to_doubles();
  wrong = 0;
  for (int64_t i = 0; i < count; ++i) wrong += broadcast[static_cast<size_t>(i)] != value(n - 1, i);
  EXPECT_EQ(wrong, 0);
}

// Many back-to-back calls of every collective keep the group in step (sequence numbers, message
// order per pair), and all_reduce still works afterwards.
TEST(MpiCollectivesLarge, ManyBackToBackCallsOfEveryCollective) {
  auto comm = make_mpi_communicator();
  const int n = comm->size(), r = comm->rank();
  const auto o = mpi_options();
  for (int i = 0; i < 50; ++i) {
    Tensor x = Tensor::full({n + i % 3, 2}, DType::kI64, r + i);
    Tensor b = x.clone();
    comm->broadcast(b, i % n, o);
    ASSERT_EQ(b.to_doubles()[0], i % n + i) << "call " << i;
    const Tensor g = comm->all_gather(x, 0, o);
    ASSERT_EQ(g.to_doubles().back(), n - 1 + i) << "call " << i;
    const Tensor s = comm->reduce_scatter(x, ReduceOp::kMax, {}, o);  // some ranks get no rows
    for (double v : s.to_doubles()) ASSERT_EQ(v, n - 1 + i) << "call " << i;
    const Tensor a = comm->all_to_all(Tensor::full({n, 1}, DType::kI32, r), {}, o);
    ASSERT_EQ(a.to_doubles()[static_cast<size_t>(n - 1)], n - 1) << "call " << i;
  }
  EXPECT_EQ(comm->sequence_number(), 200u);
  Tensor y = Tensor::full({8}, DType::kF32, 1);
  comm->all_reduce(y, y, ReduceOp::kSum, o);
  EXPECT_EQ(y.to_doubles(), std::vector<double>(8, n));
}

// The last rank never calls the reduce_scatter: the others end by the deadline naming it.
TEST(MpiCollectivesLarge, ARankThatSkipsAReduceScatterIsNamed) {
  auto comm = make_mpi_communicator();
  if (comm->size() < 2) GTEST_SKIP() << "needs two processes";
  const int late = comm->size() - 1;
  const auto o = mpi_options(Algorithm::kAuto, std::chrono::milliseconds(1000));
  if (comm->rank() != late) {
    const testing::Caught c = testing::catch_error(
        [&] { comm->reduce_scatter(Tensor::zeros({8, 2}, DType::kF32), ReduceOp::kSum, {}, o); });
    ASSERT_TRUE(c.thrown);
    EXPECT_TRUE(c.code == ErrorCode::kDeadlineExceeded || c.code == ErrorCode::kAborted) << c.what;
    EXPECT_TRUE(testing::contains(c.what, "for ranks [" + std::to_string(late) + " (" + comm->members()[late] + ")]"))
        << c.what;
    EXPECT_TRUE(testing::contains(c.what, "reduce_scatter(f32, [8,2], sum, counts [])")) << c.what;
    EXPECT_LE(c.seconds, 1.1);
  }
  testing::world_barrier();
}

}  // namespace
}  // namespace tessel
