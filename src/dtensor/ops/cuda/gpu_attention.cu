// The fused causal attention's CUDA kernels (gpu_launch.h; the op and its CPU kernels:
// ops_fused_attention.cpp). Flash attention's scheme with a thread per row: no [B, H, T, T] map
// is ever in memory.
//
// Forward: a block per (b, h) pair and tile of kRows queries, a thread per query. The keys and
// values the tile's queries see stream through shared memory kKeys rows at a time; each thread
// keeps its query row, its running maximum m, its running sum l and its output row in registers
// and rescales them when the maximum grows (the online softmax), so each score is computed once.
// Dropout multiplies each probability by its factor (0 or 1 / (1 - rate), drawn from the
// element's global index in the [B, H, T, T] probabilities as the CPU draws it) after l took it:
// out = (P o Z) v with P normalised before dropout, as the CPU's.
//
// Backward, two kernels, so that no two threads add to the same element:
// - dq: a thread per query row recomputes its row's maximum and sum (a first pass over the keys),
//   stores lse = m + log(l) and delta = rowsum(g o out) for the second kernel, then in a second
//   pass computes each p = exp(s - lse), dP = (g . v_j) z, dS = scale p (dP - delta) and adds
//   dS k_j to its dq row (rowsum(P o dP) = rowsum(g o out): the CPU kernel's identity).
// - dk, dv: a thread per key row j streams the queries i >= j (their rows of q and g, lse and
//   delta through shared memory) and adds dv_j += p z g_i and dk_j += dS q_i.
// Head widths 32, 64 and 128 (double: 32 and 64) are compiled; the glue runs other widths
// host-staged. Sums accumulate in T, as the CPU's tiles do (its BLAS GEMMs).
#include "dtensor/ops/cuda/gpu_launch.h"
#include "dtensor/ops/cuda/gpu_math.cuh"
#include "dtensor/ops/cuda/gpu_random.cuh"

namespace tessel::detail::gpu {
namespace {

constexpr int kRows = 64;  // threads per block: query rows (forward, dq) or key rows (dk, dv)
constexpr int kKeys = 32;  // rows per shared-memory tile of the streamed operand

// Where row `i` of pair `pair` starts in a [B, T, H, D] block.
__device__ inline int64_t row_at(const AttentionShape& g, int64_t pair, int64_t i) {
  return (pair / g.local_heads) * g.t * g.row_stride + (pair % g.local_heads) * g.d +
         i * g.row_stride;
}

// The global flat index of probability (pair, i, 0) in [B, H, T, T].
__device__ inline uint64_t probability_index(const AttentionShape& g, int64_t pair, int64_t i) {
  const int64_t b = g.first_batch + pair / g.local_heads;
  const int64_t h = g.first_head + pair % g.local_heads;
  return static_cast<uint64_t>(((b * g.heads + h) * g.t + i) * g.t);
}

// Probability (pair, i, j)'s dropout factor: 1 without dropout, else 0 or keep_scale.
template <typename T>
__device__ inline T dropout_factor(const AttentionShape& g, uint64_t row_index, int64_t j,
                                   T keep_scale) {
  if (g.rate <= 0) return T(1);
  return uniform_at(g.seed, row_index + static_cast<uint64_t>(j)) >= g.rate ? keep_scale : T(0);
}

// Rows [first, first + kKeys) of a and b (pair `pair`; zero past t) into shared tiles.
template <typename T, int D>
__device__ void load_tiles(const AttentionShape& g, int64_t pair, int64_t first, const T* a,
                           const T* b, T (*a_tile)[D], T (*b_tile)[D]) {
  for (int e = threadIdx.x; e < kKeys * D; e += kRows) {
    const int r = e / D, c = e % D;
    const int64_t row = first + r;
    const bool inside = row < g.t;
    a_tile[r][c] = inside ? a[row_at(g, pair, row) + c] : T(0);
    b_tile[r][c] = inside ? b[row_at(g, pair, row) + c] : T(0);
  }
}

template <typename T, int D>
__device__ __forceinline__ T dot(const T* x, const T* y) {
  T s = 0;
#pragma unroll
  for (int d = 0; d < D; ++d) s += x[d] * y[d];
  return s;
}

// What every attention kernel's thread starts from: its block's (b, h) pair, the block's first
// row and its own row (a query's, or dkv's key's), whether that row is inside the context, and
// the scale and dropout's keep factor in T.
template <typename T>
struct RowThread {
  int64_t pair, first, row;
  bool active;
  T scale, keep_scale;
  __device__ explicit RowThread(const AttentionShape& g)
      : pair(blockIdx.y),
        first(static_cast<int64_t>(blockIdx.x) * kRows),
        row(first + threadIdx.x),
        active(row < g.t),
        scale(static_cast<T>(g.scale)),
        keep_scale(static_cast<T>(1.0 / (1.0 - g.rate))) {}
};

template <typename T, int D>
__global__ void attention_forward_kernel(AttentionShape g, const T* q, const T* k, const T* v,
                                         T* out) {
  __shared__ T k_tile[kKeys][D];
  __shared__ T v_tile[kKeys][D];
  const RowThread<T> t(g);
  const int64_t pair = t.pair, first_row = t.first, i = t.row;
  const bool active = t.active;
  const T scale = t.scale, keep_scale = t.keep_scale;
  T qi[D], acc[D];
#pragma unroll
  for (int d = 0; d < D; ++d) {
    qi[d] = active ? q[row_at(g, pair, i) + d] : T(0);
    acc[d] = 0;
  }
  T m = -infinity<T>(), l = 0;
  const uint64_t row_index = probability_index(g, pair, active ? i : 0);
  const int64_t keys = first_row + kRows < g.t ? first_row + kRows : g.t;  // the tile's last sees
  for (int64_t j0 = 0; j0 < keys; j0 += kKeys) {
    load_tiles<T, D>(g, pair, j0, k, v, k_tile, v_tile);
    __syncthreads();
    const int64_t end = active ? (j0 + kKeys < i + 1 ? j0 + kKeys : i + 1) : j0;
    for (int64_t j = j0; j < end; ++j) {
      const int r = static_cast<int>(j - j0);
      const T s = scale * dot<T, D>(qi, k_tile[r]);
      if (s > m) {  // rescale what was summed under the smaller maximum
        const T c = exp_of(m - s);
        l *= c;
#pragma unroll
        for (int d = 0; d < D; ++d) acc[d] *= c;
        m = s;
      }
      const T p = exp_of(s - m);
      l += p;
      const T pz = p * dropout_factor(g, row_index, j, keep_scale);
#pragma unroll
      for (int d = 0; d < D; ++d) acc[d] += pz * v_tile[r][d];
    }
    __syncthreads();  // the tiles are rewritten next
  }
  if (active) {
#pragma unroll
    for (int d = 0; d < D; ++d) out[row_at(g, pair, i) + d] = acc[d] / l;
  }
}

template <typename T, int D>
__global__ void attention_dq_kernel(AttentionShape g, const T* q, const T* k, const T* v,
                                    const T* out, const T* grad, T* dq, T* row_stats) {
  __shared__ T k_tile[kKeys][D];
  __shared__ T v_tile[kKeys][D];
  const RowThread<T> t(g);
  const int64_t pair = t.pair, first_row = t.first, i = t.row;
  const bool active = t.active;
  const T scale = t.scale, keep_scale = t.keep_scale;
  T qi[D], gi[D], dqi[D];
  T delta = 0;
#pragma unroll
  for (int d = 0; d < D; ++d) {
    const int64_t at = row_at(g, pair, active ? i : 0) + d;
    qi[d] = active ? q[at] : T(0);
    gi[d] = active ? grad[at] : T(0);
    delta += gi[d] * (active ? out[at] : T(0));
    dqi[d] = 0;
  }
  const uint64_t row_index = probability_index(g, pair, active ? i : 0);
  const int64_t keys = first_row + kRows < g.t ? first_row + kRows : g.t;
  const int64_t end_of_row = active ? i + 1 : 0;
  // Pass 1: the row's maximum and sum.
  T m = -infinity<T>(), l = 0;
  for (int64_t j0 = 0; j0 < keys; j0 += kKeys) {
    load_tiles<T, D>(g, pair, j0, k, v, k_tile, v_tile);
    __syncthreads();
    const int64_t end = j0 + kKeys < end_of_row ? j0 + kKeys : end_of_row;
    for (int64_t j = j0; j < end; ++j) {
      const T s = scale * dot<T, D>(qi, k_tile[j - j0]);
      if (s > m) {
        l *= exp_of(m - s);
        m = s;
      }
      l += exp_of(s - m);
    }
    __syncthreads();
  }
  const T lse = m + log_of(l);
  // Pass 2: the scores' gradients into dq.
  for (int64_t j0 = 0; j0 < keys; j0 += kKeys) {
    load_tiles<T, D>(g, pair, j0, k, v, k_tile, v_tile);
    __syncthreads();
    const int64_t end = j0 + kKeys < end_of_row ? j0 + kKeys : end_of_row;
    for (int64_t j = j0; j < end; ++j) {
      const int r = static_cast<int>(j - j0);
      const T p = exp_of(scale * dot<T, D>(qi, k_tile[r]) - lse);
      const T dp = dot<T, D>(gi, v_tile[r]) * dropout_factor(g, row_index, j, keep_scale);
      const T ds = scale * p * (dp - delta);
#pragma unroll
      for (int d = 0; d < D; ++d) dqi[d] += ds * k_tile[r][d];
    }
    __syncthreads();
  }
  if (active) {
#pragma unroll
    for (int d = 0; d < D; ++d) dq[row_at(g, pair, i) + d] = dqi[d];
    const int64_t stat = (pair * g.t + i) * 2;
    row_stats[stat] = lse;
    row_stats[stat + 1] = delta;
  }
}

template <typename T, int D>
__global__ void attention_dkv_kernel(AttentionShape g, const T* q, const T* k, const T* v,
                                     const T* grad, const T* row_stats, T* dk, T* dv) {
  __shared__ T q_tile[kKeys][D];
  __shared__ T g_tile[kKeys][D];
  __shared__ T stats_tile[kKeys][2];
  const RowThread<T> t(g);
  const int64_t pair = t.pair, first_key = t.first, j = t.row;
  const bool active = t.active;
  const T scale = t.scale, keep_scale = t.keep_scale;
  T kj[D], vj[D], dkj[D], dvj[D];
#pragma unroll
  for (int d = 0; d < D; ++d) {
    const int64_t at = row_at(g, pair, active ? j : 0) + d;
    kj[d] = active ? k[at] : T(0);
    vj[d] = active ? v[at] : T(0);
    dkj[d] = dvj[d] = 0;
  }
  for (int64_t i0 = first_key; i0 < g.t; i0 += kKeys) {  // queries i >= j only
    load_tiles<T, D>(g, pair, i0, q, grad, q_tile, g_tile);
    for (int e = threadIdx.x; e < kKeys * 2; e += kRows) {
      const int64_t i = i0 + e / 2;
      stats_tile[e / 2][e % 2] = i < g.t ? row_stats[(pair * g.t + i) * 2 + e % 2] : T(0);
    }
    __syncthreads();
    const int64_t end = i0 + kKeys < g.t ? i0 + kKeys : g.t;
    for (int64_t i = active && j > i0 ? j : i0; active && i < end; ++i) {
      const int r = static_cast<int>(i - i0);
      const T p = exp_of(scale * dot<T, D>(q_tile[r], kj) - stats_tile[r][0]);
      const T z = dropout_factor(g, probability_index(g, pair, i), j, keep_scale);
      const T ds = scale * p * (dot<T, D>(g_tile[r], vj) * z - stats_tile[r][1]);
      const T pz = p * z;
#pragma unroll
      for (int d = 0; d < D; ++d) {
        dvj[d] += pz * g_tile[r][d];
        dkj[d] += ds * q_tile[r][d];
      }
    }
    __syncthreads();
  }
  if (active) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      dk[row_at(g, pair, j) + d] = dkj[d];
      dv[row_at(g, pair, j) + d] = dvj[d];
    }
  }
}

dim3 grid_of(const AttentionShape& g) {
  return dim3(static_cast<unsigned int>((g.t + kRows - 1) / kRows),
              static_cast<unsigned int>(g.pairs));
}

template <typename T, int D>
cudaError_t forward_as(const AttentionShape& g, const T* q, const T* k, const T* v, T* out,
                       cudaStream_t stream) {
  attention_forward_kernel<T, D><<<grid_of(g), kRows, 0, stream>>>(g, q, k, v, out);
  return cudaGetLastError();
}

template <typename T, int D>
cudaError_t backward_as(const AttentionShape& g, const T* q, const T* k, const T* v, const T* out,
                        const T* grad, T* dq, T* dk, T* dv, cudaStream_t stream) {
  T* row_stats = nullptr;  // lse and delta per (pair, row), stream-ordered scratch
  cudaError_t status = cudaMallocAsync(reinterpret_cast<void**>(&row_stats),
                                       static_cast<size_t>(g.pairs * g.t * 2) * sizeof(T), stream);
  if (status != cudaSuccess) return status;
  attention_dq_kernel<T, D><<<grid_of(g), kRows, 0, stream>>>(g, q, k, v, out, grad, dq,
                                                               row_stats);
  status = cudaGetLastError();
  if (status == cudaSuccess) {
    attention_dkv_kernel<T, D><<<grid_of(g), kRows, 0, stream>>>(g, q, k, v, grad, row_stats, dk,
                                                                  dv);
    status = cudaGetLastError();
  }
  const cudaError_t freed = cudaFreeAsync(row_stats, stream);
  return status != cudaSuccess ? status : freed;
}

}  // namespace

template <typename T>
bool attention_head_width_compiled(int64_t d) {
  return d == 32 || d == 64 || (d == 128 && sizeof(T) == 4);
}

template <typename T>
cudaError_t launch_causal_attention(const AttentionShape& g, const T* q, const T* k, const T* v,
                                    T* out, cudaStream_t stream) {
  if (g.pairs * g.t == 0) return cudaSuccess;
  if (g.d == 32) return forward_as<T, 32>(g, q, k, v, out, stream);
  if (g.d == 64) return forward_as<T, 64>(g, q, k, v, out, stream);
  if constexpr (sizeof(T) == 4) {
    if (g.d == 128) return forward_as<T, 128>(g, q, k, v, out, stream);
  }
  return cudaErrorInvalidValue;
}

template <typename T>
cudaError_t launch_causal_attention_grad(const AttentionShape& g, const T* q, const T* k,
                                         const T* v, const T* out, const T* grad, T* dq, T* dk,
                                         T* dv, cudaStream_t stream) {
  if (g.pairs * g.t == 0) return cudaSuccess;
  if (g.d == 32) return backward_as<T, 32>(g, q, k, v, out, grad, dq, dk, dv, stream);
  if (g.d == 64) return backward_as<T, 64>(g, q, k, v, out, grad, dq, dk, dv, stream);
  if constexpr (sizeof(T) == 4) {
    if (g.d == 128) return backward_as<T, 128>(g, q, k, v, out, grad, dq, dk, dv, stream);
  }
  return cudaErrorInvalidValue;
}

#define TESSEL_ATTENTION_INSTANTIATE(T)                                                          \
  template bool attention_head_width_compiled<T>(int64_t);                                       \
  template cudaError_t launch_causal_attention<T>(const AttentionShape&, const T*, const T*,     \
                                                  const T*, T*, cudaStream_t);                   \
  template cudaError_t launch_causal_attention_grad<T>(const AttentionShape&, const T*,          \
                                                       const T*, const T*, const T*, const T*,   \
                                                       T*, T*, T*, cudaStream_t);
TESSEL_ATTENTION_INSTANTIATE(float)
TESSEL_ATTENTION_INSTANTIATE(double)
#undef TESSEL_ATTENTION_INSTANTIATE

}  // namespace tessel::detail::gpu
