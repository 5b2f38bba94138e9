// A process that is late for a collective whose group spans processes, several members per
// process (a Cluster's groups: mpi_cluster.cpp, mpi_hierarchy.cpp): the processes waiting for it
// end by their deadline (+10 %) with kDeadlineExceeded naming the late process by its members
// in the group ("for ranks [2 (.../task:1/device:CPU:0), 3 (...)]"), the devices their callers
// know, as a group in one process names a late rank; the late process, arriving, ends with an
// error too, never a hang. Three moments: while the group forms (the join's meeting), in a
// formed group (a rendezvous, a receive), and while the process's default cluster forms (its
// first collective across processes: MpiProcessCluster, run alone by the ctest
// mpi.late_process_cluster_np2, since it must be the process's first).
//
// With more than two processes the waiting ones reach their deadlines together; the first
// aborts the group, so the others may see kAborted quoting it. Either way the late one is named.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "mpi_client.h"
#include "mpi_testing.h"
#include "tessel/comm/cluster.h"
#include "tessel/comm/mpi.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/relayout.h"
#include "testing/run_ranks.h"

namespace tessel {
namespace {

using namespace std::chrono_literals;
using testing::catch_error;
using testing::Caught;
using testing::contains;

constexpr auto kTimeout = 1000ms;
constexpr auto kStall = 2000ms;  // the late process's delay, well past the deadline
// Seconds a waiting process may take: the deadline + 10 %, and a margin for a loaded machine
// (other jobs compiling; with 4 processes on 2 cores a process waits its turn for a core).
double limit() { return 1.1 + (mpi_size() > 2 ? 0.5 : 0.3); }

std::string member(int process, int device) {
  return fmt::format("/job:worker/replica:0/task:{}/device:CPU:{}", process, device);
}

// Two members per process, in process order.
struct Group {
  std::vector<std::string> members;
  std::vector<int> owners;
};
Group two_per_process() {
  Group g;
  for (int p = 0; p < mpi_size(); ++p) {
    for (int d = 0; d < 2; ++d) {
      g.members.push_back(member(p, d));
      g.owners.push_back(p);
    }
  }
  return g;
}

// "for ranks [2L (...), 2L+1 (...)" in the group's terms: the late process's two members.
std::string late_ranks(int late) {
  return fmt::format("for ranks [{} ({}), {} ({})", 2 * late, member(late, 0), 2 * late + 1,
                     member(late, 1));
}

// What a process that waited for `late` must have seen.
void expect_named(const Caught& c, int late, const std::string& named) {
  ASSERT_TRUE(c.thrown) << "no error";
  const std::string code(error_code_name(c.code));
  if (mpi_size() == 2) {
    EXPECT_EQ(code, "DeadlineExceeded") << c.what;
  } else {
    EXPECT_TRUE(code == "DeadlineExceeded" || code == "Aborted") << c.what;
  }
  EXPECT_TRUE(contains(c.what, named)) << c.what;
  // Only the late process's members are in the brackets naming the late ones.
  const size_t open = c.what.find("for ranks [");
  ASSERT_NE(open, std::string::npos) << c.what;
  const std::string bracket = c.what.substr(open, c.what.find(']', open) - open);
  for (int p = 0; p < mpi_size(); ++p) {
    if (p != late) {
      EXPECT_FALSE(contains(bracket, fmt::format("task:{}/", p))) << c.what;
    }
  }
  EXPECT_GE(c.seconds, 0.99);
  EXPECT_LE(c.seconds, limit()) << "timeout 1 s";
}

// What the late process must see on arrival: an error (its peers gave up), by its own deadline.
void expect_failed_on_arrival(const Caught& c) {
  ASSERT_TRUE(c.thrown) << "the late process's call succeeded";
  const std::string code(error_code_name(c.code));
  EXPECT_TRUE(code == "DeadlineExceeded" || code == "Aborted") << c.what;
  EXPECT_LE(c.seconds, limit()) << c.what;
}

TEST(MpiLateProcess, IsNamedByItsMembersWhenItJoinsAGroupLate) {
  if (mpi_size() < 2) GTEST_SKIP() << "needs two processes";
  const int late = mpi_size() - 1;
  auto cluster = make_mpi_cluster();
  const Group g = two_per_process();
  if (mpi_rank() == late) std::this_thread::sleep_for(kStall);
  const Caught c = catch_error([&] { cluster->join(g.members, g.owners, kTimeout); });
  if (mpi_rank() == late) {
    expect_failed_on_arrival(c);
  } else {
    expect_named(c, late, late_ranks(late) + fmt::format("] (client {}) to join group", late));
  }
  testing::world_barrier();
}

// Each of this process's members calls `body` on its own thread; returns what each threw.
std::vector<Caught> on_members(std::vector<std::unique_ptr<Communicator>>& comms,
                               const std::function<void(Communicator&)>& body) {
  std::vector<Communicator*> mine;
  for (auto& c : comms) {
    if (c) mine.push_back(c.get());
  }
  std::vector<Caught> caught(mine.size());
  testing::run_ranks(static_cast<int>(mine.size()), [&](int i) {
    caught[static_cast<size_t>(i)] = catch_error([&] { body(*mine[static_cast<size_t>(i)]); });
  });
  return caught;
}

TEST(MpiLateProcess, IsNamedByItsMembersInAFormedGroupsRendezvous) {
  if (mpi_size() < 2) GTEST_SKIP() << "needs two processes";
  const int late = mpi_size() - 1;
  auto cluster = make_mpi_cluster();
  const Group g = two_per_process();
  auto comms = cluster->join(g.members, g.owners, 20s);
  const CollectiveOptions o = testing::mpi_options(Algorithm::kAuto, kTimeout);
  // Once together, then the late process stalls before the second barrier.
  for (const Caught& c : on_members(comms, [&](Communicator& comm) { comm.barrier(o); })) {
    EXPECT_FALSE(c.thrown) << c.what;
  }
  if (mpi_rank() == late) std::this_thread::sleep_for(kStall);
  const std::vector<Caught> caught =
      on_members(comms, [&](Communicator& comm) { comm.barrier(o); });
  for (const Caught& c : caught) {
    if (mpi_rank() == late) {
      expect_failed_on_arrival(c);
    } else {
      // "for ranks [L (/job:worker/replica:0/task:L: group ranks 2L (...), 2L+1 (...))]"
      expect_named(
          c, late,
          fmt::format("for ranks [{} (/job:worker/replica:0/task:{}: group ranks {} ({}), "
                      "{} ({}))]",
                      late, late, 2 * late, member(late, 0), 2 * late + 1, member(late, 1)));
    }
  }
  testing::world_barrier();
}

TEST(MpiLateProcess, IsNamedByItsMembersWhenItsSendIsLate) {
  if (mpi_size() < 2) GTEST_SKIP() << "needs two processes";
  const int late = mpi_size() - 1;
  auto cluster = make_mpi_cluster();
  const Group g = two_per_process();
  auto comms = cluster->join(g.members, g.owners, 20s);
  const CollectiveOptions o = testing::mpi_options(Algorithm::kAuto, kTimeout);
  // Process 0's first member waits for a message from the late process's first member.
  const int receiver = 0, sender = 2 * late;
  if (mpi_rank() == late) std::this_thread::sleep_for(kStall);
  const std::vector<Caught> caught = on_members(comms, [&](Communicator& comm) {
    Tensor t = Tensor::zeros({16}, DType::kF32);
    if (comm.rank() == receiver) comm.recv(t, sender, 0, o);
  });
  if (mpi_rank() == 0) {
    const Caught& c = caught.front();
    EXPECT_TRUE(c.thrown) << "no error";
    EXPECT_EQ(error_code_name(c.code), "DeadlineExceeded") << c.what;
    EXPECT_TRUE(contains(
        c.what, fmt::format("for a message from rank {} (/job:worker/replica:0/"
                            "task:{}: group ranks {} ({}), {} ({}))",
                            late, late, 2 * late, member(late, 0), 2 * late + 1, member(late, 1))))
        << c.what;
    EXPECT_GE(c.seconds, 0.99);
    EXPECT_LE(c.seconds, limit()) << "timeout 1 s";
  }
  testing::world_barrier();
}

// The default cluster of a runtime that has none (the process's MPI cluster, made by its first
// collective across processes) forms within the deadline of the collective that makes it.
TEST(MpiProcessCluster, ALateProcessIsNamedWhileTheClusterForms) {
  if (mpi_size() < 2) GTEST_SKIP() << "needs two processes";
  const int late = mpi_size() - 1;
  Runtime runtime(RuntimeOptions{.num_cpu_devices = 2, .job = "worker", .task = mpi_rank()});
  const Mesh mesh = testing::client_mesh({{"x", 2 * mpi_size()}});
  const Tensor host = Tensor::zeros({8 * mpi_size()}, DType::kF32);
  const DTensor sharded = copy_to_mesh(host, Layout::batch_sharded(mesh, "x", 1), runtime);
  const auto gather = [&] {
    relayout(sharded, Layout::replicated(mesh, 1), RelayoutOptions{kTimeout});
  };
  if (mpi_rank() == late) std::this_thread::sleep_for(kStall);
  const Caught c = catch_error(gather);
  if (mpi_rank() == late) {
    expect_failed_on_arrival(c);
  } else {
    expect_named(c, late, late_ranks(late));
    EXPECT_TRUE(contains(c.what, "to make the process's MPI cluster")) << c.what;
  }
  // A cluster that failed to form is not made again (its duplicate of MPI_COMM_WORLD may still
  // be pending): the next collective across processes fails at once, saying why.
  const Caught again = catch_error(gather);
  EXPECT_TRUE(again.thrown);
  EXPECT_EQ(error_code_name(again.code), "Aborted") << again.what;
  EXPECT_TRUE(contains(again.what, "failed to form")) << again.what;
  EXPECT_LT(again.seconds, 0.1);
  testing::world_barrier();
}

}  // namespace
}  // namespace tessel
