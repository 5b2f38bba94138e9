// The multi-client programs both the simulated clients (tests/dtensor/multi_client_test.cpp) and
// real processes under mpirun (tests/mpi/mpi_dtensor_test.cpp) run: every client calls the same
// function with its own runtime and its view of a mesh over `clients` x 2 devices, and checks
// that its own devices hold exactly the blocks a single client would compute.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/optimizers.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/mesh/shard_map.h"

namespace tessel::testing {

inline Layout layout_of(const Mesh& mesh, const std::vector<std::string>& specs,
                        std::vector<PartialDim> partial = {}) {
  return Layout(specs, mesh).with_partial(std::move(partial));
}

// Every local component of `d` equals its block of `expected`, to `tolerance`.
inline void expect_blocks_of(const DTensor& d, const Tensor& expected, double tolerance) {
  const ShardMap map(d.layout(), d.shape());
  const std::vector<Tensor> parts = unpack(d);
  const std::vector<int64_t>& ids = d.layout().mesh().local_device_ids();
  ASSERT_EQ(parts.size(), ids.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    const ShardBlock& b = map.block(d.layout().mesh().offset_of_device_id(ids[i]));
    const std::vector<double> want = expected.block(b.offsets, b.extents).to_doubles();
    const std::vector<double> got = parts[i].to_doubles();
    ASSERT_EQ(got.size(), want.size()) << "device " << ids[i];
    for (size_t k = 0; k < want.size(); ++k) {
      ASSERT_NEAR(got[k], want[k], tolerance) << "device " << ids[i] << " element " << k;
    }
  }
}

// Meshes of the cases: "x" over every device, or x over the clients by y over each client's 2.
inline std::vector<MeshDimension> flat_mesh(int clients) { return {{"x", 2 * clients}}; }
inline std::vector<MeshDimension> client_by_device_mesh(int clients) {
  return {{"x", clients}, {"y", 2}};
}

struct RelayoutCase {
  std::string name;
  std::vector<int64_t> shape;
  bool two_dimensional = false;  // client_by_device_mesh, else flat_mesh
  std::vector<std::string> from, to;
  std::vector<PartialDim> from_partial;
};

inline std::vector<RelayoutCase> relayout_cases() {
  const std::vector<std::string> u = {"unsharded", "unsharded"};
  return {
      {"ShardedToReplicatedGathers", {8, 3}, false, {"x", "unsharded"}, u, {}},
      {"ReplicatedToShardedSlicesLocally", {8, 3}, false, u, {"x", "unsharded"}, {}},
      {"AllToAll", {8, 8}, false, {"x", "unsharded"}, {"unsharded", "x"}, {}},
      {"UnevenShards", {5, 3}, false, {"x", "unsharded"}, {"unsharded", "x"}, {}},
      {"PartialToReplicatedAllReduces", {6, 2}, false, u, u, {{"x", ReduceOp::kSum}}},
      {"PartialToShardedReduceScatters", {8, 2}, false, u, {"x", "unsharded"}, {{"x", ReduceOp::kSum}}},
      {"TwoDimensionalSwapSendsBlocks", {4, 6}, true, {"x", "y"}, {"y", "x"}, {}},
      {"ClientDimensionGathers", {4, 6}, true, {"x", "y"}, {"unsharded", "y"}, {}},
      {"DeviceDimensionStaysInEachClient", {4, 6}, true, {"unsharded", "y"}, u, {}},
  };
}

// One client's part of a case.
inline void run_relayout_case(const RelayoutCase& rc, const Mesh& mesh, Runtime& runtime) {
  SCOPED_TRACE(rc.name);
  const Tensor host = Tensor::random_uniform(Shape(rc.shape), DType::kF32, 7, -1.0, 1.0);
  const DTensor d = copy_to_mesh(host, layout_of(mesh, rc.from, rc.from_partial), runtime);
  RelayoutOptions options;
  options.timeout = std::chrono::milliseconds(30000);
  expect_blocks_of(relayout(d, layout_of(mesh, rc.to), options), host, 1e-6);
}

// A matmul whose rows are sharded over x and whose contraction is sharded over y (so Partial,
// then reduced), tanh, a row sum, and the result replicated everywhere; `want` is the same
// program's value on one device.
inline DTensor ops_program(const Tensor& a, const Tensor& b, const Mesh& mesh, Runtime& runtime,
                           const std::vector<std::string>& a_specs,
                           const std::vector<std::string>& b_specs) {
  const DTensor da = copy_to_mesh(a, layout_of(mesh, a_specs), runtime);
  const DTensor db = copy_to_mesh(b, layout_of(mesh, b_specs), runtime);
  const DTensor out = reduce_sum(tanh(matmul(da, db)), {1});
  return relayout(out, Layout::replicated(mesh, 1));
}

inline void run_ops_case(const Mesh& mesh, Runtime& runtime) {
  Runtime reference({.num_cpu_devices = 1});
  const Tensor a = Tensor::random_uniform(Shape({8, 6}), DType::kF32, 1, -1.0, 1.0);
  const Tensor b = Tensor::random_uniform(Shape({6, 4}), DType::kF32, 2, -1.0, 1.0);
  const Mesh one = Mesh::create_on_devices({{"x", 1}}, {reference.device(0).name()});
  const Tensor want = to_host(ops_program(a, b, one, reference, {"unsharded", "unsharded"},
                                          {"unsharded", "unsharded"}));
  expect_blocks_of(ops_program(a, b, mesh, runtime, {"x", "y"}, {"y", "unsharded"}), want, 1e-5);
}

// A few steps of data- and model-parallel training (x: batch, y: the hidden units) against the
// same steps on one device: the losses must agree to 1e-5 relative.
inline void run_training_case(const Mesh& mesh, Runtime& runtime) {
  Runtime reference({.num_cpu_devices = 1});
  const Mesh one = Mesh::create_on_devices({{"x", 1}, {"y", 1}}, {reference.device(0).name()});
  struct Model {
    Mesh mesh;
    Runtime* rt;
    std::vector<DTensor> params;
    Adam adam{0.01};
    Model(const Mesh& m, Runtime& r) : mesh(m), rt(&r) {
      params = {random_normal(Shape{6, 8}, Layout({"unsharded", "y"}, m), 1, 0.0, 0.4, DType::kF32, rt),
                random_normal(Shape{8, 3}, Layout({"y", "unsharded"}, m), 2, 0.0, 0.4, DType::kF32, rt)};
    }
    double step(const Tensor& x_host, const Tensor& labels_host) {
      const DTensor x = copy_to_mesh(x_host, Layout({"x", "unsharded"}, mesh), *rt);
      const DTensor y = copy_to_mesh(labels_host, Layout({"x"}, mesh), *rt);
      auto [loss, grads] = value_and_grad(
          [&](const std::vector<DTensor>& p) {
            const DTensor logits = matmul(tanh(matmul(x, p[0])), p[1]);
            return reduce_mean(sparse_softmax_cross_entropy_with_logits(y, logits));
          },
          params);
      adam.apply(params, grads);
      return full_tensor(loss).astype(DType::kF64).data<double>()[0];
    }
  };
  Model distributed(mesh, runtime), single(one, reference);
  for (int s = 0; s < 4; ++s) {
    const Tensor x = Tensor::random_normal(Shape{8, 6}, DType::kF32, 100 + s);
    Tensor labels = Tensor::zeros(Shape{8}, DType::kI32);
    for (int i = 0; i < 8; ++i) labels.data<int32_t>()[i] = (i * 7 + s) % 3;
    const double want = single.step(x, labels);
    const double got = distributed.step(x, labels);
    EXPECT_NEAR(got, want, 1e-5 * std::abs(want)) << "step " << s;
  }
}

}  // namespace tessel::testing
