// Internal: groups whose members are spread over MPI processes, several per process
// (mpi_hierarchy.cpp): make_hierarchical_communicators (tessel/comm/mpi.h) and the groups of
// make_mpi_cluster (mpi_cluster.cpp) are made of them. Compiled only with MPI.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/mpi/mpi_transport.h"
#include "tessel/comm/communicator.h"

namespace tessel::detail {

// True for the transports of make_process_group's communicators.
bool is_process_hierarchy(const Transport& t);

// True when the all-reduce of `t` (a hierarchical or MPI transport) goes through a host's shared
// memory: made by an earlier all-reduce (for the white-box tests).
bool uses_host_shm(Transport& t);

// One group spanning processes of `mpi`: members in rank order, member r owned by MPI rank
// process_of[r] of `mpi`, every process owning at least one. Within a process the members meet
// in shared memory; across processes over `mpi`. Returns the communicators of this process's
// members at their rank positions (nullptr for the others'). Not collective.
std::vector<std::unique_ptr<Communicator>> make_process_group(std::shared_ptr<MpiTransport> mpi,
                                                             std::vector<std::string> members,
                                                             const std::vector<int>& process_of);

}  // namespace tessel::detail
