// Helpers for the cross-device ops tests on simulated GPU devices: a batch of values in the
// GPUs' memory and its reference computed here in double (testing/device_copy_counter.h counts
// the bytes copied between the host and device memory while a call runs).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "testing/device_copy_counter.h"
#include "tessel/distribute/cross_device_ops.h"
#include "tessel/runtime/runtime.h"

namespace tessel::testing {

// Uneven shapes (1, 7, 13, 33 and 2x5 elements): packs split inside tensors and scoped fields
// need padding.
inline const std::vector<Shape> kUnevenShapes = {Shape{1}, Shape{7}, Shape{13}, Shape{3, 11},
                                                 Shape{2, 5}};

// Element i of tensor k on device d: small integers, exact in every dtype used.
inline double element(int d, int k, int64_t i) { return (d + 1) * (k + 2) + (i % 5); }

// The batch on `devices`: tensor k of every value in its device's memory (a GPU's: copied there
// from the host).
inline std::vector<ValueDestinationPair> device_batch(const std::vector<Device*>& devices,
                                                      DType dtype) {
  std::vector<std::string> names;
  for (Device* device : devices) names.push_back(device->name());
  std::vector<ValueDestinationPair> pairs;
  for (int k = 0; k < static_cast<int>(kUnevenShapes.size()); ++k) {
    const Shape& shape = kUnevenShapes[static_cast<size_t>(k)];
    std::vector<Value> values;
    for (int d = 0; d < static_cast<int>(devices.size()); ++d) {
      std::vector<double> host(static_cast<size_t>(shape.num_elements()));
      for (size_t i = 0; i < host.size(); ++i) host[i] = element(d, k, static_cast<int64_t>(i));
      Tensor t = devices[static_cast<size_t>(d)]->allocate(shape, dtype, /*zero_fill=*/false);
      t.copy_from(Tensor::from_vector<double>(host, shape).astype(dtype));
      values.push_back(t);
    }
    const PerReplica v(names, values);
    pairs.emplace_back(v, v);
  }
  return pairs;
}

// Tensor k's reduction over `devices` devices, in double: SUM, or MEAN (integers truncate).
inline std::vector<double> reference(int devices, int k, ReduceOp op, DType dtype) {
  std::vector<double> out(static_cast<size_t>(kUnevenShapes[static_cast<size_t>(k)].num_elements()));
  for (size_t i = 0; i < out.size(); ++i) {
    double sum = 0;
    for (int d = 0; d < devices; ++d) sum += element(d, k, static_cast<int64_t>(i));
    out[i] = op == ReduceOp::kSum ? sum
             : is_floating(dtype) ? sum / devices
                                  : static_cast<double>(static_cast<int64_t>(sum) / devices);
  }
  return out;
}

inline std::vector<double> doubles(const Tensor& t) {
  return t.to_host().astype(DType::kF64).to_vector<double>();
}


// The bytes of the buckets a call's plan reduced (each all_reduce step's elements).
inline int64_t planned_bucket_bytes(const CrossDevicePlan& plan) {
  int64_t bytes = 0;
  for (const PlanStep& s : plan.steps) {
    if (s.kind == "all_reduce") bytes += s.num_elements * static_cast<int64_t>(dtype_size(s.dtype));
  }
  return bytes;
}

// gpu_ops.batch_reduce(op) of device_batch on `gpus` against the reference and against
// cpu_ops (the same kind of object over as many CPU devices): the same plan and results, the
// results in the GPUs' memory, the buckets allocated from the GPUs (their live bytes grow by
// the plan's bucket bytes while the results live), the inputs copied into the buckets within
// the GPUs' memory, and the host reached only by the collective's staging of each bucket (the
// simulated GPUs' group has no device collectives; an NCCL group has, and never stages) plus,
// for an integer MEAN, the division on a host copy.
inline void expect_gpu_batch_matches_cpu(CrossDeviceOps& gpu_ops, CrossDeviceOps& cpu_ops,
                                         const std::vector<Device*>& gpus,
                                         const std::vector<Device*>& cpus, DType dtype,
                                         ReduceOp op, const CommunicationOptions& options) {
  const std::string what = std::string(dtype_name(dtype)) + " " + std::string(reduce_op_name(op));
  const auto gpu_pairs = device_batch(gpus, dtype);
  const auto cpu_out = cpu_ops.batch_reduce(op, device_batch(cpus, dtype), options);
  std::vector<int64_t> live_before;
  for (Device* g : gpus) live_before.push_back(g->memory_stats().live_bytes);
  std::vector<Mirrored> out;
  std::vector<std::vector<int64_t>> copied;  // per GPU: {on the device, to the host, from it}
  {
    DeviceCopyCounter copies;
    out = gpu_ops.batch_reduce(op, gpu_pairs, options);
    for (Device* g : gpus) {
      const int ordinal = g->memory_space().device_ordinal;
      copied.push_back({copies.on_device(ordinal), copies.to_host(ordinal),
                        copies.from_host(ordinal)});
    }
  }
  const CrossDevicePlan plan = gpu_ops.last_plan();
  const CrossDevicePlan cpu_plan = cpu_ops.last_plan();
  ASSERT_EQ(plan.steps.size(), cpu_plan.steps.size()) << what;
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    EXPECT_EQ(plan.steps[s].num_elements, cpu_plan.steps[s].num_elements) << what << " step " << s;
    EXPECT_EQ(plan.steps[s].num_tensors, cpu_plan.steps[s].num_tensors) << what << " step " << s;
  }
  const int n = static_cast<int>(gpus.size());
  // Copied into the buckets: every input but those reduced alone (steps of one tensor, which in
  // this batch of one dtype are packs of one tensor: reduced from the input into the result).
  int64_t copied_in = 0;
  for (const Shape& shape : kUnevenShapes)
    copied_in += shape.num_elements() * static_cast<int64_t>(dtype_size(dtype));
  for (const PlanStep& s : plan.steps) {
    if (s.num_tensors == 1) copied_in -= s.num_elements * static_cast<int64_t>(dtype_size(dtype));
  }
  const int64_t bucket_bytes = planned_bucket_bytes(plan);
  const int64_t divisions = op == ReduceOp::kMean && !is_floating(dtype) ? 1 : 0;
  for (int d = 0; d < n; ++d) {
    Device& gpu = *gpus[static_cast<size_t>(d)];
    for (int k = 0; k < static_cast<int>(kUnevenShapes.size()); ++k) {
      const Tensor t = out[static_cast<size_t>(k)].tensor(d);
      EXPECT_EQ(t.memory_space(), gpu.memory_space()) << what << " tensor " << k;
      EXPECT_EQ(t.shape(), kUnevenShapes[static_cast<size_t>(k)]) << what << " tensor " << k;
      EXPECT_EQ(doubles(t), reference(n, k, op, dtype)) << what << " tensor " << k;
      EXPECT_EQ(doubles(t), doubles(cpu_out[static_cast<size_t>(k)].tensor(d)))
          << what << " tensor " << k;
    }
    EXPECT_EQ(gpu.memory_stats().live_bytes - live_before[static_cast<size_t>(d)], bucket_bytes)
        << what << " GPU " << d;
    const std::vector<int64_t> expected = {copied_in, bucket_bytes * (1 + divisions),
                                           bucket_bytes * (1 + divisions)};
    EXPECT_EQ(copied[static_cast<size_t>(d)], expected)
        << what << " GPU " << d << ": bytes copied {on the device, to the host, from the host}";
  }
}

}  // namespace tessel::testing
