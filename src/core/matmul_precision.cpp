// The float32 matmul precision switch (tessel/core/matmul_precision.h).
#include "tessel/core/matmul_precision.h"

#include <atomic>

#include "core/env.h"
#include "core/errors.h"

namespace tessel {
namespace {

constexpr std::string_view kComponent = "matmul_precision";

// -1: not read from the environment yet; else a MatmulPrecision.
std::atomic<int> g_precision{-1};

}  // namespace

std::string_view matmul_precision_name(MatmulPrecision precision) {
  return precision == MatmulPrecision::kHighest ? "highest" : "high";
}

MatmulPrecision matmul_precision_from_name(std::string_view name) {
  if (name == "highest") return MatmulPrecision::kHighest;
  if (name == "high") return MatmulPrecision::kHigh;
  detail::throw_invalid(kComponent, "unknown float32 matmul precision '{}' (highest or high)",
                        name);
}

MatmulPrecision matmul_precision() {
  int value = g_precision.load(std::memory_order_relaxed);
  if (value >= 0) return static_cast<MatmulPrecision>(value);
  const std::optional<std::string> text = detail::env_string("TESSEL_MATMUL_PRECISION");
  MatmulPrecision initial = MatmulPrecision::kHigh;
  if (text) {
    try {
      initial = matmul_precision_from_name(*text);
    } catch (const Error&) {
      detail::throw_invalid(kComponent, "TESSEL_MATMUL_PRECISION='{}' is not highest or high",
                            *text);
    }
  }
  g_precision.compare_exchange_strong(value, static_cast<int>(initial));
  return static_cast<MatmulPrecision>(g_precision.load(std::memory_order_relaxed));
}

void set_matmul_precision(MatmulPrecision precision) {
  if (precision != MatmulPrecision::kHighest && precision != MatmulPrecision::kHigh) {
    detail::throw_invalid(kComponent, "unknown MatmulPrecision value {}",
                          static_cast<int>(precision));
  }
  g_precision.store(static_cast<int>(precision), std::memory_order_relaxed);
}

void enable_tensor_float_32_execution(bool enabled) {
  set_matmul_precision(enabled ? MatmulPrecision::kHigh : MatmulPrecision::kHighest);
}

bool tensor_float_32_execution_enabled() { return matmul_precision() == MatmulPrecision::kHigh; }

}  // namespace tessel
