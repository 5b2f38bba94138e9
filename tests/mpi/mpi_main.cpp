// main of tessel_mpi_tests: every process of `mpirun -np N` runs the same tests in the same
// order. MPI lives for the whole run (MpiEnvironment); each test makes its own communicators,
// so that a test that aborts its group leaves the next one a fresh group. Rank 0 prints the
// usual gtest output; other ranks print only their failures, prefixed with their rank. After
// each test the ranks agree on its outcome (rank 0 names the ranks where it failed), and the
// exit status is non-zero on every rank if any rank failed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "tessel/comm/mpi.h"

namespace {

// Non-zero ranks: one line per failed assertion, then the failed test's name.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] [  FAILED  ] %s.%s\n", rank_, info.test_suite_name(), info.name());
    }
  }

 private:
  int rank_;
};

// Every rank: after each test, gathers who failed; rank 0 prints the list.
class RankAgreement : public ::testing::EmptyTestEventListener {
 public:
  RankAgreement(int rank, int size) : rank_(rank), size_(size) {}
  void OnTestEnd(const ::testing::TestInfo& info) override {
    int failed = info.result()->Failed() ? 1 : 0;
    std::vector<int> all(static_cast<size_t>(size_), 0);
    MPI_Gather(&failed, 1, MPI_INT, all.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank_ != 0) return;
    std::string ranks;
    for (int r = 0; r < size_; ++r) {
      if (all[r]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    }
    if (!ranks.empty()) {
      std::printf("[  FAILED  ] %s.%s on rank(s) %s of %d\n", info.test_suite_name(), info.name(),
                  ranks.c_str(), size_);
      std::fflush(stdout);
    }
  }

 private:
  int rank_, size_;
};

}  // namespace

int main(int argc, char** argv) {
  tessel::MpiEnvironment mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rank = tessel::mpi_rank();
  const int size = tessel::mpi_size();
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  listeners.Append(new RankAgreement(rank, size));
  int result = RUN_ALL_TESTS();
  MPI_Allreduce(MPI_IN_PLACE, &result, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return result;
}
