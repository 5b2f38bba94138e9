// DefaultMeshScope, get_default_mesh, require_default_mesh, device_name, visualize
// (dtensor_api.h).
#include <gtest/gtest.h>

#include <memory>

#include <thread>

#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/ops.h"
#include "tessel/mesh/shard_map.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

TEST(DefaultMesh, NoneOutsideAnyScope) { EXPECT_FALSE(get_default_mesh().has_value()); }

TEST(DefaultMesh, NestingRestoresThePreviousMesh) {
  Mesh outer = Mesh::create({{"x", 4}});
  Mesh inner = Mesh::create({{"x", 2}, {"y", 2}});
  {
    DefaultMeshScope a(outer);
    EXPECT_EQ(get_default_mesh(), outer);
    {
      DefaultMeshScope b(inner);
      EXPECT_EQ(get_default_mesh(), inner);
      EXPECT_EQ(require_default_mesh("matmul"), inner);
    }
    EXPECT_EQ(get_default_mesh(), outer);
  }
  EXPECT_FALSE(get_default_mesh().has_value());
}

TEST(DefaultMesh, EachThreadHasItsOwnStack) {
  Mesh main_mesh = Mesh::create({{"x", 4}});
  Mesh thread_mesh = Mesh::create({{"y", 2}});
  DefaultMeshScope scope(main_mesh);
  bool thread_saw_none = false;
  std::optional<Mesh> thread_saw_own;
  std::thread t([&] {
    thread_saw_none = !get_default_mesh().has_value();
    DefaultMeshScope own(thread_mesh);
    thread_saw_own = get_default_mesh();
  });
  t.join();
  EXPECT_TRUE(thread_saw_none);
  EXPECT_EQ(thread_saw_own, thread_mesh);
  EXPECT_EQ(get_default_mesh(), main_mesh);  // the thread's scope did not leak here
}

TEST(DefaultMesh, RequireWithoutScopeNamesTheOp) {
  EXPECT_TESSEL_ERROR(require_default_mesh("zeros"), ErrorCode::kInvalidArgument,
                      "zeros: No default mesh has been registered to DTensor");
}

// Seed 74: creation ops inside a default mesh scope are placed replicated on it, as TF DTensor
// places them; outside any scope they fail naming the op.
TEST(DefaultMesh, CreationOpsWithoutALayoutAreReplicatedOnIt) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Shape shape{3, 5};
  {
    DefaultMeshScope scope(mesh);
    const Layout replicated = Layout::replicated(mesh, 2);
    const std::vector<DTensor> made = {zeros(shape, DType::kF32, &rt),
                                       ones(shape, DType::kF64, &rt),
                                       fill(shape, 2.5, DType::kF32, &rt),
                                       random_uniform(shape, 7, -1.0, 1.0, DType::kF32, &rt),
                                       random_normal(shape, 7, 0.0, 1.0, DType::kF32, &rt)};
    for (const DTensor& d : made) {
      EXPECT_EQ(d.layout(), replicated);
      EXPECT_EQ(d.shape(), shape);
    }
    EXPECT_EQ(to_host(made[1]).to_doubles(), std::vector<double>(15, 1.0));
    EXPECT_EQ(to_host(made[2]).to_doubles(), std::vector<double>(15, 2.5));
    // The values are the ones of the same op with an explicit layout (keyed by element index).
    EXPECT_EQ(to_host(made[3]).to_doubles(),
              to_host(random_uniform(shape, Layout({"x", "y"}, mesh), 7, -1.0, 1.0, DType::kF32,
                                     &rt))
                  .to_doubles());
  }
  EXPECT_TESSEL_ERROR(zeros(shape), ErrorCode::kInvalidArgument,
                      "zeros: No default mesh has been registered to DTensor");
  EXPECT_TESSEL_ERROR(random_normal(shape, 1), ErrorCode::kInvalidArgument,
                      "random_normal: No default mesh has been registered to DTensor");
}

TEST(DefaultMesh, ErrorEmptyMesh) {
  EXPECT_TESSEL_ERROR(DefaultMeshScope scope{Mesh()}, ErrorCode::kInvalidArgument,
                      "Expect `mesh` to be a non-empty `Mesh`, got empty_mesh");
  EXPECT_FALSE(get_default_mesh().has_value());
}

TEST(DefaultMesh, DeviceNameIsTheGlobalRuntimesCustomDevice) {
  const RuntimeOptions& o = Runtime::global().options();
  EXPECT_EQ(device_name(), "/job:" + o.job + "/replica:" + std::to_string(o.replica) +
                               "/task:" + std::to_string(o.task) + "/device:CUSTOM:0");
  EXPECT_EQ(device_name(), "/job:localhost/replica:0/task:0/device:CUSTOM:0");
}

TEST(DefaultMesh, VisualizeShowsBlocksAndDeviceIds) {
  Runtime rt({.num_cpu_devices = 4});
  Layout l({"x", "y"}, Mesh::create({{"x", 2}, {"y", 2}}));
  DTensor d = copy_to_mesh(Tensor::zeros({5, 4}, DType::kF32), l, rt);
  const std::string text = visualize(d);
  EXPECT_EQ(text, ShardMap(l, Shape{5, 4}).visualize());
  for (const char* part : {"[0:3)", "[3:5)", "[0:2)", "[2:4)", " 0 ", " 1 ", " 2 ", " 3 "}) {
    EXPECT_NE(text.find(part), std::string::npos) << part << " in\n" << text;
  }
  EXPECT_TESSEL_ERROR(visualize(DTensor()), ErrorCode::kInvalidArgument,
                      "a null DTensor has no layout");
}

TEST(DefaultMesh, ClosingAnOuterScopeFirstClosesTheInnerOnesToo) {
  const Mesh a = Mesh::create({{"x", 2}});
  const Mesh b = Mesh::create({{"y", 2}});
  auto outer = std::make_unique<DefaultMeshScope>(a);
  auto inner = std::make_unique<DefaultMeshScope>(b);
  outer.reset();  // out of order (interleaved generators, async code)
  EXPECT_FALSE(get_default_mesh().has_value());
  inner.reset();  // nothing left to pop: no effect
  EXPECT_FALSE(get_default_mesh().has_value());
}

}  // namespace
}  // namespace tessel
