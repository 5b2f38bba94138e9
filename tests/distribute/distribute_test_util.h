// Helpers for the cross-device ops tests: a small runtime, values, bounded options.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "tessel/distribute/cross_device_ops.h"
#include "tessel/runtime/runtime.h"
#include "testing/expect_error.h"

namespace tessel::testing {

// Every collective in these tests runs with this deadline, so a bug fails instead of hanging.
inline const CommunicationOptions kBounded(0, 10.0);

inline std::string cpu(int i, int task = 0) {
  return "/job:localhost/replica:0/task:" + std::to_string(task) +
         "/device:CPU:" + std::to_string(i);
}

inline Tensor vec(std::vector<float> v) {
  const auto n = static_cast<int64_t>(v.size());
  return Tensor::from_vector<float>(v, Shape{n});
}

// Component i = base_i filled with (i + 1) * scale, shape `shape`, on devices first..first+n-1.
inline PerReplica filled(int n, const Shape& shape, double scale = 1.0, int first = 0,
                         DType dtype = DType::kF32) {
  std::vector<std::string> devices;
  std::vector<Value> values;
  for (int i = 0; i < n; ++i) {
    devices.push_back(cpu(first + i));
    values.push_back(Tensor::full(shape, dtype, (i + 1) * scale));
  }
  return PerReplica(devices, values);
}

inline std::vector<float> floats(const Value& v) {
  return std::get<Tensor>(v).astype(DType::kF32).to_vector<float>();
}

// Checks every component of `m` equals `expected` and lives on `devices`.
inline void expect_mirrored(const Mirrored& m, const std::vector<std::string>& devices,
                            const std::vector<float>& expected) {
  ASSERT_EQ(m.devices(), devices);
  for (int i = 0; i < m.size(); ++i) EXPECT_EQ(floats(m.value(i)), expected) << "component " << i;
}

}  // namespace tessel::testing
