// make_mpi_system_channel: a SystemChannel (system_channel.h) whose hosts are the processes of an
// MPI job, so that the system lifecycle (system.h) runs across the processes of `mpirun -np N`:
// host `task` is MPI rank `task` of MPI_COMM_WORLD, and the coordinator is rank 0.
//
//   tessel::MpiEnvironment mpi;                          // MPI lives longer than the channel
//   auto channel = make_mpi_system_channel();            // every process, same order
//   Runtime rt({.num_cpu_devices = 2, .job = "worker", .task = mpi_rank()});
//   Host host(rt, channel);
//   std::unique_ptr<SystemCoordinator> c;
//   if (mpi_rank() == 0) c = std::make_unique<SystemCoordinator>(host);
//   Topology t = start_system(host, c.get());            // N hosts x 2 devices
//
// (initialize_accelerator_system does this by itself under mpirun: accelerator_system.h.)
//
// The channel keeps SystemChannel's contract across processes:
//   - It runs over its own duplicate of MPI_COMM_WORLD (MPI_Comm_idup, polled against
//     options.timeout), with MPI's error handler MPI_ERRORS_RETURN on it: an MPI failure is
//     tessel::Error kUnavailable naming the MPI call, never an abort of the job. Making a channel
//     is collective: every process of MPI_COMM_WORLD makes its channels (and its other MPI
//     communicators) in the same order. Processes that do not all join within the timeout:
//     kDeadlineExceeded on those that waited.
//   - A process speaks only as itself: send_to_coordinator(task) and receive_at_host(task) take
//     this process's rank (another task in [0, num_hosts): kInvalidArgument naming both), and
//     receive_at_coordinator / send_to_host run on rank 0 only (elsewhere: kFailedPrecondition).
//     A task outside [0, num_hosts): kInvalidArgument.
//   - Sends copy the message, start an MPI_Isend of the copy and return; the copy lives until
//     MPI has sent it. Messages from one process to another arrive in the order they were sent
//     (MPI's non-overtaking rule on one tag).
//   - Receives poll (MPI_Improbe, then MPI_Imrecv) until their deadline and return nullopt
//     without consuming anything. A message whose transfer has begun but not ended by the
//     deadline is kept and returned by the next receive.
//   - Destruction never hangs. It ends this process's traffic with a close message to each peer
//     it talks with (rank 0: every host; a host: rank 0) and waits up to options.close_timeout
//     for theirs and for its own sends to complete; then it cancels the sends still in flight
//     (their buffers are leaked on purpose: MPI may still read them). The communicator is freed
//     only when every close arrived and nothing was left in flight; otherwise it is kept (one
//     MPI context id), because Open MPI would hand a message arriving after the free to the next
//     communicator with the same context id and break that communicator's message order. So
//     processes that destroy their channels at about the same time free them; one that leaves
//     much earlier keeps its communicator. Destroy channels before MPI is finalized (after it,
//     nothing is freed).
//
// Without MPI in the build: kUnavailable ("tessel was built without MPI"). MPI not initialised
// (or already finalized): kFailedPrecondition saying to create a tessel::MpiEnvironment first.
//
// Thread safety: every method may be called from any thread (MPI calls go through the MPI
// transport's lock, mpi.h). Receives on one queue are serialized: a second receiver waits at
// most until its own deadline.
#pragma once

#include <chrono>
#include <memory>

#include "tessel/system/system_channel.h"

namespace tessel {

struct MpiSystemChannelOptions {
  // Bounds the construction (MPI_Comm_idup). Must be > 0.
  // Default: TF's startup_timeout_sec, 20 s.
  std::chrono::milliseconds timeout{20'000};
  // How long the destructor waits for the peers' close messages and its own sends. >= 0.
  std::chrono::milliseconds close_timeout{1'000};
};

// A SystemChannel over the processes of MPI_COMM_WORLD (num_hosts() == mpi_size()). Collective
// over MPI_COMM_WORLD. A timeout out of range: kInvalidArgument.
std::shared_ptr<SystemChannel> make_mpi_system_channel(const MpiSystemChannelOptions& options = {});

}  // namespace tessel
