// Hierarchical groups across processes (make_hierarchical_communicators): every process drives
// 2 local devices on 2 threads; global rank of device d on process p is 2p + d. all_reduce with
// kAuto / kHierarchical (within the process, MPI across, back) and with the point-to-point
// algorithms over all 2P ranks, exact values against the in-process conformance references;
// the other collectives (point to point over all 2P ranks, pairs within a process in memory)
// against the references of testing/collective_checks.h; barrier and send/recv within and
// across processes; errors on every rank.
#include <gtest/gtest.h>


#include "mpi_testing.h"
#include "tessel/comm/communicator.h"
#include "tessel/comm/mpi.h"
#include "testing/collective_checks.h"
#include "testing/expect_error.h"
#include "testing/reduction_reference.h"
#include "testing/run_ranks.h"

namespace tessel {
namespace {

using namespace std::chrono_literals;
using testing::mpi_options;
using testing::reduction_expected;
using testing::reduction_input;
using testing::run_ranks;
using testing::tensor_of;

constexpr int kLocal = 2;

// Runs body(device, comm) on one thread per local device; returns the first error ("" if none).
std::string on_devices(std::vector<std::unique_ptr<Communicator>>& comms,
                       const std::function<void(int, Communicator&)>& body) {
  return testing::first_error(run_ranks(static_cast<int>(comms.size()), [&](int d) { body(d, *comms[d]); }));
}

TEST(MpiHierarchy, RanksAndNames) {
  auto comms = make_hierarchical_communicators(kLocal);
  ASSERT_EQ(comms.size(), 2u);
  const int p = mpi_rank();
  for (int d = 0; d < kLocal; ++d) {
    EXPECT_EQ(comms[d]->rank(), kLocal * p + d);
    EXPECT_EQ(comms[d]->size(), kLocal * mpi_size());
    EXPECT_EQ(comms[d]->members()[comms[d]->rank()],
              "/job:worker/replica:0/task:" + std::to_string(p) + "/device:CPU:" + std::to_string(d));
  }
}

class MpiHierarchyAllReduce : public ::testing::TestWithParam<Algorithm> {};

TEST_P(MpiHierarchyAllReduce, EveryDTypeOpAndCount) {
  auto comms = make_hierarchical_communicators(kLocal);
  const int n = comms[0]->size();
  CollectiveOptions options = mpi_options(GetParam());
  options.segment_bytes = 256;
  const DType dtypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                          DType::kI32, DType::kI64, DType::kU8,   DType::kBool};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd};
  // 70000 elements (above MPI's ring threshold) only where MPI moves them: the point-to-point
  // algorithms pass 256-byte segments.
  const bool through_mpi = GetParam() == Algorithm::kAuto || GetParam() == Algorithm::kHierarchical;
  const std::vector<int64_t> counts = through_mpi ? std::vector<int64_t>{0, 1, 7, 1023, 70000}
                                                  : std::vector<int64_t>{0, 1, 7, 1023};
  EXPECT_EQ(on_devices(comms, [&](int, Communicator& c) {
              const int r = c.rank();
              for (DType dtype : dtypes) {
                for (ReduceOp op : ops) {
                  if (dtype == DType::kBool && op == ReduceOp::kMean) continue;
                  for (int64_t count : counts) {
                    Tensor in = tensor_of(count, dtype, [&](int64_t i) { return reduction_input(op, dtype, r, i); });
                    const Tensor want = tensor_of(count, dtype, [&](int64_t i) { return reduction_expected(op, dtype, n, i); });
                    Tensor out = Tensor::zeros(in.shape(), dtype);
                    c.all_reduce(in, out, op, options);
                    if (out.to_doubles() != want.to_doubles()) {
                      throw std::runtime_error(std::string(dtype_name(dtype)) + " " +
                                               std::string(reduce_op_name(op)) + " count " +
                                               std::to_string(count) + " out of place: wrong");
                    }
                    c.all_reduce(in, in, op, options);
                    if (in.to_doubles() != want.to_doubles()) {
                      throw std::runtime_error(std::string(dtype_name(dtype)) + " " +
                                               std::string(reduce_op_name(op)) + " count " +
                                               std::to_string(count) + " in place: wrong");
                    }
                  }
                }
              }
            }),
            "");
}

INSTANTIATE_TEST_SUITE_P(Algorithms, MpiHierarchyAllReduce,
                         ::testing::Values(Algorithm::kAuto, Algorithm::kHierarchical, Algorithm::kRing,
                                           Algorithm::kHalvingDoubling, Algorithm::kReduceToOne),
                         [](const auto& info) { return std::string(algorithm_name(info.param)); });

// kAuto is kHierarchical on these groups: auto on device 0, hierarchical on device 1 agree.
TEST(MpiHierarchy, AutoIsHierarchical) {
  auto comms = make_hierarchical_communicators(kLocal);
  const int n = comms[0]->size();
  EXPECT_EQ(on_devices(comms, [&](int d, Communicator& c) {
              Tensor x = Tensor::full({100}, DType::kF32, 1);
              c.all_reduce(x, x, ReduceOp::kSum, mpi_options(d == 0 ? Algorithm::kAuto : Algorithm::kHierarchical));
              if (x.to_doubles() != std::vector<double>(100, n)) throw std::runtime_error("wrong sum");
            }),
            "");
}

// Every rank sends to every other rank (within and across processes) under two tags.
TEST(MpiHierarchy, SendRecvEveryPairAndBarrier) {
  auto comms = make_hierarchical_communicators(kLocal);
  const int n = comms[0]->size();
  EXPECT_EQ(on_devices(comms, [&](int, Communicator& c) {
              const int r = c.rank();
              for (int peer = 0; peer < n; ++peer) {
                if (peer == r) continue;
                c.send(Tensor::full({3}, DType::kI64, 100 * r + peer), peer, 5, mpi_options());
                c.send(Tensor::full({1}, DType::kI64, -r), peer, 6, mpi_options());
              }
              for (int peer = 0; peer < n; ++peer) {
                if (peer == r) continue;
                Tensor b = Tensor::zeros({1}, DType::kI64);
                c.recv(b, peer, 6, mpi_options());
                Tensor a = Tensor::zeros({3}, DType::kI64);
                c.recv(a, peer, 5, mpi_options());
                if (a.to_doubles() != std::vector<double>(3, 100 * peer + r) || b.to_doubles()[0] != -peer) {
                  throw std::runtime_error("wrong message from rank " + std::to_string(peer));
                }
              }
              for (int i = 0; i < 20; ++i) c.barrier(mpi_options());
            }),
            "");
}

// Device 1 of the last process all-reduces a different count: every rank of every process
// throws kFailedPrecondition (the local devices of other processes learn it from their device
// 0, which compared signatures across processes).
TEST(MpiHierarchy, MismatchAcrossProcessesIsFailedPreconditionEverywhere) {
  auto comms = make_hierarchical_communicators(kLocal);
  const int odd = comms[0]->size() - 1;
  const auto errors = run_ranks(kLocal, [&](int d) {
    Communicator& c = *comms[d];
    Tensor x = Tensor::zeros({c.rank() == odd ? 9 : 8}, DType::kF32);
    c.all_reduce(x, x, ReduceOp::kSum, mpi_options(Algorithm::kAuto, 10s));
  });
  for (int d = 0; d < kLocal; ++d) {
    const testing::RankError e = testing::error_of(errors[d]);
    ASSERT_TRUE(e.thrown) << "device " << d;
    EXPECT_TRUE(e.code == ErrorCode::kFailedPrecondition || e.code == ErrorCode::kAborted) << e.what;
    EXPECT_TRUE(testing::contains(e.what, "collectives differ")) << e.what;
  }
  testing::world_barrier();
}

// Each check of testing/collective_checks.h over the 2P ranks, with whole blocks and with 40-byte
// messages. A device whose check fails aborts the group, so that every other device stops at once.
class MpiHierarchyCollectives : public ::testing::TestWithParam<testing::CheckParam> {};

TEST_P(MpiHierarchyCollectives, MatchesTheReference) {
  const auto& [check, segment_bytes] = GetParam();
  auto comms = make_hierarchical_communicators(kLocal);
  CollectiveOptions o = mpi_options();
  o.segment_bytes = segment_bytes;
  EXPECT_EQ(on_devices(comms, [&](int, Communicator& c) {
              try {
                check.check(c, o, nullptr);
              } catch (const std::exception& e) {
                c.abort("rank " + std::to_string(c.rank()) + " failed a check: " + e.what());
                throw;
              }
            }),
            "");
  testing::world_barrier();
}

INSTANTIATE_TEST_SUITE_P(EveryCollective, MpiHierarchyCollectives, testing::every_check_and_segment(),
                         testing::check_param_name);

// kDirect reads peers' buffers: across processes it refuses (every device, kInvalidArgument).
TEST(MpiHierarchy, DirectAllReduceNeedsSharedMemory) {
  auto comms = make_hierarchical_communicators(kLocal);
  if (mpi_size() < 2) GTEST_SKIP() << "one process shares memory";
  EXPECT_EQ(on_devices(comms, [&](int, Communicator& c) {
              Tensor x = Tensor::full({8}, DType::kF32, 1);
              try {
                c.all_reduce(x, x, ReduceOp::kSum, mpi_options(Algorithm::kDirect));
                throw std::runtime_error("kDirect did not refuse");
              } catch (const Error& e) {
                if (e.code() != ErrorCode::kInvalidArgument) throw;
              }
            }),
            "");
  testing::world_barrier();
}

}  // namespace
}  // namespace tessel
