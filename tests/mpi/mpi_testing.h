// Helpers of the MPI tests (tessel_mpi_tests, run under mpirun).
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "tessel/comm/collective_options.h"
#include "tessel/comm/mpi.h"
#include "tessel/core/error.h"
#include "tessel/core/tensor.h"

namespace tessel::testing {

inline CollectiveOptions mpi_options(Algorithm algorithm = Algorithm::kAuto,
                                     std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  CollectiveOptions o;
  o.algorithm = algorithm;
  o.timeout = timeout;
  return o;
}

inline Tensor tensor_of(int64_t count, DType dtype, const std::function<double(int64_t)>& f) {
  std::vector<double> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[static_cast<size_t>(i)] = f(i);
  return Tensor::from_vector<double>(v, Shape{count}).astype(dtype);
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Seconds since `start`.
inline double since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The tessel::Error `call` throws (code and what()); thrown == false if it returns.
struct Caught {
  bool thrown = false;
  ErrorCode code = ErrorCode::kInternal;
  std::string what;
  double seconds = 0;
};
inline Caught catch_error(const std::function<void()>& call) {
  Caught c;
  const auto start = std::chrono::steady_clock::now();
  try {
    call();
  } catch (const Error& e) {
    c.thrown = true;
    c.code = e.code();
    c.what = e.what();
  }
  c.seconds = since(start);
  return c;
}

// MPI_COMM_WORLD's rank and size, and a plain MPI barrier (test scaffolding, not under test).
inline int world_rank() { return mpi_rank(); }
inline int world_size() { return mpi_size(); }
inline void world_barrier() { MPI_Barrier(MPI_COMM_WORLD); }

}  // namespace tessel::testing
