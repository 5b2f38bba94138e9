// The tessel CLI's subcommands. Each takes the arguments after its name and returns the exit
// status; main() reports an exception escaping a command on stderr: a UsageError as bad
// arguments (2), a tessel::Error by its code (input tessel rejected: 2; a run that failed, e.g.
// kAborted for a lost peer, kDeadlineExceeded, kFailedPrecondition for a non-finite loss: 1),
// any other std::exception as an internal error (1). Every command is run_command() over its own
// parse and run:
//
//   int run_bench_fusion(const Args& args) {
//     return run_command(args, kHelp, parse, run, "bench fusion");
//   }
#pragma once

#include <iostream>
#include <string_view>

#include "flags.h"
#include "tessel/core/error.h"

namespace tessel::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the run failed: wrong results, a failed collective, a bug
inline constexpr int kExitUsage = 2;    // bad arguments or input tessel rejected

// The options of a command that takes none (its parse only rejects arguments).
struct NoOptions {};

// A command's outline. --help (or -h) anywhere prints `help` and exits 0. Otherwise parse(args)
// reads the arguments into the command's options (a UsageError reaches main(): exit status 2)
// and run(options) runs it, returning the exit status. With `failed` named (a benchmark whose
// arguments, once accepted, cannot be the user's fault), a tessel::Error from run() prints
// "tessel: error: <failed> failed: <what>" and exits 1, where main() would exit 2 for
// kInvalidArgument; without it the error reaches main().
template <typename Parse, typename Run>
int run_command(const Args& args, std::string_view help, Parse&& parse, Run&& run,
                std::string_view failed = {}) {
  if (wants_help(args)) {
    std::cout << help;
    return kExitOk;
  }
  const auto options = parse(args);
  if (failed.empty()) return run(options);
  try {
    return run(options);
  } catch (const Error& e) {
    std::cerr << "tessel: error: " << failed << " failed: " << e.what() << "\n";
    return kExitFailure;
  }
}

int run_info(const Args& args);
int run_layout(const Args& args);
int run_demo(const Args& args);
// `tessel demo` without --layouts: the training demo.
int run_demo_train(const Args& args);
// `tessel bench ...`: dispatches to the bench subcommands below by its first argument.
int run_bench(const Args& args);
// `tessel bench <collective> ...` (all_reduce, all_gather, ...) and `tessel bench --help`.
int run_bench_collective(const Args& args);
// `tessel bench fusion ...` (called by run_bench with the arguments after "fusion").
int run_bench_fusion(const Args& args);
// `tessel bench relayout ...` (called by run_bench with the arguments after "relayout").
int run_bench_relayout(const Args& args);
// `tessel bench matmul ...` and `tessel bench dispatch ...` (the SPMD op benchmarks).
int run_bench_matmul(const Args& args);
int run_bench_dispatch(const Args& args);
// `tessel bench replicate ...`: a replicated training step, compiled vs eager vs sequential.
int run_bench_replicate(const Args& args);
int run_bench_gpt(const Args& args);
// `tessel bench checkpoint ...`: checkpoint save / restore against dd's write and read.
int run_bench_checkpoint(const Args& args);
int run_bench_embedding(const Args& args);
// `tessel bench nccl ...`: NCCL collectives on the GPUs beside raw NCCL.
int run_bench_nccl(const Args& args);
int run_train(const Args& args);

}  // namespace tessel::cli
