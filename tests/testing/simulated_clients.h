// SimulatedClients: several clients of a multi-client program inside one process, for tests
// that run in milliseconds and under ThreadSanitizer. Client c has its own Runtime (job "worker",
// task c, `devices` CPU devices) joined to the others by make_in_process_cluster; run() runs the
// same program on every client at once, one controller thread each, as separate processes would.
//
//   SimulatedClients clients(2, 2);
//   auto errors = clients.run([](SimulatedClient& c) {
//     Mesh mesh = c.mesh({{"x", 4}});                       // this client holds offsets 2c, 2c+1
//     DTensor d = copy_to_mesh(host, Layout::batch_sharded(mesh, "x", 1), c.runtime());
//     ...
//   });
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessel/comm/multi_client.h"
#include "tessel/runtime/clients.h"
#include "tessel/runtime/runtime.h"
#include "testing/run_ranks.h"

namespace tessel::testing {

class SimulatedClient {
 public:
  SimulatedClient(int id, int num_clients, int devices, std::shared_ptr<Cluster> cluster)
      : config_{num_clients, id, "worker"},
        runtime_(std::make_unique<Runtime>(
            RuntimeOptions{.num_cpu_devices = devices, .job = "worker", .task = id})) {
    for (int i = 0; i < devices; ++i) local_.push_back("CPU:" + std::to_string(i));
    set_cluster(*runtime_, std::move(cluster));
  }
  ~SimulatedClient() { set_cluster(*runtime_, nullptr); }

  int id() const { return config_.client_id; }
  Runtime& runtime() const { return *runtime_; }
  const ClientConfig& config() const { return config_; }
  // create_distributed_mesh as this client would call it.
  Mesh mesh(const std::vector<MeshDimension>& dims) const {
    return create_distributed_mesh(dims, local_, config_);
  }

 private:
  ClientConfig config_;
  std::unique_ptr<Runtime> runtime_;
  std::vector<std::string> local_;
};

class SimulatedClients {
 public:
  SimulatedClients(int num_clients, int devices) {
    auto views = make_in_process_cluster(num_clients);
    for (int c = 0; c < num_clients; ++c) {
      clients_.push_back(std::make_unique<SimulatedClient>(c, num_clients, devices, views[c]));
    }
  }

  SimulatedClient& client(int c) { return *clients_[static_cast<size_t>(c)]; }

  // program(client) on every client at once; element c is what client c threw (null: nothing).
  std::vector<std::exception_ptr> run(const std::function<void(SimulatedClient&)>& program) {
    return run_ranks(static_cast<int>(clients_.size()), [&](int c) { program(client(c)); });
  }

 private:
  std::vector<std::unique_ptr<SimulatedClient>> clients_;
};

}  // namespace tessel::testing
