#include "loss_scale.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "tessel/core/error.h"

namespace tessel::train {
namespace {

void check(bool ok, const std::string& what) {
  if (!ok) throw Error(ErrorCode::kInvalidArgument, "loss scale", what);
}

}  // namespace

DynamicLossScale::DynamicLossScale(Options options) : options_(options), scale_(options.initial) {
  check(std::isfinite(options.initial) && options.initial >= 1,
        fmt::format("the initial scale must be finite and >= 1, got {}", options.initial));
  check(std::isfinite(options.growth_factor) && options.growth_factor > 1,
        fmt::format("the growth factor must be > 1, got {}", options.growth_factor));
  check(options.backoff_factor > 0 && options.backoff_factor < 1,
        fmt::format("the backoff factor must be in (0, 1), got {}", options.backoff_factor));
  check(options.growth_interval >= 1,
        fmt::format("the growth interval must be >= 1 step, got {}", options.growth_interval));
}

bool DynamicLossScale::update(bool finite) {
  if (finite) {
    if (++good_steps_ >= options_.growth_interval) {
      const double grown = scale_ * options_.growth_factor;
      if (std::isfinite(grown)) scale_ = grown;
      good_steps_ = 0;
    }
    return true;
  }
  good_steps_ = 0;
  if (!can_back_off()) return false;
  scale_ = std::max(1.0, scale_ * options_.backoff_factor);
  ++skipped_;
  return false;
}

void DynamicLossScale::restore(double scale, int64_t good_steps) {
  check(std::isfinite(scale) && scale >= 1,
        fmt::format("a saved scale must be finite and >= 1, got {}", scale));
  check(good_steps >= 0, fmt::format("saved good steps must be >= 0, got {}", good_steps));
  scale_ = scale;
  good_steps_ = good_steps;
}

}  // namespace tessel::train
