// Internal: a shared communicator group (see comm_group.h).
#include "comm/comm_group.h"

#include <fmt/ranges.h>

#include <atomic>

#include "core/errors.h"

namespace tessel::detail {
namespace {

std::atomic<int64_t> g_live{0};

}  // namespace

CommGroup::CommGroup(std::vector<std::string> members_in,
                     std::vector<std::unique_ptr<Communicator>> comms_in)
    : members(std::move(members_in)), comms(std::move(comms_in)) {
  if (members.size() != comms.size()) {
    throw_error(ErrorCode::kInternal, "CommGroup", "{} members [{}] but {} communicators",
                members.size(), fmt::join(members, ", "), comms.size());
  }
  g_live.fetch_add(1, std::memory_order_relaxed);
}

CommGroup::~CommGroup() { g_live.fetch_sub(1, std::memory_order_relaxed); }

Communicator& CommGroup::at(const std::string& name) const {
  const int r = rank_of(name);
  if (r < 0 || !comms[static_cast<size_t>(r)]) {
    throw_error(ErrorCode::kInternal, "CommGroup",
                "{} is not a member of this client in group [{}]", name, fmt::join(members, ", "));
  }
  return *comms[static_cast<size_t>(r)];
}

int CommGroup::rank_of(const std::string& name) const {
  for (size_t r = 0; r < members.size(); ++r) {
    if (members[r] == name) return static_cast<int>(r);
  }
  return -1;
}

void CommGroup::abort(const std::string& reason) const {
  for (const auto& c : comms) {
    if (c) {
      c->abort(reason);  // aborts the whole group
      return;
    }
  }
}

int64_t CommGroup::num_live() { return g_live.load(std::memory_order_relaxed); }

std::shared_ptr<CommGroup> make_in_process_group(std::vector<std::string> members) {
  auto comms = make_in_process_communicators(static_cast<int>(members.size()), members);
  return std::make_shared<CommGroup>(std::move(members), std::move(comms));
}

}  // namespace tessel::detail
