#include "tessel/comm/mesh_groups.h"

#include <algorithm>
#include <set>

#include "comm/comm_group.h"
#include "core/errors.h"
#include "tessel/core/device_name.h"

namespace tessel {
namespace {

constexpr std::string_view kGroups = "CommunicatorPool";

// Indices of `dims` in the mesh, validated.
std::vector<bool> reduced_mask(const Mesh& mesh, const std::vector<std::string>& dims) {
  std::vector<bool> reduced(static_cast<size_t>(mesh.rank()), false);
  for (const std::string& d : dims) {
    if (!mesh.contains_dim(d)) {
      detail::throw_invalid(kGroups, "mesh dimension {} is not in mesh |{}|", d,
                            fmt::join(mesh.dim_names(), ","));
    }
    const size_t i = static_cast<size_t>(mesh.dim_index(d));
    if (reduced[i]) detail::throw_invalid(kGroups, "mesh dimension {} is listed twice", d);
    reduced[i] = true;
  }
  return reduced;
}

// The group key of an offset: its coordinates on the kept dimensions, row-major.
int64_t kept_index(const Mesh& mesh, const std::vector<bool>& reduced, int64_t offset) {
  const std::vector<int64_t> loc = mesh.device_location(offset);
  int64_t key = 0;
  for (size_t i = 0; i < loc.size(); ++i) {
    if (!reduced[i]) key = key * mesh.dims()[i].size + loc[i];
  }
  return key;
}

std::string member_name(const Mesh& mesh, int64_t offset) {
  const int64_t id = mesh.global_device_ids()[static_cast<size_t>(offset)];
  if (!mesh.global_devices().empty()) return mesh.global_devices()[static_cast<size_t>(offset)];
  const auto& ids = mesh.local_device_ids();
  const auto it = std::find(ids.begin(), ids.end(), id);
  if (it != ids.end()) return mesh.local_devices()[static_cast<size_t>(it - ids.begin())];
  return fmt::format("device {}", id);
}

}  // namespace

std::vector<std::vector<int64_t>> collective_groups(const Mesh& mesh,
                                                    const std::vector<std::string>& dims) {
  const std::vector<bool> reduced = reduced_mask(mesh, dims);
  int64_t num_groups = 1;
  for (size_t i = 0; i < reduced.size(); ++i) {
    if (!reduced[i]) num_groups *= mesh.dims()[i].size;
  }
  std::vector<std::vector<int64_t>> groups(static_cast<size_t>(num_groups));
  for (int64_t offset = 0; offset < mesh.size(); ++offset) {
    groups[static_cast<size_t>(kept_index(mesh, reduced, offset))].push_back(offset);
  }
  return groups;
}

GroupPosition group_position(const Mesh& mesh, const std::vector<std::string>& dims,
                             int64_t offset) {
  const std::vector<bool> reduced = reduced_mask(mesh, dims);
  if (offset < 0 || offset >= mesh.size()) {
    detail::throw_invalid(kGroups, "device offset {} is outside the mesh's {} devices", offset,
                          mesh.size());
  }
  GroupPosition p;
  p.group = static_cast<int>(kept_index(mesh, reduced, offset));
  for (int64_t o = 0; o < mesh.size(); ++o) {
    if (kept_index(mesh, reduced, o) == p.group) {
      if (o == offset) p.rank = static_cast<int>(p.members.size());
      p.members.push_back(o);
    }
  }
  return p;
}

namespace {

// A source making a new group of its own by `factory` (null: in-process) for every call.
CommunicatorPool::GroupSource own_groups(CommunicatorPool::GroupFactory factory) {
  if (!factory) factory = make_in_process_communicators;
  return [factory = std::move(factory)](const std::vector<std::string>& names) {
    return std::make_shared<detail::CommGroup>(names,
                                               factory(static_cast<int>(names.size()), names));
  };
}

}  // namespace

CommunicatorPool::CommunicatorPool() : CommunicatorPool(GroupFactory()) {}

CommunicatorPool::CommunicatorPool(GroupFactory factory)
    : source_(own_groups(std::move(factory))) {}

CommunicatorPool::CommunicatorPool(std::shared_ptr<Cluster> cluster, GroupFactory factory)
    : source_(own_groups(std::move(factory))), cluster_(std::move(cluster)) {}

CommunicatorPool::CommunicatorPool(std::shared_ptr<Cluster> cluster, GroupSource source)
    : source_(std::move(source)), cluster_(std::move(cluster)) {}

Communicator& CommunicatorPool::get(const Mesh& mesh, const std::vector<std::string>& dims,
                                    int64_t offset, std::chrono::milliseconds join_timeout) {
  const GroupPosition p = group_position(mesh, dims, offset);
  std::vector<std::string> sorted = dims;
  std::sort(sorted.begin(), sorted.end());
  const Key key{mesh.global_fingerprint(), sorted, p.group};
  std::lock_guard<std::mutex> lock(mu_);
  const int owner = owners(mesh, std::get<0>(key))[static_cast<size_t>(offset)];
  if (owner != client_id()) {
    detail::throw_invalid(kGroups, "device {} (mesh offset {}) belongs to client {}, not to client {}",
                          member_name(mesh, offset), offset, owner, client_id());
  }
  auto it = groups_.find(key);
  if (it == groups_.end()) {
    create(key, mesh, p.members, join_timeout);
    it = groups_.find(key);
  }
  return *it->second->comms[static_cast<size_t>(p.rank)];
}

int CommunicatorPool::client_id() const { return cluster_ ? cluster_->client_id() : 0; }

const std::vector<int>& CommunicatorPool::owners(const Mesh& mesh, uint64_t fingerprint) {
  auto [it, fresh] = owners_.try_emplace(fingerprint);
  if (fresh) {
    for (int64_t o = 0; o < mesh.size(); ++o) {
      const auto name = cluster_ ? DeviceName::try_parse(member_name(mesh, o)) : std::nullopt;
      it->second.push_back(name && name->task ? *name->task : client_id());
    }
  }
  return it->second;
}

void CommunicatorPool::create(const Key& key, const Mesh& mesh, const std::vector<int64_t>& members,
                              std::chrono::milliseconds join_timeout) {
  auto names_of = [&](const std::vector<int64_t>& offsets) {
    std::vector<std::string> names;
    for (int64_t o : offsets) names.push_back(member_name(mesh, o));
    return names;
  };
  const std::vector<int>& owner = owners(mesh, std::get<0>(key));
  auto owners_of = [&](const std::vector<int64_t>& offsets) {
    std::vector<int> of;
    for (int64_t o : offsets) of.push_back(owner[static_cast<size_t>(o)]);
    return of;
  };
  const std::vector<std::string> names = names_of(members);
  const std::vector<int> member_owners = owners_of(members);
  const int me = client_id();
  const bool spans = std::any_of(member_owners.begin(), member_owners.end(),
                                 [me](int o) { return o != me; });
  if (!spans) {
    groups_.emplace(key, source_(names));
    return;
  }
  // Join every group of (mesh, dims) holding a device of this client, in group order.
  const std::vector<std::vector<int64_t>> groups = collective_groups(mesh, std::get<1>(key));
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::vector<std::string> group_names = names_of(groups[g]);
    const std::vector<int> group_owners = owners_of(groups[g]);
    if (std::find(group_owners.begin(), group_owners.end(), me) == group_owners.end()) continue;
    const Key group_key{std::get<0>(key), std::get<1>(key), static_cast<int>(g)};
    if (groups_.count(group_key) != 0) continue;
    groups_.emplace(group_key,
                    std::make_shared<detail::CommGroup>(
                        group_names, cluster_->join(group_names, group_owners, join_timeout)));
  }
}

size_t CommunicatorPool::num_groups() const {
  std::lock_guard<std::mutex> lock(mu_);
  return groups_.size();
}

std::vector<std::shared_ptr<detail::CommGroup>> CommunicatorPool::groups() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<detail::CommGroup>> out;
  for (const auto& [key, group] : groups_) out.push_back(group);
  return out;
}

}  // namespace tessel
