// Simulated clients in one process (make_in_process_cluster, tessel/comm/cluster.h): a group spanning
// clients is one in-process group whose endpoints the clients take as they join.
#include <map>
#include <mutex>

#include "comm/cluster_join.h"
#include "comm/in_process_hub.h"
#include "core/errors.h"
#include "tessel/comm/cluster.h"

namespace tessel {
namespace {

// The groups some client has joined and not every owner has taken yet.
struct PendingGroups {
  std::mutex mu;
  struct Entry {
    std::vector<std::shared_ptr<detail::Transport>> endpoints;  // rank order
    int clients_left = 0;                                       // owners that have not joined
  };
  std::map<std::string, Entry> groups;  // by "<members>#<join count>"
};

class InProcessCluster : public Cluster {
 public:
  InProcessCluster(std::shared_ptr<PendingGroups> pending, int num_clients, int me)
      : pending_(std::move(pending)), num_clients_(num_clients), me_(me) {}

  int num_clients() const override { return num_clients_; }
  int client_id() const override { return me_; }

  std::vector<std::unique_ptr<Communicator>> join(const std::vector<std::string>& members,
                                                  const std::vector<int>& owners,
                                                  std::chrono::milliseconds) override {
    detail::check_join(members, owners, num_clients_, me_);
    std::string key = fmt::format("{}", fmt::join(members, "\n"));
    key += fmt::format("#{}", joins_[key]++);
    std::vector<std::unique_ptr<Communicator>> mine(members.size());
    std::lock_guard<std::mutex> lock(pending_->mu);
    auto [it, fresh] = pending_->groups.try_emplace(key);
    if (fresh) {
      it->second.endpoints = detail::make_in_process_transports(members);
      it->second.clients_left = static_cast<int>(detail::owning_clients(owners).size());
    }
    for (int r : detail::ranks_owned_by(owners, me_)) {
      mine[static_cast<size_t>(r)] = std::make_unique<Communicator>(it->second.endpoints[r]);
    }
    if (--it->second.clients_left == 0) pending_->groups.erase(it);
    return mine;
  }

 private:
  std::shared_ptr<PendingGroups> pending_;
  int num_clients_;
  int me_;
  std::map<std::string, int> joins_;  // how often this client joined each member list
};

}  // namespace

std::vector<std::shared_ptr<Cluster>> make_in_process_cluster(int num_clients) {
  if (num_clients < 1) {
    detail::throw_invalid("Cluster", "make_in_process_cluster: {} clients; need at least 1",
                          num_clients);
  }
  auto pending = std::make_shared<PendingGroups>();
  std::vector<std::shared_ptr<Cluster>> clients;
  for (int c = 0; c < num_clients; ++c) {
    clients.push_back(std::make_shared<InProcessCluster>(pending, num_clients, c));
  }
  return clients;
}

}  // namespace tessel
