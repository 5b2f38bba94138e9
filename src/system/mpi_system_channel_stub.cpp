// make_mpi_system_channel in a tessel built without MPI (TESSEL_WITH_MPI=OFF): kUnavailable, as
// every MPI call of the stub (src/comm/mpi/mpi_stub.cpp), so that callers need no #ifdefs.
#include "core/built_without.h"
#include "tessel/system/mpi_system_channel.h"

namespace tessel {

std::shared_ptr<SystemChannel> make_mpi_system_channel(const MpiSystemChannelOptions&) {
  detail::throw_built_without(detail::Backend::kMpi, "MPI", "make_mpi_system_channel");
}

}  // namespace tessel
