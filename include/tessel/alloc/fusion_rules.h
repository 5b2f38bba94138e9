// Fusion rules: how cross-device ops fuse many small tensors into few collectives (TF's packing).
//
// Two rules, both pure functions of sizes so that a plan can be checked before anything runs:
// - split_into_packs (AllReduceCrossDeviceOps with num_packs > 0, TF's _ConcatAndSplitPacker):
//   every device flattens and concatenates its tensors into one buffer, which is cut into
//   num_packs pieces of total / num_packs elements, the last piece taking the remainder; one
//   all-reduce runs per piece.
//       split_into_packs(10, 3) == {3, 3, 4}
// - group_by_size (CollectiveAllReduce with bytes_per_pack, TF's group_by_size): greedy in
//   order; a new pack opens only when the current one already holds MORE than bytes_per_pack
//   bytes, so packs are at least bytes_per_pack and err on the side of few, large packs.
//   0 means one pack holding everything, and so does a tensor of unknown size
//   (kUnknownTensorBytes; TF cannot pack values of unknown shape and logs a warning).
//       group_by_size({400, 400, 400, 400}, 500) == {{0, 1}, {2, 3}}
//       group_by_size({400, kUnknownTensorBytes, 400}, 500) == {{0, 1, 2}}
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

namespace tessel {

// Element counts of the packs. num_packs <= 0: kInvalidArgument "num_packs must be greater
// than zero."; total < 0: kInvalidArgument. Packs may be empty (total < num_packs), as in TF.
std::vector<int64_t> split_into_packs(int64_t total_elements, int num_packs);

// The size of a tensor whose shape is not fully known.
inline constexpr int64_t kUnknownTensorBytes = -1;

// Indices of `tensor_bytes` grouped into packs, in order. bytes_per_pack < 0 or a size below
// kUnknownTensorBytes: kInvalidArgument. No tensors: no packs.
std::vector<std::vector<int>> group_by_size(const std::vector<int64_t>& tensor_bytes,
                                            int64_t bytes_per_pack);

}  // namespace tessel
