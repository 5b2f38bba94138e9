// CollectiveKeys: the group and instance keys of collectives (TF's cross_device_utils.CollectiveKeys).
//
// A group key names a list of devices that run collectives together: the first list asked for
// gets group_key_start, each new list the next key, and the same list (joined in its order, as
// TF joins it with ',') always the same key. An instance key names one collective of a group on
// one device: each (group, device) counts up from 100 (TF's INSTANCE_KEY_START_NUMBER), one per
// call.
//
//   CollectiveKeys keys;
//   keys.get_group_key({"/cpu:0", "/cpu:1"}) == 1;  keys.get_group_key({"/cpu:1"}) == 2
//   keys.get_instance_key(1, "/cpu:0") == 100;      keys.get_instance_key(1, "/cpu:0") == 101
//
// Errors (kInvalidArgument, TF's ValueError texts): "Group <k> is not found." and "Device <d> is
// not present in group <k>".
//
// Thread safety: every method may be called from any thread (TF: "This class is thread safe").
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace tessel {

class CollectiveKeys {
 public:
  static constexpr int64_t kInstanceKeyStart = 100;

  explicit CollectiveKeys(int64_t group_key_start = 1);
  CollectiveKeys(const CollectiveKeys& other);  // TF's __deepcopy__: keys and counters
  CollectiveKeys& operator=(const CollectiveKeys&) = delete;

  int64_t get_group_key(const std::vector<std::string>& devices);
  int64_t get_instance_key(int64_t group_key, const std::string& device);

 private:
  mutable std::mutex mu_;
  int64_t next_group_key_;
  std::map<std::string, int64_t> known_groups_;                    // joined devices -> key
  std::map<int64_t, std::map<std::string, int64_t>> instance_keys_;  // key -> device -> next
};

}  // namespace tessel
