// Host: one host's side of the lifecycle (steps 1, 3 and 5) and its state machine.
#include <utility>

#include "core/errors.h"
#include "core/inert_attribute.h"
#include "system/system_messages.h"
#include "tessel/runtime/runtime.h"
#include "tessel/system/system.h"

namespace tessel {
namespace {

constexpr const char* kComponent = "Host";

}  // namespace

Host::Host(Runtime& runtime, std::shared_ptr<SystemChannel> channel)
    : runtime_(runtime), channel_(std::move(channel)), task_(runtime.options().task) {
  if (channel_ == nullptr) detail::throw_invalid(kComponent, "the channel is null");
  if (task_ >= channel_->num_hosts()) {
    detail::throw_invalid(kComponent, "task {} is not a host of a {}-host system (tasks 0..{})",
                          task_, channel_->num_hosts(), channel_->num_hosts() - 1);
  }
}

HostState Host::state() const {
  std::lock_guard lock(mu_);
  return state_;
}

uint64_t Host::epoch() const {
  std::lock_guard lock(mu_);
  return epoch_;
}

std::optional<HostConfiguration> Host::configuration() const {
  std::lock_guard lock(mu_);
  return config_;
}

std::vector<int64_t> Host::global_device_ids() const {
  std::lock_guard lock(mu_);
  return ids_;
}

std::optional<Topology> Host::topology() const {
  std::lock_guard lock(mu_);
  return topology_;
}

void Host::fail(const Error& error) {
  state_ = HostState::kFailed;
  failure_ = error.what();
  throw error;
}

void Host::on_disconnect(const std::string& key, std::function<void()> listener) {
  std::lock_guard lock(mu_);
  disconnect_listeners_[key] = std::move(listener);
}

int Host::disconnect_host() {
  std::map<std::string, std::function<void()>> listeners;
  const int count = disconnect_and_report(listeners);
  for (auto& [key, listener] : listeners) listener();
  return count;
}

int Host::disconnect_and_report(std::map<std::string, std::function<void()>>& listeners) {
  std::lock_guard lock(mu_);
  listeners = disconnect_listeners_;
  const int count = runtime_.num_devices();
  ++epoch_;
  state_ = HostState::kDisconnected;
  failure_.clear();
  config_.reset();
  ids_.clear();
  topology_.reset();
  detail::HostReport report;
  report.kind = detail::HostReport::Kind::kDisconnected;
  report.task = task_;
  report.epoch = epoch_;
  report.device_count = count;
  channel_->send_to_coordinator(task_, detail::encode(report));
  return count;
}

std::vector<int64_t> Host::initialize_host(const HostConfiguration& config,
                                           const InitializeHostOptions& options) {
  std::lock_guard lock(mu_);
  switch (state_) {
    case HostState::kDisconnected:
      break;
    case HostState::kNew:
      detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                          "initialize_host (step 3) on host {}: step 1 (disconnect_host) has not "
                          "run (BR-102-01: the steps run in order)",
                          task_);
    case HostState::kInitialized:
    case HostState::kRunning:
      detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                          "initialize_host (step 3) on host {}: the host is already {} with the "
                          "configuration of generation {}; disconnect_host first",
                          task_, host_state_name(state_), config_->generation);
    case HostState::kFailed:
      detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                          "initialize_host (step 3) on host {}: an earlier step failed ({}); "
                          "disconnect_host and start again",
                          task_, failure_);
  }
  try {
    if (options.cancellation_closes_devices < 0 || options.cancellation_closes_devices > 2) {
      detail::throw_invalid(kComponent,
                            "Host {}: tpu_cancellation_closes_chips must be 0 (unset), 1 "
                            "(enabled) or 2 (disabled); got {}",
                            task_, options.cancellation_closes_devices);
    }
    if (options.cancellation_closes_devices != 0) {
      detail::warn_inert_attribute(kComponent, "tpu_cancellation_closes_chips",
                                   std::to_string(options.cancellation_closes_devices),
                                   "it concerns TF's TFRT runtime; a cancelled tessel step "
                                   "closes no devices");
    }
    if (config.num_hosts != channel_->num_hosts()) {
      detail::throw_invalid(kComponent,
                            "Host {}: the configuration is for {} hosts but the system has {}",
                            task_, config.num_hosts, channel_->num_hosts());
    }
    if (config.devices_per_host != runtime_.num_devices()) {
      detail::throw_invalid(kComponent,
                            "Host {} has {} devices but the configuration has {} per host", task_,
                            runtime_.num_devices(), config.devices_per_host);
    }
    if (config.topology.num_tasks() != config.num_hosts ||
        config.topology.num_devices_per_task() != config.devices_per_host) {
      detail::throw_invalid(kComponent,
                            "Host {}: the configuration's topology has {} tasks x {} devices, "
                            "not {} x {}",
                            task_, config.topology.num_tasks(),
                            config.topology.num_devices_per_task(), config.num_hosts,
                            config.devices_per_host);
    }
    if (options.enable_whole_mesh_compilations &&
        *options.enable_whole_mesh_compilations != config.enable_whole_mesh_compilations) {
      detail::throw_invalid(kComponent,
                            "Host {}: enable_whole_mesh_compilations is {} here but {} in the "
                            "configuration (BR-102-05: every host must agree)",
                            task_, *options.enable_whole_mesh_compilations,
                            config.enable_whole_mesh_compilations);
    }
  } catch (const Error& e) {
    fail(e);
  }
  std::vector<int64_t> ids = config.topology.global_device_ids(task_);
  detail::HostReport report;
  report.kind = detail::HostReport::Kind::kInitialized;
  report.task = task_;
  report.epoch = epoch_;
  report.generation = config.generation;
  report.ids = ids;
  channel_->send_to_coordinator(task_, detail::encode(report));
  config_ = config;
  ids_ = ids;
  state_ = HostState::kInitialized;
  return ids;
}

void Host::set_global_topology(const Topology& topology) {
  std::lock_guard lock(mu_);
  switch (state_) {
    case HostState::kInitialized:
    case HostState::kRunning:
      break;
    case HostState::kNew:
    case HostState::kDisconnected:
      detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                          "set_global_topology (step 5) on host {}: step 3 (initialize_host) has "
                          "not run (BR-102-01: the steps run in order)",
                          task_);
    case HostState::kFailed:
      detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                          "set_global_topology (step 5) on host {}: an earlier step failed ({}); "
                          "disconnect_host and start again",
                          task_, failure_);
  }
  if (topology != config_->topology) {
    fail(Error(ErrorCode::kInvalidArgument, kComponent,
               fmt::format("Host {}: the topology {} is not the one the system was configured "
                           "with ({})",
                           task_, topology.to_string(), config_->topology.to_string())));
  }
  topology_ = topology;
  state_ = HostState::kRunning;
}

}  // namespace tessel
