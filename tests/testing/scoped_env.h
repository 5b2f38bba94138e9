// The tests' one way to set environment variables: ScopedEnv sets (or, with nullopt, unsets)
// one or several variables for a scope, then restores what each was before.
//
//   ScopedEnv env("TESSEL_CPU_DEVICES", "6");
//   ScopedEnv none("TESSEL_GPU_DEVICES", std::nullopt);
//   ScopedEnv mpirun({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"}});
//
// Use only from the test's main thread while no other thread reads the environment.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessel::testing {

class ScopedEnv {
 public:
  using Value = std::optional<std::string>;  // nullopt: unset

  ScopedEnv(const char* name, Value value) : ScopedEnv({{name, std::move(value)}}) {}
  // In order; a variable named twice ends with its last value and is restored to its first.
  explicit ScopedEnv(std::vector<std::pair<std::string, Value>> settings) {
    for (auto& [name, value] : settings) {
      if (!saved(name)) saved_.emplace_back(name, current(name));
      apply(name, value);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) apply(name, value);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  static Value current(const std::string& name) {
    const char* text = std::getenv(name.c_str());
    return text != nullptr ? Value(text) : std::nullopt;
  }
  static void apply(const std::string& name, const Value& value) {
    if (value) {
      ::setenv(name.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }
  bool saved(const std::string& name) const {
    for (const auto& entry : saved_) {
      if (entry.first == name) return true;
    }
    return false;
  }

  std::vector<std::pair<std::string, Value>> saved_;  // each variable's value before, once
};

}  // namespace tessel::testing
