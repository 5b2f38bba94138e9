// Internal: communicator groups per device set, and the multi-worker rendezvous.
#include "distribute/group_cache.h"

#include <algorithm>
#include <condition_variable>
#include <tuple>

#include "core/errors.h"
#include "tessel/core/device_name.h"

namespace tessel::detail {
namespace {

constexpr std::string_view kComponent = "CollectiveAllReduce";

using OrderKey = std::tuple<std::string, int, int, std::string, int, std::string>;

OrderKey order_key(const std::string& name) {
  const std::optional<DeviceName> d = DeviceName::try_parse(name);
  if (!d) return {"", 0, 0, "", 0, name};
  return {d->job.value_or(""),  d->replica.value_or(0), d->task.value_or(0),
          d->type.value_or(""), d->id.value_or(0),      name};
}

std::shared_ptr<CommGroup> make_group(std::vector<std::string> members) {
  auto group = std::make_shared<CommGroup>();
  group->members = rank_order(std::move(members));
  group->comms =
      make_in_process_communicators(static_cast<int>(group->members.size()), group->members);
  return group;
}

// One pending multi-worker group.
struct Rendezvous {
  std::vector<std::string> members;  // joined so far
  std::shared_ptr<CommGroup> group;  // set when complete
};

struct Registry {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::pair<int64_t, int>, std::shared_ptr<Rendezvous>> pending;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: joins may run during exit
  return *r;
}

}  // namespace

Communicator& CommGroup::at(const std::string& device) const {
  const int r = rank_of(device);
  if (r < 0) throw_error(ErrorCode::kInternal, kComponent, "{} is not in the group", device);
  return *comms[static_cast<size_t>(r)];
}

int CommGroup::rank_of(const std::string& device) const {
  for (size_t r = 0; r < members.size(); ++r) {
    if (members[r] == device) return static_cast<int>(r);
  }
  return -1;
}

void CommGroup::abort(const std::string& reason) const {
  if (!comms.empty()) comms.front()->abort(reason);
}

std::vector<std::string> rank_order(std::vector<std::string> devices) {
  std::sort(devices.begin(), devices.end(),
            [](const std::string& a, const std::string& b) { return order_key(a) < order_key(b); });
  return devices;
}

std::vector<std::string> GroupCache::key_of(const std::vector<Device*>& devices) {
  std::vector<std::string> names;
  for (const Device* d : devices) names.push_back(d->name());
  return rank_order(std::move(names));
}

int64_t GroupCache::group_key(const std::vector<Device*>& devices) {
  const auto key = key_of(devices);
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = keys_.try_emplace(key, next_key_);
  if (inserted) ++next_key_;
  return it->second;
}

std::shared_ptr<CommGroup> GroupCache::get(const std::vector<Device*>& devices, int group_size,
                                           std::chrono::steady_clock::time_point deadline) {
  const auto key = key_of(devices);
  const int64_t gkey = group_key(devices);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = groups_.find(key);
    if (it != groups_.end()) return it->second;
  }
  std::shared_ptr<CommGroup> group = group_size <= static_cast<int>(key.size())
                                         ? make_group(key)
                                         : join_group(gkey, group_size, key, deadline);
  std::lock_guard<std::mutex> lock(mu_);
  groups_[key] = group;
  return group;
}

void GroupCache::evict(const std::shared_ptr<CommGroup>& group) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = groups_.begin(); it != groups_.end(); ++it) {
    if (it->second == group) {
      groups_.erase(it);
      return;
    }
  }
}

std::shared_ptr<CommGroup> join_group(int64_t group_key, int group_size,
                                      const std::vector<std::string>& devices,
                                      std::chrono::steady_clock::time_point deadline) {
  Registry& reg = registry();
  std::unique_lock<std::mutex> lock(reg.mu);
  std::shared_ptr<Rendezvous>& slot = reg.pending[{group_key, group_size}];
  if (!slot) slot = std::make_shared<Rendezvous>();
  std::shared_ptr<Rendezvous> rv = slot;
  for (const std::string& d : devices) {
    if (std::find(rv->members.begin(), rv->members.end(), d) != rv->members.end()) {
      throw_invalid(kComponent, "group key {}: device {} joined twice", group_key, d);
    }
  }
  if (rv->members.size() + devices.size() > static_cast<size_t>(group_size)) {
    throw_invalid(kComponent, "group key {}: group_size is {} but {} devices joined: [{}], [{}]",
                  group_key, group_size, rv->members.size() + devices.size(),
                  fmt::join(rv->members, ", "), fmt::join(devices, ", "));
  }
  rv->members.insert(rv->members.end(), devices.begin(), devices.end());
  if (rv->members.size() == static_cast<size_t>(group_size)) {
    rv->group = make_group(rv->members);
    reg.pending.erase({group_key, group_size});
    reg.cv.notify_all();
    return rv->group;
  }
  reg.cv.wait_until(lock, deadline, [&] { return rv->group != nullptr; });
  if (rv->group) return rv->group;
  // Timed out: leave the rendezvous so that a later attempt starts clean.
  const std::vector<std::string> joined = rv->members;
  std::erase_if(rv->members, [&](const std::string& m) {
    return std::find(devices.begin(), devices.end(), m) != devices.end();
  });
  if (rv->members.empty()) {
    auto it = reg.pending.find({group_key, group_size});
    if (it != reg.pending.end() && it->second == rv) reg.pending.erase(it);
  }
  throw_error(ErrorCode::kDeadlineExceeded, kComponent,
              "group key {}: only {} of {} devices joined before the deadline: [{}]", group_key,
              joined.size(), group_size, fmt::join(joined, ", "));
}

}  // namespace tessel::detail
