// CollectiveKeys: TF's group and instance key sequences.
#include "tessel/distribute/collective_keys.h"

#include <fmt/format.h>

#include "core/errors.h"

namespace tessel {

CollectiveKeys::CollectiveKeys(int64_t group_key_start) : next_group_key_(group_key_start) {}

CollectiveKeys::CollectiveKeys(const CollectiveKeys& other) {
  std::lock_guard lock(other.mu_);
  next_group_key_ = other.next_group_key_;
  known_groups_ = other.known_groups_;
  instance_keys_ = other.instance_keys_;
}

int64_t CollectiveKeys::get_group_key(const std::vector<std::string>& devices) {
  const std::string joined = fmt::format("{}", fmt::join(devices, ","));
  std::lock_guard lock(mu_);
  const auto known = known_groups_.find(joined);
  if (known != known_groups_.end()) return known->second;
  const int64_t key = next_group_key_++;
  auto& counters = instance_keys_[key];
  for (const auto& device : devices) counters[device] = kInstanceKeyStart;
  known_groups_.emplace(joined, key);
  return key;
}

int64_t CollectiveKeys::get_instance_key(int64_t group_key, const std::string& device) {
  std::lock_guard lock(mu_);
  const auto group = instance_keys_.find(group_key);
  if (group == instance_keys_.end()) {
    detail::throw_invalid("CollectiveKeys", "Group {} is not found.", group_key);
  }
  const auto counter = group->second.find(device);
  if (counter == group->second.end()) {
    detail::throw_invalid("CollectiveKeys", "Device {} is not present in group {}", device,
                          group_key);
  }
  return counter->second++;
}

}  // namespace tessel
