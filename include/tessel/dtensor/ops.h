// SPMD ops on DTensors, with TensorFlow's names. Each runs on every device of its inputs' mesh
// with automatic collectives (op_registry.h: a sharding rule per op picks the output layout and
// the relayouts its inputs need) and records itself on an active gradient tape (autodiff.h).
//
//   Mesh mesh = Mesh::create({{"batch", 2}, {"model", 2}});
//   DTensor x = random_normal({8, 16}, Layout({"batch", "unsharded"}, mesh), /*seed=*/1);
//   DTensor w = random_normal({16, 32}, Layout({"unsharded", "model"}, mesh), 2);
//   DTensor h = relu(matmul(x, w));      // [8, 32] in (batch, model): no communication
//   DTensor s = reduce_sum(h, {1});      // Partial(sum over model) until a consumer needs it
//
// Broadcasting follows numpy. Partial semantics: linear ops keep a Partial input Partial (add
// of two Partials, a Partial times a replicated factor, sums, matmul, transpose, reshape,
// slice, concat, negative); a scalar or replicated operand added to a Partial sum is added
// once, not once per shard; every other op reduces a Partial input first.
// Errors: shapes that do not broadcast, bad axes, unknown einsum letters: kInvalidArgument
// naming the op and the shapes; layouts without a rule: see op_registry.h.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tessel/core/shape.h"
#include "tessel/dtensor/dtensor.h"
#include "tessel/mesh/layout.h"

namespace tessel {

// Elementwise, broadcasting.
DTensor add(const DTensor& a, const DTensor& b);
DTensor subtract(const DTensor& a, const DTensor& b);
DTensor multiply(const DTensor& a, const DTensor& b);
DTensor divide(const DTensor& a, const DTensor& b);
DTensor maximum(const DTensor& a, const DTensor& b);
DTensor minimum(const DTensor& a, const DTensor& b);
// With a host scalar (replicated).
DTensor add(const DTensor& a, double b);
DTensor multiply(const DTensor& a, double b);

// Elementwise, unary.
DTensor negative(const DTensor& x);
DTensor exp(const DTensor& x);
DTensor log(const DTensor& x);
DTensor tanh(const DTensor& x);
DTensor relu(const DTensor& x);
// GELU: the tanh approximation (approximate = true, tessel's default, jax.nn.gelu's) or the
// exact x * Phi(x) with erf (TF's and PyTorch's default, nanoGPT's).
DTensor gelu(const DTensor& x, bool approximate = true);
// The logistic function 1 / (1 + e^-x) (0 and 1 at the far ends, never NaN for a number).
DTensor sigmoid(const DTensor& x);
DTensor sqrt(const DTensor& x);
DTensor rsqrt(const DTensor& x);
DTensor cast(const DTensor& x, DType dtype);

// More elementwise ops (issue 34), with numpy's names and broadcasting. Unary, float dtypes:
DTensor square(const DTensor& x);
DTensor abs(const DTensor& x);  // gradient sign(x), 0 at 0
DTensor sin(const DTensor& x);
DTensor cos(const DTensor& x);
DTensor silu(const DTensor& x);  // x * sigmoid(x) (swish)
// x ** y (C's pow: NaN for a negative base and a non-integer exponent). Gradients flow into both
// operands; the exponent's, x^y log x, takes log 1 where x == 0 (as JAX).
DTensor pow(const DTensor& x, const DTensor& y);
DTensor pow(const DTensor& x, double exponent);
// Comparisons of two tensors of one dtype (f32, f64, i32, i64): a bool DTensor. No gradient
// flows through them. A Partial input is reduced first (a comparison is not linear).
DTensor less(const DTensor& a, const DTensor& b);
DTensor less_equal(const DTensor& a, const DTensor& b);
DTensor greater(const DTensor& a, const DTensor& b);
DTensor greater_equal(const DTensor& a, const DTensor& b);
DTensor equal(const DTensor& a, const DTensor& b);
DTensor not_equal(const DTensor& a, const DTensor& b);
// x where cond is true, else y (numpy.where, TF's where_v2): cond bool, x and y of one dtype, the
// three broadcast together. Gradients flow into x and y (zero where the other was taken).
DTensor where(const DTensor& cond, const DTensor& x, const DTensor& y);

// Linear algebra.
DTensor matmul(const DTensor& a, const DTensor& b, bool transpose_a = false,
               bool transpose_b = false);  // [..., m, k] x [..., k, n]
DTensor einsum(const std::string& equation, const DTensor& a, const DTensor& b);

// Reductions over `axes` (empty: all axes).
DTensor reduce_sum(const DTensor& x, const std::vector<int64_t>& axes = {}, bool keepdims = false);
DTensor reduce_mean(const DTensor& x, const std::vector<int64_t>& axes = {}, bool keepdims = false);
DTensor reduce_max(const DTensor& x, const std::vector<int64_t>& axes = {}, bool keepdims = false);

// Neural-network ops over the last axis.
DTensor softmax(const DTensor& logits);
DTensor log_softmax(const DTensor& logits);
// Per-example loss -log softmax(logits)[label] (TF's sparse_softmax_cross_entropy_with_logits):
// labels [..] of i32/i64, logits [.., classes]. Logits whose class axis is sharded are never
// gathered: the max and the sum of exponentials are reduced across the class shards instead
// (vocabulary-parallel cross-entropy, uneven shards included).
DTensor sparse_softmax_cross_entropy_with_logits(const DTensor& labels, const DTensor& logits);

// Convolution and pooling over NHWC images (TF's tf.nn.conv2d, max_pool2d and avg_pool2d):
// input [batch, height, width, channels]; strides, dilations and ksize are 1, 2 or 4 ints (one
// for both spatial dims, (height, width), or one per NHWC dim with the N and C ones 1); padding
// "SAME" (output ceil(in / stride), TF's split of the padding: the extra one after), "VALID" (no
// padding) or "EXPLICIT" with explicit_paddings, 8 ints: (before, after) per NHWC dim, the N and
// C pairs 0. Sharding: the batch and channel dims keep their sharding (a batch-sharded input
// needs no communication; filters sharded over their output channels shard the output's
// channels; input channels sharded like the filters' input channels give a Partial(sum) output);
// sharded height or width dims are gathered by the sharding fallback (sharding_fallback.h).
// filters: [filter_height, filter_width, in_channels, out_channels] (HWIO); output [batch,
// out_height, out_width, out_channels]. Gradients into the input and the filters.
DTensor conv2d(const DTensor& input, const DTensor& filters, const std::vector<int64_t>& strides,
               const std::string& padding, const std::vector<int64_t>& dilations = {1},
               const std::vector<int64_t>& explicit_paddings = {});
// The largest value of each ksize window per channel (NaN if the window holds one); padded
// cells never win. Its gradient goes to the window's largest input, the first in row-major
// window order on ties.
DTensor max_pool2d(const DTensor& input, const std::vector<int64_t>& ksize,
                   const std::vector<int64_t>& strides, const std::string& padding,
                   const std::vector<int64_t>& explicit_paddings = {});
// The mean of each ksize window per channel over the cells inside the input (TF's "SAME"
// average: padded cells are not counted); its gradient spreads evenly over those cells.
DTensor avg_pool2d(const DTensor& input, const std::vector<int64_t>& ksize,
                   const std::vector<int64_t>& strides, const std::string& padding,
                   const std::vector<int64_t>& explicit_paddings = {});

// Layer normalisation over the last axis (biased variance): (x - mean) / sqrt(var + epsilon) *
// weight + bias; weight and bias are [C], bias may be null. The last axis is gathered if sharded;
// the other axes keep their sharding. Weight's gradient is Partial over the row mesh dims.
DTensor layer_norm(const DTensor& x, const DTensor& weight, const DTensor& bias = DTensor(),
                   double epsilon = 1e-5);
// RMS normalisation over the last axis (Llama's RMSNorm, Keras' RMSNormalization): x /
// sqrt(mean(x^2) + epsilon) * weight, weight [C]; epsilon >= 0 (else kInvalidArgument). The last
// axis is gathered if sharded; the other axes keep their sharding. Weight's gradient is Partial
// over the row mesh dims (as layer_norm's).
DTensor rms_norm(const DTensor& x, const DTensor& weight, double epsilon = 1e-6);
// Rotary position embedding (RoPE) of x [..., positions, heads, head_dim]: in each head the pairs
// (x_j, x_{j + D/2}), j < D/2 (D = head_dim, even), at position t (the index on axis -3) are
// rotated by the angle t * theta^(-2j/D) ("rotate_half", as Hugging Face's Llama). head_dim is
// gathered if sharded; the other axes keep their sharding (positions included). Rank < 3, an odd
// head_dim or theta <= 0: kInvalidArgument.
DTensor rotary_embedding(const DTensor& x, double theta = 10000.0);
// Softmax of scale * scores over the last axis of scores [..., queries, keys] where key j is
// visible to query i when j <= i + keys - queries (causal self-attention: the mask is implied,
// never built; the scale, attention's 1 / sqrt(head_dim), costs no pass of its own).
DTensor causal_softmax(const DTensor& scores, double scale = 1.0);
// Causal self-attention in one op (flash attention's algorithm and layout on the CPU; PyTorch's
// scaled_dot_product_attention(is_causal=True, dropout_p, scale) on [B, H, T, D] views): q, k, v
// and the output are [batch, sequence, heads, head_dim] (a projection's [B, T, C] output
// reshaped: no transpose), and in each head the result equals matmul(dropout(causal_softmax(
// matmul(q, k, false, true), scale), dropout_rate, seed), v) on the [B, H, T, D] transposes, the
// dropout mask included (drawn over the [B, H, T, T] probabilities). No [B, H, T, T] map of
// scores or probabilities is kept for the backward pass or made whole in it (they are recomputed
// tile by tile). One shape and dtype (f32, f64) for q, k, v; batch and heads keep q's sharding,
// sequence and head_dim are gathered if sharded. Other shapes, a rate outside [0, 1), a
// non-finite scale: kInvalidArgument naming the values.
DTensor causal_attention(const DTensor& q, const DTensor& k, const DTensor& v, double scale = 1.0,
                         double dropout_rate = 0.0, uint64_t seed = 0);
// Each element zeroed with probability `rate`, the others scaled by 1 / (1 - rate); the mask is
// keyed by (seed, global element index): the same on every mesh and layout. rate 0: x itself.
DTensor dropout(const DTensor& x, double rate, uint64_t seed);
// x, through which no gradient flows (TF's stop_gradient).
DTensor stop_gradient(const DTensor& x);

// Generation. Both gather the axis they reduce over; neither is differentiable.
// The i64 index of the largest value along `axis` (first on ties; NaN counts as largest).
DTensor argmax(const DTensor& x, int64_t axis = -1);
// One class per row of logits [..., classes], drawn from softmax(logits / temperature) over the
// top_k largest logits (0: all); i64 [...]. Row r's draw is keyed by (seed, r): the same on every
// mesh and layout. temperature <= 0, top_k < 0: kInvalidArgument.
DTensor sample_categorical(const DTensor& logits, uint64_t seed, double temperature = 1.0,
                           int64_t top_k = 0);

// Shape ops.
DTensor reshape(const DTensor& x, const Shape& shape);
// transpose(x): the axes reversed. transpose(x, perm): axis k of the result is axis perm[k] of
// x; perm lists every axis once (negative entries count from the end), else kInvalidArgument,
// an empty perm for x of rank > 0 included (as numpy's transpose(a, [])).
DTensor transpose(const DTensor& x);
DTensor transpose(const DTensor& x, const std::vector<int64_t>& perm);
DTensor slice(const DTensor& x, const std::vector<int64_t>& begin,
              const std::vector<int64_t>& size);
DTensor concat(const std::vector<DTensor>& values, int64_t axis);

// Rows `ids` of `table` ([vocab, dim]); a row-sharded table does a masked local lookup and
// returns a Partial(sum) over the table's row mesh dims.
DTensor embedding_lookup(const DTensor& table, const DTensor& ids);

// Indexing and structural ops (issue 34), with numpy's and TF's names. Indices are i32 or i64; an
// index of an axis of n elements is in [-n, n) (negative: from the end, as numpy), else
// kInvalidArgument naming the op, the index and the bound, raised at the next sync point (kernels
// run asynchronously). The axis an op works along must be unsharded: a call with it sharded runs
// on the nearest layout the op's rule accepts (sharding_fallback.h); the other axes keep their
// sharding.

// Slices of params at `indices` along `axis` (tf.gather, numpy.take with an axis): shape
// params.shape[:axis] + indices.shape + params.shape[axis+1:]. Any dtype. The output has params'
// sharding around the indices' (theirs kept over the mesh dims params does not use). Gradient:
// scatter_add.
DTensor gather(const DTensor& params, const DTensor& indices, int64_t axis = 0);
// numpy.take_along_axis: out[..., j, ...] = arr[..., indices[..., j, ...], ...] along `axis`;
// indices has arr's rank and its shape on every other axis (no broadcasting); the output has
// indices' shape. Gradient: the updates scattered back along the axis.
DTensor take_along_axis(const DTensor& arr, const DTensor& indices, int64_t axis);
// base with `updates` added at `indices` along `axis` (gather's gradient; numpy's
// np.add.at(base, (:, ..., indices), updates)): updates has gather(base, indices, axis)'s shape,
// repeated indices add up. f32, f64, i32, i64. Where the indices are sharded, each device adds
// its own and the result is Partial(sum) over their mesh dims.
DTensor scatter_add(const DTensor& base, const DTensor& indices, const DTensor& updates,
                    int64_t axis = 0);
// x with `constant_value` around it: paddings[d] = (before, after) elements on each side of dim d
// (numpy.pad's pad_width, tf.pad's paddings), one pair per dim, none negative. Any dtype.
DTensor pad(const DTensor& x, const std::vector<std::pair<int64_t, int64_t>>& paddings,
            double constant_value = 0.0);
// Running sum along `axis` (tf.math.cumsum): exclusive, each sum leaves its own element out (the
// first is 0); reverse, summed from the end. f32, f64, i32, i64. A Partial(sum) stays Partial.
DTensor cumsum(const DTensor& x, int64_t axis = 0, bool exclusive = false, bool reverse = false);
// tf.one_hot: a new axis of `depth` at `axis` (-1: last) holding on_value at each index and
// off_value elsewhere; an index outside [0, depth) gives off_value everywhere (TF's rule: -1
// marks an ignored label). dtype f32, f64, i32, i64 or bool. Not differentiable.
DTensor one_hot(const DTensor& indices, int64_t depth, double on_value = 1.0,
                double off_value = 0.0, int64_t axis = -1, DType dtype = DType::kF32);
// tf.math.top_k: the k largest values along the last axis, largest first, and their i64 indices
// (the lower index first on ties; NaN counts as the largest, as argmax). 0 <= k <= the last axis's
// size, else kInvalidArgument. The last axis is gathered first if sharded (one relayout for both
// outputs). Gradients flow into x at the values' positions.
struct TopK {
  DTensor values;
  DTensor indices;
};
TopK top_k(const DTensor& x, int64_t k = 1);

// Creation with a layout (runtime: whose devices; null: Runtime::global()). Random values are
// keyed by global element index: the same for every layout and device count.
DTensor zeros(const Shape& shape, const Layout& layout, DType dtype = DType::kF32,
              Runtime* runtime = nullptr);
DTensor ones(const Shape& shape, const Layout& layout, DType dtype = DType::kF32,
             Runtime* runtime = nullptr);
DTensor fill(const Shape& shape, double value, const Layout& layout, DType dtype = DType::kF32,
             Runtime* runtime = nullptr);
DTensor random_uniform(const Shape& shape, const Layout& layout, uint64_t seed, double low = 0.0,
                       double high = 1.0, DType dtype = DType::kF32, Runtime* runtime = nullptr);
DTensor random_normal(const Shape& shape, const Layout& layout, uint64_t seed, double mean = 0.0,
                      double stddev = 1.0, DType dtype = DType::kF32, Runtime* runtime = nullptr);
// The same without a layout: replicated on the default mesh (dtensor_api.h's DefaultMeshScope),
// as TF DTensor places a creation op inside `with default_mesh(mesh):`; no default mesh:
// kInvalidArgument "<op>: No default mesh has been registered to DTensor".
DTensor zeros(const Shape& shape, DType dtype = DType::kF32, Runtime* runtime = nullptr);
DTensor ones(const Shape& shape, DType dtype = DType::kF32, Runtime* runtime = nullptr);
DTensor fill(const Shape& shape, double value, DType dtype = DType::kF32,
             Runtime* runtime = nullptr);
DTensor random_uniform(const Shape& shape, uint64_t seed, double low = 0.0, double high = 1.0,
                       DType dtype = DType::kF32, Runtime* runtime = nullptr);
DTensor random_normal(const Shape& shape, uint64_t seed, double mean = 0.0, double stddev = 1.0,
                      DType dtype = DType::kF32, Runtime* runtime = nullptr);
DTensor zeros_like(const DTensor& x);
DTensor ones_like(const DTensor& x);

}  // namespace tessel
