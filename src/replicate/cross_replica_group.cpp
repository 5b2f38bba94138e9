// Internal: communicators, collective order checks and failures of one replicate() call (see
// cross_replica_group.h).
#include "replicate/cross_replica_group.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/errors.h"

namespace tessel::detail {
namespace {

constexpr const char* kComponent = "ReplicaContext";

std::string collectives(uint64_t n) {
  return fmt::format("{} cross-replica collective{}", n, n == 1 ? "" : "s");
}

}  // namespace

CrossReplicaGroup::CrossReplicaGroup(std::shared_ptr<GroupService> service,
                                     const ReplicaPlacement& placement,
                                     std::chrono::milliseconds timeout, Clock::time_point deadline)
    : num_replicas_(static_cast<int>(placement.devices.size())),
      num_cores_(placement.devices.empty() ? 0 : static_cast<int>(placement.devices[0].size())),
      timeout_(timeout),
      deadline_(deadline),
      devices_(placement.devices),
      service_(std::move(service)),
      started_(placement.devices.size(), 0),
      finished_(placement.devices.size(), false),
      doing_(placement.devices.size(), "starting"),
      failed_(placement.devices.size(), false) {
  for (int r = 0; r < num_replicas_; ++r) {
    local_.push_back(placement.is_local(r));
    if (local_.back()) ++num_local_;
  }
  spans_clients_ = num_local_ < num_replicas_;
  if (num_local_ == 0) return;  // no replica here: no collective to take part in
  for (int c = 0; c < num_cores_; ++c) {
    std::vector<std::string> names;
    for (int r = 0; r < num_replicas_; ++r) {
      names.push_back(fmt::format("replica {} ({})", r, placement.names[r][c]));
    }
    if (spans_clients_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
      groups_.push_back(service_->join(names, placement.owner,
                                       std::max(left, std::chrono::milliseconds(1))));
    } else {
      groups_.push_back(service_->take(names));
    }
    // Nobody else uses a taken group, so its scratch may be set here, before any launch.
    for (int r = 0; r < num_replicas_; ++r) {
      if (!local_[static_cast<size_t>(r)]) continue;
      groups_.back()->comms[static_cast<size_t>(r)]->set_scratch_allocator(
          devices_[r][c]->allocator());
    }
  }
}

CrossReplicaGroup::~CrossReplicaGroup() {
  if (aborted_ || first_failure() || spans_clients_) return;  // dropped: evicted (or per call)
  for (auto& group : groups_) service_->give_back(std::move(group));
}

CrossReplicaGroup::Clock::time_point CrossReplicaGroup::launch_deadline() const {
  if (!spans_clients_) return deadline_;
  return deadline_ + std::clamp(timeout_ / 40, std::chrono::milliseconds(5),
                                std::chrono::milliseconds(500));
}

CollectiveOptions CrossReplicaGroup::collective_options() const {
  CollectiveOptions options;
  options.timeout = timeout_;
  options.deadline = deadline_;
  return options;
}

void CrossReplicaGroup::note(int replica, std::string doing) {
  std::lock_guard<std::mutex> lock(mu_);
  doing_[static_cast<size_t>(replica)] = std::move(doing);
}

std::string CrossReplicaGroup::doing(int replica) const {
  std::lock_guard<std::mutex> lock(mu_);
  return doing_[static_cast<size_t>(replica)];
}

std::string CrossReplicaGroup::mismatch(int replica, uint64_t n, const std::string& signature) {
  for (int f = 0; f < num_replicas_; ++f) {
    if (f != replica && finished_[f] && started_[f] <= n) {
      return fmt::format(
          "{} is collective #{} of replica {}, but replica {} returned from its computation "
          "after {}: the collective can never complete",
          signature, n, replica, f, collectives(started_[f]));
    }
  }
  const auto slot = slots_.find(n);
  if (slot != slots_.end() && slot->second.signature != signature) {
    return fmt::format(
        "replicas called different collectives at position #{}: replica {} called {}, replica "
        "{} called {} (every replica must call the same collectives in the same order, with "
        "the same shape, dtype and layout)",
        n, slot->second.first_replica, slot->second.signature, replica, signature);
  }
  return "";
}

void CrossReplicaGroup::launch(int replica, const std::string& signature,
                               std::shared_ptr<StreamLaunch> part) {
  const auto r = static_cast<size_t>(replica);
  std::unique_lock<std::mutex> lock(mu_);
  if (aborted_) throw Error(ErrorCode::kAborted, kComponent, abort_reason_);
  const uint64_t n = started_[r]++;
  const std::string error = mismatch(replica, n, signature);
  if (!error.empty()) {
    lock.unlock();
    fail(replica, ErrorCode::kFailedPrecondition, error);
  }
  Slot& slot = slots_[n];
  if (slot.arrived == 0) {
    slot.first_replica = replica;
    slot.signature = signature;
    slot.parts.resize(static_cast<size_t>(num_replicas_));
  }
  slot.parts[r] = std::move(part);
  if (++slot.arrived == num_local_) {
    // The last to arrive: every part goes to the streams together.
    std::vector<std::shared_ptr<StreamLaunch>> parts = std::move(slot.parts);
    slots_.erase(n);
    launched_ = n + 1;
    doing_[r] = fmt::format("in collective #{} ({})", n, signature);
    lock.unlock();
    arrived_.notify_all();
    std::vector<StreamLaunch*> launches;
    for (const auto& p : parts) {
      if (p) launches.push_back(p.get());  // null: a replica of another client
    }
    StreamLaunch::enqueue_together(launches);
    return;
  }
  doing_[r] = fmt::format("waiting in collective #{} ({}) for the other replicas", n, signature);
  arrived_.wait_until(lock, deadline_, [&] { return launched_ > n || aborted_; });
  if (launched_ > n) {
    doing_[r] = fmt::format("in collective #{} ({})", n, signature);
    return;
  }
  if (aborted_) throw Error(ErrorCode::kAborted, kComponent, abort_reason_);
  // The deadline: the first replica that has not arrived is the late one.
  int late = 0;
  while (late < num_replicas_ &&
         (!local_[static_cast<size_t>(late)] || slots_[n].parts[static_cast<size_t>(late)])) {
    ++late;
  }
  const std::string message = fmt::format(
      "replica {} did not reach collective #{} ({}) within the call's {} ms: it is {}; replica {} "
      "waited for it",
      late, n, signature, timeout_.count(), doing_[static_cast<size_t>(late)], replica);
  lock.unlock();
  fail(replica, ErrorCode::kDeadlineExceeded, message, late);
}

void CrossReplicaGroup::finished(int replica) {
  std::string error;
  int waiting = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_[static_cast<size_t>(replica)] = true;
    doing_[static_cast<size_t>(replica)] = "finished";
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

void CrossReplicaGroup::fail(int replica, ErrorCode code, const std::string& message, int culprit) {
  // The culprit's failure first: it is the root cause replicate() reports.
  if (culprit >= 0) record_failure(culprit, code, fmt::format("{}: {}", kComponent, message));
  record_failure(replica, code, fmt::format("{}: {}", kComponent, message));
  abort(message);
  throw Error(code, kComponent, message);
}

void CrossReplicaGroup::abort(const std::string& reason) {
  std::map<uint64_t, Slot> parked;  // parts nobody will enqueue now; dropped outside the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_) abort_reason_ = reason;
    aborted_ = true;
    parked.swap(slots_);
  }
  arrived_.notify_all();
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
