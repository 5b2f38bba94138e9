// Reference values for reduction tests: small integer inputs whose sums, products and means are
// exact in every dtype (bf16 and u8 included), and the expected result computed in double.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "tessel/core/dtype.h"
#include "tessel/core/reduce_op.h"

namespace tessel::testing {

// Rank `rank`'s element `i` for a reduction with `op`.
inline double reduction_input(ReduceOp op, DType dtype, int rank, int64_t i) {
  if (dtype == DType::kBool) return (rank + i) % 3 == 0 ? 1 : 0;
  switch (op) {
    case ReduceOp::kProd: return (rank + i) % 4 == 0 ? 2 : 1;
    case ReduceOp::kMax:
    case ReduceOp::kMin: return static_cast<double>((rank * 13 + i * 5) % 11);
    default: return static_cast<double>((rank * 31 + i * 7) % 5);
  }
}

// Element `i` of `op` over ranks 0..n-1 (integer means truncate; bool sum/max are or,
// prod/min and).
inline double reduction_expected(ReduceOp op, DType dtype, int n, int64_t i) {
  if (dtype == DType::kBool) {
    bool any = false, all = true;
    for (int r = 0; r < n; ++r) {
      any = any || reduction_input(op, dtype, r, i) != 0;
      all = all && reduction_input(op, dtype, r, i) != 0;
    }
    return (op == ReduceOp::kProd || op == ReduceOp::kMin) ? all : any;
  }
  double acc = reduction_input(op, dtype, 0, i);
  for (int r = 1; r < n; ++r) {
    const double v = reduction_input(op, dtype, r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kMean: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
    }
  }
  if (op == ReduceOp::kMean) acc = is_floating(dtype) ? acc / n : std::trunc(acc / n);
  return acc;
}

}  // namespace tessel::testing
