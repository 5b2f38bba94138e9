// tessel: command-line entry point. Dispatches to one subcommand per file (cmd_*.cpp) and turns
// errors into messages on stderr and exit statuses.
#include <exception>
#include <iostream>
#include <string_view>

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
    "Run 'tessel <command> --help' for a command's options.\n";

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
    if (command == "bench") return run_bench(args);
    if (command == "train") return run_train(args);
    std::cerr << "tessel: error: unknown command '" << command << "'\n\n" << kUsage;
    return kExitUsage;
  } catch (const UsageError& e) {
    std::cerr << "tessel: error: " << e.what() << "\nRun 'tessel " << e.command()
              << " --help' for usage.\n";
    return kExitUsage;
  } catch (const tessel::Error& e) {
    // Every tessel::Error reaching here comes from input the user gave (or a layout the demo
    // built): report it as bad input.
    std::cerr << "tessel: error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "tessel: internal error: " << e.what() << "\n";
    return kExitFailure;
  }
}
