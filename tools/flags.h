// The tessel CLI's flag parser: every command declares its flags once, each with where its
// value goes, and parse() reads the arguments in one pass.
//
//   int iters = 20;
//   int64_t bytes = 4096;
//   bool json = false;
//   FlagParser flags("bench fusion");
//   flags.integer({"-n", "--iters"}, iters, 1, 100000);
//   flags.size({"--bytes"}, bytes, 4, int64_t{1} << 30);
//   flags.set({"--json"}, json);
//   flags.parse(args);
//
// A value follows its flag ("--iters 5") or, for a long flag, an '=' ("--iters=5"). Arguments
// that do not start with '-' go to the positional handler. Every mistake throws UsageError naming
// the command, the flag and the offending text; main() prints it as
//   tessel: error: bench matmul: --n expects a positive integer, got 'abc'
//   Run 'tessel bench matmul --help' for usage.
// and exits with status 2.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tessel::cli {

// The arguments after a command's name.
using Args = std::vector<std::string>;

// True when any argument is "--help" or "-h".
bool wants_help(const Args& args);

// A flag value that is a list, split on every `sep`: "a,b," gives {"a", "b", ""}, "" gives {""}.
std::vector<std::string> split_list(const std::string& text, char sep);

// A bad command line: what() is "<command>: <message>".
class UsageError : public std::runtime_error {
 public:
  UsageError(std::string command, std::string message);

  // The command as typed after "tessel", e.g. "bench fusion".
  const std::string& command() const noexcept { return command_; }
  const std::string& message() const noexcept { return message_; }

 private:
  std::string command_;
  std::string message_;
};

class FlagParser {
 public:
  // The names a flag answers to, e.g. {"-n", "--iters"}.
  using Names = std::initializer_list<std::string_view>;
  // An integer flag's upper bound when it has none.
  static constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();

  // `command` names the command in every error ("bench", "bench relayout", "demo").
  explicit FlagParser(std::string command);
  // The declared flags point into the parser (and at their targets): it stays where it is.
  FlagParser(const FlagParser&) = delete;
  FlagParser& operator=(const FlagParser&) = delete;

  // A decimal integer in [low, high].
  void integer(Names names, int64_t& target, int64_t low, int64_t high);
  void integer(Names names, int& target, int64_t low, int64_t high);
  // An integer >= 1.
  void positive(Names names, int64_t& target);
  // A byte count in [low, high]: tessel::parse_byte_size's, digits with an optional unit K, M,
  // G or T (powers of 1024, either case, optionally followed by B or iB), e.g. 4096, 4K, 16MiB,
  // 1G.
  void size(Names names, int64_t& target, int64_t low, int64_t high);
  // A floating-point number.
  void number(Names names, double& target);
  // Any text.
  void text(Names names, std::string& target);
  void text(Names names, std::optional<std::string>& target);
  // A switch without a value: sets target to `value`.
  void set(Names names, bool& target, bool value = true);
  // A flag whose value the command interprets: handle(flag as typed, value).
  void custom(Names names,
              std::function<void(const std::string& flag, const std::string& value)> handle);
  // Arguments that are not flags, in order; without a handler they are errors.
  void positional(std::function<void(const std::string& argument)> handle);

  // Reads `args`, storing each value as it comes. Throws UsageError.
  void parse(const Args& args) const;

  // Throws UsageError(command, message): for the command's own checks, in a custom handler or
  // after parse().
  [[noreturn]] void fail(const std::string& message) const;

  // The value parsers behind integer() and size(), for values made of parts (--shape 8,6).
  int64_t parse_integer(const std::string& flag, const std::string& text, int64_t low,
                        int64_t high) const;
  int64_t parse_size(const std::string& flag, const std::string& text, int64_t low,
                     int64_t high) const;

 private:
  struct Flag {
    std::vector<std::string> names;
    bool takes_value = true;
    std::function<void(const std::string& flag, const std::string& value)> handle;
  };

  void add(Names names, bool takes_value,
           std::function<void(const std::string&, const std::string&)> handle);
  const Flag* find(const std::string& name) const;

  std::string command_;
  std::vector<Flag> flags_;
  std::function<void(const std::string&)> positional_;
};

}  // namespace tessel::cli
