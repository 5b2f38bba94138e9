// The communicator groups of CrossDeviceOps, relayout and replicate() are the runtime's (comm's
// GroupService): a dead runtime keeps none of them, and a failure evicts the group it hit so
// that the next call works.
#include <gtest/gtest.h>

#include "comm/group_service.h"
#include "tessel/distribute/cross_device_ops.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/replicate/replicate.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

using detail::CommGroup;
using detail::GroupService;

const CommunicationOptions kBounded(0, 10.0);

std::vector<std::string> device_names(const Runtime& rt) {
  std::vector<std::string> names;
  for (const Device* d : rt.devices()) names.push_back(d->name());
  return names;
}

// One component of ones per device of `rt`.
PerReplica ones(const Runtime& rt) {
  std::vector<Value> values;
  for (int i = 0; i < rt.num_devices(); ++i) values.push_back(Tensor::full({4}, DType::kF32, 1));
  return PerReplica(device_names(rt), values);
}

void cross_device_all_reduce(Runtime& rt) {
  NcclAllReduce ops(1, rt);
  const PerReplica v = ones(rt);
  const Mirrored m = ops.reduce(ReduceOp::kSum, v, v, kBounded);
  for (int i = 0; i < m.size(); ++i) {
    EXPECT_EQ(std::get<Tensor>(m.value(i)).to_vector<float>(), std::vector<float>(4, 2));
  }
}

void gathering_relayout(Runtime& rt) {
  const Mesh mesh = Mesh::create({{"x", 2}});
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 4}, Shape{4});
  const DTensor d = copy_to_mesh(x, Layout({"x"}, mesh), rt);
  EXPECT_EQ(to_host(relayout(d, Layout::replicated(mesh, 1))).to_vector<float>(),
            x.to_vector<float>());
}

ReplicateOptions two_replicas(Runtime& rt) {
  ReplicateOptions options;
  options.metadata.num_replicas = 2;
  options.runtime = &rt;
  options.timeout = std::chrono::seconds(10);
  return options;
}

// replica 0 throws when `fail`.
void replicated_all_reduce(Runtime& rt, bool fail = false) {
  const auto outs = replicate(
      [fail](ReplicaContext& ctx, const std::vector<DTensor>& in) {
        if (fail && ctx.replica_id() == 0) throw Error(ErrorCode::kInternal, "test", "injected");
        return std::vector<DTensor>{ctx.all_reduce(in[0])};
      },
      {{Tensor::full({2}, DType::kF32, 1), Tensor::full({2}, DType::kF32, 2)}}, {}, {}, {},
      two_replicas(rt));
  for (const auto& out : outs) {
    EXPECT_EQ(to_host(out[0]).to_vector<float>(), std::vector<float>(2, 3));
  }
}

// replicate()'s group of core 0 (rank = replica).
std::vector<std::string> replicate_members(Runtime& rt) {
  std::vector<std::string> names;
  const auto devices = replica_device_names(two_replicas(rt).metadata, rt);
  for (size_t r = 0; r < devices.size(); ++r) {
    names.push_back("replica " + std::to_string(r) + " (" + devices[r][0] + ")");
  }
  return names;
}

TEST(RuntimeGroups, ADeadRuntimeKeepsNoGroups) {
  const int64_t before = CommGroup::num_live();
  for (int i = 0; i < 10; ++i) {
    std::weak_ptr<GroupService> service;
    {
      Runtime rt({.num_cpu_devices = 2});
      service = GroupService::of(rt);
      cross_device_all_reduce(rt);
      gathering_relayout(rt);
      replicated_all_reduce(rt);
      // The group over both devices (CrossDeviceOps's, and the pool's: Mesh::create spells the
      // devices as the runtime does) and replicate()'s over its replicas.
      const auto devices = service.lock()->find(device_names(rt));
      ASSERT_NE(devices, nullptr);
      EXPECT_EQ(service.lock()->pool()->groups(), std::vector<std::shared_ptr<CommGroup>>{devices});
      EXPECT_NE(service.lock()->find(replicate_members(rt)), nullptr);
      EXPECT_EQ(service.lock()->num_groups(), 2u);
      EXPECT_EQ(CommGroup::num_live(), before + 2);
    }
    EXPECT_TRUE(service.expired());
    EXPECT_EQ(CommGroup::num_live(), before) << "after runtime " << i;
  }
}

TEST(RuntimeGroups, CrossDeviceOpsObjectsShareTheRuntimesGroup) {
  Runtime rt({.num_cpu_devices = 2});
  cross_device_all_reduce(rt);
  const auto g = GroupService::of(rt)->find(device_names(rt));
  ASSERT_NE(g, nullptr);
  cross_device_all_reduce(rt);  // another object
  EXPECT_EQ(GroupService::of(rt)->find(device_names(rt)), g);
}

TEST(RuntimeGroups, ACrossDeviceFailureEvictsTheGroupAndTheNextCallWorks) {
  Runtime rt({.num_cpu_devices = 2});
  auto service = GroupService::of(rt);
  cross_device_all_reduce(rt);
  std::weak_ptr<CommGroup> used = service->find(device_names(rt));
  ASSERT_FALSE(used.expired());
  rt.device(1).stream().enqueue("bad_kernel", [] { throw std::runtime_error("boom"); });
  NcclAllReduce ops(1, rt);
  const PerReplica v = ones(rt);
  EXPECT_TESSEL_ERROR(ops.reduce(ReduceOp::kSum, v, v, kBounded), ErrorCode::kFailedPrecondition,
                      "an earlier op on its stream failed");
  EXPECT_EQ(service->find(device_names(rt)), nullptr);  // evicted
  EXPECT_TESSEL_ERROR(rt.synchronize(std::chrono::seconds(10)), ErrorCode::kInternal, "boom");
  EXPECT_TRUE(used.expired());  // once the skipped task is gone, nobody holds it
  cross_device_all_reduce(rt);
  EXPECT_NE(service->find(device_names(rt)), nullptr);
}

TEST(RuntimeGroups, ARelayoutFailureEvictsThePoolAndItsGroupsAndTheNextCallWorks) {
  Runtime rt({.num_cpu_devices = 2});
  auto service = GroupService::of(rt);
  gathering_relayout(rt);
  std::weak_ptr<CommunicatorPool> pool = service->pool();
  const auto held = pool.lock()->groups();
  ASSERT_EQ(held.size(), 1u);
  std::weak_ptr<CommGroup> used = held[0];
  const std::vector<std::string> members = held[0]->members;
  {
    const Mesh mesh = Mesh::create({{"x", 2}});
    const DTensor d = copy_to_mesh(Tensor::zeros({4}, DType::kF32), Layout({"x"}, mesh), rt);
    rt.device(1).stream().enqueue("bad_kernel", [] { throw std::runtime_error("boom"); });
    EXPECT_THROW(relayout(d, Layout::replicated(mesh, 1)), Error);
  }
  EXPECT_EQ(service->find(members), nullptr);
  EXPECT_NE(service->pool(), pool.lock());
  EXPECT_TESSEL_ERROR(rt.synchronize(std::chrono::seconds(10)), ErrorCode::kInternal, "boom");
  gathering_relayout(rt);
  EXPECT_NE(service->find(members), nullptr);
}

TEST(RuntimeGroups, ReplicateReusesItsGroupsAndAFailureEvictsThem) {
  Runtime rt({.num_cpu_devices = 2});
  auto service = GroupService::of(rt);
  replicated_all_reduce(rt);
  const std::vector<std::string> members = replicate_members(rt);
  const auto first = service->find(members);
  ASSERT_NE(first, nullptr);  // given back after the call
  replicated_all_reduce(rt);
  EXPECT_EQ(service->find(members), first);  // and taken again by the next one

  EXPECT_TESSEL_ERROR(replicated_all_reduce(rt, /*fail=*/true), ErrorCode::kInternal, "injected");
  EXPECT_EQ(service->find(members), nullptr);  // aborted: not given back
  replicated_all_reduce(rt);
  const auto next = service->find(members);
  ASSERT_NE(next, nullptr);
  EXPECT_NE(next, first);
}

}  // namespace
}  // namespace tessel
