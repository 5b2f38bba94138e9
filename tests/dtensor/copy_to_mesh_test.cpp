// copy_to_mesh and to_host (dtensor_api.h): every local device takes its block, Partial values
// are split into terms the reduction gives back, and to_host inverts it bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>

#include "tessel/dtensor/dtensor_api.h"
#include "tessel/mesh/shard_map.h"
#include "testing/expect_error.h"
#include "testing/gpu_devices.h"

namespace tessel {
namespace {

constexpr ErrorCode kInvalid = ErrorCode::kInvalidArgument;

std::vector<uint8_t> bytes(const Tensor& t) {
  Tensor c = t.contiguous();
  const auto* p = static_cast<const uint8_t*>(c.data());
  return std::vector<uint8_t>(p, p + c.nbytes());
}

// Every layout of `rank` tensor dims over `mesh`: each dim unsharded, one mesh dim, or two mesh
// dims ("a+b", both orders), no mesh dim used twice.
std::vector<Layout> all_layouts(const Mesh& mesh, int rank) {
  std::vector<std::vector<std::string>> choices = {{"unsharded"}};
  for (const std::string& a : mesh.dim_names()) {
    choices.push_back({a});
    for (const std::string& b : mesh.dim_names()) {
      if (a != b) choices.push_back({a, b});
    }
  }
  std::vector<Layout> out;
  std::vector<std::string> specs;
  std::function<void(std::vector<std::string>&)> rec = [&](std::vector<std::string>& used) {
    if (static_cast<int>(specs.size()) == rank) {
      std::vector<ShardingSpec> parsed;
      for (const std::string& s : specs) parsed.push_back(ShardingSpec::parse(s));
      out.push_back(Layout::create(LayoutType::kStatic, parsed, mesh));
      return;
    }
    for (const std::vector<std::string>& c : choices) {
      bool clash = false;
      for (const std::string& d : c) {
        if (d != "unsharded" && std::find(used.begin(), used.end(), d) != used.end()) clash = true;
      }
      if (clash) continue;
      std::string spec = c[0] + (c.size() == 2 ? "+" + c[1] : "");
      specs.push_back(spec);
      std::vector<std::string> more = used;
      for (const std::string& d : c) more.push_back(d);
      rec(more);
      specs.pop_back();
    }
  };
  std::vector<std::string> none;
  rec(none);
  return out;
}

// copy_to_mesh then to_host gives x back bit for bit, and each component is its block of x.
void expect_round_trip(const Tensor& x, const Layout& layout, Runtime& rt) {
  SCOPED_TRACE(layout.to_string() + " shape " + x.shape().to_string());
  DTensor d = copy_to_mesh(x, layout, rt);
  const ShardMap map(layout, x.shape());
  for (int i = 0; i < d.num_components(); ++i) {
    const int64_t offset = layout.mesh().offset_of_device_id(layout.mesh().local_device_ids()[i]);
    const ShardBlock& b = map.block(offset);
    if (!layout.is_partial()) {
      EXPECT_EQ(bytes(d.component(i)), bytes(x.block(b.offsets, b.extents))) << "component " << i;
    }
    EXPECT_EQ(d.component(i).allocator(), d.device(i).allocator());
  }
  Tensor back = to_host(d);
  EXPECT_EQ(back.shape(), x.shape());
  EXPECT_EQ(back.dtype(), x.dtype());
  EXPECT_EQ(bytes(back), bytes(x));
}

TEST(CopyToMesh, RoundTripEveryLayoutOn1DMesh) {
  Runtime rt({.num_cpu_devices = 4});
  Mesh mesh = Mesh::create({{"x", 4}});
  for (const Shape& shape : {Shape{10, 6}, Shape{2, 3}, Shape{4, 4}, Shape{0, 5}}) {
    Tensor x = Tensor::random_uniform(shape, DType::kF32, 11);
    for (const Layout& l : all_layouts(mesh, 2)) expect_round_trip(x, l, rt);
  }
}

TEST(CopyToMesh, RoundTripEveryLayoutOn2DMesh) {
  Runtime rt({.num_cpu_devices = 4});
  Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  std::vector<Layout> layouts = all_layouts(mesh, 2);
  EXPECT_EQ(layouts.size(), 11u);  // u, x, y, x+y, y+x per dim, no mesh dim twice
  for (const Shape& shape : {Shape{10, 6}, Shape{2, 7}, Shape{5, 1}}) {
    Tensor x = Tensor::random_uniform(shape, DType::kF64, 5);
    for (const Layout& l : layouts) expect_round_trip(x, l, rt);
  }
}

TEST(CopyToMesh, RoundTripEveryLayoutOn3DMesh) {
  Runtime rt({.num_cpu_devices = 8});
  Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}, {"z", 2}});
  Tensor x = Tensor::random_uniform({7, 5, 3}, DType::kI32, 9, -100, 100);
  for (const Layout& l : all_layouts(mesh, 3)) expect_round_trip(x, l, rt);
}

TEST(CopyToMesh, RoundTripScalarAndOtherDtypes) {
  Runtime rt({.num_cpu_devices = 4});
  Mesh mesh = Mesh::create({{"x", 4}});
  expect_round_trip(Tensor::full({}, DType::kF32, 2.5), Layout::replicated(mesh, 0), rt);
  for (DType t : {DType::kBF16, DType::kF16, DType::kI64, DType::kU8, DType::kBool}) {
    expect_round_trip(Tensor::random_uniform({9, 2}, t, 4, 0, 50), Layout({"x", "unsharded"}, mesh),
                      rt);
  }
}

TEST(CopyToMesh, UnevenBlocksFollowChunkSemantics) {
  Runtime rt({.num_cpu_devices = 4});
  Mesh mesh = Mesh::create({{"x", 4}});
  auto rows = [&](int64_t n) {
    DTensor d =
        copy_to_mesh(Tensor::zeros({n, 2}, DType::kF32), Layout({"x", "unsharded"}, mesh), rt);
    std::vector<int64_t> out;
    for (const Tensor& c : d.components()) out.push_back(c.shape()[0]);
    return out;
  };
  EXPECT_EQ(rows(10), (std::vector<int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(rows(2), (std::vector<int64_t>{1, 1, 0, 0}));
}

TEST(CopyToMesh, ComponentsAreCountedOnTheirDevices) {
  Runtime rt({.num_cpu_devices = 4});
  {
    DTensor d = copy_to_mesh(Tensor::zeros({10, 4}, DType::kF32),
                             Layout({"x", "unsharded"}, Mesh::create({{"x", 4}})), rt);
    std::vector<int64_t> live;
    for (int i = 0; i < 4; ++i) live.push_back(rt.device(i).memory_stats().live_bytes);
    EXPECT_EQ(live, (std::vector<int64_t>{48, 48, 48, 16}));
  }
  for (int i = 0; i < 4; ++i) EXPECT_EQ(rt.device(i).memory_stats().live_bytes, 0);
}

Layout partial_layout(const Mesh& mesh, std::vector<std::string> specs,
                      std::vector<PartialDim> partial) {
  std::vector<ShardingSpec> parsed;
  for (const std::string& s : specs) parsed.push_back(ShardingSpec::parse(s));
  return Layout::create(LayoutType::kStatic, parsed, mesh, std::move(partial));
}

std::vector<float> values_of(const DTensor& d) {
  std::vector<float> out;
  for (const Tensor& c : d.components()) out.push_back(c.to_vector<float>()[0]);
  return out;
}

TEST(CopyToMesh, PartialSumValueOnFirstDeviceZeroElsewhere) {
  Runtime rt({.num_cpu_devices = 4});
  Layout l = partial_layout(Mesh::create({{"x", 4}}), {"unsharded"}, {{"x", ReduceOp::kSum}});
  EXPECT_EQ(values_of(copy_to_mesh(Tensor::full({1}, DType::kF32, 7), l, rt)),
            (std::vector<float>{7, 0, 0, 0}));
}

TEST(CopyToMesh, PartialProdValueOnFirstDeviceOneElsewhere) {
  Runtime rt({.num_cpu_devices = 4});
  Layout l = partial_layout(Mesh::create({{"x", 4}}), {"unsharded"}, {{"x", ReduceOp::kProd}});
  EXPECT_EQ(values_of(copy_to_mesh(Tensor::full({1}, DType::kF32, 7), l, rt)),
            (std::vector<float>{7, 1, 1, 1}));
}

TEST(CopyToMesh, PartialMeanMaxMinKeepTheValueEverywhere) {
  Runtime rt({.num_cpu_devices = 4});
  for (ReduceOp op : {ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin}) {
    Layout l = partial_layout(Mesh::create({{"x", 4}}), {"unsharded"}, {{"x", op}});
    EXPECT_EQ(values_of(copy_to_mesh(Tensor::full({1}, DType::kF32, 7), l, rt)),
              (std::vector<float>{7, 7, 7, 7}))
        << reduce_op_name(op);
  }
}

TEST(CopyToMesh, PartialOnlyAlongPartialDims) {
  // sum(y) with rows sharded on x: devices at y=0 hold their row block, devices at y=1 zeros.
  Runtime rt({.num_cpu_devices = 4});
  Layout l = partial_layout(Mesh::create({{"x", 2}, {"y", 2}}), {"x"}, {{"y", ReduceOp::kSum}});
  DTensor d = copy_to_mesh(Tensor::from_vector<float>({1, 2, 3, 4}, Shape{4}), l, rt);
  EXPECT_EQ(d.component(0).to_vector<float>(), (std::vector<float>{1, 2}));
  EXPECT_EQ(d.component(1).to_vector<float>(), (std::vector<float>{0, 0}));
  EXPECT_EQ(d.component(2).to_vector<float>(), (std::vector<float>{3, 4}));
  EXPECT_EQ(d.component(3).to_vector<float>(), (std::vector<float>{0, 0}));
}

TEST(CopyToMesh, MixedPartialOpsCombineInMeshOrder) {
  // sum(x) then prod(y): (x=0,y=0) keeps v; x=1 holds sum's 0; (x=0,y=1) holds prod's 1.
  Runtime rt({.num_cpu_devices = 4});
  Layout l = partial_layout(Mesh::create({{"x", 2}, {"y", 2}}), {"unsharded"},
                            {{"x", ReduceOp::kSum}, {"y", ReduceOp::kProd}});
  DTensor d = copy_to_mesh(Tensor::full({1}, DType::kF32, 5), l, rt);
  EXPECT_EQ(values_of(d), (std::vector<float>{5, 1, 0, 0}));
  EXPECT_EQ(to_host(d).to_vector<float>(), std::vector<float>{5});
  // max(x) then sum(y): max keeps v along x, sum zeroes y=1.
  Layout m = partial_layout(Mesh::create({{"x", 2}, {"y", 2}}), {"unsharded"},
                            {{"x", ReduceOp::kMax}, {"y", ReduceOp::kSum}});
  DTensor e = copy_to_mesh(Tensor::full({1}, DType::kF32, 5), m, rt);
  EXPECT_EQ(values_of(e), (std::vector<float>{5, 0, 5, 0}));
  EXPECT_EQ(to_host(e).to_vector<float>(), std::vector<float>{5});
}

TEST(CopyToMesh, PartialRoundTripEveryOpAndLayout) {
  Runtime rt({.num_cpu_devices = 8});
  Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}, {"z", 2}});
  const std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax,
                                     ReduceOp::kMin, ReduceOp::kProd};
  Tensor xf = Tensor::random_uniform({5, 6}, DType::kF32, 21, -50, 50)
                  .astype(DType::kI32)
                  .astype(DType::kF32);
  Tensor xi = Tensor::random_uniform({5, 6}, DType::kI32, 22, -50, 50);
  for (ReduceOp a : ops) {
    for (ReduceOp b : ops) {
      expect_round_trip(xf, partial_layout(mesh, {"x", "unsharded"}, {{"y", a}, {"z", b}}), rt);
      expect_round_trip(xi, partial_layout(mesh, {"unsharded", "y"}, {{"x", a}, {"z", b}}), rt);
    }
    expect_round_trip(xf, partial_layout(mesh, {"unsharded", "unsharded"}, {{"z", a}}), rt);
    expect_round_trip(xi, partial_layout(mesh, {"z+x", "unsharded"}, {{"y", a}}), rt);
  }
  expect_round_trip(
      xf,
      partial_layout(mesh, {"unsharded", "unsharded"},
                     {{"x", ReduceOp::kMean}, {"y", ReduceOp::kMax}, {"z", ReduceOp::kSum}}),
      rt);
}

TEST(CopyToMesh, ErrorRankMismatch) {
  Runtime rt({.num_cpu_devices = 4});
  EXPECT_TESSEL_ERROR(copy_to_mesh(Tensor::zeros({4}, DType::kF32),
                                   Layout({"x", "unsharded"}, Mesh::create({{"x", 4}})), rt),
                      kInvalid, "copy_to_mesh: tensor of shape [4] has rank 1 but layout");
}

TEST(CopyToMesh, ErrorNullTensorAndBadLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  Mesh mesh = Mesh::create({{"x", 4}});
  EXPECT_TESSEL_ERROR(copy_to_mesh(Tensor(), Layout({"x"}, mesh), rt), kInvalid,
                      "the input is a null tensor");
  EXPECT_TESSEL_ERROR(copy_to_mesh(Tensor::zeros({4}, DType::kF32), Layout({"match"}, mesh), rt),
                      kInvalid, "has a 'match' spec");
  EXPECT_TESSEL_ERROR(copy_to_mesh(Tensor::zeros({}, DType::kF32), Layout(), rt), kInvalid,
                      "the empty layout places no tensor");
}

TEST(CopyToMesh, TpuMeshOnAHostWithoutTpusIsTfsUnknownDevice) {
  // A mesh of TPU device strings (TF's tests' form) parses and lays out as in TF; placing a
  // tensor on it needs the devices, which this runtime lacks: TF's eager copy onto the mesh
  // fails with InvalidArgument "<device> unknown device.", and so do copy_to_mesh and pack.
  Runtime rt({.num_cpu_devices = 4});
  const Mesh tpu = Mesh::from_string(
      "|x=2|0,1|0,1|/job:localhost/replica:0/task:0/device:TPU:0,"
      "/job:localhost/replica:0/task:0/device:TPU:1");
  EXPECT_EQ(tpu.device_type(), "TPU");
  const Layout sharded({"x"}, tpu);
  EXPECT_EQ(sharded.local_shape_from_global_shape(Shape{4}), (Shape{2}));
  EXPECT_TESSEL_ERROR(copy_to_mesh(Tensor::zeros({4}, DType::kF32), sharded, rt), kInvalid,
                      "copy_to_mesh: /job:localhost/replica:0/task:0/device:TPU:0 unknown device.");
  EXPECT_TESSEL_ERROR(
      copy_to_mesh(Tensor::zeros({4}, DType::kF32), Layout::replicated(tpu, 1), rt), kInvalid,
      "/job:localhost/replica:0/task:0/device:TPU:0 unknown device.");
  EXPECT_TESSEL_ERROR(pack({Tensor::zeros({2}, DType::kF32), Tensor::zeros({2}, DType::kF32)},
                           sharded, rt),
                      kInvalid, "/job:localhost/replica:0/task:0/device:TPU:0 unknown device.");
  // Its host mesh (TF registers it with every TPU mesh) is this runtime's CPUs and holds it.
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 4}, {4});
  const DTensor d = copy_to_mesh(x, Layout({"x"}, tpu.host_mesh()), rt);
  EXPECT_EQ(d.num_components(), 2);
  EXPECT_EQ(to_host(d).to_vector<float>(), x.to_vector<float>());
}

TEST(CopyToMesh, ErrorPartialMeanOfBool) {
  Runtime rt({.num_cpu_devices = 4});
  Layout l = partial_layout(Mesh::create({{"x", 4}}), {"unsharded"}, {{"x", ReduceOp::kMean}});
  EXPECT_TESSEL_ERROR(copy_to_mesh(Tensor::zeros({2}, DType::kBool), l, rt), kInvalid,
                      "partial mean(x) is not defined for bool tensors");
}

TEST(ToHost, PartialTermsFromPackAreReduced) {
  Runtime rt({.num_cpu_devices = 4});
  Mesh mesh = Mesh::create({{"x", 4}});
  std::vector<Tensor> terms;
  for (float v : {1.0f, 2.0f, 3.0f, 6.0f}) terms.push_back(Tensor::full({2}, DType::kF32, v));
  auto reduce = [&](ReduceOp op) {
    return to_host(pack(terms, partial_layout(mesh, {"unsharded"}, {{"x", op}}), rt))
        .to_vector<float>()[0];
  };
  EXPECT_EQ(reduce(ReduceOp::kSum), 12.0f);
  EXPECT_EQ(reduce(ReduceOp::kMean), 3.0f);
  EXPECT_EQ(reduce(ReduceOp::kMax), 6.0f);
  EXPECT_EQ(reduce(ReduceOp::kMin), 1.0f);
  EXPECT_EQ(reduce(ReduceOp::kProd), 36.0f);
}

// The terms of a Partial on GPU devices are reduced on host copies.
TEST(ToHost, PartialTermsOnGpuDevicesAreReduced) {
  Runtime rt(testing::options_with_gpu_devices(2));
  const Mesh mesh = Mesh::create({{"x", 2}}, "GPU");
  const std::vector<Tensor> terms = {Tensor::from_vector<double>({1, 2}, {2}),
                                     Tensor::from_vector<double>({3, -5}, {2})};
  const DTensor p = pack(terms, partial_layout(mesh, {"unsharded"}, {{"x", ReduceOp::kSum}}), rt);
  EXPECT_EQ(to_host(p).to_vector<double>(), (std::vector<double>{4, -3}));
}

TEST(ToHost, FullTensorIsToHost) {
  Runtime rt({.num_cpu_devices = 4});
  Tensor x = Tensor::random_uniform({6, 6}, DType::kF32, 1);
  DTensor d = copy_to_mesh(x, Layout({"x", "y"}, Mesh::create({{"x", 2}, {"y", 2}})), rt);
  EXPECT_EQ(bytes(full_tensor(d)), bytes(x));
}

TEST(ToHost, ErrorNullDTensor) {
  EXPECT_TESSEL_ERROR(to_host(DTensor()), kInvalid,
                      "to_host expects a tensor placed on the DTensor device");
}

TEST(ToHost, ErrorMissingBlocksOfAMultiClientMesh) {
  Runtime rt({.num_cpu_devices = 2});
  // x=4 over two processes; this one holds ids 0 and 1.
  Mesh half({"x"}, {4}, {0, 1, 2, 3}, {0, 1},
            {"/job:localhost/replica:0/task:0/device:CPU:0",
             "/job:localhost/replica:0/task:0/device:CPU:1"});
  DTensor d =
      copy_to_mesh(Tensor::zeros({10, 2}, DType::kF32), Layout({"x", "unsharded"}, half), rt);
  EXPECT_EQ(d.num_components(), 2);
  EXPECT_TESSEL_ERROR(to_host(d), ErrorCode::kFailedPrecondition,
                      "[6:9, 0:2] (devices 2), [9:10, 0:2] (devices 3); relayout to a replicated");
  // Replicated over the same mesh: every block is here.
  Tensor x = Tensor::random_uniform({3, 2}, DType::kF32, 2);
  EXPECT_EQ(bytes(to_host(copy_to_mesh(x, Layout::replicated(half, 2), rt))), bytes(x));
  // Partial over x: terms on devices 2 and 3 are elsewhere.
  Layout sum = partial_layout(half, {"unsharded"}, {{"x", ReduceOp::kSum}});
  EXPECT_TESSEL_ERROR(to_host(copy_to_mesh(Tensor::zeros({2}, DType::kF32), sum, rt)),
                      ErrorCode::kFailedPrecondition, "[0:2] (devices 0,1,2,3)");
}

TEST(ToHost, EmptyRemoteBlocksAreNotMissing) {
  Runtime rt({.num_cpu_devices = 2});
  Mesh half({"x"}, {4}, {0, 1, 2, 3}, {0, 1},
            {"/job:localhost/replica:0/task:0/device:CPU:0",
             "/job:localhost/replica:0/task:0/device:CPU:1"});
  // 2 rows over 4 shards: 1, 1, 0, 0 — the remote shards are empty.
  Tensor x = Tensor::from_vector<float>({1, 2}, Shape{2});
  EXPECT_EQ(to_host(copy_to_mesh(x, Layout({"x"}, half), rt)).to_vector<float>(),
            (std::vector<float>{1, 2}));
}

}  // namespace
}  // namespace tessel
