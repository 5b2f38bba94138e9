// SystemCoordinator: steps 2 and 4 and the shutdown, on task 0, with the hosts' state learned
// from their reports.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <utility>

#include "core/errors.h"
#include "core/inert_attribute.h"
#include "system/system_messages.h"
#include "tessel/system/system.h"

namespace tessel {

// What the coordinator knows of one host, from its reports. A host's epoch counts its
// disconnects, each reported, so its step-1 reports carry epochs 1, 2, 3, ... in order. The
// coordinator "consumes" step-1 reports: a configure (or a failed start) uses up every report
// so far, a shutdown the first one after its configure. A step 1 is fresh while its epoch is
// above the consumed one; a later round's disconnect that arrives early is never lost.
struct SystemCoordinator::HostRecord {
  uint64_t latest = 0;       // epoch of the latest step-1 report
  uint64_t consumed = 0;     // epoch of the last step-1 report used up
  int device_count = 0;      // of the latest step-1 report
  bool initialized = false;  // a step-3 report arrived; its fields:
  uint64_t init_epoch = 0;   // the host's epoch when it ran step 3
  uint64_t generation = 0;   // of the configuration it used
  std::vector<int64_t> ids;

  bool fresh() const { return latest > consumed; }
  // Ran step 3 after the step 1 the configure used, and not step 1 since.
  bool ready() const { return initialized && init_epoch == consumed && !fresh(); }
};

namespace {

constexpr const char* kComponent = "SystemCoordinator";
using Clock = SystemChannel::Clock;

// "0.25 s", "20 s".
std::string seconds(std::chrono::milliseconds d) {
  return fmt::format("{:g} s", static_cast<double>(d.count()) / 1000.0);
}

void check_timeout(std::chrono::milliseconds timeout, const char* call) {
  if (timeout.count() < 0) {
    detail::throw_invalid(kComponent, "{}: the timeout must be >= 0; got {} ms", call,
                          timeout.count());
  }
}

// Input i of a lifecycle step: an integer scalar (rank 0: a device count) or vector (rank 1:
// device ids), `what` naming its values in the error.
void check_integer_input(const Tensor& t, size_t i, int rank, std::string_view what) {
  if (!t.defined()) detail::throw_invalid(kComponent, "Input {} is a null tensor", i);
  if (t.rank() != rank) {
    detail::throw_invalid(kComponent, "Input {} should be a {} but has {} dimensions", i,
                          rank == 0 ? "scalar" : "vector", t.rank());
  }
  if (t.dtype() != DType::kI32 && t.dtype() != DType::kI64) {
    detail::throw_invalid(kComponent, "Input {} has dtype {}; {} are integers", i,
                          dtype_name(t.dtype()), what);
  }
}

}  // namespace

SystemCoordinator::SystemCoordinator(const Host& host)
    : channel_(host.channel()), num_hosts_(host.channel()->num_hosts()) {
  if (host.task() != 0) {
    detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                        "the coordinator runs on task 0 (BR-102-02: configure and wait run on "
                        "worker 0); this host is task {}",
                        host.task());
  }
  hosts_.resize(static_cast<size_t>(num_hosts_));
}

SystemCoordinator::~SystemCoordinator() = default;

SystemState SystemCoordinator::state() const {
  std::lock_guard lock(mu_);
  return state_;
}

std::optional<HostConfiguration> SystemCoordinator::configuration() const {
  std::lock_guard lock(mu_);
  return config_;
}

uint64_t SystemCoordinator::host_epoch(int task) const {
  std::lock_guard lock(mu_);
  if (task < 0 || task >= num_hosts_) {
    detail::throw_error(ErrorCode::kOutOfRange, kComponent, "task {} is not one of the {} hosts",
                        task, num_hosts_);
  }
  return hosts_[static_cast<size_t>(task)].latest;
}

void SystemCoordinator::apply(const SystemChannel::Envelope& envelope) {
  const detail::HostReport report = detail::decode_host_report(envelope.message, envelope.task);
  HostRecord& record = hosts_[static_cast<size_t>(report.task)];
  if (report.kind == detail::HostReport::Kind::kDisconnected) {
    record.latest = report.epoch;
    record.device_count = report.device_count;
  } else {
    record.initialized = true;
    record.init_epoch = report.epoch;
    record.generation = report.generation;
    record.ids = report.ids;
  }
}

template <typename Done>
bool SystemCoordinator::drain_until(SystemChannel::Deadline deadline, Done done) {
  // First whatever has already arrived, so that records hold each host's latest report.
  while (auto envelope = channel_->receive_at_coordinator(Clock::now())) {
    apply(*envelope);
  }
  while (!done()) {
    auto envelope = channel_->receive_at_coordinator(deadline);
    if (!envelope) return done();
    apply(*envelope);
  }
  return true;
}

template <typename Pred>
std::vector<int> SystemCoordinator::tasks_where(Pred pred) const {
  std::vector<int> out;
  for (int t = 0; t < num_hosts_; ++t) {
    if (pred(hosts_[static_cast<size_t>(t)])) out.push_back(t);
  }
  return out;
}

void SystemCoordinator::fail(const Error& error, bool keep_configuration) {
  // The transaction rule: nothing is retried silently; every host starts again at step 1.
  state_ = SystemState::kFailed;
  failure_ = error.what();
  if (!keep_configuration) config_.reset();
  for (HostRecord& record : hosts_) record.consumed = record.latest;
  throw error;
}

std::vector<int> SystemCoordinator::gather_device_counts(std::chrono::milliseconds timeout) {
  check_timeout(timeout, "gather_device_counts");
  std::lock_guard lock(mu_);
  auto disconnected = [](const HostRecord& r) { return r.fresh(); };
  auto not_disconnected = [](const HostRecord& r) { return !r.fresh(); };
  const bool all =
      drain_until(Clock::now() + timeout, [&] { return tasks_where(not_disconnected).empty(); });
  if (!all) {
    fail(Error(ErrorCode::kDeadlineExceeded, kComponent,
               fmt::format("gather_device_counts: hosts [{}] did not run step 1 "
                           "(disconnect_host) within {}; disconnected: hosts [{}]",
                           fmt::join(tasks_where(not_disconnected), ", "), seconds(timeout),
                           fmt::join(tasks_where(disconnected), ", "))),
         /*keep_configuration=*/true);
  }
  std::vector<int> counts;
  for (const HostRecord& record : hosts_) counts.push_back(record.device_count);
  return counts;
}

void SystemCoordinator::check_configure_inputs(const std::vector<int>& counts,
                                               const ConfigureOptions& options) const {
  if (counts.empty()) {
    detail::throw_invalid(kComponent,
                          "configure_distributed_system needs one device count per host (N >= 1); "
                          "got none");
  }
  if (static_cast<int>(counts.size()) != num_hosts_) {
    detail::throw_invalid(kComponent,
                          "configure_distributed_system: got {} device counts for a system of {} "
                          "hosts",
                          counts.size(), num_hosts_);
  }
  for (int t = 0; t < num_hosts_; ++t) {
    if (counts[t] < 1) {
      detail::throw_invalid(kComponent, "Host {} has {} devices; every host needs at least one", t,
                            counts[t]);
    }
  }
  // TF: Internal "Host <i> has <x> TPU chips but host 0 has <y>".
  for (int t = 1; t < num_hosts_; ++t) {
    if (counts[t] != counts[0]) {
      detail::throw_error(ErrorCode::kInternal, kComponent,
                          "Host {} has {} devices but host 0 has {}", t, counts[t], counts[0]);
    }
  }
  if (options.topology) {
    const Topology& topology = *options.topology;
    if (topology.num_tasks() != num_hosts_) {
      detail::throw_invalid(kComponent, "the topology has {} tasks but the system has {} hosts",
                            topology.num_tasks(), num_hosts_);
    }
    if (topology.num_devices_per_task() != counts[0]) {
      std::vector<int> all(static_cast<size_t>(num_hosts_));
      for (int t = 0; t < num_hosts_; ++t) all[t] = t;
      detail::throw_invalid(kComponent,
                            "Hosts [{}] have {} devices each but the topology has {} per task",
                            fmt::join(all, ", "), counts[0], topology.num_devices_per_task());
    }
  }
}

HostConfiguration SystemCoordinator::configure_distributed_system(
    const std::vector<int>& host_device_counts, const ConfigureOptions& options) {
  std::lock_guard lock(mu_);
  drain_until(Clock::now(), [] { return true; });
  auto not_disconnected = [](const HostRecord& r) { return !r.fresh(); };
  const std::vector<int> missing = tasks_where(not_disconnected);
  // The inputs first, as TF's kernel checks them (BR-102-04); a failure fails the configure when
  // the step was in order, and changes nothing when it was not.
  const std::vector<int>& counts = host_device_counts;
  try {
    check_configure_inputs(counts, options);
  } catch (const Error& e) {
    if (missing.empty()) fail(e, /*keep_configuration=*/false);
    throw;
  }
  // Out of order (BR-102-01): rejected, nothing changes.
  if (!missing.empty()) {
    if (state_ == SystemState::kFailed) {
      detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                          "configure_distributed_system (step 2): the last configure or wait "
                          "failed ({}); every host must run disconnect_host before the system is "
                          "configured again, and hosts [{}] have not",
                          failure_, fmt::join(missing, ", "));
    }
    detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                        "configure_distributed_system (step 2): step 1 (disconnect_host) has not "
                        "run on hosts [{}] since the last configure (BR-102-01: the steps run in "
                        "order)",
                        fmt::join(missing, ", "));
  }
  // Each count must be the one its host reported at step 1; a failure fails the configure.
  try {
    for (int t = 0; t < num_hosts_; ++t) {
      const int reported = hosts_[static_cast<size_t>(t)].device_count;
      if (counts[t] != reported) {
        detail::throw_invalid(kComponent,
                              "Host {}: device count {} differs from the {} it reported at "
                              "disconnect_host",
                              t, counts[t], reported);
      }
    }
  } catch (const Error& e) {
    fail(e, /*keep_configuration=*/false);
  }
  HostConfiguration config;
  config.generation = ++generation_;
  config.num_hosts = num_hosts_;
  config.devices_per_host = counts[0];
  config.coordinator_task = 0;
  config.enable_whole_mesh_compilations = options.enable_whole_mesh_compilations;
  if (options.enable_whole_mesh_compilations) {
    detail::warn_inert_attribute(kComponent, "enable_whole_mesh_compilations", "true",
                                 "tessel builds no per-host programs to merge: every process "
                                 "runs its own kernels (BR-102-05: the hosts still must agree)");
  }
  config.topology =
      options.topology ? *options.topology : Topology::for_hosts(num_hosts_, counts[0]);
  for (HostRecord& record : hosts_) record.consumed = record.latest;
  config_ = config;
  failure_.clear();
  state_ = SystemState::kConfigured;
  return config;
}

HostConfiguration SystemCoordinator::configure_distributed_system(const std::vector<Tensor>& inputs,
                                                                  const ConfigureOptions& options) {
  std::vector<int> counts;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    check_integer_input(t, i, 0, "device counts");
    counts.push_back(static_cast<int>(t.at({})));
  }
  return configure_distributed_system(counts, options);
}

Topology SystemCoordinator::wait_for_distributed_system(
    const std::vector<std::vector<int64_t>>& per_host_ids,
    std::chrono::milliseconds startup_timeout) {
  check_timeout(startup_timeout, "wait_for_distributed_system");
  std::lock_guard lock(mu_);
  // The inputs first, as TF's kernel checks them; a failure fails a configured system's wait.
  try {
    if (static_cast<int>(per_host_ids.size()) > num_hosts_) {
      detail::throw_invalid(kComponent,
                            "wait_for_distributed_system: got {} id vectors for a system of {} "
                            "hosts",
                            per_host_ids.size(), num_hosts_);
    }
    // TF: Internal "Host <i> has <x> TPU devices but host 0 has <y>".
    for (size_t t = 0; t < per_host_ids.size(); ++t) {
      if (per_host_ids[t].size() != per_host_ids[0].size()) {
        detail::throw_error(ErrorCode::kInternal, kComponent,
                            "Host {} has {} devices but host 0 has {}", t, per_host_ids[t].size(),
                            per_host_ids[0].size());
      }
    }
  } catch (const Error& e) {
    if (state_ == SystemState::kConfigured) fail(e, /*keep_configuration=*/true);
    throw;
  }
  switch (state_) {
    case SystemState::kConfigured:
      break;
    case SystemState::kRunning:
      return config_->topology;
    case SystemState::kUnconfigured:
    case SystemState::kShutDown:
      detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                          "wait_for_distributed_system (step 4): The system has not been "
                          "initialized. Run configure_distributed_system (step 2) first");
    case SystemState::kFailed:
      detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                          "wait_for_distributed_system (step 4): The system has not been "
                          "initialized: the last configure or wait failed ({}); disconnect every "
                          "host and configure again",
                          failure_);
  }
  const HostConfiguration& config = *config_;
  try {
    for (size_t t = 0; t < per_host_ids.size(); ++t) {
      const std::vector<int64_t> assigned = config.topology.global_device_ids(static_cast<int>(t));
      if (per_host_ids[t] != assigned) {
        detail::throw_invalid(kComponent,
                              "Host {}: global device ids [{}] are not the ids the configuration "
                              "assigns it ([{}])",
                              t, fmt::join(per_host_ids[t], ","), fmt::join(assigned, ","));
      }
    }
    // Every host must report step 3 of this configuration; an older one fails at once.
    const uint64_t generation = config.generation;
    auto initialized = [](const HostRecord& r) { return r.ready(); };
    auto not_initialized = [](const HostRecord& r) { return !r.ready(); };
    auto stale = [&]() -> int {
      for (int t = 0; t < num_hosts_; ++t) {
        const HostRecord& r = hosts_[static_cast<size_t>(t)];
        if (r.ready() && r.generation != generation) return t;
      }
      return -1;
    };
    auto restarted = [](const HostRecord& r) { return r.fresh(); };
    drain_until(Clock::now() + startup_timeout, [&] {
      return stale() >= 0 || !tasks_where(restarted).empty() ||
             tasks_where(not_initialized).empty();
    });
    if (const std::vector<int> again = tasks_where(restarted); !again.empty()) {
      detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                          "hosts [{}] ran disconnect_host again before the system came up (they "
                          "started over); every host must start again",
                          fmt::join(again, ", "));
    }
    if (const int t = stale(); t >= 0) {
      detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                          "Host {} initialized with the configuration of generation {}, but the "
                          "current one is generation {}",
                          t, hosts_[static_cast<size_t>(t)].generation, generation);
    }
    if (const std::vector<int> missing = tasks_where(not_initialized); !missing.empty()) {
      detail::throw_error(ErrorCode::kDeadlineExceeded, kComponent,
                          "wait_for_distributed_system: hosts [{}] did not report step 3 "
                          "(initialize_host) within {} (startup_timeout); reported: hosts [{}]",
                          fmt::join(missing, ", "), seconds(startup_timeout),
                          fmt::join(tasks_where(initialized), ", "));
    }
    for (int t = 0; t < num_hosts_; ++t) {
      const std::vector<int64_t> assigned = config.topology.global_device_ids(t);
      if (hosts_[static_cast<size_t>(t)].ids != assigned) {
        detail::throw_error(ErrorCode::kInternal, kComponent,
                            "Host {} reported global device ids [{}] but the configuration "
                            "assigns [{}]",
                            t, fmt::join(hosts_[static_cast<size_t>(t)].ids, ","),
                            fmt::join(assigned, ","));
      }
    }
  } catch (const Error& e) {
    fail(e, /*keep_configuration=*/true);
  }
  state_ = SystemState::kRunning;
  return config.topology;
}

Topology SystemCoordinator::wait_for_distributed_system(const std::vector<Tensor>& inputs,
                                                        std::chrono::milliseconds startup_timeout) {
  std::vector<std::vector<int64_t>> ids;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    check_integer_input(t, i, 1, "device ids");
    std::vector<int64_t> host_ids;
    for (double v : t.to_doubles()) host_ids.push_back(static_cast<int64_t>(v));
    ids.push_back(std::move(host_ids));
  }
  return wait_for_distributed_system(ids, startup_timeout);
}

void SystemCoordinator::shutdown_distributed_system(std::chrono::milliseconds disconnect_timeout) {
  check_timeout(disconnect_timeout, "shutdown_distributed_system");
  std::lock_guard lock(mu_);
  // TF's kernel deletes the system's state "if it exists": with nothing configured there is
  // nothing to shut down, and nothing changes.
  if (!config_) return;
  auto disconnected = [](const HostRecord& r) { return r.fresh(); };
  auto connected = [](const HostRecord& r) { return !r.fresh(); };
  drain_until(Clock::now() + disconnect_timeout, [&] { return tasks_where(connected).empty(); });
  if (const std::vector<int> missing = tasks_where(connected); !missing.empty()) {
    if (disconnect_timeout.count() == 0) {
      detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                          "shutdown_distributed_system: hosts [{}] have not disconnected; "
                          "disconnect_host must complete on every host before shutdown "
                          "(BR-102-03)",
                          fmt::join(missing, ", "));
    }
    detail::throw_error(ErrorCode::kDeadlineExceeded, kComponent,
                        "shutdown_distributed_system: hosts [{}] did not disconnect within {}; "
                        "disconnect_host must complete on every host before shutdown "
                        "(BR-102-03); disconnected: hosts [{}]",
                        fmt::join(missing, ", "), seconds(disconnect_timeout),
                        fmt::join(tasks_where(disconnected), ", "));
  }
  // Use up only the first disconnect after the configure: a host that already started its next
  // round keeps that round's step 1.
  for (HostRecord& record : hosts_) ++record.consumed;
  config_.reset();
  failure_.clear();
  state_ = SystemState::kShutDown;
}

}  // namespace tessel
