// DeviceName: a TensorFlow device name, parsed and printed.
//
// Full form: "/job:localhost/replica:0/task:0/device:CPU:0". Every part is optional, as in
// TensorFlow's DeviceNameUtils::ParseFullName: "/job:worker/task:1", "/device:GPU:*",
// "/task:0/device:CPU:1" and the legacy "/cpu:0" and "/gpu:1" (type "CPU"/"GPU") all parse.
// A wildcard ("*") is held as an absent value. Device types are an upper-case letter followed by
// upper-case letters, digits and '_' ("CPU", "GPU", "TPU", "XLA_CPU"); job names a letter
// followed by letters, digits and '_'. Parts may come in any order and print in canonical order.
// Stricter than TensorFlow: a part given twice, a lower-case device type ("/device:cpu:0") and a
// number above INT_MAX are errors; the leading '/' is optional ("job:w/task:0").
//
//   DeviceName d = DeviceName::parse("/job:localhost/replica:0/task:0/device:CPU:3");
//   d.type == "CPU"; d.id == 3; d.to_string() == "/job:localhost/replica:0/task:0/device:CPU:3"
//
// Thread safety: value type.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tessel {

struct DeviceName {
  std::optional<std::string> job;  // "localhost", "worker", ...
  std::optional<int> replica;
  std::optional<int> task;
  std::optional<std::string> type;  // "CPU", "GPU", "TPU", ...
  std::optional<int> id;

  // Malformed: Error kInvalidArgument quoting the text and the part that failed.
  static DeviceName parse(std::string_view text);
  // As parse, but returns nullopt instead of throwing.
  static std::optional<DeviceName> try_parse(std::string_view text);
  // A fully specified name: /job:<job>/replica:<replica>/task:<task>/device:<type>:<id>.
  static DeviceName make(std::string job, int replica, int task, std::string type, int id);

  // The present parts in canonical order, each as "/<part>:<value>"; a present type with no id
  // prints "/device:TYPE:*", an id with no type "/device:*:ID". The empty name prints as "".
  // parse(to_string()) == *this for every parsed or made name.
  std::string to_string() const;
  // job, replica, task, type and id all present.
  bool is_fully_specified() const;
  // True when every part present in *this equals the same part in `other`.
  bool matches(const DeviceName& other) const;

  friend bool operator==(const DeviceName&, const DeviceName&) = default;
};

}  // namespace tessel
