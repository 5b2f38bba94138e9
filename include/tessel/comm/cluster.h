// Cluster: how the devices of this client (process) reach the devices of the other clients.
//
// A multi-client program runs the same code on every client, each driving its own devices
// (docs/architecture.md). A collective group whose members live on several clients is joined by each of
// them for its own members: join() is collective over the owning clients, which call it with
// the same member list, in the same order relative to their other joins (an SPMD program does).
//
//   // under mpirun -np 2, two devices per process:
//   auto cluster = make_mpi_cluster();                      // tessel/comm/mpi.h
//   auto mine = cluster->join({"/job:worker/replica:0/task:0/device:CPU:0",
//                              "/job:worker/replica:0/task:1/device:CPU:0"},
//                             /*owners=*/{0, 1});
//   // on client 0: mine == {<rank 0>, nullptr}; on client 1: {nullptr, <rank 1>}
//
// Two kinds: make_mpi_cluster (processes of an MPI job; the group runs over MPI between clients
// and in shared memory within one) and make_in_process_cluster (several simulated clients in one
// process, one Runtime each: fast tests of everything multi-client, under ThreadSanitizer too).
//
// Thread safety: join() may be called from any thread, one call at a time per Cluster object;
// the communicators it returns follow Communicator's rules.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tessel/comm/communicator.h"

namespace tessel {

class Cluster {
 public:
  virtual ~Cluster() = default;

  virtual int num_clients() const = 0;
  virtual int client_id() const = 0;

  // The communicators of the members this client owns, at their rank positions (nullptr for the
  // members of other clients). `members`: device names in rank order; `owners[r]`: the client
  // that owns member r. Every owning client must call join with the same lists; `timeout` bounds
  // the meeting (kDeadlineExceeded naming the clients that did not join and their members, "for
  // ranks [2 (.../task:1/device:CPU:0), ...] (client 1)"). Errors: lists of different lengths,
  // an owner outside [0, num_clients()), a repeated member, no member owned by this client:
  // kInvalidArgument; clients joining different groups at the same point: kFailedPrecondition
  // naming both.
  virtual std::vector<std::unique_ptr<Communicator>> join(const std::vector<std::string>& members,
                                                          const std::vector<int>& owners,
                                                          std::chrono::milliseconds timeout) = 0;
};

// `num_clients` simulated clients of one process: element c is client c's view. Their groups
// run over the in-process transport. A group is matched by its member list and by how many
// times each client joined that list before (the k-th join of a list on every client is the
// same group). num_clients < 1: kInvalidArgument.
std::vector<std::shared_ptr<Cluster>> make_in_process_cluster(int num_clients);

}  // namespace tessel
