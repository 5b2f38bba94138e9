// relayout on DTensors: the property test (every layout pair, uneven shards, 1-D to 3-D meshes),
// partial reductions, collectives counted with recording transports, memory, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "comm/group_service.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/mesh/shard_map.h"
#include "testing/device_copy_counter.h"
#include "testing/expect_error.h"
#include "testing/gpu_devices.h"
#include "testing/op_check.h"
#include "testing/recording_transport.h"

namespace tessel {
namespace {

// split(x, layout): each local device's block of the host tensor, cut here with slices
// (independently of copy_to_mesh).
std::vector<Tensor> split(const Tensor& x, const Layout& layout) {
  const ShardMap map(layout, x.shape());
  std::vector<Tensor> parts;
  for (int64_t id : layout.mesh().local_device_ids()) {
    const ShardBlock& b = map.block(layout.mesh().offset_of_device_id(id));
    Tensor part = x;
    for (int d = 0; d < x.shape().rank(); ++d) {
      part = part.slice(d, b.offsets[static_cast<size_t>(d)],
                        b.offsets[static_cast<size_t>(d)] + b.extents[static_cast<size_t>(d)]);
    }
    parts.push_back(part.contiguous().clone());
  }
  return parts;
}

// Compares host copies, so that blocks in a GPU's memory compare too.
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.to_host().contiguous().data(), b.to_host().contiguous().data(),
                     a.nbytes()) == 0;
}

// A random layout (each tensor dim unsharded or over one or two free mesh dims, no Partial).
Layout random_layout(const Mesh& mesh, int rank, std::mt19937& rng) {
  return testing::random_op_layout(mesh, rank, rng, /*allow_partial=*/false);
}

// 150 random (mesh, shape, dtype, from, to) cases on meshes of `device_type` devices of `rt`.
void check_relayout_property(Runtime& rt, const std::string& device_type) {
  const std::vector<Mesh> meshes = {Mesh::create({{"x", 4}}, device_type),
                                    Mesh::create({{"x", 3}}, device_type),
                                    Mesh::create({{"x", 2}, {"y", 2}}, device_type),
                                    Mesh::create({{"a", 2}, {"b", 3}}, device_type),
                                    Mesh::create({{"x", 2}, {"y", 2}, {"z", 2}}, device_type)};
  const std::vector<DType> dtypes = {DType::kF32, DType::kBF16, DType::kI64, DType::kU8};
  std::mt19937 rng(74);
  int cases = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const Mesh& mesh = meshes[static_cast<size_t>(trial) % meshes.size()];
    const int rank = 1 + static_cast<int>(rng() % 3);
    std::vector<int64_t> dims;
    for (int d = 0; d < rank; ++d) dims.push_back(static_cast<int64_t>(rng() % 9));  // 0..8
    const Shape shape(dims);
    const DType dtype = dtypes[rng() % dtypes.size()];
    const Tensor x = Tensor::random_uniform(shape, dtype, trial, 0.0, 100.0);
    const Layout a = random_layout(mesh, rank, rng);
    const Layout b = random_layout(mesh, rank, rng);
    SCOPED_TRACE(fmt::format("trial {}: {} {} from {} to {}", trial, shape.to_string(),
                             dtype_name(dtype), a.to_string(), b.to_string()));
    const DTensor packed = pack(split(x, a), a, rt);
    const DTensor moved = relayout(packed, b);
    ASSERT_EQ(moved.layout(), b);
    const std::vector<Tensor> got = unpack(moved);
    const std::vector<Tensor> want = split(x, b);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(moved.component(static_cast<int>(i)).memory_space().is_host(), device_type == "CPU");
      ASSERT_TRUE(same_bits(got[i], want[i])) << "component " << i << "\n"
                                              << plan_relayout(shape, a, b, dtype);
    }
    ++cases;
  }
  EXPECT_EQ(cases, 150);
}

TEST(Relayout, PropertyUnpackRelayoutPackEqualsSplitBitForBit) {
  Runtime rt({.num_cpu_devices = 8});
  check_relayout_property(rt, "CPU");
}

// The same on 8 GPU devices (real where a GPU is visible, else simulated: gpu_devices.h): every
// block in device memory, the collectives between them staged through host copies (their groups
// are not NCCL groups: simulated GPUs, or devices sharing a GPU).
TEST(Relayout, PropertyHoldsOnGpuDevices) {
  Runtime rt(testing::options_with_gpu_devices(8));
  check_relayout_property(rt, "GPU");
}

// A relayout whose plan is local slices (replicated to sharded) keeps GPU blocks in device
// memory: the slices are strided copies on the devices, with nothing copied to the host.
TEST(Relayout, LocalSlicesOfGpuBlocksStayInDeviceMemory) {
  Runtime rt({.num_cpu_devices = 1, .num_simulated_gpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}}, "GPU");
  const Tensor x = Tensor::random_uniform(Shape{6, 5, 4}, DType::kF32, 11);
  const Layout replicated({"unsharded", "unsharded", "unsharded"}, mesh);
  for (const Layout& to : {Layout({"x", "unsharded", "y"}, mesh), Layout({"unsharded", "y", "x"}, mesh),
                           Layout({"unsharded", "unsharded", "x"}, mesh)}) {
    const RelayoutPlan plan = plan_relayout(x.shape(), replicated, to, DType::kF32);
    ASSERT_EQ(plan.steps.size(), 1u) << plan;
    ASSERT_EQ(plan.steps[0].kind, RelayoutStepKind::kLocalSlice) << plan;
    const DTensor packed = pack(split(x, replicated), replicated, rt);
    testing::DeviceCopyCounter counter;
    const DTensor moved = relayout(packed, to);
    rt.synchronize();
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(counter.to_host(i), 0) << to.to_string() << ", GPU:" << i;
      EXPECT_EQ(counter.on_device(i), moved.component(i).nbytes()) << to.to_string() << ", GPU:" << i;
    }
    const std::vector<Tensor> got = unpack(moved);
    const std::vector<Tensor> want = split(x, to);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(same_bits(got[i], want[i])) << to.to_string();
  }
}

TEST(Relayout, AcrossMeshesMovesTheBlocks) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh four = Mesh::create({{"x", 4}});
  const Mesh two = Mesh::create_on_devices({{"y", 2}}, {"CPU:2", "CPU:3"});
  const Tensor x = Tensor::random_uniform(Shape{7, 3}, DType::kF32, 5);
  const Layout from({"x", "unsharded"}, four);
  for (const Layout& to : {Layout({"y", "unsharded"}, two), Layout({"unsharded", "y"}, two),
                           Layout({"unsharded", "unsharded"}, two)}) {
    const DTensor moved = relayout(pack(split(x, from), from, rt), to);
    const std::vector<Tensor> got = unpack(moved);
    const std::vector<Tensor> want = split(x, to);
    ASSERT_EQ(got.size(), 2u);
    for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(same_bits(got[i], want[i])) << to.to_string();
    EXPECT_EQ(&moved.device(0), &rt.device(2));
  }
}

// f32 values that are small integers: sums are exact in any order.
Tensor integers(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::random_uniform(shape, DType::kF32, seed, 0.0, 8.0);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.num_elements(); ++i) p[i] = std::floor(p[i]);
  return t;
}

TEST(Relayout, PartialSumReducesToReplicatedAndToSharded) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout partial = Layout::create(LayoutType::kStatic,
                                        {ShardingSpec::unsharded(), ShardingSpec::sharded({"y"})},
                                        mesh, {{"x", ReduceOp::kSum}});
  // Four terms: device k holds terms[k]'s block; the value is the sum over x.
  std::vector<Tensor> terms;
  std::vector<Tensor> components;
  const ShardMap map(partial, Shape{6, 4});
  Tensor sum = Tensor::zeros(Shape{6, 4}, DType::kF32);
  const std::vector<Tensor> per_x = {integers(Shape{6, 4}, 1), integers(Shape{6, 4}, 2)};
  for (int i = 0; i < 24; ++i) sum.data<float>()[i] = per_x[0].data<float>()[i] + per_x[1].data<float>()[i];
  for (int64_t k = 0; k < 4; ++k) {
    const ShardBlock& b = map.block(k);
    components.push_back(per_x[static_cast<size_t>(k / 2)]
                             .slice(1, b.offsets[1], b.offsets[1] + b.extents[1])
                             .contiguous()
                             .clone());
  }
  const DTensor d = pack(components, partial, rt);
  for (const Layout& to : {Layout({"unsharded", "y"}, mesh), Layout({"x", "y"}, mesh),
                           Layout({"unsharded", "unsharded"}, mesh), Layout({"y", "x"}, mesh)}) {
    const std::vector<Tensor> got = unpack(relayout(d, to));
    const std::vector<Tensor> want = split(sum, to);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(same_bits(got[i], want[i])) << to.to_string() << " component " << i;
    }
  }
  EXPECT_TRUE(same_bits(to_host(d), sum));
}

TEST(Relayout, ReplicatedToPartialAndBackIsTheValue) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const Tensor x = integers(Shape{5}, 3);
  const Layout partial =
      Layout::create(LayoutType::kStatic, {ShardingSpec::unsharded()}, mesh, {{"x", ReduceOp::kSum}});
  const DTensor p = relayout(copy_to_mesh(x, Layout({"unsharded"}, mesh), rt), partial);
  EXPECT_TRUE(same_bits(to_host(p), x));
  EXPECT_TRUE(same_bits(unpack(relayout(p, Layout({"x"}, mesh)))[0], split(x, Layout({"x"}, mesh))[0]));
}

// Every relayout of this runtime runs over recording transports; returns what rank 0 of each
// group recorded, per group.
struct Recorders {
  std::shared_ptr<std::vector<std::shared_ptr<testing::RecordingTransport>>> all =
      std::make_shared<std::vector<std::shared_ptr<testing::RecordingTransport>>>();
  std::vector<std::string> signatures() const {
    std::vector<std::string> out;
    for (const auto& r : *all) {
      for (const std::string& s : r->signatures()) out.push_back(s);
    }
    return out;
  }
};

Recorders record(const Runtime& rt) {
  Recorders rec;
  auto all = rec.all;
  detail::GroupService::of(rt)->set_group_factory([all](int size, std::vector<std::string> names) {
    testing::RecordingGroup group = testing::make_recording_group(size, names);
    all->push_back(group.recorders[0]);
    return std::move(group.comms);
  });
  return rec;
}

TEST(Relayout, ShardedToReplicatedIsExactlyOneAllGatherAlongX) {
  Runtime rt({.num_cpu_devices = 4});
  const Recorders rec = record(rt);
  const Mesh mesh = Mesh::create({{"x", 4}});
  const DTensor d = copy_to_mesh(Tensor::random_uniform(Shape{8, 3}, DType::kF32, 1),
                                 Layout({"x", "unsharded"}, mesh), rt);
  relayout(d, Layout({"unsharded", "unsharded"}, mesh));
  const std::vector<std::string> sigs = rec.signatures();
  ASSERT_EQ(sigs.size(), 1u);
  EXPECT_EQ(sigs[0].rfind("all_gather", 0), 0u) << sigs[0];
}

TEST(Relayout, Seed74_BR_74_06_ReplicatedToShardedRunsNoCollective) {
  Runtime rt({.num_cpu_devices = 4});
  const Recorders rec = record(rt);
  const Mesh mesh = Mesh::create({{"x", 4}});
  const DTensor d = copy_to_mesh(Tensor::random_uniform(Shape{8, 3}, DType::kF32, 1),
                                 Layout({"unsharded", "unsharded"}, mesh), rt);
  relayout(d, Layout({"x", "unsharded"}, mesh));
  EXPECT_TRUE(rec.signatures().empty());
}

TEST(Relayout, ShardedDimensionChangeIsOneAllToAllNotGatherThenSlice) {
  Runtime rt({.num_cpu_devices = 4});
  const Recorders rec = record(rt);
  const Mesh mesh = Mesh::create({{"x", 4}});
  const DTensor d = copy_to_mesh(Tensor::random_uniform(Shape{8, 8}, DType::kF32, 1),
                                 Layout({"x", "unsharded"}, mesh), rt);
  relayout(d, Layout({"unsharded", "x"}, mesh));
  const std::vector<std::string> sigs = rec.signatures();
  ASSERT_EQ(sigs.size(), 1u);
  EXPECT_EQ(sigs[0].rfind("all_to_all", 0), 0u) << sigs[0];
}

TEST(Relayout, PeakMemoryIsWhatThePlanSaysAndAtMostTwiceTheLargerShard) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Tensor x = Tensor::random_uniform(Shape{64, 48}, DType::kF32, 9);
  const std::vector<std::pair<Layout, Layout>> cases = {
      {Layout({"x", "unsharded"}, mesh), Layout({"unsharded", "x"}, mesh)},
      {Layout({"x", "y"}, mesh), Layout({"unsharded", "unsharded"}, mesh)},
      {Layout({"x", "y"}, mesh), Layout({"y", "x"}, mesh)},
      {Layout({"unsharded", "unsharded"}, mesh), Layout({"x", "y"}, mesh)}};
  for (const auto& [from, to] : cases) {
    const DTensor d = copy_to_mesh(x, from, rt);
    const RelayoutPlan plan = plan_relayout(x.shape(), from, to, DType::kF32);
    std::vector<int64_t> live;
    for (int i = 0; i < 4; ++i) {
      rt.device(i).reset_peak_memory();
      live.push_back(rt.device(i).memory_stats().live_bytes);
    }
    const DTensor moved = relayout(d, to);
    int64_t most = 0;
    for (int i = 0; i < 4; ++i) {
      most = std::max(most, rt.device(i).memory_stats().peak_bytes - live[static_cast<size_t>(i)]);
    }
    EXPECT_EQ(most, plan.peak_bytes()) << plan;
    const int64_t larger = std::max(d.component(0).nbytes(), moved.component(0).nbytes());
    EXPECT_LE(most, 2 * larger) << plan;
  }
}

// `loops` pack -> relayout (rows to columns, and to replicated) -> unpack rounds on a 4-device
// mesh of `devices` leave each device's live bytes where they started. TensorFlow's pack/unpack
// leaked this way (tensorflow/tensorflow#56393), and its sharded -> replicated relayout crashed
// on GPUs (tensorflow/tensorflow#56184).
void check_loops_leave_live_memory(Runtime& rt, const std::vector<Device*>& devices,
                                   const std::string& device_type, int loops) {
  const Mesh mesh = Mesh::create({{"x", 4}}, device_type);
  const Layout rows({"x", "unsharded"}, mesh);
  const Layout cols({"unsharded", "x"}, mesh);
  const Layout replicated({"unsharded", "unsharded"}, mesh);
  const Tensor x = Tensor::random_uniform(Shape{8, 8}, DType::kF32, 2);
  const std::vector<Tensor> parts = split(x, rows);
  relayout(pack(parts, rows, rt), cols);  // warm up the groups
  relayout(pack(parts, rows, rt), replicated);
  std::vector<int64_t> before;
  for (Device* d : devices) before.push_back(d->memory_stats().live_bytes);
  for (int n = 0; n < loops; ++n) {
    const std::vector<Tensor> out = unpack(relayout(pack(parts, rows, rt), n % 2 ? cols : replicated));
    ASSERT_EQ(out.size(), 4u);
    if (n < 2) {
      ASSERT_TRUE(same_bits(out[3], split(x, n % 2 ? cols : replicated)[3]));
    }
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    EXPECT_EQ(devices[i]->memory_stats().live_bytes, before[i]) << devices[i]->name();
  }
}

TEST(Relayout, TenThousandPackRelayoutUnpackLoopsLeaveLiveMemoryWhereItStarted) {
  Runtime rt({.num_cpu_devices = 4});
  check_loops_leave_live_memory(rt, rt.devices(), "CPU", 10000);
}

// The same on GPU devices (gpu_devices.h: real where a GPU is visible, else simulated).
TEST(Relayout, PackRelayoutUnpackLoopsLeaveLiveMemoryWhereItStartedOnGpuDevices) {
  Runtime rt(testing::options_with_gpu_devices(4));
  check_loops_leave_live_memory(rt, rt.gpu_devices(), "GPU", 2000);
}

TEST(Relayout, ErrorsNameTheLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const DTensor d = copy_to_mesh(Tensor::zeros(Shape{4, 4}, DType::kF32), Layout({"x", "unsharded"}, mesh), rt);
  EXPECT_TESSEL_ERROR(relayout(d, Layout({"x"}, mesh)), ErrorCode::kInvalidArgument,
                      "Attempted to relayout to a different global shape");
  EXPECT_TESSEL_ERROR(relayout(DTensor(), Layout({"x"}, mesh)), ErrorCode::kInvalidArgument,
                      "null DTensor");
  const RelayoutPlan other = plan_relayout(Shape{8, 4}, Layout({"x", "unsharded"}, mesh),
                                           Layout({"unsharded", "unsharded"}, mesh));
  EXPECT_TESSEL_ERROR(execute_relayout(d, other), ErrorCode::kInvalidArgument, "the plan is for [8,4]");
}

TEST(Relayout, RelayoutLikeTakesTheOtherTensorsLayoutAndMesh) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh four = Mesh::create({{"x", 4}});
  const Mesh two = Mesh::create_on_devices({{"y", 2}}, {"CPU:0", "CPU:1"});
  const Tensor x = Tensor::random_uniform(Shape{6}, DType::kF32, 4);
  const DTensor like = copy_to_mesh(Tensor::zeros(Shape{3, 3}, DType::kI32),
                                    Layout({"y", "unsharded"}, two), rt);
  const Layout target({"y"}, two);
  const DTensor d = copy_to_mesh(x, Layout({"x"}, four), rt);
  EXPECT_TESSEL_ERROR(relayout_like(d, like), ErrorCode::kInvalidArgument, "different global shape");
  const DTensor like1 = copy_to_mesh(Tensor::zeros(Shape{2}, DType::kI32), target, rt);
  const DTensor moved = relayout_like(d, like1);
  EXPECT_EQ(moved.layout(), target);
  EXPECT_TRUE(same_bits(to_host(moved), x));
}

TEST(Relayout, SameLayoutReturnsTheTensorItself) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const DTensor d = copy_to_mesh(Tensor::zeros(Shape{4}, DType::kF32), Layout({"x"}, mesh), rt);
  EXPECT_TRUE(relayout(d, Layout({"x"}, mesh)).component(2).shares_storage_with(d.component(2)));
}

TEST(Relayout, CallWithLayoutRunsUnderTheMeshAndRelayoutsTheResult) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const Tensor x = Tensor::random_uniform(Shape{8}, DType::kF32, 6);
  const DTensor out = call_with_layout(
      [&](const Tensor& v) {
        EXPECT_EQ(get_default_mesh(), std::optional<Mesh>(mesh));
        return copy_to_mesh(v, Layout({"unsharded"}, require_default_mesh("test")), rt);
      },
      Layout({"x"}, mesh), x);
  EXPECT_EQ(out.layout(), Layout({"x"}, mesh));
  EXPECT_TRUE(same_bits(to_host(out), x));
  EXPECT_FALSE(get_default_mesh().has_value());
}

}  // namespace
}  // namespace tessel
