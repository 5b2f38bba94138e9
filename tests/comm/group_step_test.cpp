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
using detail::GroupStep;
using std::chrono::milliseconds;

// Two CPU devices, the runtime's pool, and a step over it with a budget of `timeout`.
struct PoolStep {
  explicit PoolStep(GroupStep::Scratch scratch, milliseconds timeout)
      : deadline(CallDeadline::after(timeout)), step("test", service, pool, scratch) {
    options.deadline = deadline.at;
  }
  // Device d's communicator in the group over the mesh |x=2|.
  Communicator* comm(int d) {
    return &pool->get(Mesh::from_string("|x=2|*CPU"), {"x"}, d, deadline.left());
  }

  Runtime rt{{.num_cpu_devices = 2}};
  std::shared_ptr<detail::GroupService> service = detail::GroupService::of(rt);
  std::shared_ptr<CommunicatorPool> pool = service->pool();
  CallDeadline deadline;
  CollectiveOptions options;
  GroupStep step;
};

TEST(GroupStep, RunsEveryTaskWithItsDevicesScratchAndKeepsThePool) {
  PoolStep s(GroupStep::Scratch::kDevice, milliseconds(10000));
  auto sums = std::make_shared<std::vector<float>>(2, 0.0f);
  for (int d = 0; d < 2; ++d) {
    s.step.add(s.rt.device(d), s.comm(d), [comm = s.comm(d), d, sums, options = s.options] {
      Tensor t = Tensor::full({1}, DType::kF32, d + 1);
      comm->all_reduce(t, t, ReduceOp::kSum, options);
      (*sums)[static_cast<size_t>(d)] = t.to_vector<float>()[0];
    });
  }
  s.step.run("all_reduce", s.deadline);
  EXPECT_EQ(*sums, (std::vector<float>{3.0f, 3.0f}));
  for (int d = 0; d < 2; ++d) EXPECT_EQ(s.comm(d)->scratch_allocator(), s.rt.device(d).allocator());
  EXPECT_EQ(s.service->pool(), s.pool);  // nothing failed: nothing evicted
}

TEST(GroupStep, AFailingTaskAbortsItsPeersAtOnceAndEvictsThePool) {
  // A long budget: the peer must not wait it out.
  PoolStep s(GroupStep::Scratch::kHost, milliseconds(30000));
  auto peer_saw = std::make_shared<std::atomic<int>>(-1);  // the peer's error code
  Communicator* bad = s.comm(0);
  Communicator* peer = s.comm(1);
  s.step.add(s.rt.device(0), bad, [] { detail::throw_invalid("test", "device 0's input is bad"); });
  s.step.add(s.rt.device(1), peer, [peer, peer_saw, options = s.options] {
    Tensor t = Tensor::full({1}, DType::kF32, 1.0);
    try {
      peer->all_reduce(t, t, ReduceOp::kSum, options);  // waits for rank 0, which never comes
    } catch (const Error& e) {
      peer_saw->store(static_cast<int>(e.code()));
      throw;
    }
  });
  const auto start = std::chrono::steady_clock::now();
  // The root cause is reported, not the peer's kAborted.
  EXPECT_TESSEL_ERROR(s.step.run("all_reduce", s.deadline), ErrorCode::kInvalidArgument,
                      "test: all_reduce on " + s.rt.device(0).name() +
                          " failed: test: device 0's input is bad");
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(5000));
  s.rt.synchronize(testing::kWaitLimit);
  EXPECT_EQ(peer_saw->load(), static_cast<int>(ErrorCode::kAborted));
  EXPECT_EQ(peer->scratch_allocator(), nullptr);  // kHost
  // Evicted: the next caller gets a fresh pool and fresh groups.
  auto next = s.service->pool();
  EXPECT_NE(next, s.pool);
  EXPECT_NE(&next->get(Mesh::from_string("|x=2|*CPU"), {"x"}, 0), bad);
}

TEST(GroupStep, ADeadlineNamesTheLateDeviceAbortsTheGroupAndEvictsIt) {
  Runtime rt({.num_cpu_devices = 2});
  auto service = detail::GroupService::of(rt);
  std::shared_ptr<detail::CommGroup> group =
      service->group({rt.device(0).name(), rt.device(1).name()});
  int evictions = 0;
  GroupStep step("test", group, [&evictions] { ++evictions; }, GroupStep::Scratch::kHost);
  auto release = std::make_shared<testing::Gate>();  // the stuck task owns its gate
  step.add(rt.device(0), &group->at(rt.device(0).name()), [] {});
  step.add(rt.device(1), &group->at(rt.device(1).name()), [release] { release->wait(); });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TESSEL_ERROR(step.run("stuck_step", CallDeadline::after(milliseconds(100))),
                      ErrorCode::kDeadlineExceeded,
                      "test: stuck_step did not finish within 100 ms on " + rt.device(1).name());
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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
