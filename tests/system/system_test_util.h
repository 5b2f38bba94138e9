// Helpers for the system tests: N simulated hosts in this process (one Runtime and one Host
// each, one in-process channel, the coordinator on task 0), and bounded timing checks.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/runtime/runtime.h"
#include "tessel/system/system.h"
#include "tessel/system/system_channel.h"
#include "testing/expect_error.h"

namespace tessel::testing {

// Short timeouts keep the deadline tests fast; kGenerous bounds waits that should succeed.
inline constexpr std::chrono::milliseconds kShort{150};
inline constexpr std::chrono::milliseconds kGenerous{10'000};
// No step-3 outputs held by the caller of wait_for_distributed_system (they all arrive as the
// hosts' reports).
inline const std::vector<std::vector<int64_t>> kNoIds;
// A wait of kShort must end within this (scheduling slack on a loaded machine included).
inline constexpr std::chrono::milliseconds kShortBound{5'000};

class SimulatedSystem {
 public:
  // One host per entry of devices_per_host (task = index).
  explicit SimulatedSystem(std::vector<int> devices_per_host)
      : channel_(make_in_process_system_channel(static_cast<int>(devices_per_host.size()))) {
    for (size_t t = 0; t < devices_per_host.size(); ++t) {
      runtimes_.push_back(std::make_unique<Runtime>(
          RuntimeOptions{.num_cpu_devices = devices_per_host[t], .task = static_cast<int>(t)}));
      hosts_.push_back(std::make_unique<Host>(*runtimes_.back(), channel_));
    }
    coordinator_ = std::make_unique<SystemCoordinator>(*hosts_[0]);
  }
  // num_hosts hosts of `devices` devices each.
  SimulatedSystem(int num_hosts, int devices) : SimulatedSystem(std::vector<int>(num_hosts, devices)) {}

  int size() const { return static_cast<int>(hosts_.size()); }
  Host& host(int task) { return *hosts_[static_cast<size_t>(task)]; }
  Runtime& runtime(int task) { return *runtimes_[static_cast<size_t>(task)]; }
  SystemCoordinator& coordinator() { return *coordinator_; }
  const std::shared_ptr<SystemChannel>& channel() const { return channel_; }

  // Step 1 on every host; the counts in task order.
  std::vector<int> disconnect_all() {
    std::vector<int> counts;
    for (auto& h : hosts_) counts.push_back(h->disconnect_host());
    return counts;
  }
  // Steps 1-5 driven from this thread (TF's single-client graph).
  Topology bring_up(const ConfigureOptions& options = {}) {
    const std::vector<int> counts = disconnect_all();
    const HostConfiguration config = coordinator_->configure_distributed_system(counts, options);
    std::vector<std::vector<int64_t>> ids;
    for (auto& h : hosts_) ids.push_back(h->initialize_host(config));
    const Topology topology = coordinator_->wait_for_distributed_system(ids, kGenerous);
    for (auto& h : hosts_) h->set_global_topology(topology);
    return topology;
  }
  // Disconnect every host, then shut down.
  void take_down() {
    disconnect_all();
    coordinator_->shutdown_distributed_system();
  }

 private:
  std::shared_ptr<SystemChannel> channel_;
  std::vector<std::unique_ptr<Runtime>> runtimes_;
  std::vector<std::unique_ptr<Host>> hosts_;
  std::unique_ptr<SystemCoordinator> coordinator_;
};

// Runs fn(task) for every task on its own thread (multi-client style) and returns each one's
// outcome: the std::future of its call. Every future is waited for with a bound.
template <typename Fn>
auto run_hosts(int num_hosts, Fn fn) {
  using Result = decltype(fn(0));
  std::vector<std::future<Result>> futures;
  for (int t = 0; t < num_hosts; ++t) {
    futures.push_back(std::async(std::launch::async, [fn, t] { return fn(t); }));
  }
  for (auto& f : futures) {
    if (f.wait_for(kGenerous * 3) != std::future_status::ready) {
      ADD_FAILURE() << "a host thread did not finish in time";
    }
  }
  return futures;
}

// "<Code>: <what()>" of the tessel::Error `call` throws, or "ok" when it returns: what a host
// thread or process reports of its step.
inline std::string outcome(const std::function<void()>& call) {
  try {
    call();
    return "ok";
  } catch (const Error& e) {
    return std::string(error_code_name(e.code())) + ": " + e.what();
  }
}

// Milliseconds since `start`.
inline int64_t elapsed_ms(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               start)
      .count();
}

}  // namespace tessel::testing
