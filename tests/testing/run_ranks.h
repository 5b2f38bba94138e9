// run_ranks(n, body): runs body(rank) on n threads at once and returns what each threw (null
// for none). Every collective test bounds its waits with CollectiveOptions::timeout, and ctest's
// TIMEOUT bounds the process, so a bug cannot hang CI.
#pragma once

#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tessel/core/error.h"

namespace tessel::testing {

inline std::vector<std::exception_ptr> run_ranks(int n, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// Rethrows the first error, prefixed with its rank, as a gtest-readable string; "" if none.
inline std::string first_error(const std::vector<std::exception_ptr>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      return "rank " + std::to_string(r) + ": " + e.what();
    }
  }
  return "";
}

// The tessel::Error a rank threw (code and text), or nullopt-like empty code name "" if none.
struct RankError {
  bool thrown = false;
  ErrorCode code = ErrorCode::kInternal;
  std::string what;
};
inline RankError error_of(const std::exception_ptr& e) {
  RankError out;
  if (!e) return out;
  out.thrown = true;
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    out.code = err.code();
    out.what = err.what();
  } catch (const std::exception& err) {
    out.what = err.what();
  }
  return out;
}

}  // namespace tessel::testing
