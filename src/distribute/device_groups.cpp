// Internal: the groups of cross-device ops, and the multi-worker rendezvous (device_groups.h).
#include "distribute/device_groups.h"

#include <algorithm>
#include <condition_variable>
#include <tuple>

#include "comm/group_service.h"
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

// A multi-worker group spans runtimes, so no one runtime's service makes it.
std::shared_ptr<CommGroup> make_group(std::vector<std::string> members) {
  return make_in_process_group(rank_order(std::move(members)));
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

// The multi-worker group of a program running as several clients (processes under mpirun, or
// the clients of a set cluster): every client is one worker with devices named as this one's
// but for the task (the client id), TF's MultiWorkerMirroredStrategy model (each worker has the
// same local devices). Joined through the runtime's cluster, so the group runs over the
// transports DTensor's meshes use (shared memory within a host, MPI across hosts).
std::shared_ptr<CommGroup> join_clients(GroupService& service, const std::vector<std::string>& local,
                                        int group_size,
                                        std::chrono::steady_clock::time_point deadline) {
  const int clients = service.num_clients();
  const int workers = group_size / static_cast<int>(local.size());
  if (workers != clients) {
    throw_invalid(kComponent,
                  "group_size {} over {} devices per worker makes {} workers, but this program "
                  "runs as {} clients (processes); with several clients every client is one "
                  "worker: group_size must be {}",
                  group_size, local.size(), workers, clients,
                  clients * static_cast<int>(local.size()));
  }
  std::vector<std::string> members;
  for (int c = 0; c < clients; ++c) {
    for (const std::string& name : local) {
      DeviceName d = DeviceName::parse(name);
      d.task = c;
      members.push_back(d.to_string());
    }
  }
  members = rank_order(std::move(members));
  std::vector<int> owners;
  for (const std::string& m : members) owners.push_back(DeviceName::parse(m).task.value_or(0));
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return service.join(members, owners, std::max(left, std::chrono::milliseconds(1)));
}

}  // namespace

std::vector<std::string> rank_order(std::vector<std::string> devices) {
  std::sort(devices.begin(), devices.end(),
            [](const std::string& a, const std::string& b) { return order_key(a) < order_key(b); });
  return devices;
}

std::vector<std::string> DeviceGroups::key_of(const std::vector<Device*>& devices) {
  std::vector<std::string> names;
  for (const Device* d : devices) names.push_back(d->name());
  return rank_order(std::move(names));
}

int64_t DeviceGroups::group_key(const std::vector<Device*>& devices) {
  const auto key = key_of(devices);
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = keys_.try_emplace(key, next_key_);
  if (inserted) ++next_key_;
  return it->second;
}

std::shared_ptr<CommGroup> DeviceGroups::get(const std::vector<Device*>& devices, int group_size,
                                             std::chrono::steady_clock::time_point deadline) {
  const auto key = key_of(devices);
  const int64_t gkey = group_key(devices);  // numbered on first use, local sets included
  const std::shared_ptr<GroupService> service = GroupService::of(runtime_);
  if (group_size <= static_cast<int>(key.size())) return service->group(key);
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = joined_.find(key);
    if (it != joined_.end()) {
      if (std::shared_ptr<CommGroup> group = service->find(it->second)) return group;
    }
  }
  std::shared_ptr<CommGroup> group;
  if (service->num_clients() > 1) {
    group = join_clients(*service, key, group_size, deadline);
  } else {
    group = join_group(gkey, group_size, key, deadline);
  }
  service->adopt(group);
  std::lock_guard<std::mutex> lock(mu_);
  joined_[key] = group->members;
  return group;
}

void DeviceGroups::evict(const std::shared_ptr<CommGroup>& group) {
  GroupService::of(runtime_)->evict(group);
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
