// Counter-based random tensors: element i is a pure function of (seed, global flat index i),
// so a block of a tensor can be generated alone and equals the same block of the whole tensor.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/counter_random.h"
#include "core/tensor_impl.h"

namespace tessel {
namespace {

using detail::counter_hash;
using detail::unit_open_high;
using detail::unit_open_low;

void check_finite(const char* what, double a, const char* a_name, double b, const char* b_name) {
  if (!std::isfinite(a) || !std::isfinite(b)) {
    detail::throw_invalid("Tensor", "{} needs finite {} and {}, got {} and {}", what, a_name,
                          b_name, a, b);
  }
}

// Fills a fresh tensor of shape `extents` with gen(global flat index), converted to dtype.
// `offsets`/`extents` place the block inside `global_shape` (validated here).
template <typename Gen>
Tensor generate_block(const Shape& global_shape, const std::vector<int64_t>& offsets,
                      const std::vector<int64_t>& extents, DType dtype, Gen&& gen) {
  const size_t rank = static_cast<size_t>(global_shape.rank());
  if (offsets.size() != rank || extents.size() != rank) {
    detail::throw_invalid("Tensor",
                          "random block needs {} offsets and extents for shape {}, got offsets "
                          "[{}] and extents [{}]",
                          rank, global_shape.to_string(), fmt::join(offsets, ","),
                          fmt::join(extents, ","));
  }
  int64_t first = 0;  // global flat index of the block's first element
  const std::vector<int64_t> global_strides = global_shape.strides();
  for (size_t i = 0; i < rank; ++i) {
    const int64_t dim = global_shape.dims()[i];
    if (offsets[i] < 0 || extents[i] < 0 || offsets[i] > dim || extents[i] > dim - offsets[i]) {
      detail::throw_error(ErrorCode::kOutOfRange, "Tensor",
                          "random block offsets [{}] extents [{}] exceed shape {} in dimension {}",
                          fmt::join(offsets, ","), fmt::join(extents, ","),
                          global_shape.to_string(), i);
    }
    first += offsets[i] * global_strides[i];
  }
  Tensor out = Tensor::zeros(Shape(extents), dtype);
  detail::visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(out.data());
    detail::for_each_offset2(
        extents, global_strides, first, out.strides(), 0,
        [&](int64_t global, int64_t local) { p[local] = gen(static_cast<uint64_t>(global), tag); });
  });
  return out;
}

}  // namespace

Tensor Tensor::random_uniform_block(const Shape& global_shape, const std::vector<int64_t>& offsets,
                                    const std::vector<int64_t>& extents, DType dtype, uint64_t seed,
                                    double low, double high) {
  check_finite("random_uniform", low, "low", high, "high");
  if (low > high) {
    detail::throw_invalid("Tensor", "random_uniform needs low <= high, got low {} > high {}", low,
                          high);
  }
  if (dtype == DType::kBool) {
    return generate_block(global_shape, offsets, extents, dtype, [&](uint64_t i, auto tag) {
      using T = typename decltype(tag)::type;
      return detail::convert<T>((counter_hash(seed, i) >> 63) != 0);
    });
  }
  if (is_floating(dtype)) {
    return generate_block(global_shape, offsets, extents, dtype, [&](uint64_t i, auto tag) {
      using T = typename decltype(tag)::type;
      return detail::convert<T>(low + (high - low) * unit_open_high(counter_hash(seed, i)));
    });
  }
  // Integers in [ceil(low), ceil(high)), which must be a non-empty range inside the dtype.
  const double lo = std::ceil(low);
  const double hi = std::ceil(high);
  const double count = hi - lo;
  const bool fits = detail::visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>) {
      using Lim = std::numeric_limits<T>;
      return lo >= static_cast<double>(Lim::min()) && hi - 1 <= static_cast<double>(Lim::max());
    } else {
      return false;  // not reached: floating dtypes returned above
    }
  });
  if (count < 1 || !fits || count > 0x1p53) {
    detail::throw_invalid("Tensor",
                          "random_uniform for {} needs a non-empty integer range [ceil(low), "
                          "ceil(high)) inside the dtype, got low {} high {}",
                          dtype_name(dtype), low, high);
  }
  return generate_block(global_shape, offsets, extents, dtype, [&](uint64_t i, auto tag) {
    using T = typename decltype(tag)::type;
    const double v = std::floor(count * unit_open_high(counter_hash(seed, i)));
    const int64_t value = static_cast<int64_t>(lo) + static_cast<int64_t>(std::min(v, count - 1));
    return detail::convert<T>(value);
  });
}

Tensor Tensor::random_normal_block(const Shape& global_shape, const std::vector<int64_t>& offsets,
                                   const std::vector<int64_t>& extents, DType dtype, uint64_t seed,
                                   double mean, double stddev) {
  check_finite("random_normal", mean, "mean", stddev, "stddev");
  if (stddev < 0) {
    detail::throw_invalid("Tensor", "random_normal needs stddev >= 0, got {}", stddev);
  }
  if (!is_floating(dtype)) {
    detail::throw_invalid("Tensor", "random_normal needs a floating dtype, got {}",
                          dtype_name(dtype));
  }
  return generate_block(global_shape, offsets, extents, dtype, [&](uint64_t i, auto tag) {
    using T = typename decltype(tag)::type;
    // Box-Muller on two counters per element (2i and 2i + 1), keeping the cosine branch.
    const double u1 = unit_open_low(counter_hash(seed, 2 * i));
    const double u2 = unit_open_high(counter_hash(seed, 2 * i + 1));
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    return detail::convert<T>(mean + stddev * z);
  });
}

Tensor Tensor::random_uniform(const Shape& shape, DType dtype, uint64_t seed, double low,
                              double high) {
  return random_uniform_block(shape, std::vector<int64_t>(static_cast<size_t>(shape.rank()), 0),
                              shape.dims(), dtype, seed, low, high);
}

Tensor Tensor::random_normal(const Shape& shape, DType dtype, uint64_t seed, double mean,
                             double stddev) {
  return random_normal_block(shape, std::vector<int64_t>(static_cast<size_t>(shape.rank()), 0),
                             shape.dims(), dtype, seed, mean, stddev);
}

}  // namespace tessel
