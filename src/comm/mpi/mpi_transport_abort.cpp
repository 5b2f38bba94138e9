// Aborting an MpiTransport's group (comm/mpi/mpi_transport.h): the first reason wins and is sent
// to every peer as an abort record (mpi_tags::kAbort: the group's incarnation, then the
// reason); every wait receives such records from any source and ends with kAborted.
#include <cstring>

#include "comm/mpi/mpi_transport.h"
#include "core/errors.h"

namespace tessel::detail {

void MpiTransport::abort(const std::string& reason) { abort_group(reason, /*tell_peers=*/true); }

void MpiTransport::fail(const std::string& reason) {
  if (unsupported_) {
    // share() refused on every rank alike, after a successful rendezvous: the group is intact.
    unsupported_ = false;
    return;
  }
  abort(reason);
}

bool MpiTransport::abort_group(const std::string& reason, bool tell_peers, int lost) {
  std::string text;
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (aborted_.load()) return false;
    abort_reason_ = reason.rfind("group aborted", 0) == 0 ? reason : "group aborted: " + reason;
    text = abort_reason_;
    aborted_.store(true, std::memory_order_release);
  }
  if (tell_peers) {
    // The group's incarnation, then the reason.
    std::string record(sizeof incarnation_, '\0');
    std::memcpy(record.data(), &incarnation_, sizeof incarnation_);
    record += text;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_ || p == lost) continue;
      try {
        post_send(p, mpi_tags::kAbort, record.data(), record.size());
      } catch (const Error&) {
        // Best effort: a peer we cannot reach will hit its deadline.
      }
    }
  }
  return true;
}

void MpiTransport::throw_aborted() {
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    reason = abort_reason_;
  }
  throw Error(ErrorCode::kAborted, kComponent, reason);
}

void MpiTransport::check_aborted() {
  if (aborted_.load(std::memory_order_acquire)) throw_aborted();
}

void MpiTransport::poll_aborts() {
  check_aborted();
  std::string reason;
  int rc = MPI_SUCCESS;
  {
    int flag = 0;
    MPI_Message message;
    MPI_Status status;
    MpiCallLock lock;
    rc = MPI_Improbe(MPI_ANY_SOURCE, mpi_tags::kAbort, comm_, &flag, &message, &status);
    if (rc == MPI_SUCCESS && !flag) return;
    if (rc == MPI_SUCCESS) {
      int bytes = 0;
      MPI_Get_count(&status, MPI_CHAR, &bytes);
      reason.assign(static_cast<size_t>(bytes), '\0');
      check_mpi(MPI_Mrecv(reason.data(), bytes, MPI_CHAR, &message, MPI_STATUS_IGNORE), "MPI_Mrecv");
    }
  }
  if (rc != MPI_SUCCESS) fail_naming_lost_peer(rc, "MPI_Improbe");
  uint64_t incarnation = 0;
  if (reason.size() >= sizeof incarnation) std::memcpy(&incarnation, reason.data(), sizeof incarnation);
  if (incarnation != incarnation_) return;  // an older group's (see incarnation_)
  reason.erase(0, sizeof incarnation);
  abort_group(reason, /*tell_peers=*/false);
  throw_aborted();
}

}  // namespace tessel::detail
