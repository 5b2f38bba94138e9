// Internal to `tessel bench`: the values the benchmark writes and the reference it checks
// results against.
//
// Every rank's input is a short periodic sequence of small integers (period kPeriod in the
// element index, different per rank), so the exact result of any collective is itself periodic
// and is computed once per residue in double, then converted to the dtype the way the library
// converts (Tensor::astype). Checking a result is then a memory comparison against a tile of
// the expected sequence: cheap enough to run on every size, and exact — #wrong counts elements
// whose bytes differ from the reference.
//
// Values (j = element index, r = rank, N = group size):
//   sum, max, min: 1 + (j + 3r) mod 8
//   mean:          N * (1 + (j + 3r) mod 8), so the mean is an exact integer
//   prod:          2 if (j + r) mod 4 == 0 else 1 (the product is a power of two <= 2^N)
//   bool:          (j + r) mod 8 < 3
// These are exact in every dtype for the group sizes the bench allows (at most 32 devices; u8:
// sums below 256 for N <= 31, means for N <= 5, products for N <= 28; bf16 integers are exact
// up to 256).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "tessel/core/dtype.h"
#include "tessel/core/reduce_op.h"

namespace tessel::cli::bench {

inline constexpr int64_t kPeriod = 8;

// Element j of rank r's input in a group of n.
double input_value(DType dtype, ReduceOp op, int n, int rank, int64_t j);
// Element j of the reduction of all n ranks' inputs.
double reduced_value(DType dtype, ReduceOp op, int n, int64_t j);

// A periodic sequence of `dtype` elements (period kPeriod).
class Pattern {
 public:
  // value(j) for j in [0, kPeriod) defines the sequence.
  Pattern(DType dtype, const std::function<double(int64_t)>& value);

  // Writes elements [first, first + count) of the sequence to dst.
  void fill(void* dst, int64_t first, int64_t count) const;
  // The number of the `count` elements at src that differ from elements [first, first + count)
  // of the sequence (byte comparison).
  int64_t count_wrong(const void* src, int64_t first, int64_t count) const;

 private:
  size_t item_;
  std::vector<unsigned char> tile_;  // kTileElements + kPeriod elements of the sequence
};

}  // namespace tessel::cli::bench
