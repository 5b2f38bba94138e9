// tessel: command-line entry point. Dispatches to one subcommand per file (cmd_*.cpp) and turns
// every error into a message on stderr and an exit status (commands.h): no exception leaves
// main(), and no command runs threads of its own whose exceptions could escape (bench's worker
// threads hand theirs to the caller: bench_team.h).
#include <chrono>
#include <csignal>
#include <exception>
#include <iostream>
#include <string_view>
#include <thread>

#include "bench_threads.h"
#include "commands.h"
#include "flags.h"
#include "tessel/core/error.h"

namespace {

constexpr std::string_view kUsage =
    "usage: tessel <command> [options]\n"
    "\n"
    "commands:\n"
    "  info     version, compiler, what this build contains, hardware threads\n"
    "  layout   validate a layout and draw which device holds which block\n"
    "  demo     trains a small MLP on a 2x2 mesh (--layouts: a walkthrough of layouts)\n"
    "  bench    time a collective over N in-process devices (nccl-tests table)\n"
    "  train    train a model: `tessel train gpt` (nanoGPT's character GPT on a mesh)\n"
    "\n"
    "Run 'tessel <command> --help' for a command's options.\n"
    "\n"
    "Exit status: 0 done; 1 the run failed (a wrong result, a lost process, a deadline, a\n"
    "non-finite loss); 2 bad arguments or input tessel rejected. Errors go to stderr as\n"
    "'tessel: error: <what>'. --json output is one line of JSON; NaN and infinities are null.\n";

constexpr std::chrono::milliseconds kReportGrace{300};

// A tessel::Error that failed the run (a lost peer, a deadline, a diverged training run, a
// broken invariant) exits 1; the others reject what the user asked for (a bad layout, an unknown
// name, an index out of range) and exit 2, as bad arguments do.
int exit_status_of(tessel::ErrorCode code) {
  using tessel::ErrorCode;
  using tessel::cli::kExitFailure;
  using tessel::cli::kExitUsage;
  switch (code) {
    case ErrorCode::kFailedPrecondition:
    case ErrorCode::kUnavailable:
    case ErrorCode::kDeadlineExceeded:
    case ErrorCode::kAborted:
    case ErrorCode::kResourceExhausted:
    case ErrorCode::kInternal:
    case ErrorCode::kDataLoss:
      return kExitFailure;
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kOutOfRange:
    case ErrorCode::kNotFound:
    case ErrorCode::kAlreadyExists:
    case ErrorCode::kUnimplemented:
      return kExitUsage;
  }
  return kExitFailure;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tessel::cli;
  if (argc < 2) {
    std::cerr << kUsage;
    return kExitUsage;
  }
  const std::string_view command = argv[1];
  const Args args(argv + 2, argv + argc);
  try {
    if (command == "--help" || command == "-h" || command == "help") {
      std::cout << kUsage;
      return kExitOk;
    }
    if (command == "info") return run_info(args);
    if (command == "layout") return run_layout(args);
    if (command == "demo") return run_demo(args);
    if (command == "bench") {
      bench::pin_thread_environment(argv);
      return run_bench(args);
    }
    if (command == "train") return run_train(args);
    std::cerr << "tessel: error: unknown command '" << command << "'\n\n" << kUsage;
    return kExitUsage;
  } catch (const UsageError& e) {
    std::cerr << "tessel: error: " << e.what() << "\nRun 'tessel " << e.command()
              << " --help' for usage.\n";
    return kExitUsage;
  } catch (const tessel::Error& e) {
    std::cerr << "tessel: error: " << e.what() << "\n" << std::flush;
    if (e.code() == tessel::ErrorCode::kAborted ||
        e.code() == tessel::ErrorCode::kDeadlineExceeded) {
      // A failed collective: under mpirun, which ends the job (SIGTERM, then SIGKILL) at the
      // first non-zero exit, stay a moment with SIGTERM ignored, so that the other processes
      // report it too (they learn of it within the 100 ms watch period of tessel/comm/mpi.h).
      std::signal(SIGTERM, SIG_IGN);
      std::this_thread::sleep_for(kReportGrace);
    }
    return exit_status_of(e.code());
  } catch (const std::exception& e) {
    std::cerr << "tessel: internal error: " << e.what() << "\n";
    return kExitFailure;
  }
}
