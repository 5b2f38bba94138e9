// The parts of the MPI API (tessel/comm/mpi.h) that are the same whether or not tessel is built with
// MPI; the rest is in mpi_environment.cpp and the transport's files (with MPI) or mpi_stub.cpp
// (without).
#include "tessel/comm/mpi.h"

namespace tessel {

std::string_view mpi_thread_level_name(MpiThreadLevel level) {
  switch (level) {
    case MpiThreadLevel::kSingle: return "single";
    case MpiThreadLevel::kFunneled: return "funneled";
    case MpiThreadLevel::kSerialized: return "serialized";
    case MpiThreadLevel::kMultiple: return "multiple";
  }
  return "unknown";
}

MpiEnvironment::MpiEnvironment() { init(nullptr, nullptr); }
MpiEnvironment::MpiEnvironment(int* argc, char*** argv) { init(argc, argv); }

}  // namespace tessel
