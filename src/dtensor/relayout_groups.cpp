// Internal: relayout's communicator pools by runtime id (see relayout_groups.h), and the cluster
// each runtime reaches other clients through (multi_client.h).
#include "dtensor/relayout_groups.h"

#include <map>
#include <mutex>

#include "core/errors.h"
#include "tessel/mpi.h"
#include "tessel/multi_client.h"

namespace tessel {
namespace detail {
namespace {

struct Registry {
  std::mutex mu;
  std::map<uint64_t, std::shared_ptr<CommunicatorPool>> pools;  // by Runtime::id()
  std::map<uint64_t, CommunicatorPool::GroupFactory> factories;  // tests only
  std::map<uint64_t, std::shared_ptr<Cluster>> clusters;         // set_cluster
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: relayouts may run during exit
  return *r;
}

// The cluster of a runtime nobody gave one: this client is the runtime's task; a group spanning
// clients goes through the process's MPI cluster, made on first need.
class DefaultCluster : public Cluster {
 public:
  explicit DefaultCluster(int task) : task_(task) {}
  int num_clients() const override { return mpi() ? mpi()->num_clients() : task_ + 1; }
  int client_id() const override { return task_; }

  std::vector<std::unique_ptr<Communicator>> join(const std::vector<std::string>& members,
                                                  const std::vector<int>& owners,
                                                  std::chrono::milliseconds timeout) override {
    std::shared_ptr<Cluster> cluster = mpi();
    if (!cluster) {
      try {
        cluster = make_process_mpi_cluster();
      } catch (const Error& e) {
        throw_error(ErrorCode::kFailedPrecondition, "relayout",
                    "the group [{}] spans several clients, but this process is in no multi-client "
                    "cluster ({}); run one process per client under mpirun with MPI initialised "
                    "(MpiEnvironment), or call set_cluster",
                    fmt::join(members, ", "), e.message());
      }
    }
    if (cluster->client_id() != task_) {
      throw_invalid("relayout",
                    "this runtime's devices are task {} but this process is MPI rank {}; create "
                    "the runtime with RuntimeOptions::task = the MPI rank (the default under mpirun)",
                    task_, cluster->client_id());
    }
    return cluster->join(members, owners, timeout);
  }

 private:
  static std::shared_ptr<Cluster>& process_cluster() {
    static auto* cluster = new std::shared_ptr<Cluster>();  // lives until exit, like the pools
    return *cluster;
  }
  static std::mutex& process_mu() {
    static auto* mu = new std::mutex();
    return *mu;
  }
  static std::shared_ptr<Cluster> mpi() {
    std::lock_guard<std::mutex> lock(process_mu());
    return process_cluster();
  }
  static std::shared_ptr<Cluster> make_process_mpi_cluster() {
    std::lock_guard<std::mutex> lock(process_mu());
    if (!process_cluster()) process_cluster() = make_mpi_cluster();
    return process_cluster();
  }

  int task_;
};

}  // namespace

std::shared_ptr<CommunicatorPool> relayout_groups(const Runtime& runtime) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::shared_ptr<CommunicatorPool>& pool = r.pools[runtime.id()];
  if (!pool) {
    auto factory = r.factories.find(runtime.id());
    auto cluster = r.clusters.find(runtime.id());
    pool = std::make_shared<CommunicatorPool>(
        cluster != r.clusters.end() ? cluster->second
                                    : std::make_shared<DefaultCluster>(runtime.options().task),
        factory == r.factories.end() ? nullptr : factory->second);
  }
  return pool;
}

void set_relayout_group_factory(const Runtime& runtime, CommunicatorPool::GroupFactory factory) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.factories[runtime.id()] = std::move(factory);
  r.pools.erase(runtime.id());
}

void drop_relayout_groups(const Runtime& runtime) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.pools.erase(runtime.id());
}

}  // namespace detail

void set_cluster(Runtime& runtime, std::shared_ptr<Cluster> cluster) {
  detail::Registry& r = detail::registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (cluster) {
    r.clusters[runtime.id()] = std::move(cluster);
  } else {
    r.clusters.erase(runtime.id());
  }
  r.pools.erase(runtime.id());
}

std::shared_ptr<Cluster> cluster_of(const Runtime& runtime) {
  detail::Registry& r = detail::registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.clusters.find(runtime.id());
  return it == r.clusters.end() ? nullptr : it->second;
}

}  // namespace tessel
