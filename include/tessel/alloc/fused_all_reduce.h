// FusedAllReducer: batch all-reduce of many tensors with one collective per fusion bucket.
//
// Built once per participant from the tensor list (names, shapes, dtypes, groups) and a
// FusionOptions (fusion.h); every participant must list the same tensors in the same order, so
// that all plan the same buckets and run the same collectives in the same order. Each bucket is
// one persistent ScopedAllocator (scoped_allocator.h) whose backing comes from `allocator`; per
// call each bucket opens a round, its fields are allocated (allocate_all), inputs are copied into
// their fields (unless an input already IS its field: see tensor_view), one all_reduce runs in
// place over the bucket's whole backing (concat, which checks the fields), and the results are
// the field views (what split would return; they are made once, so a call costs no per-tensor
// allocation).
//
//   FusedAllReducer fused(*comm, tensors, {.bytes_per_pack = 25 << 20}, device_allocator);
//   Tensor g = fused.tensor_view(3);   // write gradient 3 here: no copy in
//   ... fill g and the other tensors' views ...
//   std::vector<Tensor> sums = fused.all_reduce(views, ReduceOp::kSum);  // no copy out
//
// Results are views into the buckets: the next all_reduce overwrites them (as DDP's
// gradient_as_bucket_view); clone() to keep one. Padding between fields is reduced too
// (harmless). Scope ids: bucket k reserves (its fields + 1) consecutive ids from `scope_id`.
//
// Errors: inputs of the wrong count, shape or dtype: kInvalidArgument naming the tensor;
// collective errors propagate (see communicator.h); a failed round is abandoned (the next call
// starts a fresh round).
//
// Thread safety: one thread at a time (like the Communicator it drives).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tessel/alloc/fusion.h"
#include "tessel/alloc/scoped_allocator.h"
#include "tessel/comm/collective_options.h"
#include "tessel/comm/communicator.h"
#include "tessel/core/allocator.h"
#include "tessel/core/reduce_op.h"
#include "tessel/core/tensor.h"

namespace tessel {

class FusedAllReducer {
 public:
  FusedAllReducer(Communicator& comm, const std::vector<FusionTensor>& tensors,
                  const FusionOptions& options = {}, Allocator* allocator = nullptr,
                  int64_t scope_id = 0);
  ~FusedAllReducer();
  FusedAllReducer(const FusedAllReducer&) = delete;
  FusedAllReducer& operator=(const FusedAllReducer&) = delete;

  const FusionPlan& plan() const { return plan_; }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  const ScopedAllocator& bucket(int k) const { return *buckets_[static_cast<size_t>(k)]; }
  // Tensor i's field in its bucket: inputs written here are reduced without a copy.
  Tensor tensor_view(int tensor_index) const;

  // out[i] = op over participants of inputs[i], as views into the buckets (the same views as
  // tensor_view(i); the vector is this object's and stays valid until it is destroyed).
  const std::vector<Tensor>& all_reduce(const std::vector<Tensor>& inputs, ReduceOp op,
                                        const CollectiveOptions& options = {});

  // The same over the buckets as they are: for callers that wrote every tensor into its
  // tensor_view (DDP's gradient_as_bucket_view). No per-tensor work at all: per bucket one
  // scoped-allocation round (allocate_all, concat) and one all_reduce.
  const std::vector<Tensor>& all_reduce_buckets(ReduceOp op, const CollectiveOptions& options = {});

  // Bytes copied into buckets by the last all_reduce (0 when every input was its field view).
  int64_t last_copied_bytes() const { return last_copied_bytes_; }
  // all_reduce calls completed.
  int64_t steps() const { return steps_; }

 private:
  // Both all_reduce forms; inputs null: the buckets as they are.
  const std::vector<Tensor>& run(const std::vector<Tensor>* inputs, ReduceOp op,
                                 const CollectiveOptions& options);

  Communicator& comm_;
  FusionPlan plan_;
  std::vector<std::unique_ptr<ScopedAllocator>> buckets_;
  std::vector<Tensor> results_;  // tensor i's field view, in tensor order
  int64_t last_copied_bytes_ = 0;
  int64_t steps_ = 0;
};

}  // namespace tessel
