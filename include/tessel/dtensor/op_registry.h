// The op registry: every SPMD op is one registration of shape inference, a sharding rule, a
// local kernel and a vector-Jacobian product; call_op dispatches a call on DTensors.
//
//   OpDef def;
//   def.name = "negative";
//   def.num_inputs = 1;
//   def.infer = same_shape_as_input;          // global output shape and dtype
//   def.shard = keep_layout_unless_partial;   // input layouts -> required layouts + output
//   def.kernel = negate_block;                // one device's block -> its output block
//   def.vjp = [](const VjpArgs& a) { return std::vector<DTensor>{negative(a.grad)}; };
//   OpRegistry::global().add(std::move(def));
//
// Dispatch (call_op) on the controller thread: infer the output's global shape and dtype, ask
// the sharding rule for the layouts the inputs must have and the output's layout, relayout the
// inputs that differ (relayout.h: the planner picks the collectives), allocate the output
// blocks on their devices, and enqueue the kernel on every device's stream. Kernels run
// asynchronously, in order per device; unpack / to_host / relayout wait for them. When a
// gradient tape is recording (autodiff.h), the call is recorded with its VJP. What a call works
// out before its kernels run (output shape, sharding decision, where every block lies) depends
// only on the op, its attrs, its runtime and its inputs' shapes, dtypes and layouts, so each
// controller thread keeps it for its most recent calls (1024 of them) and a call that repeats
// one goes straight to the relayouts and kernels; infer and shard must therefore be pure.
//
// A sharding rule that has no answer for the input layouts throws kUnimplemented (its other errors
// are the call's); call_op then relays the inputs out to the nearest layouts the rule accepts
// (replicated at worst), counts the fallback and warns once per op and layouts, or in strict
// mode raises kUnimplemented naming the op and the layouts (sharding_fallback.h).
//
// Families register from explicit functions (register_elementwise_ops, ...), called once when
// the global registry is first used.
//
// GPU devices: a block whose output lives in a GPU's memory runs the op's gpu_kernel when it has
// one (launched on the device's CUDA stream, LocalContext::cuda_stream). An op without one runs
// host-staged: its input blocks are copied to the host, the CPU kernel runs, and the output is
// copied back, so every op works on GPU meshes and gives the CPU kernel's result; each such
// call is counted (host_staged_kernel_calls()). An op's GPU kernel is its OpDef's gpu_kernel,
// set beside its CPU kernel (the elementwise ops, whose family files ask the CUDA backend for it:
// null without one) or later with set_gpu_kernel (the CUDA backend's register_gpu_kernels in
// src/dtensor/ops/cuda/).
//
// Thread safety: the registry is filled once, then read-only; call_op from one controller
// thread per runtime (like TF's eager context).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/core/box.h"
#include "tessel/core/dtype.h"
#include "tessel/core/shape.h"
#include "tessel/dtensor/dtensor.h"
#include "tessel/mesh/layout.h"

namespace tessel {

// What an op call carries besides its inputs. Each field names the ops that read it; an op
// ignores the others. The optional fields are the ones where every value means something to
// the op reading it (a seed of 0, a concat along axis 0, a lower bound of 0): they are set or
// not, so a trace (replicate/graph.h) prints exactly the ones a call set. An op reads an unset
// optional scalar as 0.
struct OpAttrs {
  // Axes and shapes.
  std::vector<int64_t> axes;          // reduce_sum / reduce_mean / reduce_max and their gradient
                                      // ops (reduce_sum_grad, reduce_max_ties, reduce_max_grad):
                                      // the reduced axes (empty: every axis)
  std::vector<int64_t> perm;          // transpose: output dim k is input dim perm[k] (empty:
                                      // the dims reversed)
  std::optional<int64_t> axis;        // concat: the axis the inputs are joined along (required);
                                      // argmax: the axis reduced (unset: the last); gather,
                                      // scatter_add, cumsum: the axis they work along (unset:
                                      // 0); take_along_axis, scatter_add_along_axis: the same
                                      // (required); one_hot: where the new axis goes (unset: -1,
                                      // the last)
  std::vector<int64_t> begin;         // slice, slice_grad: where the slice starts; pad: the
                                      // padding before each dim
  std::vector<int64_t> size;          // slice: its extent per dim (-1: to the end)
  std::vector<int64_t> shape;         // reshape: the target (one -1 is inferred); creation ops:
                                      // the output's; reduce_sum_grad (also matmul's VJP
                                      // broadcasting back): the reduced input's; slice_grad:
                                      // the sliced input's; pad: the padded output's;
                                      // conv2d_backprop_input and
                                      // avg_pool2d_grad: the input's (NHWC);
                                      // conv2d_backprop_filter: the filter's (HWIO)
  std::optional<int64_t> vocab_size;  // embedding_lookup_grad: the table's rows (required);
                                      // sparse_softmax_cross_entropy_with_logits.vocab_parallel:
                                      // the class count (required)
  std::optional<int64_t> depth;       // one_hot: the classes (required)
  std::string equation;               // einsum
  // Convolution and pooling over NHWC images (conv2d, max_pool2d, avg_pool2d and their gradient
  // ops), TF's attributes: strides, dilations and ksize are 1, 2 or 4 ints (4: one per NHWC
  // dimension, the N and C ones 1).
  std::vector<int64_t> strides;            // the window's step (required)
  std::vector<int64_t> dilations;          // conv2d: the filter taps' spacing (empty: 1)
  std::vector<int64_t> ksize;              // the pools: the window's extent (required)
  std::string padding;                     // "SAME", "VALID" or "EXPLICIT" (required)
  std::vector<int64_t> explicit_paddings;  // padding "EXPLICIT": 8 ints, (before, after) per
                                           // NHWC dimension, the N and C ones 0
  // Host scalars.
  std::optional<double> value;          // fill; pad: the constant (unset: 0);
                                        // rotary_embedding: theta
  std::optional<double> on_value;       // one_hot: the value at the index (unset: 1)
  std::optional<double> off_value;      // one_hot: the value elsewhere (unset: 0)
  std::optional<double> operand;        // add_scalar: the addend; multiply_scalar: the factor
  std::optional<double> low;            // random_uniform: values in [low, high)
  std::optional<double> high;           // random_uniform
  std::optional<double> mean;           // random_normal
  std::optional<double> stddev;         // random_normal
  std::optional<double> scale;          // reduce_sum_grad: the factor on the broadcast gradient;
                                        // causal_softmax, causal_attention: the factor on
                                        // the scores;
                                        // sample_categorical: 1 / temperature;
                                        // rotary_embedding: 1, or -1 to rotate back
  std::optional<double> beta;           // ema, ema_square: the decay
  std::optional<double> learning_rate;  // adam_apply: the step's (bias-corrected) learning rate
  std::optional<double> epsilon;        // adam_apply; layer_norm: added to the variance;
                                        // rms_norm: added to the mean square
  std::optional<double> rate;           // dropout, causal_attention: the fraction of elements
                                        // (probabilities) dropped
  std::optional<int64_t> top_k;         // sample_categorical: draw among the k largest;
                                        // top_k: how many (required)
  // The rest.
  DType dtype = DType::kF32;     // cast: the target; creation ops: the output's
  bool keepdims = false;         // the reductions and their gradient ops
  bool transpose_a = false;      // matmul
  bool transpose_b = false;      // matmul
  bool exclusive = false;        // cumsum: each sum leaves its own element out
  bool reverse = false;          // cumsum: summed from the end of the axis
  std::optional<uint64_t> seed;  // random_uniform, random_normal, dropout, causal_attention,
                                 // sample_categorical (unset: 0)
  std::optional<Layout> layout;  // creation ops: the output's layout (required);
                                 // reduce_sum_grad: the reduced input's (its sharding is
                                 // preferred for the broadcast axes; optional);
                                 // embedding_lookup_grad: the table's (required)
  Runtime* runtime = nullptr;    // creation ops: whose devices (null: Runtime::global())

  // Every field above as (name, pointer to member), in declaration order: the one list that the
  // trace's printer (replicate/graph.h), the dispatch cache's hash and the Python binding
  // (tessel.OpAttrs) are derived from, so a new attribute is its declaration above and its line
  // here (a test checks that the list has every field).
  template <typename Visit>
  static constexpr void for_each_field(Visit&& visit) {
    visit("axes", &OpAttrs::axes);
    visit("perm", &OpAttrs::perm);
    visit("axis", &OpAttrs::axis);
    visit("begin", &OpAttrs::begin);
    visit("size", &OpAttrs::size);
    visit("shape", &OpAttrs::shape);
    visit("vocab_size", &OpAttrs::vocab_size);
    visit("depth", &OpAttrs::depth);
    visit("equation", &OpAttrs::equation);
    visit("strides", &OpAttrs::strides);
    visit("dilations", &OpAttrs::dilations);
    visit("ksize", &OpAttrs::ksize);
    visit("padding", &OpAttrs::padding);
    visit("explicit_paddings", &OpAttrs::explicit_paddings);
    visit("value", &OpAttrs::value);
    visit("on_value", &OpAttrs::on_value);
    visit("off_value", &OpAttrs::off_value);
    visit("operand", &OpAttrs::operand);
    visit("low", &OpAttrs::low);
    visit("high", &OpAttrs::high);
    visit("mean", &OpAttrs::mean);
    visit("stddev", &OpAttrs::stddev);
    visit("scale", &OpAttrs::scale);
    visit("beta", &OpAttrs::beta);
    visit("learning_rate", &OpAttrs::learning_rate);
    visit("epsilon", &OpAttrs::epsilon);
    visit("rate", &OpAttrs::rate);
    visit("top_k", &OpAttrs::top_k);
    visit("dtype", &OpAttrs::dtype);
    visit("keepdims", &OpAttrs::keepdims);
    visit("transpose_a", &OpAttrs::transpose_a);
    visit("transpose_b", &OpAttrs::transpose_b);
    visit("exclusive", &OpAttrs::exclusive);
    visit("reverse", &OpAttrs::reverse);
    visit("seed", &OpAttrs::seed);
    visit("layout", &OpAttrs::layout);
    visit("runtime", &OpAttrs::runtime);
  }

  // Field by field (the compiler's, so it never misses one); the scalars as doubles compare
  // (-0.0 equals 0.0, NaN equals nothing).
  friend bool operator==(const OpAttrs&, const OpAttrs&) = default;
};

// An input or output of a call, as the rules see it: no data.
struct TensorSpec {
  Shape shape;
  DType dtype = DType::kF32;
  Layout layout;
};

struct ShardingDecision {
  std::vector<Layout> inputs;  // the layouts the inputs must have (relaid out when different)
  Layout output;               // the output's layout (may be Partial)
};

// One device's share of a call, for kernels that need to know where their block lies.
struct LocalContext {
  Box output_block;               // the output block's place in the global output
  std::vector<Box> input_blocks;  // each input block's place in its global input
  Shape output_shape;             // global shapes
  std::vector<Shape> input_shapes;
  int64_t mesh_offset = 0;        // this device's offset in the mesh
  const Layout* output_layout = nullptr;
  void* cuda_stream = nullptr;     // GPU devices: the device's cudaStream_t (gpu_kernel launches
                                   // on it); null on CPU devices
};

// What an op's VJP reads of a call besides the output's gradient (OpDef::saves), so that a
// gradient tape keeps only that for the backward pass and no more activation memory: the inputs
// whose data it reads (bit k: input k) and whether it reads the output's. The tape hands the VJP
// a stand-in for the rest: an abstract DTensor (dtensor.h) of the same shape, dtype, layout and
// runtime, which reading data refuses (kFailedPrecondition). The default keeps everything.
struct VjpSaves {
  static constexpr uint32_t kAllInputs = ~uint32_t{0};
  uint32_t inputs = kAllInputs;
  bool output = true;

  // Nothing but shapes, dtypes and layouts (add, reshape, dropout).
  static constexpr VjpSaves nothing() { return {0, false}; }
  // The output only (exp, causal_softmax).
  static constexpr VjpSaves output_only() { return {0, true}; }
  // The listed inputs, and the output when `with_output` (matmul: {0, 1}).
  static constexpr VjpSaves of_inputs(std::initializer_list<int> which, bool with_output = false) {
    VjpSaves s{0, with_output};
    for (int k : which) s.inputs |= uint32_t{1} << k;
    return s;
  }
  constexpr bool keeps_input(size_t k) const {
    return inputs == kAllInputs || (k < 32 && ((inputs >> k) & 1u) != 0);
  }
};

struct VjpArgs {
  std::vector<DTensor> inputs;  // as the kernel read them; stand-ins where OpDef::saves drops them
  DTensor output;               // a stand-in unless OpDef::saves keeps it
  DTensor grad;                 // d loss / d output, in the output's layout
  const OpAttrs* attrs = nullptr;
  std::vector<DTensor> saved;  // what OpDef::save computed when the call was recorded
  // The inputs whose gradients the tape needs now (empty: all). A VJP may return a null DTensor
  // for an input that is not wanted, and skip its work (matmul's weight gradient while a
  // zero-bubble pipeline's backward pass computes only the input gradients; an input that no
  // watched tensor flows into); it may also compute it, which is never wrong.
  std::vector<bool> wanted;
  bool wants(size_t k) const { return wanted.empty() || (k < wanted.size() && wanted[k]); }
  // Set by a VJP that relays `grad` out before using it (layer norm reduces a Partial gradient):
  // the relaid-out gradient. When the VJP skipped unwanted gradients, the tape's second call for
  // them (the split backward's weight half) passes it as `grad`, so that the relayout, a
  // collective under tensor parallelism, runs once.
  mutable DTensor grad_as_used;
};

struct OpDef {
  std::string name;
  int num_inputs = 1;
  // Global output shape and dtype from the inputs' (errors: kInvalidArgument naming the op).
  std::function<TensorSpec(const std::vector<TensorSpec>& inputs, const OpAttrs& attrs)> infer;
  // Layouts the inputs must have and the output's; the output spec holds inferred shape/dtype.
  std::function<ShardingDecision(const std::vector<TensorSpec>& inputs, const TensorSpec& output,
                                 const OpAttrs& attrs)>
      shard;
  // Writes `output` (preallocated, the local block's shape, output dtype) from the local input
  // blocks. Runs on the device's stream.
  using Kernel = std::function<void(const std::vector<Tensor>& inputs, Tensor& output,
                                    const OpAttrs& attrs, const LocalContext& context)>;
  Kernel kernel;
  // The same for blocks in a GPU's memory: enqueues its work on context.cuda_stream and may
  // return before it finishes. Null: the op runs host-staged on GPU devices (see above).
  Kernel gpu_kernel;
  // Gradients of the inputs (null DTensor: not differentiable there). Empty: no gradient.
  std::function<std::vector<DTensor>(const VjpArgs& args)> vjp;
  // The VJP returns a null DTensor for each input VjpArgs::wanted leaves out, and skips its
  // work: a split backward pass (GradientTape::backward_input) then leaves those gradients to
  // its weight half. Otherwise (the default) the VJP computes every gradient whenever it runs.
  bool vjp_skips_unwanted = false;
  // What the VJP reads of the call (the tape keeps only that; see VjpSaves).
  VjpSaves saves;
  // Tensors the VJP reads that the call does not return, computed from the inputs (as the kernel
  // read them) and the output when a tape records the call, outside the tape (layer_norm: each
  // row's mean and 1 / std, so that its backward pass does not compute them again); the VJP finds
  // them in VjpArgs::saved. Null: none. Runs only under a tape, so an inference pays nothing.
  std::function<std::vector<DTensor>(const std::vector<DTensor>& inputs, const DTensor& output,
                                     const OpAttrs& attrs)>
      save;
  // The kernel only copies the first input's block whole into the output block of another
  // shape (reshape): the launch then makes the output block a view of the input block instead
  // (no allocation, no kernel) wherever that block is contiguous, on the same device and holds
  // as many elements. Safe because blocks are never written after their kernel has run.
  bool output_views_input = false;
  // For an op whose kernel only copies one box of the first input's block into the output block
  // (slice): the box's offsets in that block, for the device's context. The launch then makes the
  // output block a view of the box wherever the box is contiguous and on the same device (no
  // allocation, no kernel), on the same grounds; the view keeps the whole input block's storage
  // alive while it lives (as a numpy or PyTorch view does). Null: none.
  std::function<std::vector<int64_t>(const LocalContext& context, const OpAttrs& attrs)>
      output_view_offsets;
};

class OpRegistry {
 public:
  // The process's registry, with every built-in family registered.
  static OpRegistry& global();
  // A duplicate name: kAlreadyExists. A def without infer, shard or kernel: kInvalidArgument.
  void add(OpDef def);
  // Sets op `name`'s gpu_kernel (kNotFound naming the op; a null kernel: kInvalidArgument).
  void set_gpu_kernel(std::string_view name, OpDef::Kernel kernel);
  // kNotFound naming the op.
  const OpDef& get(std::string_view name) const;
  bool contains(std::string_view name) const;
  std::vector<std::string> names() const;

 private:
  std::map<std::string, OpDef, std::less<>> ops_;
};

// Runs op `name` on `inputs` (see the dispatch steps above). Inputs on different meshes,
// null inputs, or a count other than num_inputs: kInvalidArgument naming the op.
DTensor call_op(std::string_view name, const std::vector<DTensor>& inputs,
                const OpAttrs& attrs = {});

// The output layout and the input relayouts call_op would use, without running anything.
ShardingDecision plan_op(std::string_view name, const std::vector<TensorSpec>& inputs,
                         const OpAttrs& attrs = {});

// How many blocks of each op ran host-staged on GPU devices (no gpu_kernel) in this process.
std::map<std::string, int64_t> host_staged_kernel_calls();
// Whether op `name` has a GPU kernel (without one its blocks on GPU devices run host-staged).
// kNotFound naming the op.
bool has_gpu_kernel(std::string_view name);

// Deprecated (the fallback is now on by default): set_replicate_fallback(e) is
// set_sharding_fallback_strict(!e), replicate_fallback() is !sharding_fallback_strict().
void set_replicate_fallback(bool enabled);
bool replicate_fallback();

}  // namespace tessel
