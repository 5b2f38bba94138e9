// The precision of float32 matmuls on GPU tensor cores: TF's
// tf.config.experimental.enable_tensor_float_32_execution, PyTorch's
// torch.set_float32_matmul_precision("highest" | "high"), JAX's jax_default_matmul_precision.
//
// kHigh (the default, as in TF and JAX on Ampere and later GPUs): a float32 matmul or einsum on a
// GPU device may round its operands to TF32 (float32's 8-bit exponent, 10 of its 23 mantissa
// bits) and sums in float32: about 1e-3 relative error per product, at the tensor cores' speed
// (8x float32's on an H100). kHighest: strict float32 on the GPU too. CPU devices always compute
// float32 matmuls in float32 (no BLAS this machine runs has a TF32 mode), so a CPU run gives
// the same bits under either setting. 16-bit and float64 matmuls are not affected.
//
// The process-wide setting is read by each GPU matmul when it runs; TESSEL_MATMUL_PRECISION
// (highest or high) sets the initial value.
//
//   tessel::set_matmul_precision(tessel::MatmulPrecision::kHighest);  // strict f32 everywhere
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <string_view>

namespace tessel {

enum class MatmulPrecision {
  kHighest,  // strict float32
  kHigh,     // TF32 on GPU tensor cores, float32 sums
};

// The current setting: set_matmul_precision's last value, else TESSEL_MATMUL_PRECISION's (an
// unknown name: kInvalidArgument naming it), else kHigh.
MatmulPrecision matmul_precision();
void set_matmul_precision(MatmulPrecision precision);

// "highest" / "high", and back (another name: kInvalidArgument naming it and the choices).
std::string_view matmul_precision_name(MatmulPrecision precision);
MatmulPrecision matmul_precision_from_name(std::string_view name);

// TF's names for the same switch: enabled is kHigh, disabled kHighest.
void enable_tensor_float_32_execution(bool enabled);
bool tensor_float_32_execution_enabled();

}  // namespace tessel
