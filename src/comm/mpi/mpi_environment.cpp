// The process's MPI as tessel/comm/mpi.h shows it, in a tessel built with MPI: MpiEnvironment
// (initialise, finalize), the world's rank and size, the library's version. mpi_common.cpp has
// the parts shared with the stub (mpi_stub.cpp).
#include "comm/mpi/mpi_env.h"
#include "core/errors.h"
#include "tessel/comm/mpi.h"

namespace tessel {

bool mpi_available() { return true; }

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS) return "unknown MPI";
  std::string version(text, static_cast<size_t>(length));
  const size_t newline = version.find_first_of("\r\n");
  if (newline != std::string::npos) version.resize(newline);
  while (!version.empty() && (version.back() == ',' || version.back() == ' ')) version.pop_back();
  return version;
}

void MpiEnvironment::init(int* argc, char*** argv) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) {
    detail::throw_error(ErrorCode::kFailedPrecondition, detail::kMpiComponent,
                        "MPI was finalized in this process; it cannot be initialised again");
  }
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    MPI_Query_thread(&provided);
  } else {
    detail::check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    owns_ = true;
  }
  detail::record_mpi_thread_level(provided);
  level_ = detail::mpi_thread_level_of(provided);
}

MpiEnvironment::~MpiEnvironment() {
  if (!owns_) return;
  // MPI_Finalize waits for every process of the job, a dead one included: it would never return.
  if (detail::mpi_peer_lost().load()) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

int mpi_rank() {
  detail::require_mpi_initialized("mpi_rank");
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int mpi_size() {
  detail::require_mpi_initialized("mpi_size");
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

}  // namespace tessel
