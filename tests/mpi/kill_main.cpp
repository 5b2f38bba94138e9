// tessel_mpi_kill: one process is killed in the middle of a collective (kill_test.sh runs it).
//
//   mpirun -np 4 tessel_mpi_kill --algorithm ring|mpi|barrier|send [--timeout-ms 3000] [--no-watch]
//                                [--linger-ms N]
//
// Every process runs collectives in a loop over one MPI communicator (send: rank 0 sends 4 MiB
// to rank 1, which answers with one element; other ranks idle); 300 ms in, rank 1 raises
// SIGKILL from a helper thread, in the middle of whichever collective it is in. Each survivor
// catches the error of its failing call and prints one line
//   survivor rank <r>: <ErrorCode> after <seconds> s: <message>
// then exits with status 1 (with the watch off, without MPI_Finalize: it would wait for the dead
// process). --linger-ms N: a survivor waits N ms after its line before it exits (with _Exit):
// mpirun aborts the whole job at once when a process exits non-zero, which cut short a survivor
// that had not printed its line yet (kill_test.sh, about 1 run in 8 on a loaded machine);
// lingering, the survivors are ended by mpirun's teardown for the killed rank instead (SIGKILL
// odls_base_sigkill_timeout seconds after it), which leaves each time to report. A survivor whose
// loop ends without an error prints "rank <r>: no error" and exits 0, which kill_test.sh reports as
// a failure. SIGTERM (which mpirun sends before SIGKILL when it tears the job down) is caught and
// ignored, so that survivors report even when they fail by the deadline.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>

#include "tessel/comm/communicator.h"
#include "tessel/comm/mpi.h"
#include "tessel/core/error.h"

namespace {

void ignore(int) {}

int run(int argc, char** argv) {
  using namespace tessel;
  std::string mode = "ring";
  int timeout_ms = 3000;
  bool watch = true;
  int linger_ms = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--algorithm" && i + 1 < argc) {
      mode = argv[++i];
    } else if (a == "--timeout-ms" && i + 1 < argc) {
      timeout_ms = std::atoi(argv[++i]);
    } else if (a == "--no-watch") {
      watch = false;
    } else if (a == "--linger-ms" && i + 1 < argc) {
      linger_ms = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "tessel_mpi_kill: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  signal(SIGTERM, ignore);
  MpiEnvironment mpi(&argc, &argv);
  MpiCommunicatorOptions mo;
  mo.watch_local_peers = watch;
  auto comm = make_mpi_communicator(mo);
  const int rank = comm->rank();
  CollectiveOptions o;
  o.timeout = std::chrono::milliseconds(timeout_ms);
  const bool p2p = mode == "barrier" || mode == "send";
  o.algorithm = p2p ? Algorithm::kAuto : algorithm_from_name(mode);
  Tensor ack = Tensor::full({1}, DType::kF32, 1);
  Tensor x = Tensor::full({1 << 20}, DType::kF32, 1);  // 4 MiB
  comm->barrier(o);
  if (rank == 1) {
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      raise(SIGKILL);
    }).detach();
  }
  const auto loop_start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - loop_start < std::chrono::seconds(20)) {
    const auto start = std::chrono::steady_clock::now();
    try {
      if (mode == "barrier") {
        comm->barrier(o);
      } else if (mode == "send") {
        if (rank == 0) {
          comm->send(x, 1, 0, o);
          comm->recv(ack, 1, 0, o);
        } else if (rank == 1) {
          comm->recv(x, 0, 0, o);
          comm->send(ack, 0, 0, o);
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      } else {
        comm->all_reduce(x, x, ReduceOp::kSum, o);
        x.fill(1);
      }
    } catch (const Error& e) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("survivor rank %d: %s after %.3f s: %s\n", rank,
                  std::string(error_code_name(e.code())).c_str(), s, e.what());
      std::fflush(stdout);
      if (linger_ms > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(linger_ms));
        std::_Exit(1);
      }
      if (!watch) std::_Exit(1);
      return 1;
    }
  }
  std::printf("rank %d: no error\n", rank);
  return 0;
}

}  // namespace

// An error outside the loop (MPI start-up, the communicator, the first barrier) ends the process
// with a message and status 1, never std::terminate; std::_Exit because MPI_Finalize could wait
// for a process that is gone.
int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessel_mpi_kill: error: %s\n", e.what());
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(1);
  }
}
