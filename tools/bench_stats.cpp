// Benchmark statistics (bench_stats.h).
#include "bench_stats.h"

#include <algorithm>
#include <cstddef>
#include <stdexcept>

namespace tessel::cli::bench {

double median(std::vector<double> values) {
  if (values.empty()) throw std::logic_error("bench::median of no values");
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  const double lower =
      *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

}  // namespace tessel::cli::bench
