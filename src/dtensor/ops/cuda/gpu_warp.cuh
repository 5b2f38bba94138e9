// Internal, device code only: the warp-per-row scheme the row-wise kernels share (gpu_rows.cu,
// gpu_xent.cu). A row belongs to one warp: its lanes take every 32nd element and combine their
// partial results with shuffles, so no shared memory and no block-wide barrier; grid-stride
// loops over the rows cover any row count.
#pragma once

#include "dtensor/ops/cuda/gpu_math.cuh"

namespace tessel::detail::gpu {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = kThreads / kWarp;
constexpr unsigned kAllLanes = 0xffffffffu;

struct Plus {
  template <typename T>
  __device__ T operator()(T acc, T x) const {
    return acc + x;
  }
};

// std::max(acc, x), as ops_nn.cpp's row maxima take it: a NaN x is skipped.
struct StdMax {
  template <typename T>
  __device__ T operator()(T acc, T x) const {
    return acc < x ? x : acc;
  }
};

// Every lane ends with the same value: lanes l and l^o combine the same two numbers (`combine`
// must be symmetric in them).
template <typename T, typename Combine>
__device__ T warp_combine(T v, Combine combine) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = combine(v, __shfl_xor_sync(kAllLanes, v, o));
  return v;
}
template <typename T>
__device__ T warp_sum(T v) {
  return warp_combine(v, Plus{});
}

// This warp's first row and the stride between a warp's rows, for grid-stride loops over rows.
__device__ inline int64_t first_row() {
  return static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
}
__device__ inline int64_t row_stride() { return static_cast<int64_t>(gridDim.x) * kWarpsPerBlock; }
__device__ inline int lane() { return static_cast<int>(threadIdx.x % kWarp); }

// Blocks of kThreads threads for a warp per row.
inline unsigned int row_blocks(int64_t rows) { return blocks_for(rows, kWarpsPerBlock); }

}  // namespace tessel::detail::gpu
