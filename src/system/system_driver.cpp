// start_system / stop_system: the five steps for one host of a multi-client program, with the
// values between the steps moved through the SystemChannel.
#include <fmt/format.h>

#include "core/errors.h"
#include "system/system_messages.h"
#include "tessel/system/system.h"

namespace tessel {
namespace {

constexpr const char* kComponent = "System";
using Clock = SystemChannel::Clock;
using detail::CoordinatorReply;

std::string seconds(std::chrono::milliseconds d) {
  return fmt::format("{:g} s", static_cast<double>(d.count()) / 1000.0);
}

void check_roles(const Host& host, const SystemCoordinator* coordinator, const char* call) {
  if (host.task() == 0 && coordinator == nullptr) {
    detail::throw_invalid(kComponent, "{}: task 0 runs the coordinator; pass it", call);
  }
  if (host.task() != 0 && coordinator != nullptr) {
    detail::throw_invalid(kComponent, "{}: host {} is not task 0 and runs no coordinator", call,
                          host.task());
  }
}

void send_reply(const Host& host, const SystemCoordinator& coordinator, int task,
                CoordinatorReply reply) {
  reply.epoch = coordinator.host_epoch(task);
  host.channel()->send_to_host(task, detail::encode(reply));
}

// Tells every other host why the start failed, so that none waits for its deadline. Best
// effort: the coordinator's own error is what its caller sees.
void broadcast_failure(const Host& host, const SystemCoordinator& coordinator, const Error& error) {
  CoordinatorReply reply;
  reply.kind = CoordinatorReply::Kind::kFailure;
  reply.code = error.code();
  reply.message = error.what();
  for (int task = 1; task < coordinator.num_hosts(); ++task) {
    try {
      send_reply(host, coordinator, task, reply);
    } catch (const Error&) {
      // The host is unreachable; it fails at its own deadline.
    }
  }
}

// At a host: the coordinator's next answer to this round (replies to earlier rounds, which
// carry an older epoch, are dropped).
CoordinatorReply await_reply(const Host& host, CoordinatorReply::Kind want, const char* what,
                             std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  for (;;) {
    std::optional<std::string> bytes = host.channel()->receive_at_host(host.task(), deadline);
    if (!bytes) {
      detail::throw_error(ErrorCode::kDeadlineExceeded, kComponent,
                          "start_system on host {}: no {} from the coordinator (task 0) within {} "
                          "(startup_timeout)",
                          host.task(), what, seconds(timeout));
    }
    CoordinatorReply reply = detail::decode_coordinator_reply(*bytes, host.task());
    if (reply.epoch != host.epoch()) continue;
    if (reply.kind == CoordinatorReply::Kind::kFailure) {
      // The coordinator's code: every process sees the seed's error (a differing device count
      // is kInvalidArgument on every host, not only on task 0).
      detail::throw_error(reply.code, kComponent,
                          "start_system on host {}: the coordinator (task 0) failed: {}",
                          host.task(), reply.message);
    }
    if (reply.kind != want) {
      detail::throw_error(ErrorCode::kInternal, kComponent,
                          "start_system on host {}: the coordinator sent something other than "
                          "the {}",
                          host.task(), what);
    }
    return reply;
  }
}

Topology start_coordinator_host(Host& host, SystemCoordinator& coordinator,
                                const StartOptions& options) {
  HostConfiguration config;
  Topology topology;
  try {
    const std::vector<int> counts = coordinator.gather_device_counts(options.startup_timeout);
    config = coordinator.configure_distributed_system(counts, options.configure);
    CoordinatorReply reply;
    reply.kind = CoordinatorReply::Kind::kConfiguration;
    reply.configuration = config;
    for (int task = 1; task < coordinator.num_hosts(); ++task) {
      send_reply(host, coordinator, task, reply);
    }
    const std::vector<int64_t> ids = host.initialize_host(config, options.initialize);
    topology = coordinator.wait_for_distributed_system({ids}, options.startup_timeout);
  } catch (const Error& e) {
    broadcast_failure(host, coordinator, e);
    throw;
  }
  CoordinatorReply reply;
  reply.kind = CoordinatorReply::Kind::kTopology;
  reply.topology = topology;
  for (int task = 1; task < coordinator.num_hosts(); ++task) {
    send_reply(host, coordinator, task, reply);
  }
  host.set_global_topology(topology);
  return topology;
}

}  // namespace

Topology start_system(Host& host, SystemCoordinator* coordinator, const StartOptions& options) {
  check_roles(host, coordinator, "start_system");
  if (options.startup_timeout.count() < 0) {
    detail::throw_invalid(kComponent, "start_system: startup_timeout must be >= 0; got {} ms",
                          options.startup_timeout.count());
  }
  host.disconnect_host();  // step 1
  if (coordinator != nullptr) return start_coordinator_host(host, *coordinator, options);

  const CoordinatorReply config = await_reply(host, CoordinatorReply::Kind::kConfiguration,
                                              "configuration", options.startup_timeout);
  host.initialize_host(*config.configuration, options.initialize);  // step 3
  const CoordinatorReply topology =
      await_reply(host, CoordinatorReply::Kind::kTopology, "topology", options.startup_timeout);
  host.set_global_topology(*topology.topology);  // step 5
  return *topology.topology;
}

void stop_system(Host& host, SystemCoordinator* coordinator, std::chrono::milliseconds timeout) {
  check_roles(host, coordinator, "stop_system");
  if (timeout.count() < 0) {
    detail::throw_invalid(kComponent, "stop_system: timeout must be >= 0; got {} ms",
                          timeout.count());
  }
  host.disconnect_host();
  if (coordinator != nullptr) coordinator->shutdown_distributed_system(timeout);
}

}  // namespace tessel
