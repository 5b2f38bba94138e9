// Destinations: where a cross-device op puts its result (TF's `destinations` argument).
//
// A destination is a device string, a list of device strings (a tessel extension), a
// DistributedValues, which stands for its devices in component order, or a tensor, which stands
// for the device whose memory holds it (TF's `tensor.device`):
//
//   ops.reduce(ReduceOp::kSum, grads, "/cpu:0");             // one device
//   ops.reduce(ReduceOp::kSum, grads, {"/cpu:0", "/cpu:2"}); // several (tessel)
//   ops.reduce(ReduceOp::kSum, grads, grads);                // grads' own devices
//   ops.reduce(ReduceOp::kSum, grads, x.component(1));       // the device holding it
//
// TF's type rule (BR-70-02: a DistributedValues, a variable, a tensor or a device string) is the
// set of constructors: anything else does not compile. tessel has no tf.Variable: a variable's
// value is a tensor, which is accepted. Python applies the rule at run time with TF's ValueError text
// kDestinationsTypeMessage. Emptiness (BR-70-01: "", no devices, an empty DistributedValues) is
// checked when an op runs, with TF's message kDestinationsEmptyMessage; names are resolved
// against the op's Runtime then (an unknown device: kNotFound).
//
// Thread safety: an immutable value.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/core/tensor.h"
#include "tessel/distribute/distributed_values.h"

namespace tessel {

inline constexpr std::string_view kDestinationsTypeMessage =
    "destinations must be one of a `DistributedValues` object, a tf.Variable object, or a device "
    "string.";
inline constexpr std::string_view kDestinationsEmptyMessage = "destinations can not be empty";

class Destinations {
 public:
  // One device. "" is allowed here and rejected as empty when used.
  Destinations(const char* device);       // NOLINT(google-explicit-constructor): TF passes strings
  Destinations(std::string device);       // NOLINT(google-explicit-constructor)
  Destinations(std::string_view device);  // NOLINT(google-explicit-constructor)
  // Several devices, in order.
  Destinations(std::vector<std::string> devices);            // NOLINT(google-explicit-constructor)
  Destinations(std::initializer_list<std::string> devices);  // NOLINT(google-explicit-constructor)
  // The devices of `value`, in component order.
  Destinations(const DistributedValues& value);  // NOLINT(google-explicit-constructor)
  // The device whose memory holds `tensor` (its allocator's device): a device's tensor (a
  // DistributedValues' or a DTensor's component) names that device; a host tensor is "/cpu:0",
  // as a TF tensor made on the host is on CPU:0. A null tensor is empty (checked when used).
  Destinations(const Tensor& tensor);  // NOLINT(google-explicit-constructor)
  // Not a destination: a null pointer would be an empty device string by accident.
  Destinations(std::nullptr_t) = delete;

  // The names as given (resolution to full names happens in the op).
  const std::vector<std::string>& devices() const { return devices_; }
  // TF's check_destinations: false for "", an empty list or an empty DistributedValues.
  bool is_empty() const;
  // True when made from a DistributedValues.
  bool is_distributed_values() const { return from_values_; }

 private:
  std::vector<std::string> devices_;
  bool from_values_ = false;
};

}  // namespace tessel
