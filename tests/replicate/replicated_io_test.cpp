// Seed 105's replicated inputs and outputs: PartialShape merging, TPUReplicatedInput's shape
// function (BR-105-01) and handle merging (BR-105-02), TPUReplicatedOutput, TPUDummyInput.
#include <gtest/gtest.h>

#include <vector>

#include "tessel/core/partial_shape.h"
#include "tessel/replicate/replicated_io.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

constexpr int64_t kU = kUnknownDim;

TEST(ReplicatePartialShape, MergeUnifiesUnknownRankAndUnknownDims) {
  const PartialShape a({2, kU});
  const PartialShape b({kU, 3});
  EXPECT_EQ(a.merge(b), PartialShape({2, 3}));
  EXPECT_EQ(PartialShape().merge(a), a);
  EXPECT_EQ(a.merge(PartialShape()), a);
  EXPECT_EQ(PartialShape().merge(PartialShape()), PartialShape());
  EXPECT_TRUE(a.is_compatible_with(b));
  EXPECT_FALSE(a.is_fully_defined());
  EXPECT_TRUE(a.merge(b).is_fully_defined());
  EXPECT_EQ(a.merge(b).to_shape(), (Shape{2, 3}));
  EXPECT_EQ(PartialShape(Shape{4, 5}), PartialShape({4, 5}));
  EXPECT_EQ(PartialShape::unknown_dims(2), PartialShape({kU, kU}));
}

TEST(ReplicatePartialShape, TextIsTfsDebugString) {
  EXPECT_EQ(PartialShape().to_string(), "<unknown>");
  EXPECT_EQ(PartialShape({2, kU, 3}).to_string(), "[2,?,3]");
  EXPECT_EQ(PartialShape(std::vector<int64_t>{}).to_string(), "[]");
  EXPECT_EQ(PartialShape().rank(), -1);
  EXPECT_EQ(PartialShape({2, kU}).dim(-1), kU);
}

TEST(ReplicatePartialShape, MergeFailuresUseTfsTexts) {
  EXPECT_TESSEL_ERROR(PartialShape({2, 3}).merge(PartialShape({2, 3, 1})),
                      ErrorCode::kInvalidArgument,
                      "PartialShape: Shapes must be equal rank, but are 2 and 3");
  EXPECT_TESSEL_ERROR(PartialShape({2, kU}).merge(PartialShape({3, 3})),
                      ErrorCode::kInvalidArgument,
                      "Dimension 0 in both shapes must be equal, but are 2 and 3. Shapes are "
                      "[2,?] and [3,3].");
  EXPECT_FALSE(PartialShape({1}).try_merge(PartialShape({2})).has_value());
}

TEST(ReplicatePartialShape, RejectsBadValues) {
  EXPECT_TESSEL_ERROR(PartialShape({2, -3}), ErrorCode::kInvalidArgument,
                      "dimension 1 is -3: an extent must be >= 0, or -1 for unknown");
  EXPECT_TESSEL_ERROR(PartialShape({2, kU}).to_shape(), ErrorCode::kFailedPrecondition,
                      "shape [2,?] is not fully defined");
  EXPECT_TESSEL_ERROR(PartialShape().dim(0), ErrorCode::kOutOfRange, "<unknown>");
}

TEST(ReplicatedInput, BR_105_01_MergesUnknownDimsFromLastToFirst) {
  // TF's shape function: the last input's shape, then inputs N-2 .. 0 merged into it.
  EXPECT_EQ(
      merge_replicated_input_shapes({PartialShape({kU, 3}), PartialShape({2, kU}), PartialShape()}),
      PartialShape({2, 3}));
  EXPECT_EQ(merge_replicated_input_shapes({PartialShape({4, 4})}), PartialShape({4, 4}));
  EXPECT_EQ(merge_replicated_input_shapes({PartialShape(), PartialShape()}), PartialShape());
  // Merging from the last: replicas 1 and 2 agree, so replica 0 is the one that fails.
  EXPECT_TESSEL_ERROR(merge_replicated_input_shapes(
                          {PartialShape({2, 4}), PartialShape({2, 3}), PartialShape({2, 3})}),
                      ErrorCode::kInvalidArgument,
                      "replica 0 has shape [2,4] and replica 1 has shape [2,3], which do not merge "
                      "(Dimension 1 in both shapes must be equal, but are 3 and 4. Shapes are "
                      "[2,3] and [2,4]. From merging shape 0 with other shapes.)");
}

TEST(ReplicatedInput, BR_105_01_MismatchNamesReplicasAndShapes) {
  // Replica 1 conflicts with replica 3 (replica 2 knows nothing of dim 0).
  EXPECT_TESSEL_ERROR(
      merge_replicated_input_shapes({PartialShape({5, 1}), PartialShape({7, 1}),
                                     PartialShape({kU, 1}), PartialShape({5, kU})},
                                    "input 3: "),
      ErrorCode::kInvalidArgument,
      "ReplicatedInput: input 3: replica 1 has shape [7,1] and replica 3 has shape [5,?]");
  EXPECT_TESSEL_ERROR(
      merge_replicated_input_shapes({PartialShape({2}), PartialShape({2, 1})}),
      ErrorCode::kInvalidArgument,
      "replica 0 has shape [2] and replica 1 has shape [2,1], which do not merge "
      "(Shapes must be equal rank, but are 2 and 1. From merging shape 0 with other "
      "shapes.)");
  EXPECT_TESSEL_ERROR(merge_replicated_input_shapes({}), ErrorCode::kInvalidArgument,
                      "needs the shapes of 1 or more replicas (N >= 1), got none");
}

// TPUReplicatedInput on DT_RESOURCE, as TF's shape function does it (BR-105-02).
HandleData handle(PartialShape shape, DType dtype = DType::kF32) { return {{shape, dtype}}; }

TEST(ReplicatedHandleData, BR_105_02_TheLastInputWithHandleDataIsTheOutputUnrefined) {
  // TF copies the source's handle data to the output before merging it into the others: the
  // output of [2,?] and [?,3] is [?,3], not the merged [2,3].
  const ReplicatedHandleData r = merge_replicated_handle_shapes_and_types(
      {handle(PartialShape({2, kU})), handle(PartialShape({kU, 3}))});
  EXPECT_EQ(r.source, 1);
  EXPECT_EQ(r.output, handle(PartialShape({kU, 3})));
  EXPECT_EQ(r.inputs[0], handle(PartialShape({2, 3})));  // input 0 refined in place
  EXPECT_EQ(r.inputs[1], handle(PartialShape({kU, 3})));
}

TEST(ReplicatedHandleData, BR_105_02_InputsWithoutHandleDataAreSkippedAndTakeACopy) {
  const ReplicatedHandleData r = merge_replicated_handle_shapes_and_types(
      {std::nullopt, handle(PartialShape({4}), DType::kI32), std::nullopt});
  EXPECT_EQ(r.source, 1);
  EXPECT_EQ(r.output, handle(PartialShape({4}), DType::kI32));
  EXPECT_EQ(r.inputs[0], r.output);       // below the source: takes a copy
  EXPECT_EQ(r.inputs[2], std::nullopt);   // above it: never visited
  const ReplicatedHandleData none =
      merge_replicated_handle_shapes_and_types({std::nullopt, std::nullopt});
  EXPECT_EQ(none.output, std::nullopt);
  EXPECT_EQ(none.source, -1);
  EXPECT_TESSEL_ERROR(merge_replicated_handle_shapes_and_types({}), ErrorCode::kInvalidArgument,
                      "ReplicatedInput: needs the handle data of 1 or more inputs (N >= 1)");
}

TEST(ReplicatedHandleData, BR_105_02_ConflictsAreIgnoredAsTfDoes) {
  const ReplicatedHandleData r = merge_replicated_handle_shapes_and_types({
      handle(PartialShape({3, 4})),                    // shapes do not merge: kept
      handle(PartialShape({kU, kU}), DType::kF64),     // another dtype: left as it was
      handle(PartialShape()),                          // the unknown rank: refined
      HandleData{},                                    // another entry count: left as it was
      handle(PartialShape({2, kU})),                   // the source
  });
  EXPECT_EQ(r.source, 4);
  EXPECT_EQ(r.inputs[0], handle(PartialShape({3, 4})));
  EXPECT_EQ(r.inputs[1], handle(PartialShape({kU, kU}), DType::kF64));
  EXPECT_EQ(r.inputs[2], handle(PartialShape({2, kU})));
  EXPECT_EQ(r.inputs[3], HandleData{});
  EXPECT_EQ(r.output, handle(PartialShape({2, kU})));
}

TEST(ReplicatedHandleData, BR_105_02_SeveralEntriesMergeAllOrNothingOnDtypes) {
  const HandleData source = {{PartialShape({kU}), DType::kF32}, {PartialShape({1}), DType::kI64}};
  const ReplicatedHandleData r = merge_replicated_handle_shapes_and_types({
      HandleData{{PartialShape({5}), DType::kF32}, {PartialShape({kU}), DType::kI32}},
      HandleData{{PartialShape({kU}), DType::kF32}, {PartialShape({kU}), DType::kI64}},
      source,
  });
  EXPECT_EQ(r.output, source);
  // Entry 1's dtype differs: entry 0 is not refined either.
  EXPECT_EQ(r.inputs[0],
            (HandleData{{PartialShape({5}), DType::kF32}, {PartialShape({kU}), DType::kI32}}));
  EXPECT_EQ(r.inputs[1],
            (HandleData{{PartialShape({kU}), DType::kF32}, {PartialShape({1}), DType::kI64}}));
}

TEST(ReplicatedVariable, BR_105_02_PerReplicaValuesMergeWithTheDeclaredHandle) {
  const auto v = ReplicatedVariable::per_replica(
      "w", {Tensor::zeros({2, 4}, DType::kF32), Tensor::zeros({2, 4}, DType::kF32)},
      PartialShape({kU, 4}));
  EXPECT_EQ(v.dtype, DType::kF32);
  EXPECT_EQ(merge_variable_handles(v, 2), (HandleShapeAndType{PartialShape({2, 4}), DType::kF32}));
  EXPECT_TRUE(v.value(1).defined());
  EXPECT_TESSEL_ERROR(merge_variable_handles(v, 3), ErrorCode::kInvalidArgument,
                      "ReplicatedVariable: variable 'w' has 2 values; 3 expected (one value per "
                      "replica with num_replicas = 3)");
}

TEST(ReplicatedVariable, BR_105_02_MismatchNamesVariableAndReplicas) {
  const auto shapes = ReplicatedVariable::per_replica(
      "w", {Tensor::zeros({2, 4}, DType::kF32), Tensor::zeros({3, 4}, DType::kF32)});
  EXPECT_TESSEL_ERROR(merge_variable_handles(shapes, 2), ErrorCode::kInvalidArgument,
                      "ReplicatedVariable: variable 'w': replica 0 has handle shape [2,4] and "
                      "replica 1 has handle shape [3,4]");
  const auto dtypes = ReplicatedVariable::per_replica(
      "b", {Tensor::zeros({4}, DType::kF32), Tensor::zeros({4}, DType::kBF16)});
  EXPECT_TESSEL_ERROR(merge_variable_handles(dtypes, 2), ErrorCode::kInvalidArgument,
                      "variable 'b': replica 0's handle has dtype f32 and replica 1's has dtype "
                      "bf16");
  auto declared =
      ReplicatedVariable::mirrored("m", Tensor::zeros({4}, DType::kF32), PartialShape({5}));
  EXPECT_TESSEL_ERROR(merge_variable_handles(declared, 2), ErrorCode::kInvalidArgument,
                      "variable 'm': its values have shape [4], which does not merge with the "
                      "declared handle shape [5]");
  declared.handle_shape = PartialShape();
  declared.dtype = DType::kF64;
  EXPECT_TESSEL_ERROR(merge_variable_handles(declared, 2), ErrorCode::kInvalidArgument,
                      "variable 'm' is declared f64 but its values are f32");
  const auto null_value =
      ReplicatedVariable::per_replica("n", {Tensor::zeros({1}, DType::kF32), Tensor()});
  EXPECT_TESSEL_ERROR(merge_variable_handles(null_value, 2), ErrorCode::kInvalidArgument,
                      "variable 'n': the value of replica 1 is a null tensor");
}

TEST(ReplicatedVariable, BR_105_02_MirroredVariableHasOneValueForEveryReplica) {
  const auto v = ReplicatedVariable::mirrored("m", Tensor::full({3}, DType::kF32, 2.0));
  EXPECT_TRUE(v.is_mirrored_variable);
  EXPECT_EQ(merge_variable_handles(v, 8), (HandleShapeAndType{PartialShape({3}), DType::kF32}));
  EXPECT_TRUE(v.value(7).shares_storage_with(v.values[0]));
  auto two = v;
  two.values.push_back(v.values[0]);
  EXPECT_TESSEL_ERROR(merge_variable_handles(two, 2), ErrorCode::kInvalidArgument,
                      "variable 'm' has 2 values; 1 expected (one mirrored value");
}

TEST(ReplicatedOutput, OneValueToNumReplicasOutputsOfItsShape) {
  const Tensor t = Tensor::full({2, 3}, DType::kF32, 1.5);
  const std::vector<Tensor> outs = replicated_output(t, 3);
  ASSERT_EQ(outs.size(), 3u);
  for (const Tensor& o : outs) {
    EXPECT_EQ(o.shape(), t.shape());
    EXPECT_EQ(o.to_vector<float>(), t.to_vector<float>());
  }
  EXPECT_TESSEL_ERROR(replicated_output(t, 0), ErrorCode::kInvalidArgument,
                      "ReplicatedOutput: num_replicas must be >= 1; got 0");
  EXPECT_TESSEL_ERROR(replicated_output(Tensor(), 2), ErrorCode::kInvalidArgument,
                      "ReplicatedOutput: the input is a null tensor");
}

TEST(ReplicateDummyInput, ZerosOfF32OrBf16WithTheGivenShape) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const Tensor t = dummy_input(dtype, Shape{2, 5});
    EXPECT_EQ(t.dtype(), dtype);
    EXPECT_EQ(t.shape(), (Shape{2, 5}));
    for (double v : t.to_doubles()) EXPECT_EQ(v, 0.0);
  }
  EXPECT_EQ(dummy_input(DType::kF32, Shape{}).num_elements(), 1);
}

TEST(ReplicateDummyInput, RejectsOtherDtypesNamingThem) {
  for (DType dtype : {DType::kF64, DType::kF16, DType::kI32, DType::kBool}) {
    EXPECT_TESSEL_ERROR(dummy_input(dtype, Shape{2}), ErrorCode::kInvalidArgument,
                        std::string("DummyInput: dtype ") + std::string(dtype_name(dtype)) +
                            " is not allowed: TPUDummyInput makes f32 or bf16 tensors only");
  }
}

}  // namespace
}  // namespace tessel
