// Internal, device code only: the math the ops' CUDA kernels share. The functions the CPU kernels
// call through <cmath> by argument type (exp_of, log_of, sqrt_of, tanh_of, erf_of) are
// elementwise_math.h's, which host and device share; here: a multiply the compiler may not fuse
// into an FMA (where the CPU kernel rounds a product before using it), and the launch shape of
// grid-stride loops.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dtensor/ops/elementwise_math.h"

namespace tessel::detail::gpu {

// a * b rounded, never contracted with a following add.
__device__ inline float mul_rounded(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rounded(double a, double b) { return __dmul_rn(a, b); }

template <typename T>
__device__ inline T infinity() {
  return static_cast<T>(__longlong_as_double(0x7ff0000000000000LL));
}

template <typename T>
__device__ inline T quiet_nan() {
  return static_cast<T>(__longlong_as_double(0x7ff8000000000000LL));
}

constexpr int kThreads = 256;          // threads per block of the elementwise and row kernels
constexpr int64_t kMaxBlocks = 65535;  // grid-stride loops cover the rest

// Blocks for `work` items at `per_block` items a block, at least 1, at most kMaxBlocks.
inline unsigned int blocks_for(int64_t work, int64_t per_block) {
  const int64_t blocks = (work + per_block - 1) / per_block;
  return static_cast<unsigned int>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

// Launches the grid-stride kernel `kernel(args...)` on `stream`, with enough blocks of kThreads
// threads for `n` items, and returns the launch's status; launches nothing when n is 0.
template <typename... Params, typename... Args>
cudaError_t launch_over(int64_t n, cudaStream_t stream, void (*kernel)(Params...), Args... args) {
  if (n == 0) return cudaSuccess;
  kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(args...);
  return cudaGetLastError();
}

// The global index of this thread and the grid's thread count, for grid-stride loops.
__device__ inline int64_t thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t thread_count() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

}  // namespace tessel::detail::gpu
