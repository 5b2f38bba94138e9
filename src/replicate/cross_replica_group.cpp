// Internal: communicators, collective order checks and failures of one replicate() call (see
// cross_replica_group.h).
#include "replicate/cross_replica_group.h"

#include <fmt/format.h>

#include "core/errors.h"

namespace tessel::detail {
namespace {

constexpr const char* kComponent = "ReplicaContext";

std::string collectives(uint64_t n) {
  return fmt::format("{} cross-replica collective{}", n, n == 1 ? "" : "s");
}

}  // namespace

CrossReplicaGroup::CrossReplicaGroup(std::shared_ptr<GroupService> service,
                                     const std::vector<std::vector<Device*>>& devices,
                                     std::chrono::milliseconds timeout)
    : num_replicas_(static_cast<int>(devices.size())),
      num_cores_(devices.empty() ? 0 : static_cast<int>(devices[0].size())),
      timeout_(timeout),
      devices_(devices),
      service_(std::move(service)),
      started_(devices.size(), 0),
      finished_(devices.size(), false),
      failed_(devices.size(), false) {
  for (int c = 0; c < num_cores_; ++c) {
    std::vector<std::string> names;
    for (int r = 0; r < num_replicas_; ++r) {
      names.push_back(fmt::format("replica {} ({})", r, devices_[r][c]->name()));
    }
    groups_.push_back(service_->take(names));
    // Nobody else uses a taken group, so its scratch may be set here, before any launch.
    for (int r = 0; r < num_replicas_; ++r) {
      groups_.back()->comms[static_cast<size_t>(r)]->set_scratch_allocator(
          devices_[r][c]->allocator());
    }
  }
}

CrossReplicaGroup::~CrossReplicaGroup() {
  if (aborted_.load() || first_failure()) return;  // dropped: evicted
  for (auto& group : groups_) service_->give_back(std::move(group));
}

void CrossReplicaGroup::enter(int replica, const std::string& signature) {
  std::string error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t n = started_[static_cast<size_t>(replica)]++;
    for (int f = 0; f < num_replicas_ && error.empty(); ++f) {
      if (f != replica && finished_[f] && started_[f] <= n) {
        error = fmt::format(
            "{} is collective #{} of replica {}, but replica {} returned from its computation "
            "after {}: the collective can never complete",
            signature, n, replica, f, collectives(started_[f]));
      }
    }
    if (error.empty()) {
      Slot& slot = slots_[n];
      if (slot.arrived == 0) {
        slot.first_replica = replica;
        slot.signature = signature;
      } else if (slot.signature != signature) {
        error = fmt::format(
            "replicas called different collectives at position #{}: replica {} called {}, replica "
            "{} called {} (every replica must call the same collectives in the same order, with "
            "the same shape, dtype and layout)",
            n, slot.first_replica, slot.signature, replica, signature);
      }
      if (++slot.arrived == num_replicas_) slots_.erase(n);
    }
  }
  if (!error.empty()) fail(replica, error);
}

void CrossReplicaGroup::finished(int replica) {
  std::string error;
  int waiting = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_[static_cast<size_t>(replica)] = true;
    const uint64_t done = started_[static_cast<size_t>(replica)];
    for (int s = 0; s < num_replicas_; ++s) {
      if (s == replica || finished_[s] || started_[s] <= done) continue;
      const auto slot = slots_.find(done);
      waiting = s;
      error = fmt::format(
          "replica {} waits in collective #{} ({}), but replica {} returned from its computation "
          "after {}: the collective can never complete",
          s, done, slot == slots_.end() ? std::string("?") : slot->second.signature, replica,
          collectives(done));
      break;
    }
  }
  if (waiting < 0) return;
  record_failure(waiting, ErrorCode::kFailedPrecondition, fmt::format("{}: {}", kComponent, error));
  abort(error);
}

void CrossReplicaGroup::fail(int replica, const std::string& message) {
  record_failure(replica, ErrorCode::kFailedPrecondition,
                 fmt::format("{}: {}", kComponent, message));
  abort(message);
  throw Error(ErrorCode::kFailedPrecondition, kComponent, message);
}

void CrossReplicaGroup::abort(const std::string& reason) {
  aborted_.store(true);
  for (const auto& group : groups_) group->abort(reason);
}

void CrossReplicaGroup::record_failure(int replica, ErrorCode code, const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_[static_cast<size_t>(replica)]) return;
  failed_[static_cast<size_t>(replica)] = true;
  failures_.push_back({replica, code, what});
}

std::optional<CrossReplicaGroup::Failure> CrossReplicaGroup::first_failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Failure& f : failures_) {
    if (f.code != ErrorCode::kAborted) return f;
  }
  if (failures_.empty()) return std::nullopt;
  return failures_.front();
}

}  // namespace tessel::detail
