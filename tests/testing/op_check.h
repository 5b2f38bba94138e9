// Harness for op tests: random layouts (sharded, replicated, Partial, uneven), distributing a
// host value with random Partial terms, comparing a distributed run with a single-device run,
// and checking VJPs against central finite differences in f64.
//
//   Runtime rt({.num_cpu_devices = 4});
//   std::mt19937 rng(1);
//   const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
//   auto fn = [](const std::vector<DTensor>& in) { return tanh(in[0]); };
//   for (int t = 0; t < 20; ++t) {
//     Tensor x = random_host({5, 3}, DType::kF64, t);
//     expect_matches_single_device(fn, {x}, {random_op_layout(mesh, 2, rng, true)}, rt, rng);
//   }
//   expect_vjp_matches_finite_differences(fn, {x}, {layout}, rt, rng);
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/sharding_fallback.h"
#include "tessel/mesh/shard_map.h"

namespace tessel::testing {

using OpFn = std::function<DTensor(const std::vector<DTensor>&)>;

// A DTensor's global value as doubles, row-major (for EXPECT_EQ against literals).
inline std::vector<double> values(const DTensor& t) { return to_host(t).to_doubles(); }

// The meshes the op tests run on: 1, 2 and 2x2 devices.
inline std::vector<Mesh> small_meshes() {
  return {Mesh::create({{"x", 1}}), Mesh::create({{"x", 2}}), Mesh::create({{"x", 2}, {"y", 2}})};
}

// Host values laid out as `layout` (f64 or i64).
inline DTensor put(const std::vector<double>& v, const Shape& shape, const Layout& layout,
                   Runtime& rt) {
  return copy_to_mesh(Tensor::from_vector<double>(v, shape), layout, rt);
}
inline DTensor put_ints(const std::vector<int64_t>& v, const Shape& shape, const Layout& layout,
                        Runtime& rt) {
  return copy_to_mesh(Tensor::from_vector<int64_t>(v, shape), layout, rt);
}

// What plan_op takes for an input.
inline TensorSpec spec(const Shape& shape, const Layout& layout, DType dtype = DType::kF32) {
  return TensorSpec{shape, dtype, layout};
}

// A test whose ops may fall back (sharding_fallback.h): it starts out of strict mode and leaves
// no records behind.
class FallbackScopedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_sharding_fallback_strict(false);
    reset_sharding_fallbacks();
  }
  void TearDown() override { SetUp(); }
};

// The meshes the op tests run on: 4 devices in a line, 2x2, and 3 (uneven shards).
inline std::vector<Mesh> op_test_meshes() {
  return {Mesh::create({{"x", 4}}), Mesh::create({{"x", 2}, {"y", 2}}), Mesh::create({{"x", 3}})};
}

inline Tensor random_host(const Shape& shape, DType dtype, uint64_t seed, double low = -2.0,
                          double high = 2.0) {
  return Tensor::random_uniform(shape, dtype, seed, low, high);
}

// Each tensor dim unsharded or sharded over one or two free mesh dims; with allow_partial, a
// free mesh dim left over may become Partial(sum).
inline Layout random_op_layout(const Mesh& mesh, int rank, std::mt19937& rng,
                               bool allow_partial = false) {
  std::vector<std::string> free = mesh.dim_names();
  std::shuffle(free.begin(), free.end(), rng);
  std::vector<ShardingSpec> specs;
  for (int d = 0; d < rank; ++d) {
    const int take = std::min<int>(static_cast<int>(free.size()), static_cast<int>(rng() % 3));
    if (take == 0) {
      specs.push_back(ShardingSpec::unsharded());
      continue;
    }
    std::vector<std::string> dims(free.end() - take, free.end());
    free.resize(free.size() - static_cast<size_t>(take));
    specs.push_back(ShardingSpec::sharded(dims));
  }
  std::vector<PartialDim> partial;
  if (allow_partial && !free.empty() && rng() % 2 == 0) partial.push_back({free.back(), ReduceOp::kSum});
  return Layout::create(LayoutType::kStatic, specs, mesh, partial);
}

// The host value laid out as `layout`; a Partial(sum) layout gets random terms that add up to
// the value (every device holds a different term, not just the first one).
inline DTensor distribute(const Tensor& host, const Layout& layout, Runtime& rt, std::mt19937& rng) {
  if (!layout.is_partial()) return copy_to_mesh(host, layout, rt);
  const Mesh& mesh = layout.mesh();
  int64_t terms = 1;
  for (const PartialDim& p : layout.partial()) terms *= mesh.dim_size(p.mesh_dim);
  std::vector<Tensor> term(static_cast<size_t>(terms));
  Tensor rest = host.contiguous().clone();
  for (int64_t t = 1; t < terms; ++t) {
    term[static_cast<size_t>(t)] = Tensor::random_uniform(host.shape(), host.dtype(), rng(), -1, 1);
    Tensor& r = term[static_cast<size_t>(t)];
    for (int64_t i = 0; i < rest.num_elements(); ++i) {
      if (host.dtype() == DType::kF64) {
        rest.data<double>()[i] -= r.data<double>()[i];
      } else {
        rest.data<float>()[i] -= r.data<float>()[i];
      }
    }
  }
  term[0] = rest;
  const ShardMap map(layout, host.shape());
  std::vector<Tensor> components;
  for (int64_t id : mesh.local_device_ids()) {
    const int64_t offset = mesh.offset_of_device_id(id);
    const std::vector<int64_t> loc = mesh.device_location(offset);
    int64_t t = 0;
    for (const PartialDim& p : layout.partial()) {
      const int dim = mesh.dim_index(p.mesh_dim);
      t = t * mesh.dim_size(p.mesh_dim) + loc[static_cast<size_t>(dim)];
    }
    const ShardBlock& b = map.block(offset);
    Tensor part = term[static_cast<size_t>(t)];
    for (int d = 0; d < host.shape().rank(); ++d) {
      part = part.slice(d, b.offsets[static_cast<size_t>(d)],
                        b.offsets[static_cast<size_t>(d)] + b.extents[static_cast<size_t>(d)]);
    }
    components.push_back(part.contiguous().clone());
  }
  return pack(components, layout, rt);
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const Tensor x = a.dtype() == DType::kF64 ? a : a.astype(DType::kF64);
  const Tensor y = b.dtype() == DType::kF64 ? b : b.astype(DType::kF64);
  double most = 0;
  for (int64_t i = 0; i < x.num_elements() && i < y.num_elements(); ++i) {
    most = std::max(most, std::abs(x.data<double>()[i] - y.data<double>()[i]));
  }
  return most;
}

// fn on the distributed inputs equals fn on the same values on a one-device mesh.
inline void expect_matches_single_device(const OpFn& fn, const std::vector<Tensor>& hosts,
                                         const std::vector<Layout>& layouts, Runtime& rt,
                                         std::mt19937& rng, double tolerance = 1e-9) {
  std::vector<DTensor> dist;
  std::vector<DTensor> single;
  const Mesh one = Mesh::create_on_devices({{"single", 1}}, {rt.device(0).name()});
  std::string where;
  for (size_t i = 0; i < hosts.size(); ++i) {
    dist.push_back(distribute(hosts[i], layouts[i], rt, rng));
    single.push_back(copy_to_mesh(hosts[i], Layout::replicated(one, hosts[i].shape().rank()), rt));
    where += fmt::format(" input {}: {} in {};", i, hosts[i].shape().to_string(),
                         layouts[i].to_string());
  }
  const Tensor got = to_host(fn(dist));
  const Tensor want = to_host(fn(single));
  EXPECT_LE(max_abs_diff(got, want), tolerance) << where;
}

// The gradients of sum(fn(x) * w) (w fixed random weights) by value_and_grad match central
// differences, every input in f64, with each input in its layout; they come back in it.
inline void expect_vjp_matches_finite_differences(const OpFn& fn, const std::vector<Tensor>& hosts,
                                                  const std::vector<Layout>& layouts, Runtime& rt,
                                                  std::mt19937& rng, double tolerance = 1e-6) {
  std::vector<DTensor> params;
  for (size_t i = 0; i < hosts.size(); ++i) params.push_back(distribute(hosts[i], layouts[i], rt, rng));
  const Tensor out_host = to_host(fn(params));
  const Tensor w = Tensor::random_uniform(out_host.shape(), DType::kF64, rng(), -1, 1);
  const auto loss = [&](const std::vector<DTensor>& p) {
    const DTensor out = fn(p);
    return reduce_sum(multiply(out, copy_to_mesh(w, Layout::replicated(out.layout().mesh(), w.shape().rank()), rt)));
  };
  const auto [value, grads] = value_and_grad(loss, params);
  const double h = 1e-6;
  for (size_t i = 0; i < hosts.size(); ++i) {
    if (hosts[i].dtype() != DType::kF64) continue;  // index inputs
    EXPECT_EQ(grads[i].layout(), params[i].layout()) << "gradient " << i << " lost its layout";
    const Tensor g = to_host(grads[i]);
    for (int64_t j = 0; j < hosts[i].num_elements(); ++j) {
      std::vector<DTensor> plus = params, minus = params;
      Tensor xp = hosts[i].contiguous().clone(), xm = hosts[i].contiguous().clone();
      xp.data<double>()[j] += h;
      xm.data<double>()[j] -= h;
      plus[i] = copy_to_mesh(xp, layouts[i].without_partial(), rt);
      minus[i] = copy_to_mesh(xm, layouts[i].without_partial(), rt);
      const double fd = (to_host(loss(plus)).data<double>()[0] - to_host(loss(minus)).data<double>()[0]) / (2 * h);
      EXPECT_NEAR(g.data<double>()[j], fd, tolerance * std::max(1.0, std::abs(fd)))
          << "input " << i << " element " << j << " in " << layouts[i].to_string();
    }
  }
}

}  // namespace tessel::testing
