// The MpiTransport's sends (comm/mpi/mpi_transport.h): every send is buffered (a copy of the
// caller's bytes goes out with MPI_Isend, so send never waits for its receiver), the copies are
// reaped by later calls and reused; and the test seam that makes sends to one peer fail.
#include <cstring>

#include "comm/mpi/mpi_transport.h"
#include "core/errors.h"

namespace tessel::detail {
namespace {

std::atomic<int> g_failing_peer{-1};  // ScopedMpiSendFault's peer, -1: none
// Send buffers kept for reuse.
constexpr size_t kSpareBuffers = 4;

}  // namespace

ScopedMpiSendFault::ScopedMpiSendFault(int peer) : peer_lost_before_(mpi_peer_lost().load()) {
  g_failing_peer.store(peer);
}

ScopedMpiSendFault::~ScopedMpiSendFault() {
  g_failing_peer.store(-1);
  mpi_peer_lost().store(peer_lost_before_);
}

int MpiTransport::mpi_tag_of(int tag, std::string_view op) const {
  if (tag < 0) {
    if (tag < -7) {
      throw_error(ErrorCode::kInternal, kComponent, "{}: algorithm tag {} out of range", op, tag);
    }
    return mpi_tags::kAlgorithmBase - tag;
  }
  if (tag > tag_ub_ - mpi_tags::kFirstFree) {
    throw_invalid(kComponent, "{}: tag {} is above this MPI's limit of {}", op, tag,
                  tag_ub_ - mpi_tags::kFirstFree);
  }
  return mpi_tags::kFirstFree + tag;
}

void MpiTransport::send(int peer, int tag, const void* data, size_t bytes,
                        const Signature& signature, Deadline deadline) {
  send_tagged(peer, mpi_tag_of(tag, "send"), data, bytes, signature, deadline);
}

void MpiTransport::send_tagged(int peer, int mpi_tag, const void* data, size_t bytes,
                               const Signature& signature, Deadline deadline) {
  const std::atomic<int> to{peer};
  const auto watch = watch_stuck(signature, deadline, &to);
  poll_aborts();
  const auto* p = static_cast<const uint8_t*>(data);
  // Pieces of at most kMaxPiece; a message of 0 bytes is one empty piece.
  size_t offset = 0;
  do {
    const size_t piece = std::min(kMaxPiece, bytes - offset);
    post_send(peer, mpi_tag, p + offset, piece);
    offset += piece;
  } while (offset < bytes);
}

void MpiTransport::post_send(int peer, int mpi_tag, const void* data, size_t bytes) {
  int rc = MPI_SUCCESS;
  std::string_view call = "MPI_Isend";
  {
    std::lock_guard<std::mutex> guard(send_mu_);
    PendingSend s;
    s.peer = peer;
    if (!spare_.empty()) {
      s.buffer = std::move(spare_.back());
      spare_.pop_back();
    }
    s.buffer.resize(bytes);
    if (bytes > 0) std::memcpy(s.buffer.data(), data, bytes);
    MpiCallLock lock;
    rc = peer == g_failing_peer.load(std::memory_order_relaxed)
             ? MPI_ERR_INTERN
             : MPI_Isend(s.buffer.data(), static_cast<int>(bytes), MPI_BYTE, peer, mpi_tag, comm_,
                         &s.request);
    int done = 0;
    if (rc == MPI_SUCCESS) {
      call = "MPI_Test of an MPI_Isend";
      rc = MPI_Test(&s.request, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) release_failed(s);
    }
    if (rc == MPI_SUCCESS && !done) {
      sends_.push_back(std::move(s));
    } else if (rc == MPI_SUCCESS && spare_.size() < kSpareBuffers) {
      spare_.push_back(std::move(s.buffer));
    }
  }
  if (rc != MPI_SUCCESS) lost_peer(peer, call, rc);
}

void MpiTransport::reap_sends() {
  int rc = MPI_SUCCESS;
  int peer = -1;
  {
    std::lock_guard<std::mutex> guard(send_mu_);
    while (!sends_.empty()) {
      int done = 0;
      {
        MpiCallLock lock;
        rc = MPI_Test(&sends_.front().request, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) release_failed(sends_.front());
      }
      if (rc != MPI_SUCCESS) peer = sends_.front().peer;
      if (rc == MPI_SUCCESS && !done) break;
      if (rc == MPI_SUCCESS && spare_.size() < kSpareBuffers) {
        spare_.push_back(std::move(sends_.front().buffer));
      }
      sends_.pop_front();
      if (rc != MPI_SUCCESS) break;
    }
  }
  if (rc != MPI_SUCCESS) lost_peer(peer, "MPI_Test of an MPI_Isend", rc);
}

void MpiTransport::release_failed(PendingSend& s) {
  // MPI may still hold a request whose test failed: free it, and leak the buffer it may read
  // (as the destructor does for undelivered sends). Under MpiCallLock.
  if (s.request != MPI_REQUEST_NULL) {
    MPI_Request_free(&s.request);
    new std::vector<uint8_t>(std::move(s.buffer));
  }
}

}  // namespace tessel::detail
