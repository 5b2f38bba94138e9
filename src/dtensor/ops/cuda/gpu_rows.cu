// The row-wise ops' CUDA kernels (gpu_launch.h): reductions, softmax, causal softmax, layer norm
// and its gradients. A row (the reduced or normalised elements, contiguous) belongs to one warp
// (gpu_warp.cuh), or, for a few long rows (a full reduction), pieces of it to whole blocks. A sum
// down columns (a reduction over a middle axis, [outer, reduced, inner] with inner > 1, and layer
// norm's weight gradient) gives each output column a column of threads of one block instead
// (coalesced reads along the row). Grid-stride loops cover any row count.
#include <limits>

#include "dtensor/ops/cuda/gpu_launch.h"
#include "dtensor/ops/cuda/gpu_math.cuh"
#include "dtensor/ops/cuda/gpu_warp.cuh"

namespace tessel::detail::gpu {
namespace {

// ops_reduction.cpp's rule of max, as its CPU kernel writes it (so NaN is treated the same way;
// softmax's std::max is gpu_warp.cuh's StdMax).
struct KeepMax {  // ops_reduction.cpp's `b > a ? b : a`: a NaN x is skipped
  template <typename T>
  __device__ T operator()(T acc, T x) const {
    return x > acc ? x : acc;
  }
};

// ---- reductions --------------------------------------------------------------------------

// Sums accumulate in double, as the CPU kernel (ops_reduction.cpp) does: a running float sum
// over a long row loses digits with every addition. Maxima stay in T.
template <typename T, typename Acc, typename Combine>
__global__ void reduce_rows_kernel(const T* x, T* out, int64_t rows, int64_t length, Acc init,
                                   Combine combine, T divisor) {
  for (int64_t r = first_row(); r < rows; r += row_stride()) {
    const T* row = x + r * length;
    Acc acc = init;
    for (int64_t j = lane(); j < length; j += kWarp) acc = combine(acc, static_cast<Acc>(row[j]));
    acc = warp_combine(acc, combine);
    if (lane() == 0) out[r] = static_cast<T>(acc) / divisor;
  }
}

// Few long rows (a full reduction: the loss, a gradient's squared norm): a warp per row would
// leave the GPU idle, so each row is cut into `chunks` pieces, a block of kThreads threads
// reduces each piece into partials[row * chunks + piece] (its warps' results combined through
// shared memory), and a second kernel, a warp per row, combines the row's partials in order. The
// order is fixed, so the result is the same on every run.
template <typename T, typename Acc, typename Combine>
__global__ void reduce_pieces_kernel(const T* x, Acc* partials, int64_t length, int64_t chunks,
                                     Acc init, Combine combine) {
  __shared__ Acc warps[kWarpsPerBlock];
  const int64_t row = blockIdx.y, piece = blockIdx.x;
  const int64_t per_piece = (length + chunks - 1) / chunks;
  const int64_t begin = piece * per_piece;
  const int64_t end = begin + per_piece < length ? begin + per_piece : length;
  const T* values = x + row * length;
  Acc acc = init;
  for (int64_t j = begin + threadIdx.x; j < end; j += kThreads) {
    acc = combine(acc, static_cast<Acc>(values[j]));
  }
  acc = warp_combine(acc, combine);
  if (lane() == 0) warps[threadIdx.x / kWarp] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarpsPerBlock; ++w) acc = combine(acc, warps[w]);
    partials[row * chunks + piece] = acc;
  }
}

template <typename T, typename Acc, typename Combine>
__global__ void combine_pieces_kernel(const Acc* partials, T* out, int64_t rows, int64_t chunks,
                                      Acc init, Combine combine, T divisor) {
  for (int64_t r = first_row(); r < rows; r += row_stride()) {
    Acc acc = init;
    for (int64_t j = lane(); j < chunks; j += kWarp) acc = combine(acc, partials[r * chunks + j]);
    acc = warp_combine(acc, combine);
    if (lane() == 0) out[r] = static_cast<T>(acc) / divisor;
  }
}

// Rows at least this long go through the pieces when there are fewer rows than this GPU-filling
// count of warps.
constexpr int64_t kLongRow = int64_t{1} << 15;
constexpr int64_t kFewRows = 1024;
// Elements per thread of a piece (at least), and the most pieces of one row.
constexpr int64_t kPerThread = 16;
constexpr int64_t kMaxPieces = 1024;

template <typename T, typename Acc, typename Combine>
cudaError_t launch_reduce_pieces(const T* x, T* out, int64_t rows, int64_t length, Acc init,
                                 Combine combine, T divisor, cudaStream_t stream) {
  int64_t chunks = (length + kThreads * kPerThread - 1) / (kThreads * kPerThread);
  chunks = chunks < kMaxPieces ? chunks : kMaxPieces;
  Acc* partials = nullptr;
  cudaError_t status = cudaMallocAsync(reinterpret_cast<void**>(&partials),
                                       static_cast<size_t>(rows * chunks) * sizeof(Acc), stream);
  if (status != cudaSuccess) return status;
  reduce_pieces_kernel<T, Acc, Combine>
      <<<dim3(static_cast<unsigned int>(chunks), static_cast<unsigned int>(rows)), kThreads, 0,
         stream>>>(x, partials, length, chunks, init, combine);
  status = cudaGetLastError();
  if (status == cudaSuccess) {
    combine_pieces_kernel<T, Acc, Combine><<<row_blocks(rows), kThreads, 0, stream>>>(
        partials, out, rows, chunks, init, combine, divisor);
    status = cudaGetLastError();
  }
  const cudaError_t freed = cudaFreeAsync(partials, stream);
  return status != cudaSuccess ? status : freed;
}

// Block (kWarp, kColumnThreads): threadIdx.x picks the column within a tile of kWarp columns,
// threadIdx.y every kColumnThreads-th reduced element; the partials meet in shared memory.
constexpr int kColumnThreads = 16;

template <typename T, typename Acc, typename Combine>
__global__ void reduce_columns_kernel(const T* x, T* out, int64_t outer, int64_t reduced,
                                      int64_t inner, Acc init, Combine combine, T divisor) {
  __shared__ Acc partial[kColumnThreads][kWarp];
  const int64_t tiles = (inner + kWarp - 1) / kWarp;
  for (int64_t tile = blockIdx.x; tile < outer * tiles; tile += gridDim.x) {
    const int64_t o = tile / tiles;
    const int64_t i = (tile % tiles) * kWarp + threadIdx.x;
    Acc acc = init;
    if (i < inner) {
      const T* column = x + o * reduced * inner + i;
      for (int64_t r = threadIdx.y; r < reduced; r += kColumnThreads) {
        acc = combine(acc, static_cast<Acc>(column[r * inner]));
      }
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && i < inner) {
      for (int k = 1; k < kColumnThreads; ++k) acc = combine(acc, partial[k][threadIdx.x]);
      out[o * inner + i] = static_cast<T>(acc) / divisor;
    }
    __syncthreads();  // partial is reused by the next tile
  }
}

// ---- softmax -----------------------------------------------------------------------------

// softmax_rows (ops_nn.cpp) and causal_row (ops_attention.cpp) in one: the first `visible`
// elements of a row of `length`, scaled by `scale` (the product rounded, as on the CPU), the
// rest zero.
template <typename T>
__device__ void softmax_row(const T* x, T* y, int64_t length, int64_t visible, T scale, bool log) {
  T most = -infinity<T>();
  for (int64_t j = lane(); j < visible; j += kWarp) most = StdMax{}(most, mul_rounded(scale, x[j]));
  most = warp_combine(most, StdMax{});
  T total = 0;
  for (int64_t j = lane(); j < visible; j += kWarp)
    total += exp_of(mul_rounded(scale, x[j]) - most);
  total = warp_sum(total);
  if (log) {
    // (x - max) - log(total), as the CPU kernel: subtracting max + log(total) at once loses digits.
    const T lse = log_of(total);
    for (int64_t j = lane(); j < visible; j += kWarp)
      y[j] = (mul_rounded(scale, x[j]) - most) - lse;
  } else {
    const T inv = visible > 0 ? T(1) / total : T(0);
    for (int64_t j = lane(); j < visible; j += kWarp) {
      y[j] = mul_rounded(exp_of(mul_rounded(scale, x[j]) - most), inv);
    }
  }
  for (int64_t j = visible + lane(); j < length; j += kWarp) y[j] = T(0);
}

template <typename T>
__global__ void softmax_kernel(const T* x, T* out, int64_t rows, int64_t classes, bool log) {
  for (int64_t r = first_row(); r < rows; r += row_stride()) {
    softmax_row(x + r * classes, out + r * classes, classes, classes, T(1), log);
  }
}

template <typename T>
__global__ void causal_softmax_kernel(const T* x, T* out, int64_t rows, int64_t queries_in_block,
                                      int64_t keys, int64_t first_visible, T scale) {
  for (int64_t r = first_row(); r < rows; r += row_stride()) {
    int64_t visible = first_visible + r % queries_in_block;
    visible = visible < 0 ? 0 : (visible > keys ? keys : visible);
    softmax_row(x + r * keys, out + r * keys, keys, visible, scale, /*log=*/false);
  }
}

// ops_attention.cpp's causal_grad_row: dx = scale * s * (g - sum(g * s)) over the visible keys.
template <typename T>
__global__ void causal_softmax_grad_kernel(const T* s, const T* g, T* dx, int64_t rows,
                                           int64_t queries_in_block, int64_t keys,
                                           int64_t first_visible, T scale) {
  for (int64_t r = first_row(); r < rows; r += row_stride()) {
    int64_t visible = first_visible + r % queries_in_block;
    visible = visible < 0 ? 0 : (visible > keys ? keys : visible);
    const T* sr = s + r * keys;
    const T* gr = g + r * keys;
    T* dr = dx + r * keys;
    T inner = 0;
    for (int64_t j = lane(); j < visible; j += kWarp) inner += gr[j] * sr[j];
    inner = warp_sum(inner);
    for (int64_t j = lane(); j < visible; j += kWarp) dr[j] = scale * sr[j] * (gr[j] - inner);
    for (int64_t j = visible + lane(); j < keys; j += kWarp) dr[j] = T(0);
  }
}

// ---- layer norm --------------------------------------------------------------------------

struct RowStats {
  double mean;
  double rstd;
};

// ops_norm.cpp's row_stats: mean, then the biased variance around it, in double (not centered,
// RMS norm's: mean 0, rstd from the mean square).
template <typename T>
__device__ RowStats row_stats(const T* x, int64_t n, double epsilon, bool centered) {
  double sum = 0;
  if (centered) {
    for (int64_t c = lane(); c < n; c += kWarp) sum += x[c];
  }
  const double mean = warp_sum(sum) / static_cast<double>(n);
  double squares = 0;
  for (int64_t c = lane(); c < n; c += kWarp) {
    const double d = x[c] - mean;
    squares += d * d;
  }
  return {mean, 1.0 / sqrt(warp_sum(squares) / static_cast<double>(n) + epsilon)};
}

template <typename T>
__global__ void layer_norm_kernel(const T* x, const T* w, const T* b, T* y, int64_t rows, int64_t n,
                                  double epsilon, bool centered) {
  for (int64_t r = first_row(); r < rows; r += row_stride()) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    const RowStats s = row_stats(xr, n, epsilon, centered);
    const T m = static_cast<T>(s.mean), rstd = static_cast<T>(s.rstd);
    for (int64_t c = lane(); c < n; c += kWarp) {
      yr[c] = mul_rounded(mul_rounded(xr[c] - m, rstd), w[c]) + (b ? b[c] : T(0));
    }
  }
}

// dx = rstd * (g*w - mean(g*w) - xhat * mean(g*w * xhat)), per row, in double, with each row's
// statistics from row_stats_kernel (not centered: without the mean(g*w) term).
template <typename T>
__global__ void layer_norm_grad_kernel(const T* x, const T* w, const T* g, const RowStats* stats,
                                       T* dx, int64_t rows, int64_t n, bool centered) {
  for (int64_t r = first_row(); r < rows; r += row_stride()) {
    const T* xr = x + r * n;
    const T* gr = g + r * n;
    T* dr = dx + r * n;
    const RowStats s = stats[r];
    double sum_gw = 0, sum_gw_xhat = 0;
    for (int64_t c = lane(); c < n; c += kWarp) {
      const double gw = static_cast<double>(gr[c]) * w[c];
      sum_gw += gw;
      sum_gw_xhat += gw * (xr[c] - s.mean) * s.rstd;
    }
    const double total_gw = warp_sum(sum_gw);  // every lane joins the shuffle
    const double a = centered ? total_gw / static_cast<double>(n) : 0.0;
    const double bb = warp_sum(sum_gw_xhat) / static_cast<double>(n);
    for (int64_t c = lane(); c < n; c += kWarp) {
      const double xhat = (xr[c] - s.mean) * s.rstd;
      dr[c] = static_cast<T>(s.rstd * (static_cast<double>(gr[c]) * w[c] - a - xhat * bb));
    }
  }
}

// Each row's statistics into `stats` (layer_norm_stats: what the backward kernels read).
template <typename T>
__global__ void row_stats_kernel(const T* x, RowStats* stats, int64_t rows, int64_t n,
                                 double epsilon, bool centered) {
  for (int64_t r = first_row(); r < rows; r += row_stride()) {
    const RowStats s = row_stats(x + r * n, n, epsilon, centered);
    if (lane() == 0) stats[r] = s;
  }
}

// out[c] = sum over rows of g * (x - mean) * rstd, in double: the threads of a block's column c
// take every kColumnThreads-th row, as reduce_columns_kernel.
template <typename T>
__global__ void weight_grad_kernel(const T* x, const T* g, const RowStats* stats, T* out,
                                   int64_t rows, int64_t n) {
  __shared__ double partial[kColumnThreads][kWarp];
  for (int64_t tile = blockIdx.x; tile * kWarp < n; tile += gridDim.x) {
    const int64_t c = tile * kWarp + threadIdx.x;
    double acc = 0;
    if (c < n) {
      for (int64_t r = threadIdx.y; r < rows; r += kColumnThreads) {
        acc += static_cast<double>(g[r * n + c]) * (x[r * n + c] - stats[r].mean) * stats[r].rstd;
      }
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < n) {
      for (int k = 1; k < kColumnThreads; ++k) acc += partial[k][threadIdx.x];
      out[c] = static_cast<T>(acc);
    }
    __syncthreads();
  }
}

// Launches a warp-per-row kernel over `rows` rows of `length` elements (nothing to do when
// either is 0).
template <typename... Params, typename... Args>
cudaError_t launch_rows(void (*kernel)(Params...), int64_t rows, int64_t length,
                        cudaStream_t stream, Args... args) {
  if (rows * length == 0) return cudaSuccess;
  kernel<<<row_blocks(rows), kThreads, 0, stream>>>(args...);
  return cudaGetLastError();
}

// A reduction's kernel: a warp per output element when the reduced elements are contiguous
// (inner == 1), or pieces of blocks for a few long rows, else a block per kWarp output columns.
template <typename T, typename Acc, typename Combine>
cudaError_t launch_reduce_as(const T* x, T* out, int64_t outer, int64_t reduced, int64_t inner,
                             Acc init, Combine combine, T divisor, cudaStream_t stream) {
  if (inner == 1 && reduced >= kLongRow && outer < kFewRows) {
    return launch_reduce_pieces(x, out, outer, reduced, init, combine, divisor, stream);
  }
  if (inner == 1) {  // one row per output element, even an empty one (reduced == 0)
    return launch_rows(reduce_rows_kernel<T, Acc, Combine>, outer, 1, stream, x, out, outer,
                       reduced, init, combine, divisor);
  }
  const int64_t tiles = outer * ((inner + kWarp - 1) / kWarp);
  reduce_columns_kernel<T, Acc, Combine>
      <<<blocks_for(tiles, 1), dim3(kWarp, kColumnThreads), 0, stream>>>(
          x, out, outer, reduced, inner, init, combine, divisor);
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t launch_reduce(Reduction kind, const T* x, T* out, int64_t outer, int64_t reduced,
                          int64_t inner, T divisor, cudaStream_t stream) {
  if (outer * inner == 0) return cudaSuccess;
  if (kind == Reduction::kMax) {
    return launch_reduce_as(x, out, outer, reduced, inner, -std::numeric_limits<T>::infinity(),
                            KeepMax{}, divisor, stream);
  }
  return launch_reduce_as(x, out, outer, reduced, inner, 0.0, Plus{}, divisor, stream);
}

template <typename T>
cudaError_t launch_softmax(const T* x, T* out, int64_t rows, int64_t classes, bool log,
                           cudaStream_t stream) {
  return launch_rows(softmax_kernel<T>, rows, classes, stream, x, out, rows, classes, log);
}

template <typename T>
cudaError_t launch_causal_softmax(const T* x, T* out, int64_t rows, int64_t queries_in_block,
                                  int64_t keys, int64_t first_visible, T scale,
                                  cudaStream_t stream) {
  return launch_rows(causal_softmax_kernel<T>, rows, keys, stream, x, out, rows, queries_in_block,
                     keys, first_visible, scale);
}

template <typename T>
cudaError_t launch_causal_softmax_grad(const T* s, const T* g, T* dx, int64_t rows,
                                       int64_t queries_in_block, int64_t keys,
                                       int64_t first_visible, T scale, cudaStream_t stream) {
  return launch_rows(causal_softmax_grad_kernel<T>, rows, keys, stream, s, g, dx, rows,
                     queries_in_block, keys, first_visible, scale);
}

template <typename T>
cudaError_t launch_layer_norm(const T* x, const T* weight, const T* bias, T* out, int64_t rows,
                              int64_t n, double epsilon, bool centered, cudaStream_t stream) {
  return launch_rows(layer_norm_kernel<T>, rows, n, stream, x, weight, bias, out, rows, n, epsilon,
                     centered);
}

// The statistics tensor, f64 [rows, 2] (mean, rstd), is an array of RowStats.
static_assert(sizeof(RowStats) == 2 * sizeof(double), "RowStats must be a (mean, rstd) pair");

template <typename T>
cudaError_t launch_layer_norm_stats(const T* x, double* stats, int64_t rows, int64_t n,
                                    double epsilon, bool centered, cudaStream_t stream) {
  return launch_rows(row_stats_kernel<T>, rows, n, stream, x, reinterpret_cast<RowStats*>(stats),
                     rows, n, epsilon, centered);
}

template <typename T>
cudaError_t launch_layer_norm_grad(const T* x, const T* weight, const T* g, const double* stats,
                                   T* dx, int64_t rows, int64_t n, bool centered,
                                   cudaStream_t stream) {
  return launch_rows(layer_norm_grad_kernel<T>, rows, n, stream, x, weight, g,
                     reinterpret_cast<const RowStats*>(stats), dx, rows, n, centered);
}

template <typename T>
cudaError_t launch_layer_norm_weight_grad(const T* x, const T* g, const double* stats, T* out,
                                          int64_t rows, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (rows == 0) return cudaMemsetAsync(out, 0, static_cast<size_t>(n) * sizeof(T), stream);
  weight_grad_kernel<T>
      <<<blocks_for((n + kWarp - 1) / kWarp, 1), dim3(kWarp, kColumnThreads), 0, stream>>>(
          x, g, reinterpret_cast<const RowStats*>(stats), out, rows, n);
  return cudaGetLastError();
}

#define TESSEL_INSTANTIATE_ROW_LAUNCHERS(T)                                                       \
  template cudaError_t launch_reduce<T>(Reduction, const T*, T*, int64_t, int64_t, int64_t, T,    \
                                        cudaStream_t);                                            \
  template cudaError_t launch_softmax<T>(const T*, T*, int64_t, int64_t, bool, cudaStream_t);     \
  template cudaError_t launch_causal_softmax<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, \
                                                T, cudaStream_t);                                 \
  template cudaError_t launch_causal_softmax_grad<T>(const T*, const T*, T*, int64_t, int64_t,    \
                                                     int64_t, int64_t, T, cudaStream_t);          \
  template cudaError_t launch_layer_norm<T>(const T*, const T*, const T*, T*, int64_t, int64_t,   \
                                            double, bool, cudaStream_t);                          \
  template cudaError_t launch_layer_norm_stats<T>(const T*, double*, int64_t, int64_t, double,    \
                                                  bool, cudaStream_t);                            \
  template cudaError_t launch_layer_norm_grad<T>(const T*, const T*, const T*, const double*, T*, \
                                                 int64_t, int64_t, bool, cudaStream_t);           \
  template cudaError_t launch_layer_norm_weight_grad<T>(const T*, const T*, const double*, T*,    \
                                                        int64_t, int64_t, cudaStream_t);
TESSEL_INSTANTIATE_ROW_LAUNCHERS(float)
TESSEL_INSTANTIATE_ROW_LAUNCHERS(double)
#undef TESSEL_INSTANTIATE_ROW_LAUNCHERS

}  // namespace tessel::detail::gpu
