// The MPI API in the ordinary (single-process, no mpirun) test binary: what a build without MPI
// reports (the stub), what a build with MPI reports before MPI is initialised, and the kMpi
// algorithm's name. The transport itself is tested under mpirun (tests/mpi, label mpi).
#include <gtest/gtest.h>

#include "tessel/comm/communicator.h"
#include "tessel/comm/mpi.h"
#include "tessel/config.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

TEST(MpiApi, AvailabilityMatchesTheBuild) {
#ifdef TESSEL_HAVE_MPI
  EXPECT_TRUE(mpi_available());
  EXPECT_NE(mpi_library_version().find("MPI"), std::string::npos) << mpi_library_version();
#else
  EXPECT_FALSE(mpi_available());
  EXPECT_EQ(mpi_library_version(), "");
#endif
}

TEST(MpiApi, WithoutMpiEveryCallIsUnavailableElseNeedsInitialisedMpi) {
  if (!mpi_available()) {
    EXPECT_TESSEL_ERROR(MpiEnvironment(), ErrorCode::kUnavailable, "tessel was built without MPI");
    EXPECT_TESSEL_ERROR(mpi_rank(), ErrorCode::kUnavailable, "tessel was built without MPI");
    EXPECT_TESSEL_ERROR(make_mpi_communicator(), ErrorCode::kUnavailable, "tessel was built without MPI");
    EXPECT_TESSEL_ERROR(make_hierarchical_communicators(2), ErrorCode::kUnavailable,
                        "tessel was built without MPI");
  } else {
    // This binary never initialises MPI.
    EXPECT_TESSEL_ERROR(mpi_rank(), ErrorCode::kFailedPrecondition, "MPI is not initialised");
    EXPECT_TESSEL_ERROR(mpi_size(), ErrorCode::kFailedPrecondition, "create a tessel::MpiEnvironment first");
    EXPECT_TESSEL_ERROR(make_mpi_communicator(), ErrorCode::kFailedPrecondition, "MPI is not initialised");
    // It asked MPI for the world rank first, which ended the process (MPI_Comm_rank before MPI_Init).
    EXPECT_TESSEL_ERROR(make_hierarchical_communicators(2), ErrorCode::kFailedPrecondition,
                        "make_hierarchical_communicators: MPI is not initialised");
  }
}

TEST(MpiApi, MpiAlgorithmNameAndItsTransport) {
  EXPECT_EQ(algorithm_name(Algorithm::kMpi), "mpi");
  EXPECT_EQ(algorithm_from_name("mpi"), Algorithm::kMpi);
  EXPECT_EQ(mpi_thread_level_name(MpiThreadLevel::kSerialized), "serialized");
  // On an in-process group kMpi is refused (without MPI: unavailable), and the other ranks hear
  // of it.
  auto comms = make_in_process_communicators(1);
  Tensor x = Tensor::full({4}, DType::kF32, 1);
  CollectiveOptions o;
  o.algorithm = Algorithm::kMpi;
  o.timeout = std::chrono::seconds(5);
  EXPECT_TESSEL_ERROR(comms[0]->all_reduce(x, x, ReduceOp::kSum, o),
                      mpi_available() ? ErrorCode::kInvalidArgument : ErrorCode::kUnavailable,
                      mpi_available() ? "needs a communicator over MPI" : "built without MPI");
}

}  // namespace
}  // namespace tessel
