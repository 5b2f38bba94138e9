// Helpers for the tests of what gradient tapes keep (tape_memory.h): the bytes kept over every
// device, a one-device fixture, and the OpDef of an identity op for test ops with their own VJP.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/tape_memory.h"

namespace tessel::testing {

// The bytes tapes keep now, over every device.
inline int64_t kept_bytes() {
  int64_t total = 0;
  for (const TapeMemoryStats& s : tape_memory_stats()) total += s.live_bytes;
  return total;
}

// One CPU device (so a tensor's bytes are its block's) and f64 random tensors on it.
class OneDeviceTest : public ::testing::Test {
 protected:
  OneDeviceTest() : rt_({.num_cpu_devices = 1}), mesh_(Mesh::create({{"x", 1}})) {}
  DTensor random(const Shape& shape, uint64_t seed) {
    return random_normal(shape, Layout::replicated(mesh_, shape.rank()), seed, 0, 1, DType::kF64,
                         &rt_);
  }

  Runtime rt_;
  Mesh mesh_;
};

// "name"(x) -> x in x's layout (a copy); the caller sets the VJP and what it reads.
inline OpDef identity_op(std::string name) {
  OpDef def;
  def.name = std::move(name);
  def.infer = [](const std::vector<TensorSpec>& in, const OpAttrs&) { return in[0]; };
  def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
    return ShardingDecision{{in[0].layout}, in[0].layout};
  };
  def.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs&, const LocalContext&) {
    out.copy_from(in[0]);
  };
  return def;
}

}  // namespace tessel::testing
