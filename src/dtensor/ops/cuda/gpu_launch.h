// Internal: the launchers of the ops' CUDA kernels, plain C++ functions on device pointers,
// sizes and a stream: gpu_elementwise.cu (unary, scalar and broadcasting binary ops, whose math
// is elementwise_math.h's, shared with the CPU kernels), gpu_rows.cu (reductions, softmax,
// causal softmax, layer norm), gpu_move.cu (fills, copies, embeddings, dropout's mask, slice /
// slice_grad / concat's box copies), gpu_attention.cu (the fused causal attention and its
// gradient) and gpu_xent.cu (the cross entropy, unsharded and vocabulary-parallel). Each enqueues its kernel on `stream` and returns the launch's status (the
// caller checks it with check_cuda); nothing waits. Every function is instantiated for float and
// double (the byte movers of gpu_move.cu for unsigned integers of 1, 2, 4 and 8 bytes, standing
// for any dtype of that width) and computes what the op's CPU kernel in
// src/dtensor/ops/ops_*.cpp computes, in the same order where the rounding depends on it (the
// comments name the CPU kernel). Sizes are element counts; pointers are contiguous blocks. The
// OpDef::Kernel glue (shapes, attrs, fallbacks) is in the .cpp file of the same name.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessel::detail::gpu {

// ---- gpu_elementwise.cu --------------------------------------------------------------------

// out[i] = op(x[i]) for i < n, `op` the index of the op's functor in elementwise_math.h's
// UnaryOps (AddScalar / MultiplyScalar take `operand` as their scalar; the others ignore it). An
// index outside UnaryOps: cudaErrorInvalidValue.
template <typename T>
cudaError_t launch_unary(int op, const T* x, T* out, int64_t n, double operand,
                         cudaStream_t stream);

// The iteration space of a broadcasting binary op (op_util.h's BroadcastDims, at most
// kMaxDims dimensions, outermost first): output element i, written in row-major order over
// `extent`, reads a at sum(index_d * a_stride[d]) and b likewise.
struct BroadcastIndex {
  static constexpr int kMaxDims = 6;
  int dims = 0;
  int64_t extent[kMaxDims] = {};
  int64_t a_stride[kMaxDims] = {};
  int64_t b_stride[kMaxDims] = {};
};

// out[i] = op(a[...], b[...]) for the n = prod(extent) output elements, `op` the index of the
// op's functor in elementwise_math.h's BinaryOps (the *Grad ones take (grad, x) or (grad, y)).
template <typename T>
cudaError_t launch_binary(int op, const T* a, const T* b, T* out, int64_t n,
                          const BroadcastIndex& index, cudaStream_t stream);

// ops_optimizer.cpp's fused updates, elementwise over three (ema, ema_square: two) inputs:
//   kEma       (m, g):    s0 * m + (1 - s0) * g         (s0 = beta)
//   kEmaSquare (v, g):    s0 * v + (1 - s0) * g * g
//   kAdamApply (p, m, v): s2 * p - s0 * m / (sqrt(v) + s1)  (s0 = the step's learning rate,
//                         s1 = eps, s2 = the decay factor)
enum class FusedUpdate { kEma, kEmaSquare, kAdamApply };

// out[i] = update(a[i], b[i], c[i]) for i < n (c unused by the two-input updates).
template <typename T>
cudaError_t launch_fused_update(FusedUpdate update, const T* a, const T* b, const T* c, T* out,
                                int64_t n, double s0, double s1, double s2, cudaStream_t stream);

// ---- gpu_rows.cu ---------------------------------------------------------------------------

enum class Reduction { kSum, kMax };

// The input seen as [outer, reduced, inner] (contiguous), reduced over the middle axis into
// out [outer, inner]: sum (accumulated in T, from 0) or max (from -inf; NaN inputs are
// skipped, as ops_reduction.cpp's `b > a ? b : a`), then divided by `divisor` (reduce_mean's
// global count; 1 otherwise).
template <typename T>
cudaError_t launch_reduce(Reduction kind, const T* x, T* out, int64_t outer, int64_t reduced,
                          int64_t inner, T divisor, cudaStream_t stream);

// ops_nn.cpp's softmax_rows: each of `rows` rows of `classes` elements, softmax or (`log`)
// log_softmax, as (x - max) - log(sum(exp(x - max))).
template <typename T>
cudaError_t launch_softmax(const T* x, T* out, int64_t rows, int64_t classes, bool log,
                           cudaStream_t stream);

// ops_attention.cpp's causal_row: rows of `keys` scores, in matrices of `queries_in_block`
// rows; row i of each matrix is the softmax of scale * x over its first
// clamp(first_visible + i, 0, keys) keys and zero after (a row that sees no key is all zeros).
template <typename T>
cudaError_t launch_causal_softmax(const T* x, T* out, int64_t rows, int64_t queries_in_block,
                                  int64_t keys, int64_t first_visible, T scale,
                                  cudaStream_t stream);

// ops_attention.cpp's causal_grad_row: the gradient of launch_causal_softmax's rows from its
// output s and the output's gradient g (the same rows, keys and visible counts).
template <typename T>
cudaError_t launch_causal_softmax_grad(const T* s, const T* g, T* dx, int64_t rows,
                                       int64_t queries_in_block, int64_t keys,
                                       int64_t first_visible, T scale, cudaStream_t stream);

// ops_norm.cpp's layer_norm_kernel: each of `rows` rows of n channels normalised with its mean
// and biased variance (accumulated in double), times weight, plus bias (null: none). Not
// `centered`: RMS norm's, the mean taken as 0 (so in the statistics and the gradient below).
template <typename T>
cudaError_t launch_layer_norm(const T* x, const T* weight, const T* bias, T* out, int64_t rows,
                              int64_t n, double epsilon, bool centered, cudaStream_t stream);

// ops_norm.cpp's layer_norm_stats_kernel: stats[2r], stats[2r + 1] = row r's mean and rstd,
// in double, as launch_layer_norm computes them.
template <typename T>
cudaError_t launch_layer_norm_stats(const T* x, double* stats, int64_t rows, int64_t n,
                                    double epsilon, bool centered, cudaStream_t stream);

// ops_norm.cpp's layer_norm_grad_kernel: dx from x, weight, the output's gradient g and the
// rows' statistics (launch_layer_norm_stats).
template <typename T>
cudaError_t launch_layer_norm_grad(const T* x, const T* weight, const T* g, const double* stats,
                                   T* dx, int64_t rows, int64_t n, bool centered,
                                   cudaStream_t stream);

// ops_norm.cpp's weight_grad_kernel: out[c] = the sum over the rows of g * (x - mean) * rstd, in
// double, with the rows' statistics.
template <typename T>
cudaError_t launch_layer_norm_weight_grad(const T* x, const T* g, const double* stats, T* out,
                                          int64_t rows, int64_t n, cudaStream_t stream);

// ---- gpu_move.cu ---------------------------------------------------------------------------

// out[i] = value for i < n (E: an unsigned integer holding the dtype's bit pattern).
template <typename E>
cudaError_t launch_fill(E* out, int64_t n, E value, cudaStream_t stream);

// A strided read of a contiguous block (at most kMaxDims dimensions, outermost first): output
// element i, written in row-major order over `extent`, reads src at sum(index_d * stride[d]).
// transpose's permuted strides; reduce_sum_grad's broadcast (stride 0 on the reduced axes).
struct StridedIndex {
  static constexpr int kMaxDims = 6;
  int dims = 0;
  int64_t extent[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};
};

// ops_shape.cpp's transpose_block (and slice_kernel's box read, src pointing at the box's first
// element): out[i] = src[...] for the n = prod(extent) output elements.
template <typename E>
cudaError_t launch_strided_copy(const E* src, E* out, int64_t n, const StridedIndex& index,
                                cudaStream_t stream);

// copy_box's scatter (ops_shape.cpp's slice_grad_kernel and concat_kernel): the n =
// prod(extent) elements of the contiguous block src, row-major over `extent`, written to out at
// sum(index_d * stride[d]). Elements of out that no source element reaches are left alone.
template <typename E>
cudaError_t launch_strided_write(const E* src, E* out, int64_t n, const StridedIndex& index,
                                 cudaStream_t stream);

// ops_reduction.cpp's sum_grad_kernel: out[i] = scale * src[...].
template <typename T>
cudaError_t launch_strided_scale(const T* src, T* out, int64_t n, const StridedIndex& index,
                                 T scale, cudaStream_t stream);

// ops_dropout.cpp's dropout_kernel: out[i] = x[i] * scale where u >= rate, else 0, for the
// n = prod(global.extent) elements of a block. u is Tensor::random_uniform(seed)'s value at the
// element's global flat index, first + sum(index_d * global.stride[d]) (tensor_random.cpp's
// counter hash, ported bit for bit, so the GPU drops exactly the elements the CPU drops).
template <typename T>
cudaError_t launch_dropout(const T* x, T* out, int64_t n, const StridedIndex& global, int64_t first,
                           uint64_t seed, double rate, T scale, cudaStream_t stream);

// Where the embedding kernels report an id outside [0, vocab): `found` becomes nonzero and `id`
// one such id (device memory, zeroed by the caller before the launch).
struct BadId {
  int64_t found;
  int64_t id;
};

// ops_indexing.cpp's lookup_rows: row k of out ([count, dim]) is row ids[k] - row_begin of table
// ([rows, dim]) when that is one of its rows, else zeros.
template <typename T, typename I>
cudaError_t launch_embedding_lookup(const T* table, int64_t row_begin, int64_t rows, int64_t dim,
                                    const I* ids, int64_t count, int64_t vocab, T* out, BadId* bad,
                                    cudaStream_t stream);

// ops_indexing.cpp's scatter_add_rows: out ([rows, dim]) zeroed, then row k of g ([count, dim])
// added (atomicAdd: the order of the additions differs from the CPU's) to row ids[k] - row_begin
// when that is one of out's rows.
template <typename T, typename I>
cudaError_t launch_embedding_scatter_add(const I* ids, int64_t count, const T* g, int64_t dim,
                                         int64_t row_begin, int64_t rows, int64_t vocab, T* out,
                                         BadId* bad, cudaStream_t stream);

// ---- gpu_attention.cu ----------------------------------------------------------------------
// ops_fused_attention.cpp's causal_attention and causal_attention_grad on a [B, T, H, D] block
// (its AttentionGeometry, attention_geometry.h): `pairs` = local B x local H, position rows
// `row_stride` = local H x D apart; the block's offsets in the global B and H and the global H
// locate its probabilities in [B, H, T, T] for the dropout draws.
struct AttentionShape {
  int64_t pairs = 0, local_heads = 0, t = 0, d = 0, row_stride = 0;
  int64_t heads = 0, first_batch = 0, first_head = 0;
  double scale = 1.0, rate = 0.0;
  uint64_t seed = 0;
};

// Whether the kernels below are compiled for head width d (32, 64; float also 128).
template <typename T>
bool attention_head_width_compiled(int64_t d);

// out = dropout(causal_softmax(scale q k^T), rate, seed) v per (b, h) pair.
template <typename T>
cudaError_t launch_causal_attention(const AttentionShape& g, const T* q, const T* k, const T* v,
                                    T* out, cudaStream_t stream);

// Its gradient from out and the output's gradient `grad`: dq, dk, dv (each a block like q).
template <typename T>
cudaError_t launch_causal_attention_grad(const AttentionShape& g, const T* q, const T* k,
                                         const T* v, const T* out, const T* grad, T* dq, T* dk,
                                         T* dv, cudaStream_t stream);

// ---- gpu_xent.cu ---------------------------------------------------------------------------
// ops_parallel_xent.cpp's stages, then ops_nn.cpp's unsharded cross entropy. A logits block is
// [rows, local] (its classes are global classes [offset, offset + local)); the parts are [rows, 2];
// labels are one per row.

// parts_kernel: out[r] = (sum of exp(x[r, c] - m[r]) over the block's classes, accumulated in T;
// x[r, label - offset] - m[r] when the block holds the label's class, else 0).
template <typename T, typename L>
cudaError_t launch_xent_parts(const L* labels, const T* x, const T* m, T* out, int64_t rows,
                              int64_t local, int64_t offset, cudaStream_t stream);

// parts_grad_kernel: out[r, c] = g[r, 0] * exp(x[r, c] - m[r]), plus g[r, 1] at the label's class.
template <typename T, typename L>
cudaError_t launch_xent_parts_grad(const L* labels, const T* x, const T* m, const T* g, T* out,
                                   int64_t rows, int64_t local, int64_t offset,
                                   cudaStream_t stream);

// Where the last stage reports labels outside [0, classes): the least such row (device memory,
// every byte set to 0xff by the caller before the launch: kNoRow when there is none).
struct BadLabel {
  static constexpr uint64_t kNoRow = ~uint64_t{0};
  uint64_t row;
};

// The last stage: out[r] = log(parts[r, 0]) - parts[r, 1], each label checked against `classes`.
template <typename T, typename L>
cudaError_t launch_xent_finish(const T* parts, const L* labels, T* out, int64_t rows,
                               int64_t classes, BadLabel* bad, cudaStream_t stream);

// Its gradient: out[r] = (g[r] / parts[r, 0], -g[r]).
template <typename T>
cudaError_t launch_xent_finish_grad(const T* parts, const T* g, T* out, int64_t rows,
                                    cudaStream_t stream);

// ops_nn.cpp's xent_rows, for logits whose class axis is whole: each of `rows` rows of
// `classes` logits x, out[r] = log(sum(exp(x - max))) - (x[label] - max), the sum accumulated in
// T. A row whose label is outside [0, classes) is reported through `bad` as by
// launch_xent_finish (its loss is then NaN).
template <typename T, typename L>
cudaError_t launch_xent_rows(const L* labels, const T* x, T* out, int64_t rows, int64_t classes,
                             BadLabel* bad, cudaStream_t stream);

// ops_nn.cpp's xent_grad_rows: dx[r, c] = exp(x - max) * (g[r] / sum(exp(x - max))), minus g[r]
// at the label's class (the product rounded before the subtraction, as the CPU's statements). Bad
// labels are reported as by launch_xent_rows (their rows get no subtraction).
template <typename T, typename L>
cudaError_t launch_xent_grad_rows(const L* labels, const T* x, const T* g, T* dx, int64_t rows,
                                  int64_t classes, BadLabel* bad, cudaStream_t stream);

}  // namespace tessel::detail::gpu
