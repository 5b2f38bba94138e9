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
// gradient tape is recording (autodiff.h), the call is recorded with its VJP.
//
// A sharding rule that has no answer for the input layouts throws kUnimplemented; call_op then
// raises kUnimplemented naming the op and the layouts, unless the replicate fallback is on
// (set_replicate_fallback): then every input is relaid out to replicated (Partial reduced), the
// kernel runs on whole tensors, and a warning naming the op and the bytes moved is printed once
// per op.
//
// Families register from explicit functions (register_elementwise_ops, ...), called once when
// the global registry is first used.
//
// Thread safety: the registry is filled once, then read-only; call_op from one controller
// thread per runtime (like TF's eager context).
#pragma once

#include <cstdint>
#include <functional>
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

// What an op call carries besides its inputs; each op reads the fields it documents.
struct OpAttrs {
  std::vector<int64_t> axes;         // reductions, transpose permutation, concat axis
  std::vector<int64_t> begin;        // slice
  std::vector<int64_t> sizes;        // slice sizes, reshape / creation shape
  std::string equation;              // einsum
  double scalar = 0.0;               // fill value, random bounds (low)
  double scalar2 = 0.0;              // random bounds (high), normal stddev
  DType dtype = DType::kF32;         // cast, creation
  bool keepdims = false;
  bool transpose_a = false;          // matmul
  bool transpose_b = false;
  uint64_t seed = 0;                 // random, dropout
  double epsilon = 0.0;              // layer_norm: added to the variance
  double rate = 0.0;                 // dropout: the fraction of elements dropped
  std::optional<Layout> layout;      // creation ops: the output layout
  Runtime* runtime = nullptr;        // creation ops: whose devices (null: Runtime::global())
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
};

struct VjpArgs {
  std::vector<DTensor> inputs;
  DTensor output;
  DTensor grad;  // d loss / d output, in the output's layout
  const OpAttrs* attrs = nullptr;
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
  std::function<void(const std::vector<Tensor>& inputs, Tensor& output, const OpAttrs& attrs,
                     const LocalContext& context)>
      kernel;
  // Gradients of the inputs (null DTensor: not differentiable there). Empty: no gradient.
  std::function<std::vector<DTensor>(const VjpArgs& args)> vjp;
};

class OpRegistry {
 public:
  // The process's registry, with every built-in family registered.
  static OpRegistry& global();
  // A duplicate name: kAlreadyExists. A def without infer, shard or kernel: kInvalidArgument.
  void add(OpDef def);
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

// Opt-in: ops without a rule for their input layouts replicate their inputs (default off).
void set_replicate_fallback(bool enabled);
bool replicate_fallback();

}  // namespace tessel
