// The per-runtime group service (src/comm/group_service.h): one group per member list, shared
// until evicted; the pool's groups are the service's; take/give_back; gone with the runtime.
#include <gtest/gtest.h>

#include "comm/group_service.h"
#include "testing/expect_error.h"
#include "testing/run_ranks.h"

namespace tessel {
namespace {

using detail::CommGroup;
using detail::GroupService;

const std::vector<std::string> kAB = {"a", "b"};

// An all-reduce of every rank's rank over `group`, on one thread per rank; "" or the error.
std::string sum_ranks(const CommGroup& group) {
  return testing::first_error(testing::run_ranks(static_cast<int>(group.comms.size()), [&](int r) {
    Tensor t = Tensor::full({2}, DType::kF32, r);
    CollectiveOptions o;
    o.timeout = std::chrono::seconds(10);
    group.comms[static_cast<size_t>(r)]->all_reduce(t, t, ReduceOp::kSum, o);
  }));
}

TEST(GroupService, OneGroupPerMemberListUntilEvicted) {
  Runtime rt({.num_cpu_devices = 2});
  auto service = GroupService::of(rt);
  EXPECT_EQ(GroupService::of(rt), service);
  const auto g = service->group(kAB);
  EXPECT_EQ(g->members, kAB);
  EXPECT_EQ(service->group(kAB), g);
  EXPECT_NE(service->group({"b", "a"}), g);  // rank order is part of the name
  EXPECT_EQ(service->find(kAB), g);
  EXPECT_EQ(service->num_groups(), 2u);
  service->evict(g);
  EXPECT_EQ(service->find(kAB), nullptr);
  const auto fresh = service->group(kAB);
  EXPECT_NE(fresh, g);
  service->evict(g);  // already replaced: nothing happens
  EXPECT_EQ(service->find(kAB), fresh);
  EXPECT_TESSEL_ERROR(service->group({}), ErrorCode::kInvalidArgument, "at least one member");
}

TEST(GroupService, AnAbortedGroupIsEvictedAndTheNextOneWorks) {
  Runtime rt({.num_cpu_devices = 2});
  auto service = GroupService::of(rt);
  const auto g = service->group(kAB);
  ASSERT_EQ(sum_ranks(*g), "");
  g->abort("test failure");
  EXPECT_NE(sum_ranks(*g).find("test failure"), std::string::npos);  // aborted for good
  service->evict(g);  // the policy: whoever saw the failure evicts
  const auto next = service->group(kAB);
  ASSERT_NE(next, g);
  EXPECT_EQ(sum_ranks(*next), "");
}

TEST(GroupService, ThePoolsGroupsAreTheServicesAndGoWithIt) {
  Runtime rt({.num_cpu_devices = 4});
  auto service = GroupService::of(rt);
  const Mesh mesh = Mesh::from_string("|x=2,y=2|*CPU");
  auto pool = service->pool();
  EXPECT_EQ(service->pool(), pool);
  Communicator& c = pool->get(mesh, {"x"}, 1);
  const auto g = service->find(c.members());
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->comms[static_cast<size_t>(c.rank())].get(), &c);
  EXPECT_EQ(pool->groups(), std::vector<std::shared_ptr<CommGroup>>{g});

  // Evicting the pool evicts the groups it handed out; the next pool gets fresh ones.
  service->evict(pool);
  EXPECT_EQ(service->find(c.members()), nullptr);
  auto next = service->pool();
  EXPECT_NE(next, pool);
  Communicator& c2 = next->get(mesh, {"x"}, 1);
  EXPECT_NE(&c2, &c);
  EXPECT_EQ(service->find(c2.members())->comms[static_cast<size_t>(c2.rank())].get(), &c2);

  // Evicting a group (another user saw it fail) drops the pool that holds it.
  service->evict(service->find(c2.members()));
  EXPECT_NE(service->pool(), next);
}

TEST(GroupService, EvictingAGroupKeepsAPoolThatDoesNotHoldIt) {
  Runtime rt({.num_cpu_devices = 4});
  auto service = GroupService::of(rt);
  auto pool = service->pool();
  pool->get(Mesh::from_string("|x=2,y=2|*CPU"), {"x"}, 0);
  service->evict(service->group(kAB));
  EXPECT_EQ(service->pool(), pool);
}

TEST(GroupService, ATakenGroupIsNobodyElsesUntilGivenBack) {
  Runtime rt({.num_cpu_devices = 2});
  auto service = GroupService::of(rt);
  const auto taken = service->take(kAB);
  EXPECT_EQ(service->find(kAB), nullptr);
  const auto other = service->take(kAB);  // a concurrent caller gets its own
  EXPECT_NE(other, taken);
  service->give_back(taken);
  service->give_back(other);  // one is registered already: dropped
  EXPECT_EQ(service->find(kAB), taken);
  EXPECT_EQ(service->take(kAB), taken);  // reused
}

TEST(GroupService, AdoptReplacesTheRegisteredGroup) {
  Runtime rt({.num_cpu_devices = 2});
  auto service = GroupService::of(rt);
  const auto old = service->group(kAB);
  const auto made = detail::make_in_process_group(kAB);
  service->adopt(made);
  EXPECT_EQ(service->group(kAB), made);
}

TEST(GroupService, ANewFactoryDropsTheGroups) {
  Runtime rt({.num_cpu_devices = 2});
  auto service = GroupService::of(rt);
  const auto g = service->group(kAB);
  int made = 0;
  service->set_group_factory([&made](int size, std::vector<std::string> names) {
    ++made;
    return make_in_process_communicators(size, std::move(names));
  });
  EXPECT_EQ(service->num_groups(), 0u);
  EXPECT_NE(service->group(kAB), g);
  EXPECT_EQ(made, 1);
}

TEST(GroupService, TheGroupsDieWithTheRuntime) {
  const int64_t before = CommGroup::num_live();
  std::weak_ptr<GroupService> service;
  std::weak_ptr<CommGroup> group;
  std::weak_ptr<CommunicatorPool> pool;
  {
    Runtime rt({.num_cpu_devices = 4});
    service = GroupService::of(rt);
    group = service.lock()->group(kAB);
    pool = service.lock()->pool();
    pool.lock()->get(Mesh::from_string("|x=2,y=2|*CPU"), {"x", "y"}, 0);
    EXPECT_EQ(CommGroup::num_live(), before + 2);
  }
  EXPECT_TRUE(service.expired());
  EXPECT_TRUE(group.expired());
  EXPECT_TRUE(pool.expired());
  EXPECT_EQ(CommGroup::num_live(), before);
}

TEST(GroupService, APoolOutlivingItsRuntimeMakesNoGroups) {
  std::shared_ptr<CommunicatorPool> pool;
  {
    Runtime rt({.num_cpu_devices = 4});
    pool = GroupService::of(rt)->pool();
  }
  EXPECT_TESSEL_ERROR(pool->get(Mesh::from_string("|x=2,y=2|*CPU"), {"x"}, 0),
                      ErrorCode::kFailedPrecondition, "the runtime of this pool was destroyed");
}

}  // namespace
}  // namespace tessel
