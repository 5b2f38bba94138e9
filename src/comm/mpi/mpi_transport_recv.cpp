// The MpiTransport's receives (comm/mpi/mpi_transport.h): MPI_Irecv into the caller's buffer,
// piece by piece, polled by the transport's wait; a receive that ends early (deadline, abort)
// is taken back from MPI before the buffer returns to the caller.
#include "comm/mpi/mpi_transport.h"
#include "core/errors.h"

namespace tessel::detail {

void MpiTransport::recv(int peer, int tag, void* data, size_t bytes, const Signature& signature,
                        Deadline deadline) {
  recv_tagged(peer, mpi_tag_of(tag, "recv"), data, bytes, signature, deadline, std::to_string(tag));
}

void MpiTransport::recv_tagged(int peer, int mpi_tag, void* data, size_t bytes,
                               const Signature& signature, Deadline deadline,
                               std::string_view tag_text) {
  // Watched as a whole: MPI_Irecv and the cancellation below are MPI calls too.
  const std::atomic<int> from{peer};
  const auto watch = watch_stuck(signature, deadline, &from);
  poll_aborts();
  auto* p = static_cast<uint8_t*>(data);
  size_t offset = 0;
  do {
    const size_t piece = std::min(kMaxPiece, bytes - offset);
    MPI_Request request = MPI_REQUEST_NULL;
    int posted = MPI_SUCCESS;
    {
      MpiCallLock lock;
      posted = MPI_Irecv(p + offset, static_cast<int>(piece), MPI_BYTE, peer, mpi_tag, comm_, &request);
    }
    if (posted != MPI_SUCCESS) lost_peer(peer, "MPI_Irecv", posted);
    MPI_Status status;
    int rc = MPI_SUCCESS;
    auto poll = [&] {
      int done = 0;
      MpiCallLock lock;
      rc = MPI_Test(&request, &done, &status);
      return done != 0 || rc != MPI_SUCCESS;
    };
    auto on_deadline = [&](double waited) {
      const std::string message = fmt::format(
          "{} waited {:.3f} s for a message from {} with tag {} in {} (sequence {}); it did not "
          "arrive",
          who(rank_), waited, who(peer), tag_text, signature.describe(members_), signature.sequence);
      abort_group(message, /*tell_peers=*/true);
      throw Error(ErrorCode::kDeadlineExceeded, kComponent, message);
    };
    try {
      wait(poll, signature, deadline, on_deadline);
    } catch (...) {
      // The buffer goes back to the caller: take the receive back from MPI first.
      MpiCallLock lock;
      if (request != MPI_REQUEST_NULL) {
        MPI_Cancel(&request);
        const auto limit = Clock::now() + std::chrono::milliseconds(100);
        int done = 0;
        while (!done && Clock::now() < limit) MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        if (!done) MPI_Request_free(&request);
      }
      throw;
    }
    int got = 0;
    if (rc == MPI_SUCCESS) MPI_Get_count(&status, MPI_BYTE, &got);
    int error_class = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &error_class);
    if (error_class == MPI_ERR_TRUNCATE || (rc == MPI_SUCCESS && static_cast<size_t>(got) != piece)) {
      throw_invalid(kComponent, "{} expected {} bytes from {} (tag {}) but {} were sent", who(rank_),
                    bytes, who(peer), tag_text,
                    error_class == MPI_ERR_TRUNCATE ? fmt::format("more than {}", piece)
                                                    : std::to_string(offset + got));
    }
    if (rc != MPI_SUCCESS) lost_peer(peer, "MPI_Irecv", rc);
    offset += piece;
  } while (offset < bytes);
}

}  // namespace tessel::detail
