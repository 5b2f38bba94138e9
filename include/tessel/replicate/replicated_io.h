// The inputs and outputs of a replicated computation, as TF's replication ops define them
// (tensorflow/core/ops/tpu_replication_ops.cc): TPUReplicatedInput's shape merging (BR-105-01)
// and resource-handle merging (BR-105-02), TPUReplicatedOutput, TPUDummyInput. replicate()
// (replicate.h) applies the merges to its inputs and variables; they are public so that a tracer
// or a user can check shapes before running anything.
//
//   merge_replicated_input_shapes({PartialShape({2, kUnknownDim}), PartialShape({2, 3})})
//       == PartialShape({2, 3})
//   merge_replicated_input_shapes({Shape{2, 3}, Shape{2, 4}})
//       // kInvalidArgument: "replica 0 has shape [2,3] and replica 1 has shape [2,4] ..."
//   auto w = ReplicatedVariable::per_replica("w", {w0, w1});   // one value per replica
//   auto b = ReplicatedVariable::mirrored("b", b_value);       // one value for every replica
//   merge_variable_handles(w, 2)             // {shape [..], dtype}: the merged handle data
//   merge_replicated_handle_shapes_and_types({HandleData{{PartialShape({2, 3}), DType::kF32}},
//                                             std::nullopt})
//       .output == HandleData{{[2,3], f32}}   // input 1 has no handle data: input 0's wins
//   replicated_output(t, 4)                  // 4 handles of t (TPUReplicatedOutput)
//   dummy_input(DType::kBF16, Shape{8, 128}) // zeros (TPUDummyInput: f32 or bf16 only)
//
// Merging follows TF's shape function: start from the LAST replica's shape and merge replicas
// N-2 .. 0 into it (PartialShape::merge). A failure at replica i is Error kInvalidArgument from
// "ReplicatedInput" naming replica i, a replica j > i whose shape conflicts with it directly,
// both shapes, TF's merge text and TF's context "From merging shape i with other shapes.".
// Handle data (the shapes and dtypes behind each replica's resource handle) follow TF's code
// exactly (merge_replicated_handle_shapes_and_types): the output carries the LAST input's handle
// data that exists, and conflicts are ignored ("no way to discover errors"). A ReplicatedVariable,
// whose values tessel has, is checked strictly instead (merge_variable_handles): replicas that
// disagree on its shape or dtype would fail TF's compilation, which needs identical static shapes.
//
// Thread safety: pure functions and value types.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/core/dtype.h"
#include "tessel/core/partial_shape.h"
#include "tessel/core/shape.h"
#include "tessel/core/tensor.h"
#include "tessel/distribute/variable_aggregation.h"
#include "tessel/dtensor/dtensor.h"

namespace tessel {

// TPUReplicatedInput's shape function over the replicas' shapes (replica order). No shapes:
// kInvalidArgument (TF: N >= 1). `what` prefixes the message ("input 2: ").
PartialShape merge_replicated_input_shapes(const std::vector<PartialShape>& shapes,
                                           std::string_view what = {});

// A resource handle's data: the shape and dtype of the variable behind it.
struct HandleShapeAndType {
  PartialShape shape;
  DType dtype = DType::kF32;
  friend bool operator==(const HandleShapeAndType&, const HandleShapeAndType&) = default;
};

// The handle data of one resource input (TF's vector<ShapeAndType>): one entry per value behind
// the handle (a variable has one; a TensorList several). An input may have none (nullopt).
using HandleData = std::vector<HandleShapeAndType>;

// What TPUReplicatedInput's shape function does with the handle data of N resource inputs
// (BR-105-02), as TF's code does it:
//  - output: the handle data of the last input (highest index) that has any, unchanged; none if
//    no input has any. `source` is that input's index (-1 when none).
//  - inputs: each input's handle data after TF merges the source's into it, from input source-1
//    down to 0 (MergeInputHandleShapesAndTypes): an input without handle data takes a copy; one
//    with a different number of entries, or an entry of another dtype, is left as it was; per
//    entry, shapes merge (PartialShape::merge) and a shape that does not merge is kept.
// Nothing is an error: TF ignores every conflict. No inputs: kInvalidArgument (TF: N >= 1).
struct ReplicatedHandleData {
  std::optional<HandleData> output;
  int source = -1;
  std::vector<std::optional<HandleData>> inputs;
  friend bool operator==(const ReplicatedHandleData&, const ReplicatedHandleData&) = default;
};
ReplicatedHandleData merge_replicated_handle_shapes_and_types(
    const std::vector<std::optional<HandleData>>& inputs);

// A variable passed to a replicated computation (TF's _TPUReplicate `variables`): either one
// value per replica, or one value mirrored on every replica (TF's is_mirrored_variable). Each
// replica's handle data is its value's shape and dtype; they merge across replicas, and the
// result must agree with the declared dtype and merge with the declared handle_shape.
// The computation may assign it (ReplicaContext::assign_variable); replicate() then writes the
// new values into `values`' tensors in place, a mirrored variable's combined by `aggregation`.
struct ReplicatedVariable {
  std::string name;
  DType dtype = DType::kF32;
  PartialShape handle_shape;   // the declared shape; the unknown rank accepts any
  std::vector<Tensor> values;  // one per replica, or one when is_mirrored_variable
  bool is_mirrored_variable = false;
  // How the replicas' assignments of a mirrored variable combine (TF's tf.Variable aggregation);
  // a per-replica variable takes each replica's own value and ignores it.
  VariableAggregation aggregation = VariableAggregation::kNone;

  // dtype from the first value; handle_shape as given (default: unknown rank).
  static ReplicatedVariable per_replica(std::string name, std::vector<Tensor> values,
                                        PartialShape handle_shape = {});
  static ReplicatedVariable mirrored(std::string name, Tensor value, PartialShape handle_shape = {},
                                     VariableAggregation aggregation = VariableAggregation::kNone);
  // The value replica `replica` reads (values[0] when mirrored).
  const Tensor& value(int replica) const;
};

// Checks `variable` for `num_replicas` replicas and returns its merged handle data: the values'
// shapes merged from the last replica to the first, as input shapes are, and their dtype. Errors,
// kInvalidArgument from "ReplicatedVariable" naming the variable: a value count other than
// num_replicas (1 when mirrored), a null value (naming the replica), values whose shapes or
// dtypes differ across replicas (naming both replicas; TF's compilation would fail), a dtype
// other than the declared one, a merged shape that does not merge with the declared handle_shape.
HandleShapeAndType merge_variable_handles(const ReplicatedVariable& variable, int num_replicas);

// TPUReplicatedOutput: one value to num_replicas outputs, each with the input's shape. The
// outputs are handles of the same storage (TF's outputs are one tensor; tessel tensors are
// mutable, so write to a clone()). num_replicas < 1 or a null value: kInvalidArgument from
// "ReplicatedOutput".
std::vector<Tensor> replicated_output(const Tensor& value, int num_replicas);
std::vector<DTensor> replicated_output(const DTensor& value, int num_replicas);

// TPUDummyInput: a tensor of zeros standing in for an input that is absent, dtype f32 or bf16
// (TF's two); any other dtype: kInvalidArgument from "DummyInput" naming it.
Tensor dummy_input(DType dtype, const Shape& shape);

}  // namespace tessel
