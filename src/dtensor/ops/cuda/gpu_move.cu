// The CUDA kernels of the ops that move elements rather than compute with them (gpu_launch.h):
// fill, the strided copy of transpose and slice (and, times a scale, reduce_sum_grad's
// broadcast), its scatter for slice_grad and concat, the embedding gather and scatter-add, and
// dropout (whose mask is read at strided global indices). The byte movers are templates on an
// unsigned integer of the element's width, so one instantiation serves every dtype of that width.
// Grid-stride loops cover any size.
#include "dtensor/ops/cuda/gpu_launch.h"
#include "dtensor/ops/cuda/gpu_math.cuh"
#include "dtensor/ops/cuda/gpu_random.cuh"

namespace tessel::detail::gpu {
namespace {

template <typename E>
__global__ void fill_kernel(E* out, int64_t n, E value) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) out[i] = value;
}

// Where element i, counted row-major over index.extent, lies in the strided block (the source of
// a strided read, the destination of a strided write).
__device__ inline int64_t strided_offset(int64_t i, const StridedIndex& index) {
  int64_t offset = 0;
  for (int d = index.dims - 1; d >= 0; --d) {
    offset += (i % index.extent[d]) * index.stride[d];
    i /= index.extent[d];
  }
  return offset;
}

template <typename E>
__global__ void strided_copy_kernel(const E* src, E* out, int64_t n, StridedIndex index) {
  for (int64_t i = thread_index(); i < n; i += thread_count())
    out[i] = src[strided_offset(i, index)];
}

// The scatter of strided_copy_kernel: contiguous source, strided destination.
template <typename E>
__global__ void strided_write_kernel(const E* src, E* out, int64_t n, StridedIndex index) {
  for (int64_t i = thread_index(); i < n; i += thread_count())
    out[strided_offset(i, index)] = src[i];
}

template <typename T>
__global__ void strided_scale_kernel(const T* src, T* out, int64_t n, StridedIndex index, T scale) {
  for (int64_t i = thread_index(); i < n; i += thread_count())
    out[i] = scale * src[strided_offset(i, index)];
}

template <typename T>
__global__ void dropout_kernel(const T* x, T* out, int64_t n, StridedIndex global, int64_t first,
                               uint64_t seed, double rate, T scale) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    const uint64_t counter = static_cast<uint64_t>(first + strided_offset(i, global));
    out[i] = uniform_at(seed, counter) >= rate ? x[i] * scale : T(0);
  }
}

// Row ids[k] - row_begin of a block of `rows` rows, or -1 when outside it; an id outside
// [0, vocab) is reported through `bad` (any one of them: the caller names one) and gives -1.
template <typename I>
__device__ int64_t local_row(const I* ids, int64_t k, int64_t row_begin, int64_t rows,
                             int64_t vocab, BadId* bad) {
  const int64_t id = static_cast<int64_t>(ids[k]);
  if (id < 0 || id >= vocab) {
    bad->id = id;
    bad->found = 1;
    return -1;
  }
  const int64_t local = id - row_begin;
  return local >= 0 && local < rows ? local : -1;
}

// One thread per output element [k, c].
template <typename T, typename I>
__global__ void lookup_kernel(const T* table, int64_t row_begin, int64_t rows, int64_t dim,
                              const I* ids, int64_t count, int64_t vocab, T* out, BadId* bad) {
  const int64_t n = count * dim;
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    const int64_t k = i / dim;
    const int64_t local = local_row(ids, k, row_begin, rows, vocab, bad);
    out[i] = local < 0 ? T(0) : table[local * dim + i % dim];
  }
}

// One thread per element of g: added into its row of out (zeroed before by the launcher).
template <typename T, typename I>
__global__ void scatter_add_kernel(const I* ids, int64_t count, const T* g, int64_t dim,
                                   int64_t row_begin, int64_t rows, int64_t vocab, T* out,
                                   BadId* bad) {
  const int64_t n = count * dim;
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    const int64_t local = local_row(ids, i / dim, row_begin, rows, vocab, bad);
    if (local >= 0) atomicAdd(out + local * dim + i % dim, g[i]);
  }
}

}  // namespace

template <typename E>
cudaError_t launch_fill(E* out, int64_t n, E value, cudaStream_t stream) {
  return launch_over(n, stream, fill_kernel<E>, out, n, value);
}

template <typename E>
cudaError_t launch_strided_copy(const E* src, E* out, int64_t n, const StridedIndex& index,
                                cudaStream_t stream) {
  return launch_over(n, stream, strided_copy_kernel<E>, src, out, n, index);
}

template <typename E>
cudaError_t launch_strided_write(const E* src, E* out, int64_t n, const StridedIndex& index,
                                 cudaStream_t stream) {
  return launch_over(n, stream, strided_write_kernel<E>, src, out, n, index);
}

template <typename T>
cudaError_t launch_strided_scale(const T* src, T* out, int64_t n, const StridedIndex& index,
                                 T scale, cudaStream_t stream) {
  return launch_over(n, stream, strided_scale_kernel<T>, src, out, n, index, scale);
}

template <typename T>
cudaError_t launch_dropout(const T* x, T* out, int64_t n, const StridedIndex& global, int64_t first,
                           uint64_t seed, double rate, T scale, cudaStream_t stream) {
  return launch_over(n, stream, dropout_kernel<T>, x, out, n, global, first, seed, rate, scale);
}

template <typename T, typename I>
cudaError_t launch_embedding_lookup(const T* table, int64_t row_begin, int64_t rows, int64_t dim,
                                    const I* ids, int64_t count, int64_t vocab, T* out, BadId* bad,
                                    cudaStream_t stream) {
  return launch_over(count * dim, stream, lookup_kernel<T, I>, table, row_begin, rows, dim, ids,
                     count, vocab, out, bad);
}

template <typename T, typename I>
cudaError_t launch_embedding_scatter_add(const I* ids, int64_t count, const T* g, int64_t dim,
                                         int64_t row_begin, int64_t rows, int64_t vocab, T* out,
                                         BadId* bad, cudaStream_t stream) {
  const cudaError_t zeroed =
      cudaMemsetAsync(out, 0, static_cast<size_t>(rows * dim) * sizeof(T), stream);
  if (zeroed != cudaSuccess) return zeroed;
  return launch_over(count * dim, stream, scatter_add_kernel<T, I>, ids, count, g, dim, row_begin,
                     rows, vocab, out, bad);
}

#define TESSEL_FILL_AND_COPY(E)                                                            \
  template cudaError_t launch_fill<E>(E*, int64_t, E, cudaStream_t);                       \
  template cudaError_t launch_strided_copy<E>(const E*, E*, int64_t, const StridedIndex&,  \
                                              cudaStream_t);                               \
  template cudaError_t launch_strided_write<E>(const E*, E*, int64_t, const StridedIndex&, \
                                               cudaStream_t);
TESSEL_FILL_AND_COPY(uint8_t)
TESSEL_FILL_AND_COPY(uint16_t)
TESSEL_FILL_AND_COPY(uint32_t)
TESSEL_FILL_AND_COPY(uint64_t)
#undef TESSEL_FILL_AND_COPY

template cudaError_t launch_strided_scale<float>(const float*, float*, int64_t, const StridedIndex&,
                                                 float, cudaStream_t);
template cudaError_t launch_strided_scale<double>(const double*, double*, int64_t,
                                                  const StridedIndex&, double, cudaStream_t);

template cudaError_t launch_dropout<float>(const float*, float*, int64_t, const StridedIndex&,
                                           int64_t, uint64_t, double, float, cudaStream_t);
template cudaError_t launch_dropout<double>(const double*, double*, int64_t, const StridedIndex&,
                                            int64_t, uint64_t, double, double, cudaStream_t);

#define TESSEL_EMBEDDING(T, I)                                                                    \
  template cudaError_t launch_embedding_lookup<T, I>(                                             \
      const T*, int64_t, int64_t, int64_t, const I*, int64_t, int64_t, T*, BadId*, cudaStream_t); \
  template cudaError_t launch_embedding_scatter_add<T, I>(                                        \
      const I*, int64_t, const T*, int64_t, int64_t, int64_t, int64_t, T*, BadId*, cudaStream_t);
TESSEL_EMBEDDING(float, int32_t)
TESSEL_EMBEDDING(float, int64_t)
TESSEL_EMBEDDING(double, int32_t)
TESSEL_EMBEDDING(double, int64_t)
#undef TESSEL_EMBEDDING

}  // namespace tessel::detail::gpu
