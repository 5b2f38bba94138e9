// TF's TPUReplicatedInput shape and handle merging, TPUReplicatedOutput and TPUDummyInput (see
// replicated_io.h).
#include "tessel/replicate/replicated_io.h"

#include <fmt/format.h>

#include <optional>
#include <utility>

#include "core/errors.h"

namespace tessel {
namespace {

constexpr const char* kInput = "ReplicatedInput";
constexpr const char* kVariable = "ReplicatedVariable";

struct MergeFailure {
  size_t replica = 0;   // the replica whose shape failed to merge
  size_t conflict = 0;  // a later replica whose shape conflicts with it directly
  std::string why;      // TF's Merge text
};

// TF's loop: cur = shapes[N-1]; cur = Merge(cur, shapes[i]) for i = N-2 .. 0. Every known rank
// and extent of `cur` comes from some later replica, and the later ones agree, so a failure at
// i always has a later replica that conflicts with i on its own.
std::optional<MergeFailure> merge_last_to_first(const std::vector<PartialShape>& shapes,
                                                PartialShape& merged) {
  merged = shapes.back();
  for (size_t k = shapes.size() - 1; k-- > 0;) {
    std::string why;
    std::optional<PartialShape> next = merged.try_merge(shapes[k], &why);
    if (!next) {
      size_t j = k + 1;
      while (j + 1 < shapes.size() && shapes[k].is_compatible_with(shapes[j])) ++j;
      return MergeFailure{k, j, std::move(why)};
    }
    merged = std::move(*next);
  }
  return std::nullopt;
}

[[noreturn]] void throw_merge_failure(std::string_view component, std::string_view what,
                                      std::string_view noun,
                                      const std::vector<PartialShape>& shapes,
                                      const MergeFailure& f) {
  const bool period = !f.why.empty() && f.why.back() == '.';
  detail::throw_invalid(component,
                        "{}replica {} has {} {} and replica {} has {} {}, which do not merge ({}{} "
                        "From merging shape {} with other shapes.)",
                        what, f.replica, noun, shapes[f.replica].to_string(), f.conflict, noun,
                        shapes[f.conflict].to_string(), f.why, period ? "" : ".", f.replica);
}

// A variable's values must agree across replicas (TF's compilation needs identical static
// shapes): dtypes equal, shapes merging from the last replica to the first.
HandleShapeAndType check_variable_handles(const std::vector<HandleShapeAndType>& handles,
                                          std::string_view what) {
  for (size_t k = handles.size() - 1; k-- > 0;) {
    if (handles[k].dtype != handles.back().dtype) {
      detail::throw_invalid(kVariable,
                            "{}replica {}'s handle has dtype {} and replica {}'s has dtype {}, "
                            "which do not merge (From merging shape {} with other shapes.)",
                            what, k, dtype_name(handles[k].dtype), handles.size() - 1,
                            dtype_name(handles.back().dtype), k);
    }
  }
  std::vector<PartialShape> shapes;
  shapes.reserve(handles.size());
  for (const HandleShapeAndType& h : handles) shapes.push_back(h.shape);
  HandleShapeAndType merged{PartialShape(), handles.back().dtype};
  if (auto failure = merge_last_to_first(shapes, merged.shape)) {
    throw_merge_failure(kVariable, what, "handle shape", shapes, *failure);
  }
  return merged;
}

// TF's InferenceContext::MergeHandleShapesAndTypes(from, to_update): every entry's dtype must
// match (else nothing changes); each entry's shape is merged, a failed merge keeping the old one.
void merge_handle_data_into(const HandleData& from, HandleData& to_update) {
  if (from.size() != to_update.size()) return;
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i].dtype != to_update[i].dtype) return;
  }
  for (size_t i = 0; i < from.size(); ++i) {
    if (std::optional<PartialShape> merged = to_update[i].shape.try_merge(from[i].shape)) {
      to_update[i].shape = std::move(*merged);
    }
  }
}

}  // namespace

PartialShape merge_replicated_input_shapes(const std::vector<PartialShape>& shapes,
                                           std::string_view what) {
  if (shapes.empty()) {
    detail::throw_invalid(kInput, "{}needs the shapes of 1 or more replicas (N >= 1), got none",
                          what);
  }
  PartialShape merged;
  if (auto failure = merge_last_to_first(shapes, merged)) {
    throw_merge_failure(kInput, what, "shape", shapes, *failure);
  }
  return merged;
}

ReplicatedHandleData merge_replicated_handle_shapes_and_types(
    const std::vector<std::optional<HandleData>>& inputs) {
  if (inputs.empty()) {
    detail::throw_invalid(kInput, "needs the handle data of 1 or more inputs (N >= 1), got none");
  }
  ReplicatedHandleData result;
  result.inputs = inputs;
  for (int i = static_cast<int>(inputs.size()) - 1; i >= 0; --i) {
    std::optional<HandleData>& input = result.inputs[static_cast<size_t>(i)];
    if (result.output) {
      if (input) {
        merge_handle_data_into(*result.output, *input);
      } else {
        input = result.output;
      }
    } else if (input) {
      result.output = input;
      result.source = i;
    }
  }
  return result;
}

ReplicatedVariable ReplicatedVariable::per_replica(std::string name, std::vector<Tensor> values,
                                                   PartialShape handle_shape) {
  ReplicatedVariable v;
  v.name = std::move(name);
  v.dtype = values.empty() || !values[0].defined() ? DType::kF32 : values[0].dtype();
  v.handle_shape = std::move(handle_shape);
  v.values = std::move(values);
  return v;
}

ReplicatedVariable ReplicatedVariable::mirrored(std::string name, Tensor value,
                                                PartialShape handle_shape,
                                                VariableAggregation aggregation) {
  ReplicatedVariable v = per_replica(std::move(name), {std::move(value)}, std::move(handle_shape));
  v.is_mirrored_variable = true;
  v.aggregation = aggregation;
  return v;
}

const Tensor& ReplicatedVariable::value(int replica) const {
  const size_t index = is_mirrored_variable ? 0 : static_cast<size_t>(replica);
  if (replica < 0 || index >= values.size()) {
    detail::throw_error(ErrorCode::kOutOfRange, kVariable,
                        "variable '{}' has no value for replica {}", name, replica);
  }
  return values[index];
}

HandleShapeAndType merge_variable_handles(const ReplicatedVariable& variable, int num_replicas) {
  const size_t expected = variable.is_mirrored_variable ? 1 : static_cast<size_t>(num_replicas);
  if (num_replicas < 1 || variable.values.size() != expected) {
    detail::throw_invalid(
        kVariable, "variable '{}' has {} values; {} expected ({} with num_replicas = {})",
        variable.name, variable.values.size(), expected,
        variable.is_mirrored_variable ? "one mirrored value" : "one value per replica",
        num_replicas);
  }
  std::vector<HandleShapeAndType> handles;
  for (size_t r = 0; r < variable.values.size(); ++r) {
    const Tensor& value = variable.values[r];
    if (!value.defined()) {
      detail::throw_invalid(kVariable, "variable '{}': the value of replica {} is a null tensor",
                            variable.name, r);
    }
    handles.push_back({PartialShape(value.shape()), value.dtype()});
  }
  const std::string what = fmt::format("variable '{}': ", variable.name);
  HandleShapeAndType merged = check_variable_handles(handles, what);
  if (merged.dtype != variable.dtype) {
    detail::throw_invalid(kVariable, "variable '{}' is declared {} but its values are {}",
                          variable.name, dtype_name(variable.dtype), dtype_name(merged.dtype));
  }
  std::string why;
  std::optional<PartialShape> shape = variable.handle_shape.try_merge(merged.shape, &why);
  if (!shape) {
    detail::throw_invalid(kVariable,
                          "variable '{}': its values have shape {}, which does not merge with the "
                          "declared handle shape {} ({})",
                          variable.name, merged.shape.to_string(),
                          variable.handle_shape.to_string(), why);
  }
  merged.shape = std::move(*shape);
  return merged;
}

std::vector<Tensor> replicated_output(const Tensor& value, int num_replicas) {
  if (!value.defined()) detail::throw_invalid("ReplicatedOutput", "the input is a null tensor");
  if (num_replicas < 1) {
    detail::throw_invalid("ReplicatedOutput", "num_replicas must be >= 1; got {}", num_replicas);
  }
  return std::vector<Tensor>(static_cast<size_t>(num_replicas), value);
}

std::vector<DTensor> replicated_output(const DTensor& value, int num_replicas) {
  if (!value.defined()) detail::throw_invalid("ReplicatedOutput", "the input is a null DTensor");
  if (num_replicas < 1) {
    detail::throw_invalid("ReplicatedOutput", "num_replicas must be >= 1; got {}", num_replicas);
  }
  return std::vector<DTensor>(static_cast<size_t>(num_replicas), value);
}

Tensor dummy_input(DType dtype, const Shape& shape) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    detail::throw_invalid("DummyInput",
                          "dtype {} is not allowed: TPUDummyInput makes f32 or bf16 tensors only",
                          dtype_name(dtype));
  }
  return Tensor::zeros(shape, dtype);
}

}  // namespace tessel
