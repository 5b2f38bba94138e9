// The CUDA kernels of the cross entropy (gpu_launch.h). The vocabulary-parallel stages, as
// ops_parallel_xent.cpp's CPU kernels: the per-row parts (a warp per row, gpu_warp.cuh), their
// gradient (a thread per logit), and the last stage and its gradient (a thread per row). The
// unsharded op and its gradient, as ops_nn.cpp's xent_rows and xent_grad_rows: a warp per row.
#include "dtensor/ops/cuda/gpu_launch.h"
#include "dtensor/ops/cuda/gpu_math.cuh"
#include "dtensor/ops/cuda/gpu_warp.cuh"

namespace tessel::detail::gpu {
namespace {

// Where label `label` falls in this block's `local` classes starting at global class `offset`,
// or -1 when another block holds it (or it is no class at all).
__device__ inline int64_t local_class(int64_t label, int64_t offset, int64_t local) {
  const int64_t mine = label - offset;
  return mine >= 0 && mine < local ? mine : -1;
}

// The warp's row of n logits: the sum of exp(x - m) in T (every lane gets it).
template <typename T>
__device__ T row_exp_sum(const T* xr, int64_t n, T m) {
  T total = 0;
  for (int64_t c = lane(); c < n; c += kWarp) total += exp_of(xr[c] - m);
  return warp_sum(total);
}

// The warp's row of n logits: its max as ops_nn.cpp's std::max loop takes it from -inf (every
// lane gets it).
template <typename T>
__device__ T row_max(const T* xr, int64_t n) {
  T most = -infinity<T>();
  for (int64_t c = lane(); c < n; c += kWarp) most = StdMax{}(most, xr[c]);
  return warp_combine(most, StdMax{});
}

// Row r's label when it is in [0, classes); else -1, the row recorded in `bad` (the least such
// row wins).
template <typename L>
__device__ int64_t checked_label(const L* labels, int64_t r, int64_t classes, BadLabel* bad) {
  const int64_t label = static_cast<int64_t>(labels[r]);
  if (label >= 0 && label < classes) return label;
  atomicMin(reinterpret_cast<unsigned long long*>(&bad->row), static_cast<unsigned long long>(r));
  return -1;
}

// parts_kernel: out[r] = (sum over the row of exp(x - m[r]), x[label] - m[r] or 0), the sum in T.
template <typename T, typename L>
__global__ void parts_kernel(const L* labels, const T* x, const T* m, T* out, int64_t rows,
                             int64_t local, int64_t offset) {
  for (int64_t r = first_row(); r < rows; r += row_stride()) {
    const T* xr = x + r * local;
    const T mr = m[r];
    const T total = row_exp_sum(xr, local, mr);
    if (lane() == 0) {
      const int64_t mine = local_class(static_cast<int64_t>(labels[r]), offset, local);
      out[2 * r] = total;
      out[2 * r + 1] = mine >= 0 ? xr[mine] - mr : T(0);
    }
  }
}

// parts_grad_kernel: d = g[r, 0] * exp(x - m[r]), plus g[r, 1] at the label's class (the
// product rounded before the add, as the CPU's two statements).
template <typename T, typename L>
__global__ void parts_grad_kernel(const L* labels, const T* x, const T* m, const T* g, T* out,
                                  int64_t rows, int64_t local, int64_t offset) {
  const int64_t n = rows * local;
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    const int64_t r = i / local;
    T d = mul_rounded(g[2 * r], exp_of(x[i] - m[r]));
    if (local_class(static_cast<int64_t>(labels[r]), offset, local) == i % local) d += g[2 * r + 1];
    out[i] = d;
  }
}

// The finish kernel: loss = log(parts[r, 0]) - parts[r, 1]; the least row whose label is outside
// [0, classes) goes to `bad`.
template <typename T, typename L>
__global__ void finish_kernel(const T* parts, const L* labels, T* out, int64_t rows,
                              int64_t classes, BadLabel* bad) {
  for (int64_t r = thread_index(); r < rows; r += thread_count()) {
    checked_label(labels, r, classes, bad);
    out[r] = log_of(parts[2 * r]) - parts[2 * r + 1];
  }
}

// The finish gradient: (g / parts[r, 0], -g).
template <typename T>
__global__ void finish_grad_kernel(const T* parts, const T* g, T* out, int64_t rows) {
  for (int64_t r = thread_index(); r < rows; r += thread_count()) {
    out[2 * r] = g[r] / parts[2 * r];
    out[2 * r + 1] = -g[r];
  }
}

// xent_rows: loss = log(sum(exp(x - max))) - (x[label] - max), a warp per row.
template <typename T, typename L>
__global__ void xent_rows_kernel(const L* labels, const T* x, T* out, int64_t rows, int64_t classes,
                                 BadLabel* bad) {
  for (int64_t r = first_row(); r < rows; r += row_stride()) {
    const T* xr = x + r * classes;
    const T most = row_max(xr, classes);
    const T total = row_exp_sum(xr, classes, most);
    if (lane() == 0) {
      const int64_t label = checked_label(labels, r, classes, bad);
      out[r] = label < 0 ? quiet_nan<T>() : log_of(total) - (xr[label] - most);
    }
  }
}

// xent_grad_rows: d = exp(x - max) * (g[r] / total), rounded, then minus g[r] at the label.
template <typename T, typename L>
__global__ void xent_grad_rows_kernel(const L* labels, const T* x, const T* g, T* dx, int64_t rows,
                                      int64_t classes, BadLabel* bad) {
  for (int64_t r = first_row(); r < rows; r += row_stride()) {
    const T* xr = x + r * classes;
    T* dr = dx + r * classes;
    const T most = row_max(xr, classes);
    const T scale = g[r] / row_exp_sum(xr, classes, most);
    const int64_t label = checked_label(labels, r, classes, bad);
    for (int64_t c = lane(); c < classes; c += kWarp) {
      T d = mul_rounded(exp_of(xr[c] - most), scale);
      if (c == label) d -= g[r];
      dr[c] = d;
    }
  }
}

}  // namespace

template <typename T, typename L>
cudaError_t launch_xent_parts(const L* labels, const T* x, const T* m, T* out, int64_t rows,
                              int64_t local, int64_t offset, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;  // a row of no classes still writes (0, 0)
  parts_kernel<T, L>
      <<<row_blocks(rows), kThreads, 0, stream>>>(labels, x, m, out, rows, local, offset);
  return cudaGetLastError();
}

template <typename T, typename L>
cudaError_t launch_xent_parts_grad(const L* labels, const T* x, const T* m, const T* g, T* out,
                                   int64_t rows, int64_t local, int64_t offset,
                                   cudaStream_t stream) {
  return launch_over(rows * local, stream, parts_grad_kernel<T, L>, labels, x, m, g, out, rows,
                     local, offset);
}

template <typename T, typename L>
cudaError_t launch_xent_finish(const T* parts, const L* labels, T* out, int64_t rows,
                               int64_t classes, BadLabel* bad, cudaStream_t stream) {
  return launch_over(rows, stream, finish_kernel<T, L>, parts, labels, out, rows, classes, bad);
}

template <typename T>
cudaError_t launch_xent_finish_grad(const T* parts, const T* g, T* out, int64_t rows,
                                    cudaStream_t stream) {
  return launch_over(rows, stream, finish_grad_kernel<T>, parts, g, out, rows);
}

template <typename T, typename L>
cudaError_t launch_xent_rows(const L* labels, const T* x, T* out, int64_t rows, int64_t classes,
                             BadLabel* bad, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  xent_rows_kernel<T, L>
      <<<row_blocks(rows), kThreads, 0, stream>>>(labels, x, out, rows, classes, bad);
  return cudaGetLastError();
}

template <typename T, typename L>
cudaError_t launch_xent_grad_rows(const L* labels, const T* x, const T* g, T* dx, int64_t rows,
                                  int64_t classes, BadLabel* bad, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  xent_grad_rows_kernel<T, L>
      <<<row_blocks(rows), kThreads, 0, stream>>>(labels, x, g, dx, rows, classes, bad);
  return cudaGetLastError();
}

#define TESSEL_XENT(T, L)                                                                          \
  template cudaError_t launch_xent_parts<T, L>(const L*, const T*, const T*, T*, int64_t, int64_t, \
                                               int64_t, cudaStream_t);                             \
  template cudaError_t launch_xent_parts_grad<T, L>(const L*, const T*, const T*, const T*, T*,    \
                                                    int64_t, int64_t, int64_t, cudaStream_t);      \
  template cudaError_t launch_xent_finish<T, L>(const T*, const L*, T*, int64_t, int64_t,          \
                                                BadLabel*, cudaStream_t);                          \
  template cudaError_t launch_xent_rows<T, L>(const L*, const T*, T*, int64_t, int64_t, BadLabel*, \
                                              cudaStream_t);                                       \
  template cudaError_t launch_xent_grad_rows<T, L>(const L*, const T*, const T*, T*, int64_t,      \
                                                   int64_t, BadLabel*, cudaStream_t);
TESSEL_XENT(float, int32_t)
TESSEL_XENT(float, int64_t)
TESSEL_XENT(double, int32_t)
TESSEL_XENT(double, int64_t)
#undef TESSEL_XENT

template cudaError_t launch_xent_finish_grad<float>(const float*, const float*, float*, int64_t,
                                                    cudaStream_t);
template cudaError_t launch_xent_finish_grad<double>(const double*, const double*, double*, int64_t,
                                                     cudaStream_t);

}  // namespace tessel::detail::gpu
