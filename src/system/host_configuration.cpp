// HostConfiguration <-> HostConfigurationProto, and the names of the lifecycle's states.
#include "core/errors.h"
#include "tessel/proto/system.pb.h"
#include "tessel/system/system.h"

namespace tessel {

std::string HostConfiguration::serialized() const {
  proto::HostConfigurationProto p;
  p.set_generation(generation);
  p.set_num_hosts(num_hosts);
  p.set_devices_per_host(devices_per_host);
  p.set_coordinator_task(coordinator_task);
  p.set_enable_whole_mesh_compilations(enable_whole_mesh_compilations);
  p.mutable_topology()->ParseFromString(topology.serialized());
  return p.SerializeAsString();
}

HostConfiguration HostConfiguration::from_serialized(const std::string& bytes) {
  proto::HostConfigurationProto p;
  if (!p.ParseFromString(bytes)) {
    detail::throw_invalid("HostConfiguration",
                          "from_serialized: {} bytes are not a HostConfigurationProto",
                          bytes.size());
  }
  HostConfiguration out;
  out.generation = p.generation();
  out.num_hosts = p.num_hosts();
  out.devices_per_host = p.devices_per_host();
  out.coordinator_task = p.coordinator_task();
  out.enable_whole_mesh_compilations = p.enable_whole_mesh_compilations();
  out.topology = Topology::from_serialized(p.topology().SerializeAsString());
  if (out.num_hosts < 1 || out.devices_per_host < 1 ||
      out.topology.num_tasks() != out.num_hosts ||
      out.topology.num_devices_per_task() != out.devices_per_host) {
    detail::throw_invalid("HostConfiguration",
                          "{} hosts x {} devices do not match its topology ({} tasks x {} "
                          "devices)",
                          out.num_hosts, out.devices_per_host, out.topology.num_tasks(),
                          out.topology.num_devices_per_task());
  }
  if (out.coordinator_task < 0 || out.coordinator_task >= out.num_hosts) {
    detail::throw_invalid("HostConfiguration", "coordinator task {} is not one of its {} hosts",
                          out.coordinator_task, out.num_hosts);
  }
  return out;
}

std::string_view host_state_name(HostState state) {
  switch (state) {
    case HostState::kNew: return "New";
    case HostState::kDisconnected: return "Disconnected";
    case HostState::kInitialized: return "Initialized";
    case HostState::kRunning: return "Running";
    case HostState::kFailed: return "Failed";
  }
  return "?";
}

std::string_view system_state_name(SystemState state) {
  switch (state) {
    case SystemState::kUnconfigured: return "Unconfigured";
    case SystemState::kConfigured: return "Configured";
    case SystemState::kRunning: return "Running";
    case SystemState::kFailed: return "Failed";
    case SystemState::kShutDown: return "ShutDown";
  }
  return "?";
}

}  // namespace tessel
