// DistributedValues, PerReplica, Mirrored, regroup.
#include "tessel/distribute/distributed_values.h"

#include <sstream>

#include "core/errors.h"
#include "tessel/core/device_name.h"

namespace tessel {
namespace {

// True when every component is the same object: one component, or the same tensor view.
bool all_same(const std::vector<Value>& values) {
  if (values.size() == 1) return true;
  if (values.empty()) return false;
  const auto* first = std::get_if<Tensor>(&values.front());
  if (first == nullptr) return false;
  for (const Value& v : values) {
    const auto* t = std::get_if<Tensor>(&v);
    if (t == nullptr || !t->shares_storage_with(*first) || !(t->shape() == first->shape()) ||
        t->strides() != first->strides() || t->storage_offset() != first->storage_offset() ||
        t->dtype() != first->dtype()) {
      return false;
    }
  }
  return true;
}

template <typename Container>
std::variant<Tensor, IndexedSlices, Container> regroup_impl(const Container& values) {
  if (!all_same(values.values())) return values;
  const Value& v = values.values().front();
  if (const auto* t = std::get_if<Tensor>(&v)) return *t;
  return std::get<IndexedSlices>(v);
}

}  // namespace

DistributedValues::DistributedValues(const char* class_name, std::vector<std::string> devices,
                                     std::vector<Value> values)
    : class_name_(class_name), devices_(std::move(devices)), values_(std::move(values)) {
  if (devices_.size() != values_.size()) {
    detail::throw_invalid(class_name_, "{} devices for {} values", devices_.size(), values_.size());
  }
  std::vector<DeviceName> parsed;
  for (size_t i = 0; i < devices_.size(); ++i) {
    const std::optional<DeviceName> d = DeviceName::try_parse(devices_[i]);
    if (!d || !d->type || !d->id) {
      detail::throw_invalid(class_name_,
                            "device '{}' of component {} is not a device name with a type and "
                            "an id (e.g. /job:localhost/replica:0/task:0/device:CPU:0)",
                            devices_[i], i);
    }
    for (size_t j = 0; j < parsed.size(); ++j) {
      if (parsed[j] == *d) {
        detail::throw_invalid(class_name_, "components {} and {} are both on device '{}'", j, i,
                              devices_[i]);
      }
    }
    parsed.push_back(*d);
    if (const auto* t = std::get_if<Tensor>(&values_[i]); t != nullptr && !t->defined()) {
      detail::throw_invalid(class_name_, "component {} on '{}' is a null tensor", i, devices_[i]);
    }
  }
}

const Value& DistributedValues::value(int i) const {
  if (i < 0 || i >= size()) {
    detail::throw_error(ErrorCode::kOutOfRange, class_name_, "component {} of {}", i, size());
  }
  return values_[static_cast<size_t>(i)];
}

const Tensor& DistributedValues::tensor(int i) const {
  const Value& v = value(i);
  if (const auto* t = std::get_if<Tensor>(&v)) return *t;
  detail::throw_invalid(class_name_, "component {} on '{}' is an IndexedSlices, not a tensor", i,
                        devices_[static_cast<size_t>(i)]);
}

const IndexedSlices& DistributedValues::indexed_slices(int i) const {
  const Value& v = value(i);
  if (const auto* s = std::get_if<IndexedSlices>(&v)) return *s;
  detail::throw_invalid(class_name_, "component {} on '{}' is a dense tensor, not IndexedSlices", i,
                        devices_[static_cast<size_t>(i)]);
}

bool DistributedValues::has_indexed_slices() const {
  for (const Value& v : values_) {
    if (std::holds_alternative<IndexedSlices>(v)) return true;
  }
  return false;
}

std::string DistributedValues::to_string() const {
  std::ostringstream out;
  out << class_name_ << ":{";
  for (size_t i = 0; i < values_.size(); ++i) {
    out << "\n  " << i << ": " << devices_[i] << ": ";
    if (const auto* t = std::get_if<Tensor>(&values_[i])) {
      out << t->to_string();
    } else {
      out << std::get<IndexedSlices>(values_[i]).to_string();
    }
  }
  out << (values_.empty() ? "}" : "\n}");
  return out.str();
}

PerReplica::PerReplica(std::vector<std::string> devices, std::vector<Value> values)
    : DistributedValues("PerReplica", std::move(devices), std::move(values)) {}

Mirrored::Mirrored(std::vector<std::string> devices, std::vector<Value> values)
    : DistributedValues("Mirrored", std::move(devices), std::move(values)) {}

std::variant<Tensor, IndexedSlices, Mirrored> regroup(const Mirrored& values) {
  return regroup_impl(values);
}

std::variant<Tensor, IndexedSlices, PerReplica> regroup(const PerReplica& values) {
  return regroup_impl(values);
}

PerReplica make_tensor_into_per_replica(Value value, std::string_view device) {
  if (device.empty()) {
    detail::throw_invalid("CrossDeviceOps",
                          "Cannot convert `input_tensor` to a `PerReplica` object because it "
                          "doesn't have device set.");
  }
  return PerReplica({std::string(device)}, {std::move(value)});
}

}  // namespace tessel
