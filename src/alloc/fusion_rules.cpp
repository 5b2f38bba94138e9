// Fusion rules of TF's cross-device ops: how many small tensors become few packs (fusion_rules.h).
#include "tessel/alloc/fusion_rules.h"

#include <algorithm>

#include "core/errors.h"

namespace tessel {

std::vector<int64_t> split_into_packs(int64_t total_elements, int num_packs) {
  if (num_packs <= 0) detail::throw_invalid("Packing", "num_packs must be greater than zero.");
  if (total_elements < 0) {
    detail::throw_invalid("Packing", "total_elements must be non-negative, got {}", total_elements);
  }
  const int64_t each = total_elements / num_packs;
  std::vector<int64_t> packs(static_cast<size_t>(num_packs), each);
  packs.back() = total_elements - each * (num_packs - 1);
  return packs;
}

std::vector<std::vector<int>> group_by_size(const std::vector<int64_t>& tensor_bytes,
                                            int64_t bytes_per_pack) {
  if (bytes_per_pack < 0) {
    detail::throw_invalid("Packing", "bytes_per_pack must be non-negative, got {}", bytes_per_pack);
  }
  for (size_t i = 0; i < tensor_bytes.size(); ++i) {
    if (tensor_bytes[i] < kUnknownTensorBytes) {
      detail::throw_invalid("Packing", "tensor {} has a negative size {}", i, tensor_bytes[i]);
    }
  }
  std::vector<std::vector<int>> packs;
  const bool unknown = std::find(tensor_bytes.begin(), tensor_bytes.end(), kUnknownTensorBytes) !=
                       tensor_bytes.end();
  if (unknown) bytes_per_pack = 0;  // TF: values of unknown shape are not packed: one pack
  int64_t current = 0;  // bytes in packs.back()
  for (size_t i = 0; i < tensor_bytes.size(); ++i) {
    if (packs.empty() || (bytes_per_pack > 0 && current > bytes_per_pack)) {
      packs.emplace_back();
      current = 0;
    }
    packs.back().push_back(static_cast<int>(i));
    current += tensor_bytes[i];
  }
  return packs;
}

}  // namespace tessel
