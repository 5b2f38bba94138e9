#include "tessel/alloc/fused_all_reduce.h"

#include <string>

#include "core/errors.h"

namespace tessel {
namespace {
constexpr const char* kComponent = "FusedAllReducer";
}  // namespace

FusedAllReducer::FusedAllReducer(Communicator& comm, const std::vector<FusionTensor>& tensors,
                                 const FusionOptions& options, Allocator* allocator,
                                 int64_t scope_id)
    : comm_(comm), plan_(plan_fusion(tensors, options)) {
  int64_t next_id = scope_id;
  for (size_t k = 0; k < plan_.buckets.size(); ++k) {
    const FusionBucket& b = plan_.buckets[k];
    std::vector<Shape> shapes;
    for (int t : b.tensors) shapes.push_back(plan_.tensors[static_cast<size_t>(t)].shape);
    const int n = static_cast<int>(shapes.size());
    buckets_.push_back(std::make_unique<ScopedAllocator>(
        std::move(shapes), b.dtype, fmt::format("fused_all_reduce_bucket_{}", k), next_id,
        /*expected_call_count=*/0, allocator));
    buckets_.back()->close();  // an empty round; all_reduce opens one per call
    next_id += n + 1;
  }
  results_.reserve(plan_.tensors.size());
  for (size_t i = 0; i < plan_.tensors.size(); ++i) {
    results_.push_back(
        buckets_[static_cast<size_t>(plan_.bucket_of[i])]->field_view(plan_.field_of[i]));
  }
}

FusedAllReducer::~FusedAllReducer() = default;

Tensor FusedAllReducer::tensor_view(int tensor_index) const {
  if (tensor_index < 0 || tensor_index >= static_cast<int>(plan_.tensors.size())) {
    detail::throw_invalid(kComponent, "tensor index {} is outside [0, {})", tensor_index,
                          plan_.tensors.size());
  }
  return results_[static_cast<size_t>(tensor_index)];
}

const std::vector<Tensor>& FusedAllReducer::all_reduce(const std::vector<Tensor>& inputs,
                                                       ReduceOp op,
                                                       const CollectiveOptions& options) {
  if (inputs.size() != plan_.tensors.size()) {
    detail::throw_invalid(kComponent, "got {} inputs for {} planned tensors", inputs.size(),
                          plan_.tensors.size());
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const FusionTensor& t = plan_.tensors[i];
    if (!inputs[i].defined() || !(inputs[i].shape() == t.shape) || inputs[i].dtype() != t.dtype) {
      detail::throw_invalid(kComponent, "input {} ({}) is {} {}, planned {} {}", i, t.name,
                            inputs[i].defined() ? dtype_name(inputs[i].dtype()) : "null",
                            inputs[i].defined() ? inputs[i].shape().to_string() : "",
                            dtype_name(t.dtype), t.shape.to_string());
    }
  }
  last_copied_bytes_ = 0;
  return run(&inputs, op, options);
}

const std::vector<Tensor>& FusedAllReducer::all_reduce_buckets(ReduceOp op,
                                                               const CollectiveOptions& options) {
  last_copied_bytes_ = 0;
  return run(nullptr, op, options);
}

const std::vector<Tensor>& FusedAllReducer::run(const std::vector<Tensor>* inputs, ReduceOp op,
                                                const CollectiveOptions& options) {
  for (size_t k = 0; k < buckets_.size(); ++k) {
    ScopedAllocator& scope = *buckets_[k];
    const FusionBucket& b = plan_.buckets[k];
    if (!scope.closed()) {
      try {
        scope.close();  // a round abandoned by an error
      } catch (const Error&) {
      }
    }
    scope.reopen(scope.num_fields());
    const std::vector<Tensor>& aliases = scope.allocate_all();
    for (size_t f = 0; inputs != nullptr && f < b.tensors.size(); ++f) {
      const Tensor& input = (*inputs)[static_cast<size_t>(b.tensors[f])];
      Tensor& alias = results_[static_cast<size_t>(b.tensors[f])];
      // The same view (storage, offset, strides; shape and dtype were checked above): no copy.
      const bool same_view = input.shares_storage_with(alias) &&
                             input.storage_offset() == alias.storage_offset() &&
                             input.strides() == alias.strides();
      if (!same_view) {
        alias.copy_from(input);
        last_copied_bytes_ += static_cast<int64_t>(alias.nbytes());
      }
    }
    Tensor all = scope.concat(scope.backing(), aliases);
    comm_.all_reduce(all, all, op, options);
    scope.close();
  }
  ++steps_;
  return results_;
}

}  // namespace tessel
