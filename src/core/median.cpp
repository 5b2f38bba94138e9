// The median of a sample (tessel/core/median.h).
#include "tessel/core/median.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "core/errors.h"

namespace tessel {

double median(std::vector<double> values) {
  if (values.empty()) detail::throw_invalid("median", "no values: an empty sample has no median");
  // NaN breaks the ordering nth_element needs; numpy answers NaN, and so does this.
  if (std::any_of(values.begin(), values.end(), [](double v) { return std::isnan(v); })) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  const size_t mid = values.size() / 2;
  const auto upper = values.begin() + static_cast<std::ptrdiff_t>(mid);
  std::nth_element(values.begin(), upper, values.end());
  if (values.size() % 2 == 1) return *upper;
  // Everything before `upper` is at most *upper; the largest of them is the lower middle value.
  const double lower = *std::max_element(values.begin(), upper);
  return (lower + *upper) / 2;  // as numpy and statistics.median compute it
}

}  // namespace tessel
