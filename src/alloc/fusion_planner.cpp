#include <utility>

#include "core/errors.h"
#include "tessel/alloc/fusion.h"
#include "tessel/alloc/fusion_rules.h"
#include "tessel/alloc/scoped_allocator.h"

namespace tessel {
namespace {

constexpr const char* kComponent = "FusionPlanner";

void add_bucket(FusionPlan& plan, const std::vector<int>& members) {
  if (members.empty()) return;
  FusionBucket bucket;
  const FusionTensor& first = plan.tensors[static_cast<size_t>(members.front())];
  bucket.dtype = first.dtype;
  bucket.group = first.group;
  bucket.tensors = members;
  std::vector<Shape> shapes;
  for (int t : members) {
    const FusionTensor& tensor = plan.tensors[static_cast<size_t>(t)];
    bucket.bytes += tensor.shape.num_elements() * static_cast<int64_t>(dtype_size(tensor.dtype));
    plan.bucket_of[static_cast<size_t>(t)] = static_cast<int>(plan.buckets.size());
    plan.field_of[static_cast<size_t>(t)] = static_cast<int>(shapes.size());
    shapes.push_back(tensor.shape);
  }
  scoped_layout(shapes, bucket.dtype, 0, &bucket.padded_bytes);
  plan.buckets.push_back(std::move(bucket));
}

}  // namespace

FusionPlan plan_fusion(const std::vector<FusionTensor>& tensors, const FusionOptions& options) {
  if (options.bytes_per_pack < 0) {
    detail::throw_invalid(kComponent, "bytes_per_pack must be non-negative, got {}",
                          options.bytes_per_pack);
  }
  if (options.num_packs < 0) {
    detail::throw_invalid(kComponent, "num_packs must be non-negative, got {}", options.num_packs);
  }
  if (options.bytes_per_pack > 0 && options.num_packs > 0) {
    detail::throw_invalid(kComponent, "give bytes_per_pack ({}) or num_packs ({}), not both",
                          options.bytes_per_pack, options.num_packs);
  }
  FusionPlan plan;
  plan.tensors = tensors;
  plan.bucket_of.assign(tensors.size(), -1);
  plan.field_of.assign(tensors.size(), -1);

  // Classes by (dtype, group) in order of first appearance.
  std::vector<std::vector<int>> classes;
  for (size_t i = 0; i < tensors.size(); ++i) {
    bool placed = false;
    for (auto& c : classes) {
      const FusionTensor& head = tensors[static_cast<size_t>(c.front())];
      if (head.dtype == tensors[i].dtype && head.group == tensors[i].group) {
        c.push_back(static_cast<int>(i));
        placed = true;
        break;
      }
    }
    if (!placed) classes.push_back({static_cast<int>(i)});
  }

  for (const auto& members : classes) {
    if (options.num_packs > 0) {
      const std::vector<int64_t> counts =
          split_into_packs(static_cast<int64_t>(members.size()), options.num_packs);
      size_t next = 0;
      for (int64_t count : counts) {
        std::vector<int> run(members.begin() + static_cast<std::ptrdiff_t>(next),
                             members.begin() + static_cast<std::ptrdiff_t>(next + count));
        next += static_cast<size_t>(count);
        add_bucket(plan, run);
      }
    } else {
      std::vector<int64_t> bytes;
      for (int t : members) {
        const FusionTensor& tensor = tensors[static_cast<size_t>(t)];
        bytes.push_back(tensor.shape.num_elements() *
                        static_cast<int64_t>(dtype_size(tensor.dtype)));
      }
      for (const auto& pack : group_by_size(bytes, options.bytes_per_pack)) {
        std::vector<int> run;
        for (int k : pack) run.push_back(members[static_cast<size_t>(k)]);
        add_bucket(plan, run);
      }
    }
  }
  return plan;
}

std::string FusionPlan::report() const {
  std::string out;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const FusionBucket& bucket = buckets[b];
    out += fmt::format("bucket {}: {} group \"{}\" {} tensors {} bytes ({} padded):", b,
                       dtype_name(bucket.dtype), bucket.group, bucket.tensors.size(), bucket.bytes,
                       bucket.padded_bytes);
    for (int t : bucket.tensors) out += " " + tensors[static_cast<size_t>(t)].name;
    out += "\n";
  }
  return out;
}

}  // namespace tessel
