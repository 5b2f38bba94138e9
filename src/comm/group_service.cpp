// Internal: the per-runtime communicator groups (group_service.h) and the default cluster of a
// runtime nobody gave one.
#include "comm/group_service.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <optional>
#include <set>
#include <utility>

#include "core/errors.h"
#include "tessel/comm/mpi.h"
#include "tessel/comm/nccl.h"
#include "tessel/runtime/clients.h"
#include "tessel/runtime/device.h"
#include "tessel/runtime/runtime.h"

namespace tessel::detail {
namespace {

// The cluster of a runtime nobody gave one: this client is the runtime's task; a group spanning
// clients goes through the process's MPI cluster, made on first need. Making it is collective
// over every process of the job (MPI_Comm_idup of MPI_COMM_WORLD), so it takes the deadline of
// the join that needs it: a process that does not come is named by the members it owns in that
// group, as a late rank is, instead of being waited for past the caller's deadline. A cluster
// that failed to form cannot be made again (the duplication may still be pending in MPI, and a
// second one would pair with it), so later joins fail at once with kAborted naming the cause.
class DefaultCluster : public Cluster {
 public:
  explicit DefaultCluster(int task) : task_(task) {}
  int num_clients() const override {
    std::shared_ptr<Cluster> cluster = ProcessCluster::get().made();
    return cluster ? cluster->num_clients() : task_ + 1;
  }
  int client_id() const override { return task_; }

  std::vector<std::unique_ptr<Communicator>> join(const std::vector<std::string>& members,
                                                  const std::vector<int>& owners,
                                                  std::chrono::milliseconds timeout) override {
    const auto start = std::chrono::steady_clock::now();
    std::shared_ptr<Cluster> cluster = ProcessCluster::get().make(members, owners, task_, timeout);
    if (cluster->client_id() != task_) {
      throw_invalid("Cluster",
                    "this runtime's devices are task {} but this process is MPI rank {}; create "
                    "the runtime with RuntimeOptions::task = the MPI rank (the default under "
                    "mpirun)",
                    task_, cluster->client_id());
    }
    // The join's own meeting gets what is left of the caller's budget.
    const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    const auto left = std::max(timeout - spent, std::chrono::milliseconds(1));
    return cluster->join(members, owners, timeout.count() > 0 ? left : timeout);
  }

 private:
  // The process's MPI cluster, shared by every runtime of the process; it lives until exit
  // (collectives may run during exit).
  class ProcessCluster {
   public:
    static ProcessCluster& get() {
      static auto* process = new ProcessCluster();
      return *process;
    }
    std::shared_ptr<Cluster> made() {
      std::lock_guard<std::mutex> lock(mu_);
      return cluster_;
    }
    // The cluster, made within `timeout` by the first caller (the join of members/owners).
    std::shared_ptr<Cluster> make(const std::vector<std::string>& members,
                                  const std::vector<int>& owners, int task,
                                  std::chrono::milliseconds timeout) {
      std::lock_guard<std::mutex> lock(mu_);
      if (cluster_) return cluster_;
      if (failure_) {
        throw_error(ErrorCode::kAborted, "Cluster",
                    "this process's MPI cluster failed to form and cannot be made again (its "
                    "duplicate of MPI_COMM_WORLD may still be pending in MPI); joining group [{}] "
                    "is refused. The first failure: {}",
                    fmt::join(members, ", "), failure_->what());
      }
      const auto start = std::chrono::steady_clock::now();
      const auto waited = [start] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      };
      try {
        MpiCommunicatorOptions options;
        options.timeout = timeout;
        cluster_ = make_mpi_cluster(options);
      } catch (const Error& e) {
        if (e.code() == ErrorCode::kDeadlineExceeded || e.code() == ErrorCode::kAborted) {
          failure_ = late_error(e, members, owners, task, waited());
          throw *failure_;
        }
        throw_error(ErrorCode::kFailedPrecondition, "Cluster",
                    "the group [{}] spans several clients, but this process is in no multi-client "
                    "cluster ({}); run one process per client under mpirun with MPI initialised "
                    "(MpiEnvironment), or call set_cluster",
                    fmt::join(members, ", "), e.message());
      }
      return cluster_;
    }

   private:
    // The error of a cluster that did not form in time, naming the group's members on the
    // other clients: with two processes the other one is the late one; with more, MPI's
    // duplication does not say which process is missing, and the message says so.
    static Error late_error(const Error& cause, const std::vector<std::string>& members,
                            const std::vector<int>& owners, int task, double waited) {
      std::vector<std::string> late;
      std::set<int> clients;
      for (size_t r = 0; r < members.size(); ++r) {
        if (owners[r] == task) continue;
        late.push_back(fmt::format("{} ({})", r, members[r]));
        clients.insert(owners[r]);
      }
      const int processes = mpi_size();
      const std::string which =
          processes <= 2 ? std::string("they did not arrive")
                         : fmt::format("MPI does not say which of the job's {} other processes "
                                       "did not arrive (those of the group are named)",
                                       processes - 1);
      return Error(cause.code(), "Cluster",
                   fmt::format("client {} waited {:.3f} s for ranks [{}] (client {}) to make the "
                               "process's MPI cluster (its first collective across processes, "
                               "over all {} processes of the job) before joining group [{}]; "
                               "{}: {}",
                               task, waited, fmt::join(late, ", "), fmt::join(clients, ", "),
                               processes, fmt::join(members, ", "), which, cause.what()));
    }

    std::mutex mu_;
    std::shared_ptr<Cluster> cluster_;
    std::optional<Error> failure_;
  };

  int task_;
};

// The members as devices of `runtime` when every one is a GPU device on its own CUDA GPU (an
// NCCL group can join them); else empty.
std::vector<Device*> distinct_cuda_gpus(const Runtime* runtime, const std::vector<std::string>& members) {
  std::vector<Device*> gpus;
  if (runtime == nullptr || runtime->gpu_devices().empty() || !nccl_available()) return gpus;
  std::set<int> ordinals;
  for (const std::string& name : members) {
    Device* d = nullptr;
    for (Device* g : runtime->gpu_devices()) {
      if (g->name() == name) d = g;
    }
    if (d == nullptr || d->cuda_stream() == nullptr || !ordinals.insert(d->gpu_ordinal()).second) {
      return {};
    }
    gpus.push_back(d);
  }
  return gpus;
}

}  // namespace

std::shared_ptr<GroupService> GroupService::of(const Runtime& runtime) {
  const int task = runtime.options().task;
  const Runtime* rt = &runtime;
  return runtime.attachment<GroupService>(
      [task, rt] { return std::make_shared<GroupService>(task, rt); });
}

std::shared_ptr<CommGroup> GroupService::make(const std::vector<std::string>& members) const {
  if (members.empty()) throw_invalid("GroupService", "a group needs at least one member");
  if (!factory_) {
    if (std::vector<Device*> gpus = distinct_cuda_gpus(runtime_, members); !gpus.empty()) {
      return std::make_shared<CommGroup>(members, make_nccl_communicators(gpus));
    }
    return make_in_process_group(members);
  }
  return std::make_shared<CommGroup>(members, factory_(static_cast<int>(members.size()), members));
}

std::shared_ptr<CommGroup> GroupService::group(const std::vector<std::string>& members) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<CommGroup>& slot = groups_[members];
  if (!slot) {
    try {
      slot = make(members);
    } catch (...) {
      groups_.erase(members);
      throw;
    }
  }
  return slot;
}

std::shared_ptr<CommGroup> GroupService::find(const std::vector<std::string>& members) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = groups_.find(members);
  return it == groups_.end() ? nullptr : it->second;
}

void GroupService::adopt(std::shared_ptr<CommGroup> group) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> members = group->members;
  groups_[std::move(members)] = std::move(group);
}

std::shared_ptr<CommGroup> GroupService::join(const std::vector<std::string>& members,
                                               const std::vector<int>& owners,
                                               std::chrono::milliseconds timeout) {
  std::shared_ptr<Cluster> cluster = this->cluster();
  if (!cluster) cluster = std::make_shared<DefaultCluster>(task_);
  // Cluster::join is one call at a time per cluster (the process's MPI cluster is shared by
  // every runtime): concurrent joins of this process wait for each other.
  static std::mutex* joins = new std::mutex();  // never destroyed: joins may run during exit
  std::lock_guard<std::mutex> lock(*joins);
  return std::make_shared<CommGroup>(members, cluster->join(members, owners, timeout));
}

int GroupService::num_clients() const {
  if (const std::shared_ptr<Cluster> cluster = this->cluster()) return cluster->num_clients();
  if (runtime_ == nullptr) return 1;
  const ClientConfig me = client_config();
  const bool is_this_client =
      runtime_->options().job == me.job && runtime_->options().task == me.client_id;
  return is_this_client ? me.num_clients : 1;
}

std::shared_ptr<CommGroup> GroupService::take(const std::vector<std::string>& members) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = groups_.find(members);
  if (it == groups_.end()) return make(members);
  std::shared_ptr<CommGroup> group = std::move(it->second);
  groups_.erase(it);
  return group;
}

void GroupService::give_back(std::shared_ptr<CommGroup> group) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> members = group->members;
  groups_.try_emplace(std::move(members), std::move(group));
}

void GroupService::unregister(const std::shared_ptr<CommGroup>& group) {
  const auto it = groups_.find(group->members);
  if (it != groups_.end() && it->second == group) groups_.erase(it);
}

void GroupService::evict(const std::shared_ptr<CommGroup>& group) {
  std::shared_ptr<CommunicatorPool> pool;
  {
    std::lock_guard<std::mutex> lock(mu_);
    unregister(group);
    pool = pool_;
  }
  if (!pool) return;
  // The pool's lock is taken outside ours: the pool calls group() under its own.
  const std::vector<std::shared_ptr<CommGroup>> held = pool->groups();
  if (std::find(held.begin(), held.end(), group) == held.end()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (pool_ == pool) pool_.reset();
}

size_t GroupService::num_groups() const {
  std::lock_guard<std::mutex> lock(mu_);
  return groups_.size();
}

std::shared_ptr<CommunicatorPool> GroupService::pool() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!pool_) {
    // The pool may outlive this service in a caller's hands; it then makes no new groups.
    std::weak_ptr<GroupService> self = weak_from_this();
    pool_ = std::make_shared<CommunicatorPool>(
        cluster_ ? cluster_ : std::make_shared<DefaultCluster>(task_),
        [self](const std::vector<std::string>& names) {
          const std::shared_ptr<GroupService> service = self.lock();
          if (!service) {
            throw_error(ErrorCode::kFailedPrecondition, "CommunicatorPool",
                        "the runtime of this pool was destroyed; no group over [{}] can be made",
                        fmt::join(names, ", "));
          }
          return service->group(names);
        });
  }
  return pool_;
}

void GroupService::evict(const std::shared_ptr<CommunicatorPool>& pool) {
  if (!pool) return;
  // Its groups go even when the pool was already replaced: one of them may be the one that
  // failed, and the current pool does not hold it (else it would have been dropped too).
  const std::vector<std::shared_ptr<CommGroup>> held = pool->groups();
  std::lock_guard<std::mutex> lock(mu_);
  if (pool_ == pool) pool_.reset();
  for (const auto& group : held) unregister(group);
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
  groups_.clear();
  pool_.reset();
}

}  // namespace tessel::detail
