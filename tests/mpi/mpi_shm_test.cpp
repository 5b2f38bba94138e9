// The shared-memory level between the processes of one host (src/comm/mpi/host_shm.h): the
// all-reduce of make_mpi_communicator (1 device per process) and of
// make_hierarchical_communicators (2 devices per process) under kAuto, against the in-process
// all-reduce of the same ranks' inputs run in this process (an independent path: the in-process
// hub's direct algorithm): bit-identical for every dtype and reduce op, empty, tiny, uneven and
// multi-chunk sizes, in and out of place. The segment is gone from /dev/shm once made; TESSEL_SHM=0
// keeps MPI; mismatched calls, a late rank and a lost segment creation end with errors naming the
// ranks. (A killed process: tests/mpi/CMakeLists.txt's mpi.kill_shm_* runs.)
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "comm/mpi/mpi_hierarchy.h"
#include "comm/mpi/mpi_transport.h"
#include "mpi_testing.h"
#include "tessel/comm/communicator.h"
#include "tessel/comm/mpi.h"
#include "testing/reduction_reference.h"
#include "testing/run_ranks.h"

namespace tessel {
namespace {

using namespace std::chrono_literals;
using testing::catch_error;
using testing::contains;
using testing::mpi_options;
using testing::run_ranks;
using testing::tensor_of;

const DType kDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                         DType::kI32, DType::kI64, DType::kU8,   DType::kBool};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd};
// Empty, one element, odd, an uneven small size, and a size of several chunks (uneven): the
// comparisons with the in-process run set 64 KiB chunks (TESSEL_SHM_SLOT_BYTES).
const int64_t kCounts[] = {0, 1, 7, 4097, 300001};

// Rank r's input: inexact floats (so that the order of the sum shows), small integers.
Tensor input_of(int r, DType dtype, ReduceOp op, int64_t count) {
  return tensor_of(count, dtype, [&](int64_t i) -> double {
    if (dtype == DType::kBool) return (i + r) % 3 == 0 ? 1 : 0;
    if (dtype == DType::kU8) return static_cast<double>((i * 7 + r * 3) % (op == ReduceOp::kProd ? 3 : 50));
    if (is_floating(dtype)) return std::sin(0.37 * static_cast<double>(i) + 1.3 * r) * (r + 1.7);
    return static_cast<double>((i * 7 + r * 13) % 11 - 5);
  });
}

// The in-process all-reduce of every rank's input (n ranks, one thread each): rank 0's output.
Tensor in_process(int n, DType dtype, ReduceOp op, int64_t count) {
  auto comms = make_in_process_communicators(n);
  Tensor result;
  const std::string error = testing::first_error(run_ranks(n, [&](int r) {
    Tensor in = input_of(r, dtype, op, count);
    Tensor out = Tensor::zeros(in.shape(), dtype);
    comms[r]->all_reduce(in, out, op, mpi_options());
    if (r == 0) result = out;
  }));
  if (!error.empty()) throw std::runtime_error("in-process reference: " + error);
  return result;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// Every dtype, op and count through `comms` (this process's communicators, one thread each),
// bit for bit against the in-process run. Returns the first failure ("" if none).
std::string check_against_in_process(std::vector<std::unique_ptr<Communicator>>& comms) {
  const int n = comms[0]->size();
  for (DType dtype : kDTypes) {
    for (ReduceOp op : kOps) {
      if (dtype == DType::kBool && op == ReduceOp::kMean) continue;
      for (int64_t count : kCounts) {
        const Tensor want = in_process(n, dtype, op, count);
        const std::string error = testing::first_error(run_ranks(static_cast<int>(comms.size()), [&](int d) {
          Communicator& c = *comms[d];
          Tensor in = input_of(c.rank(), dtype, op, count);
          Tensor out = Tensor::zeros(in.shape(), dtype);
          c.all_reduce(in, out, op, mpi_options());
          const std::string what = fmt::format("{} {} count {}", dtype_name(dtype), reduce_op_name(op), count);
          if (!same_bytes(out, want)) throw std::runtime_error(what + " out of place differs from in-process");
          c.all_reduce(in, in, op, mpi_options());
          if (!same_bytes(in, want)) throw std::runtime_error(what + " in place differs from in-process");
        }));
        if (!error.empty()) return error;
      }
    }
  }
  return "";
}

// Names in /dev/shm of tessel segments made by one of the processes of `comm` (an MPI
// communicator): /dev/shm/tessel-shm.<creator pid>.<n>. (Other jobs on the machine may have
// theirs.)
std::vector<std::string> segments_of(Communicator& comm) {
  std::vector<std::string> prefixes, names;
  for (const auto& peer : dynamic_cast<detail::MpiTransport&>(comm.transport()).peers()) {
    prefixes.push_back(fmt::format("tessel-shm.{}.", peer.pid));
  }
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(dir)) {
      for (const std::string& prefix : prefixes) {
        if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) names.push_back(e->d_name);
      }
    }
    ::closedir(dir);
  }
  return names;
}

std::vector<std::unique_ptr<Communicator>> one_device() {
  std::vector<std::unique_ptr<Communicator>> comms;
  comms.push_back(make_mpi_communicator());
  return comms;
}

// True when two of the processes share a host (not so under tests/mpi/veth_test.sh, where each
// process has a network namespace and host name of its own): the shared-memory level exists.
bool processes_share_a_host() {
  auto comm = make_mpi_communicator();
  const auto& peers = dynamic_cast<detail::MpiTransport&>(comm->transport()).peers();
  for (size_t i = 0; i < peers.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (peers[i].host == peers[j].host) return true;
    }
  }
  return false;
}

#define SKIP_UNLESS_SHARED_HOST()                                                    \
  if (!processes_share_a_host()) GTEST_SKIP() << "no two processes share a host"

TEST(MpiShm, OneDevicePerProcessEqualsInProcess) {
  SKIP_UNLESS_SHARED_HOST();
  ::setenv("TESSEL_SHM_SLOT_BYTES", "65536", 1);
  auto comms = one_device();
  EXPECT_EQ(check_against_in_process(comms), "");
  ::unsetenv("TESSEL_SHM_SLOT_BYTES");
  EXPECT_TRUE(detail::uses_host_shm(comms[0]->transport()));
}

TEST(MpiShm, TwoDevicesPerProcessEqualsInProcess) {
  SKIP_UNLESS_SHARED_HOST();
  ::setenv("TESSEL_SHM_SLOT_BYTES", "65536", 1);
  auto comms = make_hierarchical_communicators(2);
  EXPECT_EQ(check_against_in_process(comms), "");
  ::unsetenv("TESSEL_SHM_SLOT_BYTES");
  EXPECT_TRUE(detail::uses_host_shm(comms[0]->transport()));
}

// The several-hosts path on one machine (TESSEL_SHM_SPLIT_HOSTS=2: each half of the processes
// is a "host"): shared memory within the halves, the halves' leaders' ring over MPI. Partial
// sums are rounded per host, so the references are the exact ones of the conformance tests.
std::string check_exact(std::vector<std::unique_ptr<Communicator>>& comms) {
  const int n = comms[0]->size();
  return testing::first_error(run_ranks(static_cast<int>(comms.size()), [&](int d) {
    Communicator& c = *comms[d];
    for (DType dtype : kDTypes) {
      for (ReduceOp op : kOps) {
        if (dtype == DType::kBool && op == ReduceOp::kMean) continue;
        for (int64_t count : kCounts) {
          Tensor in = tensor_of(count, dtype, [&](int64_t i) { return testing::reduction_input(op, dtype, c.rank(), i); });
          const Tensor want = tensor_of(count, dtype, [&](int64_t i) { return testing::reduction_expected(op, dtype, n, i); });
          Tensor out = Tensor::zeros(in.shape(), dtype);
          c.all_reduce(in, out, op, mpi_options());
          if (out.to_doubles() != want.to_doubles()) {
            throw std::runtime_error(fmt::format("{} {} count {}: wrong", dtype_name(dtype), reduce_op_name(op), count));
          }
        }
      }
    }
  }));
}

TEST(MpiShm, SeveralHostsOneDevicePerProcess) {
  SKIP_UNLESS_SHARED_HOST();
  ::setenv("TESSEL_SHM_SPLIT_HOSTS", "2", 1);
  auto comms = one_device();
  EXPECT_EQ(check_exact(comms), "");
  ::unsetenv("TESSEL_SHM_SPLIT_HOSTS");
  EXPECT_TRUE(detail::uses_host_shm(comms[0]->transport()));
}

TEST(MpiShm, SeveralHostsTwoDevicesPerProcess) {
  SKIP_UNLESS_SHARED_HOST();
  ::setenv("TESSEL_SHM_SPLIT_HOSTS", "2", 1);
  auto comms = make_hierarchical_communicators(2);
  EXPECT_EQ(check_exact(comms), "");
  ::unsetenv("TESSEL_SHM_SPLIT_HOSTS");
  EXPECT_TRUE(detail::uses_host_shm(comms[0]->transport()));
}

TEST(MpiShm, DefaultChunksEqualInProcess) {
  SKIP_UNLESS_SHARED_HOST();
  auto comms = one_device();
  const int64_t count = 600001;  // 2.4 MB of f32: three 1 MiB chunks, the last one partial
  const Tensor want = in_process(comms[0]->size(), DType::kF32, ReduceOp::kSum, count);
  Tensor in = input_of(comms[0]->rank(), DType::kF32, ReduceOp::kSum, count);
  Tensor out = Tensor::zeros(in.shape(), DType::kF32);
  comms[0]->all_reduce(in, out, ReduceOp::kSum, mpi_options());
  EXPECT_TRUE(same_bytes(out, want));
}

TEST(MpiShm, SegmentIsUnlinkedOnceMapped) {
  SKIP_UNLESS_SHARED_HOST();
  auto comms = one_device();
  Tensor t = Tensor::full(Shape{16}, DType::kF32, 1.0);
  comms[0]->all_reduce(t, t, ReduceOp::kSum, mpi_options());
  ASSERT_TRUE(detail::uses_host_shm(comms[0]->transport()));
  EXPECT_EQ(t.to_doubles()[0], testing::world_size());
  testing::world_barrier();
  EXPECT_EQ(segments_of(*comms[0]), std::vector<std::string>{});
}

TEST(MpiShm, StaleSegmentOfAGoneProcessIsRemoved) {
  SKIP_UNLESS_SHARED_HOST();
  // A segment named like one whose creator is gone (no process has a pid near 4194000 here), as
  // a crash between creation and unlinking leaves it, disappears at the next creation.
  const std::string stale = fmt::format("/tessel-shm.{}.0", 4194000 + testing::world_rank());
  const int fd = ::shm_open(stale.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ::close(fd);
  testing::world_barrier();
  auto comms = one_device();
  Tensor t = Tensor::full(Shape{4}, DType::kF32, 1.0);
  comms[0]->all_reduce(t, t, ReduceOp::kSum, mpi_options());
  testing::world_barrier();
  const bool left = ::access(("/dev/shm" + stale).c_str(), F_OK) == 0;
  EXPECT_FALSE(left) << stale << " is still there";
  if (left) ::shm_unlink(stale.c_str());
}

TEST(MpiShm, DisabledKeepsMpi) {
  SKIP_UNLESS_SHARED_HOST();
  ::setenv("TESSEL_SHM", "0", 1);
  auto comms = one_device();
  Tensor t = Tensor::full(Shape{1000}, DType::kF32, 1.0);
  comms[0]->all_reduce(t, t, ReduceOp::kSum, mpi_options());
  ::unsetenv("TESSEL_SHM");
  EXPECT_FALSE(detail::uses_host_shm(comms[0]->transport()));
  EXPECT_EQ(t.to_doubles()[999], testing::world_size());
}

TEST(MpiShm, MismatchedCallsNameBothRanks) {
  SKIP_UNLESS_SHARED_HOST();
  auto comms = one_device();
  Tensor t = Tensor::full(Shape{4}, DType::kF32, 1.0);
  comms[0]->all_reduce(t, t, ReduceOp::kSum, mpi_options());  // makes the segment
  const int r = testing::world_rank();
  Tensor odd = Tensor::full(Shape{r == 0 ? 8 : 9}, DType::kF32, 1.0);
  const auto caught = catch_error([&] { comms[0]->all_reduce(odd, odd, ReduceOp::kSum, mpi_options()); });
  EXPECT_TRUE(caught.thrown);
  EXPECT_TRUE(caught.code == ErrorCode::kFailedPrecondition || caught.code == ErrorCode::kAborted) << caught.what;
  EXPECT_TRUE(contains(caught.what, "8 elements") && contains(caught.what, "9 elements")) << caught.what;
}

TEST(MpiShm, LateRankIsNamedAtTheDeadline) {
  SKIP_UNLESS_SHARED_HOST();
  auto comms = one_device();
  Tensor t = Tensor::full(Shape{4}, DType::kF32, 1.0);
  comms[0]->all_reduce(t, t, ReduceOp::kSum, mpi_options());  // makes the segment
  const int late = testing::world_size() - 1;
  if (testing::world_rank() == late) {
    std::this_thread::sleep_for(1500ms);  // then the group is aborted
    const auto caught = catch_error([&] { comms[0]->all_reduce(t, t, ReduceOp::kSum, mpi_options()); });
    EXPECT_EQ(caught.code, ErrorCode::kAborted) << caught.what;
  } else {
    const auto caught = catch_error([&] {
      comms[0]->all_reduce(t, t, ReduceOp::kSum, mpi_options(Algorithm::kAuto, 500ms));
    });
    EXPECT_TRUE(caught.code == ErrorCode::kDeadlineExceeded || caught.code == ErrorCode::kAborted)
        << caught.what;
    EXPECT_TRUE(contains(caught.what, fmt::format("rank {} (", late))) << caught.what;
    EXPECT_LT(caught.seconds, 1.4);
  }
  testing::world_barrier();
}

}  // namespace
}  // namespace tessel
