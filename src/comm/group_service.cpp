// Internal: the per-runtime communicator groups (group_service.h) and the default cluster of a
// runtime nobody gave one.
#include "comm/group_service.h"

#include <fmt/ranges.h>

#include <utility>

#include "core/errors.h"
#include "tessel/comm/mpi.h"

namespace tessel::detail {
namespace {

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
  // The process's MPI cluster is shared by every runtime of the process and lives until exit
  // (collectives may run during exit).
  static std::shared_ptr<Cluster>& process_cluster() {
    static auto* cluster = new std::shared_ptr<Cluster>();
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

std::shared_ptr<GroupService> GroupService::of(const Runtime& runtime) {
  const int task = runtime.options().task;
  return runtime.attachment<GroupService>([task] { return std::make_shared<GroupService>(task); });
}

std::shared_ptr<CommunicatorPool> GroupService::pool() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!pool_) {
    pool_ = std::make_shared<CommunicatorPool>(
        cluster_ ? cluster_ : std::make_shared<DefaultCluster>(task_), factory_);
  }
  return pool_;
}

void GroupService::evict(const std::shared_ptr<CommunicatorPool>& pool) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pool_ == pool) pool_.reset();
}

void GroupService::set_cluster(std::shared_ptr<Cluster> cluster) {
  std::lock_guard<std::mutex> lock(mu_);
  cluster_ = std::move(cluster);
  pool_.reset();
}

std::shared_ptr<Cluster> GroupService::cluster() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cluster_;
}

void GroupService::set_group_factory(CommunicatorPool::GroupFactory factory) {
  std::lock_guard<std::mutex> lock(mu_);
  factory_ = std::move(factory);
  pool_.reset();
}

}  // namespace tessel::detail
