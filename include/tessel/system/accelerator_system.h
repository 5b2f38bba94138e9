// initialize_accelerator_system / shutdown_accelerator_system: TF DTensor's process-wide pair,
// on top of the system lifecycle (system.h).
//
//   AcceleratorSystemInfo info = initialize_accelerator_system({.num_logical_cpu_devices = 4});
//   info.device_type == "CPU"; info.num_devices == 4; info.topology.num_tasks() == 1
//   std::shared_ptr<Runtime> rt = accelerator_system_runtime();   // the system's devices
//   ...
//   shutdown_accelerator_system();
//   initialize_accelerator_system({.num_logical_cpu_devices = 2});  // again, another size
//
// initialize runs the five steps of system.h for this process's host (start_system) and
// shutdown the two that take it down (stop_system), each wait bounded by startup_timeout /
// shutdown_timeout. Which system:
//   - `channel` given: a multi-host system over it; this process is host `task`.
//   - else under mpirun (num_clients() > 1, clients.h): one host per process of the MPI job,
//     over make_mpi_system_channel (mpi_system_channel.h), this process host client_id() (its
//     MPI rank). Every process of `mpirun -np N` calls initialize (collective: in the same order
//     as its other MPI communicators) and brings up the same N-host system; each calls shutdown.
//     MPI must be initialised first (a tessel::MpiEnvironment that outlives the system):
//     otherwise kFailedPrecondition saying so. num_clients() or client_id() other than MPI's
//     size and rank: kInvalidArgument.
//   - else: this process alone (one host, task 0, an in-process channel).
//
//   tessel::MpiEnvironment mpi;                                   // under mpirun -np 2
//   AcceleratorSystemInfo info = initialize_accelerator_system();
//   info.num_hosts == 2; info.task == mpi_rank(); info.topology == Topology::for_hosts(2, d)
//   shutdown_accelerator_system();
//
// A failure of the start is thrown on every process with the coordinator's code (a host whose
// device count differs: kInvalidArgument naming it everywhere; a host that never reported:
// kDeadlineExceeded naming it), and every process is left uninitialized.
//
// The runtime. Runtime::global() is created once per process and cannot change its device
// count, so the system uses it only when it fits: the job and task it was named after (job_name()
// and client_id(): "localhost"/0 alone, "worker"/rank under mpirun), num_logical_cpu_devices -1
// or equal to its count, and experimental_reset_context false. Otherwise the system creates a
// Runtime of its own with num_logical_cpu_devices devices, named after the system's job and
// task, and releases it at shutdown (it lives on while a caller still holds the shared_ptr).
// accelerator_system_runtime() returns whichever it is: pass it to the calls that take a
// Runtime (their default is Runtime::global()).
//
// Differences from TF (docs/system.md): initialize returns an AcceleratorSystemInfo
// (TF returns the device type, info.device_type); the state errors keep TF's texts but are
// kFailedPrecondition (Python: FailedPreconditionError, a RuntimeError; TF raises ValueError);
// shutdown in a multi-host system is supported (TF refuses it in multi-client mode); under
// mpirun the clients are found from the MPI environment (TF: DTENSOR_* variables).
//
// Thread safety: every function may be called from any thread; they are serialized (one
// process-wide mutex, held for at most the call's timeouts).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessel/mesh/topology.h"
#include "tessel/system/system.h"
#include "tessel/system/system_channel.h"

namespace tessel {

class Runtime;

struct AcceleratorSystemOptions {
  // "CPU", "GPU" or "TPU", any case (TF's check and text for anything else: kInvalidArgument
  // "Unknown device_type ... Allowed values are CPU, GPU, or TPU"). tessel's runtime has only
  // virtual CPU devices: "GPU" and "TPU" are kUnimplemented.
  std::string device_type = "CPU";
  // TF: a coordination service so that the clients know each other's devices. tessel's
  // coordinator is that service; false is accepted for a one-host system (nothing to
  // coordinate) and kInvalidArgument with more hosts.
  bool enable_coordination_service = true;
  // Virtual CPU devices of this host: 1..kMaxCpuDevices, or -1 for TESSEL_CPU_DEVICES (else 4),
  // as RuntimeOptions::num_cpu_devices.
  int num_logical_cpu_devices = -1;
  // TF resets its context, invalidating existing tensors. Here: the system creates a fresh
  // Runtime of its own even where Runtime::global() would fit (see above); nothing existing is
  // invalidated.
  bool experimental_reset_context = false;

  // tessel's own:
  std::string job{};  // the devices' job name; empty: job_name() ("localhost", mpirun "worker")
  bool enable_whole_mesh_compilations = false;  // BR-102-05, passed to configure
  std::chrono::milliseconds startup_timeout = kDefaultStartupTimeout;   // each wait of initialize
  std::chrono::milliseconds shutdown_timeout = kDefaultStartupTimeout;  // each wait of shutdown
  // A multi-host system: its channel (null: under mpirun an MPI channel, else a one-host
  // system) and this process's task (unset: client_id(), the MPI rank under mpirun).
  std::shared_ptr<SystemChannel> channel{};
  std::optional<int> task{};
};

// What initialize_accelerator_system brought up.
struct AcceleratorSystemInfo {
  std::string device_type;                  // "CPU"
  int num_devices = 0;                      // in the whole system
  int num_local_devices = 0;                // on this host
  int num_hosts = 0;
  int task = 0;                             // this host
  std::vector<int64_t> local_device_ids;    // global ids of this host's devices
  Topology topology;                        // of the whole system
  bool enable_whole_mesh_compilations = false;
  bool enable_coordination_service = true;
  bool experimental_reset_context = false;
  bool owns_runtime = false;                // false: the system uses Runtime::global()
};

// Brings the system up. Already initialized (without a shutdown since): kFailedPrecondition
// "Accelerator system has already been initialized. Call ...shutdown_accelerator_system()
// first." (TF's text). Bad options: kInvalidArgument; a step that fails or times out: its
// error, and the process is left uninitialized (initialize may be called again).
AcceleratorSystemInfo initialize_accelerator_system(const AcceleratorSystemOptions& options = {});

// Takes the system down: waits (up to shutdown_timeout) for the work queued on the system's
// devices, disconnects this host and, on task 0, shuts the system down once every host has
// disconnected. Not initialized: kFailedPrecondition "Accelerator system is not initialized.
// Call ...initialize_accelerator_system first." (TF's text). Devices still busy at the
// deadline, or hosts that did not disconnect: kDeadlineExceeded, and the system stays
// initialized (shutdown may be retried). Work that failed: the system is shut down, then its
// error is thrown (as TF's try/finally does).
void shutdown_accelerator_system();

bool is_accelerator_system_initialized();
// The info of the running system; not initialized: kFailedPrecondition.
AcceleratorSystemInfo accelerator_system_info();
// The system's runtime (see above); not initialized: kFailedPrecondition.
std::shared_ptr<Runtime> accelerator_system_runtime();
// This process's Host of the system (for the steps that follow it: configure_embedding); not
// initialized: kFailedPrecondition. Keep it no longer than the system: the Host refers to the
// system's runtime, which shutdown may free.
std::shared_ptr<Host> accelerator_system_host();

}  // namespace tessel
