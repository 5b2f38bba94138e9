// DistributedValues: one value per device, as TensorFlow's tf.distribute values.
//
// A DistributedValues holds components: component i is a dense Tensor or an IndexedSlices that
// lives on devices()[i], a device named in TF's form ("/job:localhost/replica:0/task:0/device:
// CPU:1", or a partial name such as "/cpu:1" that the runtime completes). Two kinds exist, as in
// TF, and differ only in what they promise:
//   PerReplica — each device holds its own value (e.g. per-replica gradients);
//   Mirrored   — every device holds the same value (what reductions and broadcasts return).
//
//   PerReplica grads({"/cpu:0", "/cpu:1"}, {g0, g1});
//   Mirrored m = ops.reduce(ReduceOp::kSum, grads, grads);   // cross_device_ops.h
//   Tensor on_cpu1 = m.tensor(1);
//
// tessel tensors carry no device, so the device of each component is stated here. Unlike TF,
// a device may hold only one component (a collective needs one rank per device).
//
// Thread safety: immutable values holding tensor handles (see tensor.h).
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tessel/core/tensor.h"
#include "tessel/distribute/indexed_slices.h"

namespace tessel {

// One component: a dense tensor or sparse rows.
using Value = std::variant<Tensor, IndexedSlices>;

class DistributedValues {
 public:
  // Device names in component order; element i is where values()[i] lives.
  const std::vector<std::string>& devices() const { return devices_; }
  const std::vector<Value>& values() const { return values_; }
  int size() const { return static_cast<int>(values_.size()); }
  bool empty() const { return values_.empty(); }

  // Component i (0 <= i < size(), else kOutOfRange).
  const Value& value(int i) const;
  // Component i as a dense tensor; an IndexedSlices component: kInvalidArgument.
  const Tensor& tensor(int i) const;
  // Component i as IndexedSlices; a dense component: kInvalidArgument.
  const IndexedSlices& indexed_slices(int i) const;
  // True when any component is an IndexedSlices.
  bool has_indexed_slices() const;

  // "PerReplica:{\n  0: <device>: Tensor(...)\n  1: ...\n}" (TF's repr, one line per device).
  std::string to_string() const;

 protected:
  // Checks: devices.size() == values.size(); every device parses as a TF device name with a
  // type and an id (DeviceName, device_name.h); no device appears twice (compared as parsed);
  // no tensor is null. Failures: kInvalidArgument naming `class_name` and the values.
  DistributedValues(const char* class_name, std::vector<std::string> devices,
                    std::vector<Value> values);

 private:
  const char* class_name_;            // "PerReplica" or "Mirrored"
  std::vector<std::string> devices_;  // as given
  std::vector<Value> values_;         // component i on devices_[i]
};

class PerReplica : public DistributedValues {
 public:
  // Empty lists make an empty PerReplica (valid here; reductions reject it with TF's error).
  PerReplica(std::vector<std::string> devices, std::vector<Value> values);
};

class Mirrored : public DistributedValues {
 public:
  Mirrored(std::vector<std::string> devices, std::vector<Value> values);
};

// TF's regroup for results: when every component is the same object — there is one component,
// or every component is the same view of the same storage — that component itself; otherwise
// the container unchanged. This is why TF returns a plain tensor from a reduction to one device
// and a Mirrored from a reduction to several.
std::variant<Tensor, IndexedSlices, Mirrored> regroup(const Mirrored& values);
std::variant<Tensor, IndexedSlices, PerReplica> regroup(const PerReplica& values);

// TF's _make_tensor_into_per_replica: a value known to live on `device` becomes a one-component
// PerReplica. An empty device: kInvalidArgument "Cannot convert `input_tensor` to a `PerReplica`
// object because it doesn't have device set." (always the case for a bare tessel tensor, which
// carries no device).
PerReplica make_tensor_into_per_replica(Value value, std::string_view device);

}  // namespace tessel
