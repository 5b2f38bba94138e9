// Fusion planning: which tensors share a bucket (one scoped allocation, one collective).
//
// Tensors are first split into classes by (dtype, group), in order of first appearance; within
// a class, in input order, buckets are formed by one of TF's packing rules (tessel/alloc/fusion_rules.h):
// - bytes_per_pack > 0: greedy group_by_size — a new bucket opens only once the current one
//   already holds MORE than bytes_per_pack bytes (bytes = elements * dtype size, unpadded);
// - num_packs > 0: the class's tensors are cut into num_packs runs of count / num_packs
//   tensors, the last run taking the remainder (split_into_packs over tensor counts); empty
//   runs (fewer tensors than packs) are dropped;
// - neither: one bucket per class. Both set: kInvalidArgument; negative: kInvalidArgument
//   ("bytes_per_pack must be non-negative", "num_packs must be non-negative").
// The plan is a pure function of the tensor list, so every participant that lists the same
// tensors in the same order gets the same buckets in the same order.
//
//   FusionPlan plan = plan_fusion({{"w0", Shape{1024}, DType::kF32}, ...}, {.bytes_per_pack = 4 <<
//   20}); std::cout << plan.report();
//   // bucket 0: f32 group "" 2 tensors 8192 bytes (8192 padded): w0 w1
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/core/dtype.h"
#include "tessel/core/shape.h"

namespace tessel {

struct FusionTensor {
  std::string name;
  Shape shape;
  DType dtype = DType::kF32;
  std::string group;  // only tensors of the same group (and dtype) share a bucket
};

struct FusionOptions {
  int64_t bytes_per_pack = 0;
  int num_packs = 0;
};

struct FusionBucket {
  DType dtype = DType::kF32;
  std::string group;
  std::vector<int> tensors;  // indices into the planned list, increasing
  int64_t bytes = 0;         // sum of the tensors' bytes
  int64_t padded_bytes = 0;  // the bucket's backing size (fields 64-byte aligned)
};

struct FusionPlan {
  std::vector<FusionTensor> tensors;
  std::vector<FusionBucket> buckets;
  // For each tensor: its bucket and its field index in that bucket.
  std::vector<int> bucket_of;
  std::vector<int> field_of;

  // One line per bucket: "bucket <k>: <dtype> group "<g>" <n> tensors <b> bytes (<p> padded):
  // <names...>".
  std::string report() const;
};

FusionPlan plan_fusion(const std::vector<FusionTensor>& tensors, const FusionOptions& options);

}  // namespace tessel
