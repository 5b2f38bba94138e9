#include "bench_check.h"

#include <algorithm>
#include <cstring>

#include "tessel/core/tensor.h"

namespace tessel::cli::bench {
namespace {

// Elements compared per memcmp; a multiple of kPeriod.
constexpr int64_t kTileElements = 4096;

double base_value(int rank, int64_t j) { return 1.0 + static_cast<double>((j + 3 * rank) % 8); }

}  // namespace

double input_value(DType dtype, ReduceOp op, int n, int rank, int64_t j) {
  if (dtype == DType::kBool) return (j + rank) % 8 < 3 ? 1.0 : 0.0;
  switch (op) {
    case ReduceOp::kProd: return (j + rank) % 4 == 0 ? 2.0 : 1.0;
    case ReduceOp::kMean: return n * base_value(rank, j);
    default: return base_value(rank, j);
  }
}

double reduced_value(DType dtype, ReduceOp op, int n, int64_t j) {
  if (dtype == DType::kBool) {
    bool any = false, all = true;
    for (int r = 0; r < n; ++r) {
      const bool v = input_value(dtype, op, n, r, j) != 0;
      any = any || v;
      all = all && v;
    }
    return (op == ReduceOp::kProd || op == ReduceOp::kMin) ? all : any;
  }
  double acc = input_value(dtype, op, n, 0, j);
  for (int r = 1; r < n; ++r) {
    const double v = input_value(dtype, op, n, r, j);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kMean: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
    }
  }
  return op == ReduceOp::kMean ? acc / n : acc;  // exact: inputs are multiples of n
}

Pattern::Pattern(DType dtype, const std::function<double(int64_t)>& value) : item_(dtype_size(dtype)) {
  std::vector<double> values(static_cast<size_t>(kTileElements + kPeriod));
  for (size_t j = 0; j < values.size(); ++j) values[j] = value(static_cast<int64_t>(j) % kPeriod);
  const Tensor t = Tensor::from_vector<double>(values, Shape{static_cast<int64_t>(values.size())}).astype(dtype);
  tile_.resize(t.nbytes());
  std::memcpy(tile_.data(), t.data(), t.nbytes());
}

void Pattern::fill(void* dst, int64_t first, int64_t count) const {
  auto* out = static_cast<unsigned char*>(dst);
  for (int64_t o = 0; o < count; o += kTileElements) {
    const int64_t n = std::min(kTileElements, count - o);
    const int64_t phase = (first + o) % kPeriod;
    std::memcpy(out + o * item_, tile_.data() + phase * item_, n * item_);
  }
}

int64_t Pattern::count_wrong(const void* src, int64_t first, int64_t count) const {
  const auto* in = static_cast<const unsigned char*>(src);
  int64_t wrong = 0;
  for (int64_t o = 0; o < count; o += kTileElements) {
    const int64_t n = std::min(kTileElements, count - o);
    const unsigned char* want = tile_.data() + ((first + o) % kPeriod) * item_;
    const unsigned char* got = in + o * item_;
    if (std::memcmp(got, want, n * item_) == 0) continue;
    for (int64_t i = 0; i < n; ++i) {
      if (std::memcmp(got + i * item_, want + i * item_, item_) != 0) ++wrong;
    }
  }
  return wrong;
}

}  // namespace tessel::cli::bench
