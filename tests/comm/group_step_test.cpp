// The group-step runner (src/comm/group_step.h): the scratch allocator is set on each stream; a
// failing device's task aborts its peers' collectives at once and evicts the pool; a deadline
// names the late device, aborts the group and evicts it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "comm/group_service.h"
#include "comm/group_step.h"
#include "core/errors.h"
#include "runtime/runtime_test_util.h"
#include "tessel/runtime/runtime.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

using detail::CallDeadline;
using detail::GroupService;
using detail::GroupStep;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const Mesh kLine = Mesh::from_string("|x=2|*CPU");

TEST(GroupStep, RunsEveryTaskWithItsDevicesScratchAndKeepsThePool) {
  Runtime rt({.num_cpu_devices = 2});
  auto service = GroupService::of(rt);
  auto pool = service->pool();
  GroupStep step("test", service, pool, GroupStep::Scratch::kDevice);
  const CallDeadline deadline = CallDeadline::after(milliseconds(10000));
  CollectiveOptions options;
  options.deadline = deadline.at;
  auto sums = std::make_shared<std::vector<float>>(2, 0.0f);
  Communicator* comms[2];
  for (int d = 0; d < 2; ++d) {
    Communicator* comm = &pool->get(kLine, {"x"}, d, deadline.left());
    comms[d] = comm;
    step.add(rt.device(d), comm, [comm, d, sums, options] {
      Tensor t = Tensor::full({1}, DType::kF32, d + 1);
      comm->all_reduce(t, t, ReduceOp::kSum, options);
      (*sums)[static_cast<size_t>(d)] = t.to_vector<float>()[0];
    });
  }
  step.run("all_reduce", deadline);
  EXPECT_EQ(*sums, (std::vector<float>{3.0f, 3.0f}));
  for (int d = 0; d < 2; ++d) EXPECT_EQ(comms[d]->scratch_allocator(), rt.device(d).allocator());
  EXPECT_EQ(service->pool(), pool);  // nothing failed: nothing evicted
}

TEST(GroupStep, AFailingTaskAbortsItsPeersAtOnceAndEvictsThePool) {
  Runtime rt({.num_cpu_devices = 2});
  auto service = GroupService::of(rt);
  auto pool = service->pool();
  GroupStep step("test", service, pool, GroupStep::Scratch::kHost);
  // A long budget: the peer must not wait it out.
  const CallDeadline deadline = CallDeadline::after(milliseconds(30000));
  CollectiveOptions options;
  options.deadline = deadline.at;
  auto peer_saw = std::make_shared<std::atomic<int>>(-1);  // the peer's error code
  Communicator* bad = &pool->get(kLine, {"x"}, 0, deadline.left());
  Communicator* peer = &pool->get(kLine, {"x"}, 1, deadline.left());
  step.add(rt.device(0), bad, [] {
    detail::throw_invalid("test", "device 0's input is bad");
  });
  step.add(rt.device(1), peer, [peer, peer_saw, options] {
    Tensor t = Tensor::full({1}, DType::kF32, 1.0);
    try {
      peer->all_reduce(t, t, ReduceOp::kSum, options);  // waits for rank 0, which never comes
    } catch (const Error& e) {
      peer_saw->store(static_cast<int>(e.code()));
      throw;
    }
  });
  const auto start = Clock::now();
  // The root cause is reported, not the peer's kAborted.
  EXPECT_TESSEL_ERROR(step.run("all_reduce", deadline), ErrorCode::kInvalidArgument,
                      "test: all_reduce on " + rt.device(0).name() +
                          " failed: test: device 0's input is bad");
  EXPECT_LT(Clock::now() - start, milliseconds(5000));
  rt.synchronize(testing::kWaitLimit);
  EXPECT_EQ(peer_saw->load(), static_cast<int>(ErrorCode::kAborted));
  EXPECT_EQ(peer->scratch_allocator(), nullptr);  // kHost
  // Evicted: the next caller gets a fresh pool and fresh groups that work.
  auto next = service->pool();
  EXPECT_NE(next, pool);
  EXPECT_NE(&next->get(kLine, {"x"}, 0), bad);
}

TEST(GroupStep, ADeadlineNamesTheLateDeviceAbortsTheGroupAndEvictsIt) {
  Runtime rt({.num_cpu_devices = 2});
  auto service = GroupService::of(rt);
  std::shared_ptr<detail::CommGroup> group =
      service->group({rt.device(0).name(), rt.device(1).name()});
  int evictions = 0;
  GroupStep step("test", group, [&evictions] { ++evictions; }, GroupStep::Scratch::kHost);
  auto release = std::make_shared<testing::Gate>();  // the stuck task owns its gate
  step.add(rt.device(0), &group->at(rt.device(0).name()), [] {});
  step.add(rt.device(1), &group->at(rt.device(1).name()), [release] { release->wait(); });
  const auto start = Clock::now();
  EXPECT_TESSEL_ERROR(step.run("stuck_step", CallDeadline::after(milliseconds(100))),
                      ErrorCode::kDeadlineExceeded,
                      "test: stuck_step did not finish within 100 ms on " + rt.device(1).name());
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GE(took, 0.1);
  EXPECT_LT(took, 2.0);  // the step's deadline, not the stuck task
  EXPECT_EQ(evictions, 1);
  // The whole group was aborted: its next collective fails at once.
  Tensor t = Tensor::full({1}, DType::kF32, 1.0);
  EXPECT_TESSEL_ERROR(group->at(rt.device(0).name()).all_reduce(t, t, ReduceOp::kSum),
                      ErrorCode::kAborted, "group aborted");
  release->open();
  rt.synchronize(testing::kWaitLimit);
}

}  // namespace
}  // namespace tessel
