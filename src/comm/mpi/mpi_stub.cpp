// The MPI API of a tessel built without MPI (TESSEL_WITH_MPI=OFF): mpi_available() is false and
// every call that would need MPI throws kUnavailable, so that callers need no #ifdefs.
#include "comm/algorithms.h"
#include "core/built_without.h"
#include "tessel/comm/mpi.h"

namespace tessel {
namespace {

[[noreturn]] void unavailable(std::string_view what) {
  detail::throw_built_without(detail::Backend::kMpi, "MPI", what);
}

}  // namespace

bool mpi_available() { return false; }
std::string mpi_library_version() { return ""; }

void MpiEnvironment::init(int*, char***) { unavailable("MpiEnvironment"); }
MpiEnvironment::~MpiEnvironment() = default;

int mpi_rank() { unavailable("mpi_rank"); }
int mpi_size() { unavailable("mpi_size"); }

std::unique_ptr<Communicator> make_mpi_communicator(const MpiCommunicatorOptions&) {
  unavailable("make_mpi_communicator");
}

std::vector<std::unique_ptr<Communicator>> make_hierarchical_communicators(
    int, const MpiCommunicatorOptions&) {
  unavailable("make_hierarchical_communicators");
}

std::shared_ptr<Cluster> make_mpi_cluster(const MpiCommunicatorOptions&) {
  unavailable("make_mpi_cluster");
}

namespace detail {

void mpi_all_reduce(Transport&, const AllReduceArgs&) { unavailable("all_reduce via mpi"); }

Algorithm auto_all_reduce_algorithm(const Transport&, size_t) { return Algorithm::kRing; }

bool process_hierarchy_all_reduce(Transport&, const AllReduceArgs&) { return false; }

}  // namespace detail
}  // namespace tessel
