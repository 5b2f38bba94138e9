// pack, unpack, fetch_layout, check_layout, is_dtensor (dtensor_api.h): TF's checks and messages,
// uneven shape inference, storage and memory, and the seed 74 rules of the DTensor layer.
#include <gtest/gtest.h>

#include <string>

#include "tessel/dtensor/dtensor_api.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

constexpr ErrorCode kInvalid = ErrorCode::kInvalidArgument;

// A [rows, cols] f32 tensor whose elements are start, start + 1, ...
Tensor iota(Shape shape, float start = 0) {
  std::vector<float> v(static_cast<size_t>(shape.num_elements()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<float>(i);
  return Tensor::from_vector<float>(v, shape);
}

// n components of the given shapes, component i starting at 100 * i.
std::vector<Tensor> parts(const std::vector<Shape>& shapes) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < shapes.size(); ++i) out.push_back(iota(shapes[i], 100.0f * i));
  return out;
}

void expect_unpack_equals(const DTensor& d, const std::vector<Tensor>& expected) {
  std::vector<Tensor> got = unpack(d);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].shape(), expected[i].shape()) << "component " << i;
    EXPECT_EQ(got[i].to_vector<float>(), expected[i].to_vector<float>()) << "component " << i;
  }
}

TEST(DTensorPack, RoundTrip1DMesh) {
  Runtime rt({.num_cpu_devices = 4});
  Layout rows({"x", "unsharded"}, Mesh::create({{"x", 4}}));
  std::vector<Tensor> in = parts({{2, 3}, {2, 3}, {2, 3}, {2, 3}});
  DTensor d = pack(in, rows, rt);
  EXPECT_EQ(d.shape(), (Shape{8, 3}));
  EXPECT_EQ(d.layout(), rows);
  expect_unpack_equals(d, in);
  Tensor host = to_host(d);
  EXPECT_EQ(host.slice(0, 4, 6).to_vector<float>(), in[2].to_vector<float>());
}

TEST(DTensorPack, RoundTrip2DMesh) {
  Runtime rt({.num_cpu_devices = 4});
  Layout both({"y", "x"}, Mesh::create({{"x", 2}, {"y", 2}}));
  std::vector<Tensor> in = parts({{3, 2}, {3, 2}, {3, 2}, {3, 2}});
  DTensor d = pack(in, both, rt);
  EXPECT_EQ(d.shape(), (Shape{6, 4}));
  expect_unpack_equals(d, in);
  // Device 1 is at x=0, y=1: rows [3, 6), columns [0, 2).
  EXPECT_EQ(to_host(d).block({3, 0}, {3, 2}).to_vector<float>(), in[1].to_vector<float>());
}

TEST(DTensorPack, RoundTrip3DMesh) {
  Runtime rt({.num_cpu_devices = 8});
  Layout l({"z", "unsharded", "x+y"}, Mesh::create({{"x", 2}, {"y", 2}, {"z", 2}}));
  std::vector<Shape> shapes(8, Shape{2, 3, 1});
  std::vector<Tensor> in = parts(shapes);
  DTensor d = pack(in, l, rt);
  EXPECT_EQ(d.shape(), (Shape{4, 3, 4}));
  expect_unpack_equals(d, in);
  // Device 6 is at x=1, y=1, z=0: rows [0, 2), column 3 (x+y shard 3).
  EXPECT_EQ(to_host(d).block({0, 0, 3}, {2, 3, 1}).to_vector<float>(), in[6].to_vector<float>());
}

TEST(DTensorPack, UnevenTenRowsOverFour) {
  Runtime rt({.num_cpu_devices = 4});
  Layout rows({"x", "unsharded"}, Mesh::create({{"x", 4}}));
  std::vector<Tensor> in = parts({{3, 2}, {3, 2}, {3, 2}, {1, 2}});
  DTensor d = pack(in, rows, rt);
  EXPECT_EQ(d.shape(), (Shape{10, 2}));
  expect_unpack_equals(d, in);
  EXPECT_EQ(to_host(d).slice(0, 9, 10).to_vector<float>(), in[3].to_vector<float>());
}

TEST(DTensorPack, UnevenTwoRowsOverFourHasEmptyShards) {
  Runtime rt({.num_cpu_devices = 4});
  Layout rows({"x", "unsharded"}, Mesh::create({{"x", 4}}));
  std::vector<Tensor> in = parts({{1, 5}, {1, 5}, {0, 5}, {0, 5}});
  DTensor d = pack(in, rows, rt);
  EXPECT_EQ(d.shape(), (Shape{2, 5}));
  expect_unpack_equals(d, in);
  EXPECT_EQ(to_host(d).to_vector<float>(),
            (std::vector<float>{0, 1, 2, 3, 4, 100, 101, 102, 103, 104}));
}

TEST(DTensorPack, UnevenOverTwoMeshDimsOfOneTensorDim) {
  Runtime rt({.num_cpu_devices = 4});
  Layout l({"unsharded", "y+x"}, Mesh::create({{"x", 2}, {"y", 2}}));
  // 7 columns over 4 shards: 2, 2, 2, 1. Device (x, y) holds shard y * 2 + x.
  std::vector<Tensor> in = parts({{2, 2}, {2, 2}, {2, 2}, {2, 1}});
  DTensor d = pack(in, l, rt);
  EXPECT_EQ(d.shape(), (Shape{2, 7}));
  EXPECT_EQ(to_host(d).block({0, 2}, {2, 2}).to_vector<float>(), in[2].to_vector<float>());
}

TEST(DTensorPack, ReplicatedComponentsAreNotCompared) {
  Runtime rt({.num_cpu_devices = 4});
  Layout rep = Layout::replicated(Mesh::create({{"x", 4}}), 1);
  std::vector<Tensor> in = parts({{3}, {3}, {3}, {3}});  // all different: the caller's contract
  DTensor d = pack(in, rep, rt);
  EXPECT_EQ(d.shape(), Shape{3});
  expect_unpack_equals(d, in);
}

TEST(DTensorPack, PartialLayoutKeepsPendingTerms) {
  Runtime rt({.num_cpu_devices = 4});
  Layout sum = Layout::create(LayoutType::kStatic, {ShardingSpec::unsharded()},
                              Mesh::create({{"x", 4}}), {{"x", ReduceOp::kSum}});
  std::vector<Tensor> in = parts({{2}, {2}, {2}, {2}});
  DTensor d = pack(in, sum, rt);
  expect_unpack_equals(d, in);
  EXPECT_EQ(to_host(d).to_vector<float>(), (std::vector<float>{600, 604}));
}

TEST(DTensorPack, ComponentsAreCopiesOnTheirDevices) {
  Runtime rt({.num_cpu_devices = 4});
  Layout rows({"x"}, Mesh::create({{"x", 4}}));
  std::vector<Tensor> in = parts({{5}, {5}, {5}, {5}});
  DTensor d = pack(in, rows, rt);
  for (int i = 0; i < 4; ++i) {
    EXPECT_FALSE(d.component(i).shares_storage_with(in[static_cast<size_t>(i)]));
    EXPECT_EQ(d.component(i).allocator(), rt.device(i).allocator());
    EXPECT_TRUE(d.component(i).is_contiguous());
    EXPECT_EQ(rt.device(i).memory_stats().live_bytes, 20);
  }
  in[0].fill(-1);
  EXPECT_EQ(unpack(d)[0].to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4}));
}

TEST(DTensorPack, StridedInputsArePackedContiguous) {
  Runtime rt({.num_cpu_devices = 2});
  Layout cols({"unsharded", "x"}, Mesh::create({{"x", 2}}));
  Tensor whole = iota({2, 4});
  DTensor d = pack({whole.slice(1, 0, 2), whole.slice(1, 2, 4)}, cols, rt);
  EXPECT_TRUE(d.component(1).is_contiguous());
  EXPECT_EQ(d.component(1).to_vector<float>(), (std::vector<float>{2, 3, 6, 7}));
  EXPECT_EQ(to_host(d).to_vector<float>(), whole.to_vector<float>());
}

TEST(DTensorUnpack, ReturnsTheDTensorsStorage) {
  Runtime rt({.num_cpu_devices = 4});
  DTensor d = pack(parts({{2}, {2}, {2}, {2}}), Layout({"x"}, Mesh::create({{"x", 4}})), rt);
  std::vector<Tensor> out = unpack(d);
  ASSERT_EQ(out.size(), 4u);
  for (int i = 0; i < 4; ++i)
    EXPECT_TRUE(out[static_cast<size_t>(i)].shares_storage_with(d.component(i)));
}

TEST(DTensorPack, PackOfUnpackIsTheSameDTensor) {
  Runtime rt({.num_cpu_devices = 4});
  Layout l({"y", "x"}, Mesh::create({{"x", 2}, {"y", 2}}));
  DTensor d = copy_to_mesh(Tensor::random_uniform({5, 3}, DType::kF32, 3), l, rt);
  DTensor again = pack(unpack(d), l, rt);
  EXPECT_EQ(again.layout(), d.layout());
  EXPECT_EQ(again.shape(), d.shape());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(again.component(i).to_vector<float>(), d.component(i).to_vector<float>());
  }
}

TEST(DTensorPack, MemoryReturnsAfterTenThousandLoops) {
  Runtime rt({.num_cpu_devices = 4});
  Layout rows({"x", "unsharded"}, Mesh::create({{"x", 4}}));
  std::vector<Tensor> in = parts({{3, 8}, {3, 8}, {3, 8}, {1, 8}});
  std::vector<int64_t> before;
  for (int i = 0; i < 4; ++i) before.push_back(rt.device(i).memory_stats().live_bytes);
  for (int loop = 0; loop < 10000; ++loop) {
    std::vector<Tensor> out = unpack(pack(in, rows, rt));
    ASSERT_EQ(out[3].shape(), (Shape{1, 8}));
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(rt.device(i).memory_stats().live_bytes, before[static_cast<size_t>(i)]);
    EXPECT_EQ(rt.device(i).memory_stats().num_allocations, 10000);
  }
}

TEST(DTensorPack, ErrorNoInputs) {
  Runtime rt({.num_cpu_devices = 4});
  EXPECT_TESSEL_ERROR(pack({}, Layout({"x"}, Mesh::create({{"x", 4}})), rt), kInvalid,
                      "DTensorPack requires 1 or more inputs");
}

TEST(DTensorPack, ErrorNullInput) {
  Runtime rt({.num_cpu_devices = 2});
  EXPECT_TESSEL_ERROR(pack({iota({2}), Tensor()}, Layout({"x"}, Mesh::create({{"x", 2}})), rt),
                      kInvalid, "input 1 is a null tensor");
}

TEST(DTensorPack, ErrorCountMismatchNamesDevice) {
  Runtime rt({.num_cpu_devices = 4});
  EXPECT_TESSEL_ERROR(pack(parts({{2}, {2}, {2}}), Layout({"x"}, Mesh::create({{"x", 4}})), rt),
                      kInvalid,
                      "The dtensor device /job:localhost/replica:0/task:0/device:CUSTOM:0 "
                      "expected 4 inputs to DTensorPack, but got 3");
}

TEST(DTensorPack, ErrorCountMismatchNamesThisRuntimesDevice) {
  Runtime rt({.num_cpu_devices = 2, .job = "worker", .replica = 1, .task = 3});
  Mesh mesh({{"x", 2}}, {"/job:worker/replica:1/task:3/device:CPU:0",
                         "/job:worker/replica:1/task:3/device:CPU:1"});
  EXPECT_TESSEL_ERROR(pack(parts({{2}}), Layout({"x"}, mesh), rt), kInvalid,
                      "The dtensor device /job:worker/replica:1/task:3/device:CUSTOM:0 expected 2 "
                      "inputs to DTensorPack, but got 1");
}

TEST(DTensorPack, ErrorDtypeMismatch) {
  Runtime rt({.num_cpu_devices = 2});
  EXPECT_TESSEL_ERROR(pack({iota({2}), Tensor::zeros({2}, DType::kI32)},
                           Layout({"x"}, Mesh::create({{"x", 2}})), rt),
                      kInvalid,
                      "Components of a PackedTensor must all have the same dtype (input 0: f32, "
                      "input 1: i32)");
}

TEST(DTensorPack, ErrorRankMismatch) {
  Runtime rt({.num_cpu_devices = 2});
  Layout l({"x", "unsharded"}, Mesh::create({{"x", 2}}));
  EXPECT_TESSEL_ERROR(pack({iota({2}), iota({2})}, l, rt), kInvalid,
                      "Packed layout should have the same rank as the rank for each component. "
                      "The rank of each component is: 1, while layout has rank: 2\nLayout: "
                      "sharding_specs:x,unsharded");
}

TEST(DTensorPack, ErrorShapeNamesComponentDeviceAndExpected) {
  Runtime rt({.num_cpu_devices = 4});
  Layout rows({"x", "unsharded"}, Mesh::create({{"x", 4}}));
  // Inferred rows 2+3+3+3 = 11: chunks 3,3,3,2, so component 0 is short.
  EXPECT_TESSEL_ERROR(pack(parts({{2, 2}, {3, 2}, {3, 2}, {3, 2}}), rows, rt), kInvalid,
                      "component 0 (device /job:localhost/replica:0/task:0/device:CPU:0) has "
                      "shape [2,2] but its block of the global shape [11,2] is [3,2]");
  // Unsharded extents must agree.
  EXPECT_TESSEL_ERROR(pack(parts({{1, 2}, {1, 2}, {1, 3}, {1, 2}}), rows, rt), kInvalid,
                      "component 2 (device /job:localhost/replica:0/task:0/device:CPU:2) has "
                      "shape [1,3] but its block of the global shape [4,2] is [1,2]");
}

TEST(DTensorPack, ErrorLayoutsThatPlaceNoTensor) {
  Runtime rt({.num_cpu_devices = 2});
  EXPECT_TESSEL_ERROR(pack({iota({2})}, Layout(), rt), kInvalid,
                      "pack: the empty layout places no tensor");
  EXPECT_TESSEL_ERROR(
      pack({iota({2}), iota({2})},
           Layout::create(LayoutType::kStatic, {ShardingSpec::any()}, Mesh::create({{"x", 2}})),
           rt),
      kInvalid, "has a 'any' spec");
}

TEST(DTensorPack, ErrorMeshDeviceNotInRuntime) {
  Runtime rt({.num_cpu_devices = 2});
  EXPECT_TESSEL_ERROR(
      pack(parts({{1}, {1}, {1}, {1}}), Layout({"x"}, Mesh::create({{"x", 4}})), rt), kInvalid,
      "pack: /job:localhost/replica:0/task:0/device:CPU:2 unknown device. The mesh device is "
      "not one of this runtime's");
}

TEST(DTensorPack, RemoteMeshGivesAComponentlessDTensor) {
  Runtime rt({.num_cpu_devices = 2});
  Mesh remote({"x"}, {4}, {0, 1, 2, 3}, {}, {}, "",
              {"/job:w/replica:0/task:1/device:CPU:0", "/job:w/replica:0/task:1/device:CPU:1",
               "/job:w/replica:0/task:1/device:CPU:2", "/job:w/replica:0/task:1/device:CPU:3"});
  DTensor d = pack({iota({3, 2})}, Layout({"x", "unsharded"}, remote), rt);
  EXPECT_EQ(d.shape(), (Shape{12, 2}));  // TF's rule: local shape times shard count
  EXPECT_EQ(d.num_components(), 0);
  EXPECT_TESSEL_ERROR(unpack(d), ErrorCode::kUnimplemented,
                      "DTensorUnpack is not supported on a remote mesh.");
}

TEST(DTensorPack, MultiClientMeshUsesTheFirstLocalShard) {
  Runtime rt({.num_cpu_devices = 2});
  // x=4 over two processes; this one holds ids 2 and 3 (shards 2 and 3).
  Mesh half({"x"}, {4}, {0, 1, 2, 3}, {2, 3},
            {"/job:localhost/replica:0/task:0/device:CPU:0",
             "/job:localhost/replica:0/task:0/device:CPU:1"});
  DTensor d = pack(parts({{3, 2}, {3, 2}}), Layout({"x", "unsharded"}, half), rt);
  EXPECT_EQ(d.shape(), (Shape{12, 2}));
  EXPECT_EQ(unpack(d)[1].to_vector<float>(), (std::vector<float>{100, 101, 102, 103, 104, 105}));
}

TEST(DTensorUnpack, ErrorNullDTensor) {
  EXPECT_TESSEL_ERROR(unpack(DTensor()), kInvalid,
                      "DTensorUnpack expects a tensor placed on the DTensor device");
}

TEST(DTensorUnpack, IsASyncPointForTheDevicesStreams) {
  Runtime rt({.num_cpu_devices = 2});
  DTensor d = pack({iota({1}), iota({1})}, Layout({"x"}, Mesh::create({{"x", 2}})), rt);
  Tensor c = d.component(1);
  rt.device(1).stream().enqueue("scale", [c]() mutable { c.fill(42); });
  EXPECT_EQ(unpack(d)[1].to_vector<float>(), std::vector<float>{42});
  rt.device(0).stream().enqueue("broken_kernel",
                                [] { throw Error(ErrorCode::kInternal, "kernel", "boom"); });
  EXPECT_TESSEL_ERROR(unpack(d), ErrorCode::kInternal, "op 'broken_kernel'");
  EXPECT_EQ(unpack(d).size(), 2u);  // reported once
}

TEST(DTensorFetchLayout, ReturnsAnEqualLayout) {
  Runtime rt({.num_cpu_devices = 4});
  Layout l({"x", "unsharded"}, Mesh::create({{"x", 2}, {"y", 2}}));
  DTensor d = copy_to_mesh(iota({4, 4}), l, rt);
  EXPECT_EQ(fetch_layout(d), l);
  EXPECT_EQ(fetch_layout(d).to_string(), l.to_string());
  EXPECT_NE(fetch_layout(d), Layout({"y", "unsharded"}, l.mesh()));
  EXPECT_TESSEL_ERROR(fetch_layout(DTensor()), kInvalid,
                      "FetchLayout expects a tensor placed on the layout device.");
}

TEST(DTensorCheckLayout, MismatchNamesBothLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  Layout rows({"x", "unsharded"}, mesh);
  Layout cols({"unsharded", "x"}, mesh);
  DTensor d = copy_to_mesh(iota({4, 4}), rows, rt);
  EXPECT_NO_THROW(check_layout(d, rows));
  EXPECT_TESSEL_ERROR(check_layout(d, cols), kInvalid,
                      "Layout of tensor: " + rows.to_string() +
                          ", did not match expected layout: " + cols.to_string());
  // Exact equality: kParted differs from kStatic even with the same specs.
  EXPECT_TESSEL_ERROR(check_layout(d, rows.to_parted()), kInvalid, "did not match");
}

TEST(DTensorIsDTensor, TrueOnlyForDefined) {
  Runtime rt({.num_cpu_devices = 2});
  EXPECT_FALSE(is_dtensor(DTensor()));
  EXPECT_TRUE(
      is_dtensor(pack({iota({1}), iota({1})}, Layout({"x"}, Mesh::create({{"x", 2}})), rt)));
}

TEST(Seed74, BR_74_05_PackAndUnpackAreEager) {
  // C++ has no graph mode: pack copies before returning and unpack waits for the devices, so
  // the values are there at once (TF's "must be called eagerly" cannot arise).
  Runtime rt({.num_cpu_devices = 2});
  std::vector<Tensor> in = {iota({2}), iota({2}, 10)};
  DTensor d = pack(in, Layout({"x"}, Mesh::create({{"x", 2}})), rt);
  EXPECT_EQ(rt.device(0).stream().pending(), 0u);
  EXPECT_EQ(unpack(d)[1].to_vector<float>(), (std::vector<float>{10, 11}));
}

TEST(Seed74, BR_74_07_ScalarOnlyFullyReplicated) {
  Runtime rt({.num_cpu_devices = 2});
  Mesh mesh = Mesh::create({{"x", 2}});
  Tensor s0 = Tensor::full({}, DType::kF32, 1.5);
  Tensor s1 = Tensor::full({}, DType::kF32, 2.5);
  DTensor d = pack({s0, s1}, Layout::replicated(mesh, 0), rt);
  EXPECT_EQ(d.shape(), Shape{});
  EXPECT_TRUE(d.layout().is_fully_replicated());
  EXPECT_EQ(unpack(d)[1].to_vector<float>(), std::vector<float>{2.5f});
  EXPECT_TESSEL_ERROR(pack({s0, s1}, Layout({"unsharded"}, mesh), rt), kInvalid,
                      "The rank of each component is: 0, while layout has rank: 1");
  EXPECT_TESSEL_ERROR(pack({s0, s1}, Layout({"x"}, mesh), rt), kInvalid,
                      "The rank of each component is: 0, while layout has rank: 1");
}

}  // namespace
}  // namespace tessel
