// The multi-host system lifecycle (seed 102; TF's distributed TPU configuration ops): five
// ordered steps bring a system of hosts up, two take it down.
//
// A system is N hosts, tasks 0..N-1. Each host is one Runtime (one process in a real deployment;
// several Runtimes in one process simulate several hosts) with a Host object. Task 0 also runs
// the SystemCoordinator (TF: the TPU_SYSTEM device of worker 0). Hosts report to the coordinator
// through a SystemChannel (system_channel.h); the steps' own inputs and outputs are the values
// TF's ops pass, as tessel types:
//
//   step  call                                     on            TF op
//   1     host.disconnect_host() -> device count   every host    _DisconnectHostFromDistributedTPUSystem
//   2     coordinator.configure_distributed_system task 0        _ConfigureDistributedTPU
//           (device counts) -> HostConfiguration
//   3     host.initialize_host(config)             every host    _InitializeHostForDistributedTPU
//           -> the host's global device ids
//   4     coordinator.wait_for_distributed_system  task 0        _WaitForDistributedTPU
//           (ids, startup_timeout) -> Topology
//   5     host.set_global_topology(topology)       every host    _SetGlobalTPUArray
//   down  host.disconnect_host() on every host, then coordinator.shutdown_distributed_system()
//                                                                _ShutdownDistributedTPU
//
//   auto channel = make_in_process_system_channel(2);
//   Runtime rt0({.num_cpu_devices = 2, .task = 0}), rt1({.num_cpu_devices = 2, .task = 1});
//   Host h0(rt0, channel), h1(rt1, channel);
//   SystemCoordinator coordinator(h0);
//   std::vector<int> counts = {h0.disconnect_host(), h1.disconnect_host()};     // {2, 2}
//   HostConfiguration config = coordinator.configure_distributed_system(counts);
//   auto ids0 = h0.initialize_host(config), ids1 = h1.initialize_host(config);  // {0,1}, {2,3}
//   Topology t = coordinator.wait_for_distributed_system({ids0, ids1});
//   h0.set_global_topology(t); h1.set_global_topology(t);
//   ...
//   h0.disconnect_host(); h1.disconnect_host(); coordinator.shutdown_distributed_system();
//
// In a multi-client program each host calls start_system / stop_system (below), which run the
// same steps and move the values through the channel.
//
// Rules (seed 102):
//   BR-102-01 the steps run in order. Each Host and the coordinator keep a state machine; a step
//             out of order is kFailedPrecondition naming the step that must come first. The
//             coordinator learns each host's steps from its reports, so configure needs step 1
//             on every host since the last configure, and wait needs step 3 on every host.
//   BR-102-02 configure and wait run on task 0: a SystemCoordinator can only be built on the
//             Host of task 0.
//   BR-102-03 shutdown only after every host disconnected (after the last configure):
//             otherwise kFailedPrecondition (kDeadlineExceeded when told to wait) naming the
//             hosts still connected. Shutdown with no system configured does nothing, as TF's
//             kernel (it deletes the system's state "if it exists").
//   BR-102-04 every host's device count must agree with host 0's and with the topology:
//             kInternal "Host <i> has <x> devices but host 0 has <y>", TF's code (its text says
//             "TPU chips"); the other count checks are kInvalidArgument. Every step checks its
//             inputs before the system's state, in TF's order.
//   BR-102-05 enable_whole_mesh_compilations is accepted, carried in the HostConfiguration to
//             every host and checked to agree there. TF uses it to let one compilation cover the
//             whole mesh instead of each host's part; tessel builds no per-host programs (every
//             process runs its own kernels, and the replicate layer's compilation cache is per
//             process), so the flag changes no behaviour yet: it is recorded so that a TF
//             configuration carries over and the hosts provably agree on it.
//   Transaction rule: a failed configure or wait is not retried silently. The coordinator
//             enters SystemState::kFailed and refuses wait and configure until every host has
//             run disconnect_host again; a Host whose step failed refuses further steps until
//             its own disconnect_host.
//
// Waits: wait_for_distributed_system waits at most startup_timeout (default 20 s, TF's
// startup_timeout_sec) and then fails with kDeadlineExceeded naming the hosts that did not
// report; every other wait is bounded the same way.
//
// Thread safety: a Host and a SystemCoordinator may be called from any thread; calls on one
// object are serialized (a blocking wait holds the object for at most its timeout).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/core/tensor.h"
#include "tessel/mesh/topology.h"
#include "tessel/system/system_channel.h"

namespace tessel {

class Runtime;

// TF's default startup_timeout_sec.
inline constexpr std::chrono::seconds kDefaultStartupTimeout{20};

// The output of step 2 and the input of step 3 (TF: the serialized TPUHostConfiguration).
struct HostConfiguration {
  uint64_t generation = 0;  // 1, 2, ... per coordinator: which configure produced it
  int num_hosts = 0;
  int devices_per_host = 0;
  int coordinator_task = 0;
  bool enable_whole_mesh_compilations = false;  // BR-102-05
  Topology topology;                            // what step 4 returns

  // Serialized HostConfigurationProto (proto/system.proto).
  std::string serialized() const;
  // Bytes that do not parse, or a configuration whose topology does not have num_hosts tasks of
  // devices_per_host devices: kInvalidArgument.
  static HostConfiguration from_serialized(const std::string& bytes);

  friend bool operator==(const HostConfiguration&, const HostConfiguration&) = default;
};

// Step 2's attributes.
struct ConfigureOptions {
  // BR-102-05 (see above).
  bool enable_whole_mesh_compilations = false;
  // TF's topology flags: when given, the system must have exactly its num_tasks hosts with its
  // num_devices_per_task devices each (BR-102-04), and step 4 returns it. Default: the uniform
  // Topology::for_hosts(number of hosts, devices per host).
  std::optional<Topology> topology{};
};

// Step 3's attributes.
struct InitializeHostOptions {
  // When set, must equal the configuration's flag (kInvalidArgument naming the host otherwise);
  // unset: take the configuration's.
  std::optional<bool> enable_whole_mesh_compilations{};
  // TF's tpu_cancellation_closes_chips: 0 unset, 1 enabled, 2 disabled (kInvalidArgument
  // otherwise). Recorded only: it concerns TF's TFRT runtime.
  int cancellation_closes_devices = 0;
};

enum class HostState {
  kNew,           // no step yet
  kDisconnected,  // step 1 done (also after shutdown's disconnect)
  kInitialized,   // step 3 done
  kRunning,       // step 5 done
  kFailed,        // a step failed; only disconnect_host is accepted
};

enum class SystemState {
  kUnconfigured,  // no configure yet
  kConfigured,    // step 2 done
  kRunning,       // step 4 done
  kFailed,        // configure or wait failed; every host must disconnect again
  kShutDown,      // shut down; may be configured again
};

// "New", "Disconnected", ...; "Unconfigured", "Configured", ...
std::string_view host_state_name(HostState state);
std::string_view system_state_name(SystemState state);

// One host of the system: a Runtime and its end of the channel.
class Host {
 public:
  // The host's task is runtime.options().task, which must be < channel->num_hosts()
  // (kInvalidArgument otherwise). `runtime` must outlive the Host.
  Host(Runtime& runtime, std::shared_ptr<SystemChannel> channel);
  Host(const Host&) = delete;
  Host& operator=(const Host&) = delete;

  int task() const { return task_; }
  Runtime& runtime() const { return runtime_; }
  const std::shared_ptr<SystemChannel>& channel() const { return channel_; }
  HostState state() const;
  // Number of disconnect_host calls so far (the coordinator echoes it in its replies).
  uint64_t epoch() const;

  // Step 1: leaves any system (forgets configuration, ids and topology), reports to the
  // coordinator and returns this host's device count (TF: number_of_tpu_chips). Valid in every
  // state; it is how a failed host starts again.
  int disconnect_host();

  // Step 3: joins the system `config` describes and returns the global device ids of this host's
  // devices (task * devices_per_host + index), which it also reports to the coordinator.
  // Before step 1, or twice: kFailedPrecondition. A configuration that does not fit this host
  // (another host count, another device count, disagreeing flags, a bad option):
  // kInvalidArgument naming the host; the host is then kFailed.
  std::vector<int64_t> initialize_host(const HostConfiguration& config,
                                       const InitializeHostOptions& options = {});

  // Step 5: records the global topology; the host is then kRunning. Before step 3:
  // kFailedPrecondition. A topology other than the configuration's: kInvalidArgument naming the
  // host; the host is then kFailed.
  void set_global_topology(const Topology& topology);

  // The configuration of step 3, the ids of step 3, the topology of step 5 (each empty before).
  std::optional<HostConfiguration> configuration() const;
  std::vector<int64_t> global_device_ids() const;
  std::optional<Topology> topology() const;

  // Runs `listener` after every later disconnect_host (outside the host's lock, on the caller's
  // thread), so that the layers above drop what they keep for the system being left (the
  // embedding tables of configure_embedding). A listener under the same `key` is replaced.
  void on_disconnect(const std::string& key, std::function<void()> listener);

 private:
  [[noreturn]] void fail(const Error& error);  // records kFailed and rethrows, mu_ held
  // disconnect_host's step under mu_; hands out the listeners to run after it.
  int disconnect_and_report(std::map<std::string, std::function<void()>>& listeners);

  Runtime& runtime_;
  const std::shared_ptr<SystemChannel> channel_;
  const int task_;

  mutable std::mutex mu_;  // guards the fields below
  HostState state_ = HostState::kNew;
  uint64_t epoch_ = 0;
  std::string failure_;  // what() of the step that failed
  std::optional<HostConfiguration> config_;
  std::vector<int64_t> ids_;
  std::optional<Topology> topology_;
  std::map<std::string, std::function<void()>> disconnect_listeners_;
};

// The coordinator of the system: runs steps 2 and 4 and the shutdown, on task 0.
class SystemCoordinator {
 public:
  // On the Host of task 0 only (BR-102-02): another task is kFailedPrecondition. Shares the
  // host's channel (one coordinator per channel); keeps no reference to the host.
  explicit SystemCoordinator(const Host& host);
  ~SystemCoordinator();
  SystemCoordinator(const SystemCoordinator&) = delete;
  SystemCoordinator& operator=(const SystemCoordinator&) = delete;

  int num_hosts() const { return num_hosts_; }
  SystemState state() const;
  // The configuration of the last successful configure, until shutdown or a failed configure.
  std::optional<HostConfiguration> configuration() const;

  // Step 2. host_device_counts[i] is host i's step-1 output: one per host (N >= 1), each equal
  // to host 0's count (kInternal, TF's code) and to the topology's (kInvalidArgument naming the
  // host, BR-102-04), checked first (TF's order). Then every host must have run step 1 since the
  // last configure; otherwise the call is rejected with kFailedPrecondition naming those that
  // have not (after a failed configure the message says so) and changes nothing; and each count
  // must be what its host reported. An input failure of an in-order call puts the coordinator
  // in kFailed and every host must disconnect again. Success: the configuration of
  // a new generation, state kConfigured (a configured or running system may be configured
  // again once every host has run step 1; TF replaces its state the same way).
  HostConfiguration configure_distributed_system(const std::vector<int>& host_device_counts,
                                                 const ConfigureOptions& options = {});
  // TF's form: one integer scalar per host. A tensor of another rank: kInvalidArgument
  // "Input <i> should be a scalar but has <d> dimensions".
  HostConfiguration configure_distributed_system(const std::vector<Tensor>& inputs,
                                                 const ConfigureOptions& options = {});

  // Step 4. Waits up to startup_timeout until every host has reported step 3 for the current
  // configuration, then returns the topology (state kRunning). per_host_ids are the step-3
  // outputs the caller holds: entry i is host i's (TF multi-client: only the local hosts'; the
  // rest arrive as reports); each must have host 0's length (kInternal, TF's code: "Host <i> has
  // <x> devices but host 0 has <y>", checked before the state) and equal the ids the
  // configuration assigns.
  // Before configure, after shutdown: kFailedPrecondition "The system has not been
  // initialized." After a failed configure or wait: kFailedPrecondition saying so. Hosts missing
  // at the deadline: kDeadlineExceeded naming them. A host that initialized with an older
  // configuration, or ran disconnect_host again meanwhile: kFailedPrecondition naming it. Any
  // of these failures: state kFailed. In kRunning it returns the topology again. A negative
  // timeout: kInvalidArgument.
  Topology wait_for_distributed_system(const std::vector<std::vector<int64_t>>& per_host_ids,
                                       std::chrono::milliseconds startup_timeout =
                                           kDefaultStartupTimeout);
  // TF's form: one integer vector per host. Another rank: kInvalidArgument
  // "Input <i> should be a vector but has <d> dimensions".
  Topology wait_for_distributed_system(const std::vector<Tensor>& inputs,
                                       std::chrono::milliseconds startup_timeout =
                                           kDefaultStartupTimeout);

  // Shuts the system down (state kShutDown) once every host has disconnected since the last
  // configure, waiting up to disconnect_timeout for their reports (0: only those already
  // here). No configured system (never configured, shut down, configure failed): nothing
  // happens (TF's kernel). Hosts still connected:
  // kFailedPrecondition naming them (kDeadlineExceeded when disconnect_timeout > 0); the system
  // keeps running and shutdown may be called again.
  void shutdown_distributed_system(std::chrono::milliseconds disconnect_timeout =
                                       std::chrono::milliseconds(0));

  // For start_system: waits up to `timeout` until every host has run step 1 since the last
  // configure and returns their device counts in task order. Hosts missing at the deadline:
  // kDeadlineExceeded naming them; the start has then failed (state kFailed, every host must
  // run step 1 again, a configured system may still be shut down).
  std::vector<int> gather_device_counts(std::chrono::milliseconds timeout);

  // The epoch of host `task`'s latest step-1 report (replies carry it; see Host::epoch).
  uint64_t host_epoch(int task) const;

 private:
  struct HostRecord;
  // Applies the reports that arrive before `deadline`, until `done()` holds; returns done().
  template <typename Done>
  bool drain_until(SystemChannel::Deadline deadline, Done done);
  void apply(const SystemChannel::Envelope& envelope);
  template <typename Pred>
  std::vector<int> tasks_where(Pred pred) const;
  [[noreturn]] void fail(const Error& error, bool keep_configuration);
  // configure's checks of its own inputs (counts, options), before any state (TF's order).
  void check_configure_inputs(const std::vector<int>& counts, const ConfigureOptions& options) const;

  const std::shared_ptr<SystemChannel> channel_;
  const int num_hosts_;

  mutable std::mutex mu_;  // guards the fields below; held for a whole call
  SystemState state_ = SystemState::kUnconfigured;
  uint64_t generation_ = 0;
  std::string failure_;
  std::optional<HostConfiguration> config_;
  std::vector<HostRecord> hosts_;  // by task
};

// ---- multi-client drivers ----------------------------------------------------------------------

struct StartOptions {
  ConfigureOptions configure{};
  InitializeHostOptions initialize{};
  // Bounds every wait of every step (TF's startup_timeout_sec bounds step 4).
  std::chrono::milliseconds startup_timeout = kDefaultStartupTimeout;
};

// Runs the five steps for one host; every host of the system calls it (from its own process or
// thread), task 0 with its coordinator, the others with nullptr. Task 0 gathers the device
// counts, configures, sends each host its configuration, waits and sends the topology; a
// failure there is sent to every host, which fails with the coordinator's error code, quoting
// its message ("start_system on host 1: the coordinator (task 0) failed: ..."), so that every
// process reports the seed's error (BR-102-04's kInvalidArgument, the startup timeout's
// kDeadlineExceeded naming the hosts that did not report). Returns the
// topology. A host that hears nothing from the coordinator within startup_timeout:
// kDeadlineExceeded naming the step it waited for. A coordinator for another task, or none on
// task 0: kInvalidArgument.
Topology start_system(Host& host, SystemCoordinator* coordinator, const StartOptions& options = {});

// Takes one host out of the system (disconnect_host); on task 0 then shuts the system down,
// waiting up to `timeout` for the other hosts' disconnects (BR-102-03).
void stop_system(Host& host, SystemCoordinator* coordinator,
                 std::chrono::milliseconds timeout = kDefaultStartupTimeout);

}  // namespace tessel
