// initialize_accelerator_system / shutdown_accelerator_system: the process-wide system.
#include "tessel/system/accelerator_system.h"

#include <algorithm>
#include <cctype>
#include <exception>
#include <mutex>

#include "core/errors.h"
#include "tessel/comm/mpi.h"
#include "tessel/runtime/clients.h"
#include "tessel/runtime/runtime.h"
#include "tessel/system/mpi_system_channel.h"

namespace tessel {
namespace {

constexpr const char* kComponent = "AcceleratorSystem";

// The running system; members are destroyed coordinator first, runtime last.
struct AcceleratorSystem {
  AcceleratorSystemInfo info;
  std::shared_ptr<Runtime> runtime;
  std::shared_ptr<SystemChannel> channel;
  std::shared_ptr<Host> host;  // shared: accelerator_system_host()
  std::unique_ptr<SystemCoordinator> coordinator;  // task 0 only
  std::chrono::milliseconds shutdown_timeout{0};
};

std::mutex g_mu;                        // serializes the functions of this file
std::unique_ptr<AcceleratorSystem> g_system;  // null: not initialized

[[noreturn]] void throw_not_initialized() {
  detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                      "Accelerator system is not initialized. Call "
                      "initialize_accelerator_system first.");
}

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s;
}

// The system's channel and this process's task (accelerator_system.h: "Which system").
struct Membership {
  std::shared_ptr<SystemChannel> channel;
  int task = 0;
  std::string job;
};

void check_options(const AcceleratorSystemOptions& o, const std::string& device_type) {
  if (device_type != "CPU" && device_type != "GPU" && device_type != "TPU") {
    detail::throw_invalid(kComponent, "Unknown device_type {}. Allowed values are CPU, GPU, or TPU",
                          device_type);
  }
  if (device_type != "CPU") {
    detail::throw_error(ErrorCode::kUnimplemented, kComponent,
                        "device_type {}: tessel's runtime has only virtual CPU devices",
                        device_type);
  }
  if (o.num_logical_cpu_devices != -1 &&
      (o.num_logical_cpu_devices < 1 || o.num_logical_cpu_devices > kMaxCpuDevices)) {
    detail::throw_invalid(kComponent, "num_logical_cpu_devices must be -1 or 1..{}; got {}",
                          kMaxCpuDevices, o.num_logical_cpu_devices);
  }
  if (o.startup_timeout.count() < 0 || o.shutdown_timeout.count() < 0) {
    detail::throw_invalid(kComponent,
                          "startup_timeout and shutdown_timeout must be >= 0; got {} ms and {} ms",
                          o.startup_timeout.count(), o.shutdown_timeout.count());
  }
}

// Under mpirun: a channel over the processes of the MPI job, checked against the environment.
std::shared_ptr<SystemChannel> mpi_channel(const AcceleratorSystemOptions& o, int clients) {
  std::shared_ptr<SystemChannel> channel;
  try {
    channel = make_mpi_system_channel(
        {.timeout = std::max(o.startup_timeout, std::chrono::milliseconds(1))});
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kFailedPrecondition) throw;
    detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                        "initialize_accelerator_system: this process is client {} of {} "
                        "(mpirun), whose hosts talk over MPI, but MPI is not ready: create a "
                        "tessel::MpiEnvironment first and keep it past the shutdown ({})",
                        client_id(), clients, e.what());
  }
  if (channel->num_hosts() != clients || mpi_rank() != client_id()) {
    detail::throw_invalid(kComponent,
                          "initialize_accelerator_system: the environment says client {} of {} "
                          "(clients.h) but this is MPI rank {} of {}",
                          client_id(), clients, mpi_rank(), channel->num_hosts());
  }
  return channel;
}

Membership membership(const AcceleratorSystemOptions& o) {
  Membership m;
  m.job = o.job.empty() ? job_name() : o.job;
  m.task = o.task.value_or(client_id());
  const int clients = num_clients();
  if (o.channel) {
    m.channel = o.channel;
  } else if (clients > 1) {
    m.channel = mpi_channel(o, clients);
  } else {
    m.channel = make_in_process_system_channel(1);
  }
  const int num_hosts = m.channel->num_hosts();
  if (m.task < 0 || m.task >= num_hosts) {
    detail::throw_invalid(kComponent, "task {} is not a host of a {}-host system", m.task,
                          num_hosts);
  }
  if (!o.enable_coordination_service && num_hosts > 1) {
    detail::throw_invalid(kComponent,
                          "enable_coordination_service=false: the {} hosts need the coordinator "
                          "to learn each other's devices",
                          num_hosts);
  }
  return m;
}

// Runtime::global() where it fits (see accelerator_system.h), else a Runtime of the system's own.
std::shared_ptr<Runtime> choose_runtime(const AcceleratorSystemOptions& o, const Membership& m,
                                        bool& owns) {
  // Only where the global runtime is (or will be) named after this job and task.
  if (!o.experimental_reset_context && m.task == client_id() && m.job == job_name()) {
    Runtime& global = Runtime::global();
    if (global.options().task == m.task && global.options().job == m.job &&
        (o.num_logical_cpu_devices == -1 || o.num_logical_cpu_devices == global.num_devices())) {
      owns = false;
      return std::shared_ptr<Runtime>(&global, [](Runtime*) {});  // never deleted
    }
  }
  owns = true;
  return std::make_shared<Runtime>(
      RuntimeOptions{.num_cpu_devices = o.num_logical_cpu_devices, .job = m.job, .task = m.task});
}

}  // namespace

AcceleratorSystemInfo initialize_accelerator_system(const AcceleratorSystemOptions& options) {
  std::lock_guard lock(g_mu);
  if (g_system) {
    detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                        "Accelerator system has already been initialized. Call "
                        "shutdown_accelerator_system() first.");
  }
  const std::string device_type = upper(options.device_type);
  check_options(options, device_type);
  const Membership m = membership(options);

  auto system = std::make_unique<AcceleratorSystem>();
  bool owns = false;
  system->runtime = choose_runtime(options, m, owns);
  system->channel = m.channel;
  system->host = std::make_shared<Host>(*system->runtime, system->channel);
  if (m.task == 0) system->coordinator = std::make_unique<SystemCoordinator>(*system->host);
  system->shutdown_timeout = options.shutdown_timeout;

  StartOptions start;
  start.configure.enable_whole_mesh_compilations = options.enable_whole_mesh_compilations;
  start.startup_timeout = options.startup_timeout;
  // A failure leaves the process uninitialized: `system` and all it made go away here.
  Topology topology = start_system(*system->host, system->coordinator.get(), start);

  AcceleratorSystemInfo& info = system->info;
  info.device_type = device_type;
  info.num_devices = topology.num_devices();
  info.num_local_devices = system->runtime->num_devices();
  info.num_hosts = topology.num_tasks();
  info.task = m.task;
  info.local_device_ids = system->host->global_device_ids();
  info.topology = std::move(topology);
  info.enable_whole_mesh_compilations = options.enable_whole_mesh_compilations;
  info.enable_coordination_service = options.enable_coordination_service;
  info.experimental_reset_context = options.experimental_reset_context;
  info.owns_runtime = owns;
  g_system = std::move(system);
  return g_system->info;
}

void shutdown_accelerator_system() {
  std::lock_guard lock(g_mu);
  if (!g_system) throw_not_initialized();
  const std::chrono::milliseconds timeout = g_system->shutdown_timeout;
  // TF waits for pending work first (context.async_wait) and still shuts down if it failed.
  std::exception_ptr work_error;
  try {
    g_system->runtime->synchronize(timeout);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kDeadlineExceeded) throw;
    work_error = std::current_exception();
    g_system->runtime->synchronize(timeout);  // the failures are cleared: now only idleness
  }
  stop_system(*g_system->host, g_system->coordinator.get(), timeout);
  g_system.reset();
  if (work_error) std::rethrow_exception(work_error);
}

bool is_accelerator_system_initialized() {
  std::lock_guard lock(g_mu);
  return g_system != nullptr;
}

AcceleratorSystemInfo accelerator_system_info() {
  std::lock_guard lock(g_mu);
  if (!g_system) throw_not_initialized();
  return g_system->info;
}

std::shared_ptr<Runtime> accelerator_system_runtime() {
  std::lock_guard lock(g_mu);
  if (!g_system) throw_not_initialized();
  return g_system->runtime;
}

std::shared_ptr<Host> accelerator_system_host() {
  std::lock_guard lock(g_mu);
  if (!g_system) throw_not_initialized();
  return g_system->host;
}

}  // namespace tessel
