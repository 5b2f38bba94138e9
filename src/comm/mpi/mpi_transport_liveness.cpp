// Who is still there (comm/mpi/mpi_transport.h): liveness pings and their pongs
// (mpi_tags::kPing, kPong), the watch on the processes of peers on this host, and naming the
// peer MPI lost when a call with it (or on any source) fails.
#include <signal.h>
#include <sys/types.h>

#include <cerrno>
#include <fstream>

#include "comm/mpi/mpi_transport.h"
#include "core/errors.h"

namespace tessel::detail {
namespace {

// A probe's payload: the group's incarnation and the prober's nonce.
struct Probe {
  uint64_t incarnation = 0;
  uint64_t nonce = 0;
};

}  // namespace

// True when process `pid` (on this host) no longer runs: gone, or a zombie not yet reaped.
bool process_gone(int64_t pid) {
  if (pid <= 0) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat;
  std::getline(in, stat);
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  const char state = stat[paren + 2];
  return state == 'Z' || state == 'X';
}

// ---- lost peers ------------------------------------------------------------------------------

void MpiTransport::lost_peer(int peer, std::string_view call, int rc) {
  // MPI fails a call with a peer when it lost the connection to it (e.g. a TCP reset from a
  // killed process on another host): the peer is named and the group aborted, as watch_peers
  // does. Called without send_mu_ or MpiCallLock: abort_group sends to the other peers.
  mpi_peer_lost().store(true);
  abort_group(fmt::format("{} lost {}: {} to it failed: {}", who(rank_), who(peer), call,
                          locked_mpi_error_string(rc)),
              /*tell_peers=*/true, /*lost=*/peer);
  throw_aborted();
}

void MpiTransport::fail_naming_lost_peer(int rc, std::string_view call) {
  // MPI does not say which peer failed a call on any source: a ping to a lost peer that fails
  // at once names it (lost_peer); otherwise the call's own error is reported (the pings stay
  // queued, to be reaped or cancelled with the group).
  start_probe();
  throw_error(ErrorCode::kUnavailable, kMpiComponent, "{} failed: {}", call,
              locked_mpi_error_string(rc));
}

void MpiTransport::watch_peers(const Signature& signature, double waited) {
  // Every peer that is gone is named: survivors that already failed and exited may be among
  // them, next to the process that was lost first.
  const Peer& me = peers_[rank_];
  std::vector<std::string> gone;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || peers_[p].host != me.host || !process_gone(peers_[p].pid)) continue;
    gone.push_back(fmt::format("{} (pid {})", who(p), peers_[p].pid));
  }
  if (gone.empty()) return;
  const std::string message = fmt::format(
      "{} lost {}: {} no longer running; {} waited {:.3f} s in {} (sequence {})", who(rank_),
      fmt::join(gone, ", "), gone.size() == 1 ? "its process is" : "their processes are",
      who(rank_), waited, signature.describe(members_), signature.sequence);
  mpi_peer_lost().store(true);
  abort_group(message, /*tell_peers=*/true);
  throw_aborted();
}

// ---- liveness probes -------------------------------------------------------------------------

int MpiTransport::receive_probe(int tag, void* probe) {
  int flag = 0, rc = MPI_SUCCESS;
  MPI_Message message;
  MPI_Status status;
  {
    MpiCallLock lock;
    rc = MPI_Improbe(MPI_ANY_SOURCE, tag, comm_, &flag, &message, &status);
    if (rc == MPI_SUCCESS && flag) {
      check_mpi(MPI_Mrecv(probe, sizeof(Probe), MPI_BYTE, &message, MPI_STATUS_IGNORE), "MPI_Mrecv");
      return status.MPI_SOURCE;
    }
  }
  if (rc != MPI_SUCCESS) fail_naming_lost_peer(rc, "MPI_Improbe");
  return -1;
}

void MpiTransport::answer_pings() {
  Probe probe;
  for (int from; (from = receive_probe(mpi_tags::kPing, &probe)) >= 0;) {
    if (probe.incarnation == incarnation_) post_send(from, mpi_tags::kPong, &probe, sizeof probe);
  }
}

uint64_t MpiTransport::start_probe() {
  const Probe mine{incarnation_, ++probes_};
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) post_send(r, mpi_tags::kPing, &mine, sizeof mine);
  }
  return mine.nonce;
}

void MpiTransport::collect_pongs(uint64_t nonce, std::vector<bool>& answered) {
  answered[static_cast<size_t>(rank_)] = true;
  Probe pong;
  for (int from; (from = receive_probe(mpi_tags::kPong, &pong)) >= 0;) {
    if (pong.incarnation == incarnation_ && pong.nonce == nonce) answered[static_cast<size_t>(from)] = true;
  }
}

}  // namespace tessel::detail
