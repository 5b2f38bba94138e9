// The clients of an MPI job as a Cluster (make_mpi_cluster, tessel/comm/mpi.h).
//
// join(): a group owned by this process alone is an in-process group. Otherwise the owning
// processes first meet over the cluster's duplicate of MPI_COMM_WORLD: each sends the others a
// digest of the member list and waits for theirs, against the deadline (a missing process is
// named by its members in the group, "for ranks [2 (...device:CPU:0), 3 (...)] (client 1)"; a
// process joining another group is kFailedPrecondition). Only then do they call the
// blocking MPI_Comm_create_group, which every owner has by then reached, and build the group
// over the new communicator (make_process_group: shared memory within a process, MPI across).
#include <algorithm>

#include "comm/cluster_join.h"
#include "comm/mpi/mpi_hierarchy.h"
#include "core/errors.h"
#include "tessel/comm/cluster.h"
#include "tessel/comm/collective_options.h"

namespace tessel {
namespace {

constexpr std::string_view kCluster = "Cluster";

uint64_t digest_of(const std::vector<std::string>& members, const std::vector<int>& owners) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a
  auto add = [&h](std::string_view bytes) {
    for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  };
  for (size_t r = 0; r < members.size(); ++r) {
    add(members[r]);
    add(fmt::format("@{};", owners[r]));
  }
  return h;
}

class MpiCluster : public Cluster {
 public:
  explicit MpiCluster(const MpiCommunicatorOptions& options)
      : options_(options), world_(detail::MpiTransport::create(MPI_COMM_WORLD, options)) {}

  int num_clients() const override { return world_->size(); }
  int client_id() const override { return world_->rank(); }

  std::vector<std::unique_ptr<Communicator>> join(const std::vector<std::string>& members,
                                                  const std::vector<int>& owners,
                                                  std::chrono::milliseconds timeout) override {
    const int me = client_id();
    detail::check_join(members, owners, num_clients(), me);
    const std::vector<int> clients = detail::owning_clients(owners);
    if (clients.size() == 1) return make_in_process_communicators(static_cast<int>(members.size()), members);
    const auto deadline = detail::Clock::now() + (timeout.count() > 0 ? timeout : default_collective_timeout());
    meet(members, owners, clients, deadline);
    MPI_Comm comm = create_group_comm(clients);
    MpiCommunicatorOptions options = options_;
    options.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::max(deadline - detail::Clock::now(), detail::Clock::duration(std::chrono::milliseconds(1))));
    std::shared_ptr<detail::MpiTransport> transport;
    try {
      transport = detail::MpiTransport::create(comm, options);
    } catch (const Error& e) {
      // A deadline (or an abort) may have ended create's wait while its MPI_Comm_idup of `comm`
      // was still pending: MPI keeps progressing that collective, which reads `comm`, so freeing
      // it here left a dangling communicator that the next MPI call of the process crashed in
      // (libnbc's progress). The group's communicator is then leaked, as idup_until leaks the
      // new handle (mpi_env.h).
      if (e.code() != ErrorCode::kDeadlineExceeded && e.code() != ErrorCode::kAborted) {
        free_comm(comm);
      }
      throw;
    } catch (...) {
      free_comm(comm);
      throw;
    }
    free_comm(comm);
    std::vector<int> process_of;
    for (int owner : owners) {
      process_of.push_back(static_cast<int>(std::find(clients.begin(), clients.end(), owner) - clients.begin()));
    }
    return detail::make_process_group(std::move(transport), members, process_of);
  }

 private:
  // Every owning client sends the others the group's digest and checks theirs.
  void meet(const std::vector<std::string>& members, const std::vector<int>& owners,
            const std::vector<int>& clients, detail::Deadline deadline) {
    const auto start = detail::Clock::now();
    const uint64_t mine = digest_of(members, owners);
    const detail::Signature sig{++joins_, fmt::format("join({:016x})", mine),
                                fmt::format("join of group [{}]", fmt::join(members, ", "))};
    // A meeting called off before this client came (the others gave up waiting for it, or the
    // cluster had failed before) is said as such, naming no other client as late. Every send
    // hears of aborts first; so does the poll after them, before any wait.
    try {
      world_->poll_aborts();
      for (int c : clients) {
        if (c != client_id()) {
          world_->send_tagged(c, detail::mpi_tags::kJoin, &mine, sizeof mine, sig, deadline);
        }
      }
      world_->poll_aborts();
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kAborted) throw;
      detail::throw_error(ErrorCode::kAborted, kCluster,
                          "client {} cannot join group [{}]: the meeting was called off before it "
                          "came (the others gave up waiting for it, or the cluster had failed): {}",
                          client_id(), fmt::join(members, ", "), e.message());
    }
    // Every digest is read before a mismatch is reported, so that a failed meeting leaves no
    // message behind for the next join.
    int differs = -1;
    uint64_t their_digest = 0;
    for (int c : clients) {
      if (c == client_id()) continue;
      uint64_t theirs = 0;
      try {
        world_->recv_tagged(c, detail::mpi_tags::kJoin, &theirs, sizeof theirs, sig, deadline,
                            "join");
      } catch (const Error& e) {
        // The client waited for is named by its members in this group (the devices the caller
        // knows), as a group names a late rank. Aborted: another client's wait ended first (its
        // deadline, or a lost process) and called the meeting off while this one waited for c.
        if (e.code() != ErrorCode::kDeadlineExceeded && e.code() != ErrorCode::kAborted) throw;
        std::vector<std::string> late;
        for (size_t r = 0; r < members.size(); ++r) {
          if (owners[r] == c) late.push_back(fmt::format("{} ({})", r, members[r]));
        }
        const double waited = std::chrono::duration<double>(detail::Clock::now() - start).count();
        if (e.code() == ErrorCode::kDeadlineExceeded) {
          detail::throw_error(ErrorCode::kDeadlineExceeded, kCluster,
                              "client {} waited {:.3f} s for ranks [{}] (client {}) to join group "
                              "[{}]; they did not arrive: {}",
                              client_id(), waited, fmt::join(late, ", "), c,
                              fmt::join(members, ", "), e.message());
        }
        detail::throw_error(ErrorCode::kAborted, kCluster,
                            "client {} waited {:.3f} s for ranks [{}] (client {}) to join group "
                            "[{}] until the meeting was aborted: {}",
                            client_id(), waited, fmt::join(late, ", "), c,
                            fmt::join(members, ", "), e.message());
      }
      if (theirs != mine && differs < 0) {
        differs = c;
        their_digest = theirs;
      }
    }
    if (differs >= 0) {
      detail::throw_error(ErrorCode::kFailedPrecondition, kCluster,
                          "client {} joins group [{}] (digest {:016x}) but client {} joins "
                          "another group (digest {:016x}) at the same point; every client must "
                          "make the same collective calls in the same order",
                          client_id(), fmt::join(members, ", "), mine, differs, their_digest);
    }
  }

  MPI_Comm create_group_comm(const std::vector<int>& clients) {
    detail::MpiCallLock lock;
    MPI_Group world_group = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
    MPI_Comm comm = MPI_COMM_NULL;
    detail::check_mpi(MPI_Comm_group(world_->comm(), &world_group), "MPI_Comm_group");
    int rc = MPI_Group_incl(world_group, static_cast<int>(clients.size()), clients.data(), &group);
    if (rc == MPI_SUCCESS) {
      rc = MPI_Comm_create_group(world_->comm(), group, detail::mpi_tags::kCreateGroup, &comm);
    }
    if (group != MPI_GROUP_NULL) MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    detail::check_mpi(rc, "MPI_Comm_create_group");
    return comm;
  }

  static void free_comm(MPI_Comm& comm) {
    detail::MpiCallLock lock;
    MPI_Comm_free(&comm);
  }

  MpiCommunicatorOptions options_;
  std::shared_ptr<detail::MpiTransport> world_;
  uint64_t joins_ = 0;
};

}  // namespace

std::shared_ptr<Cluster> make_mpi_cluster(const MpiCommunicatorOptions& options) {
  detail::require_mpi_initialized("make_mpi_cluster");
  MpiCommunicatorOptions named = options;
  if (named.name.empty()) named.name = fmt::format("/job:worker/replica:0/task:{}", mpi_rank());
  return std::make_shared<MpiCluster>(named);
}

}  // namespace tessel
