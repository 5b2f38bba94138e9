// Internal: block arithmetic of relayout steps (see block_transfers.h).
#include "dtensor/relayout/block_transfers.h"

#include <map>
#include <utility>

#include "core/errors.h"
#include "tessel/mesh/shard_map.h"

namespace tessel::detail {

std::vector<Box> blocks_of(const Layout& layout, const Shape& shape) {
  const ShardMap map(layout, shape);
  std::vector<Box> blocks;
  blocks.reserve(static_cast<size_t>(map.num_devices()));
  for (int64_t k = 0; k < map.num_devices(); ++k) {
    blocks.push_back(Box{map.block(k).offsets, map.block(k).extents});
  }
  return blocks;
}

std::vector<std::string> mesh_device_names(const Mesh& mesh) {
  if (mesh.is_single_device()) return {mesh.single_device()};
  if (static_cast<int64_t>(mesh.global_devices().size()) == mesh.size()) {
    return mesh.global_devices();
  }
  if (mesh.num_local_devices() == mesh.size()) {
    // Single client: local ids are the global ids; order the names by mesh offset.
    std::vector<std::string> names(static_cast<size_t>(mesh.size()));
    for (size_t i = 0; i < mesh.local_devices().size(); ++i) {
      names[static_cast<size_t>(mesh.offset_of_device_id(mesh.local_device_ids()[i]))] =
          mesh.local_devices()[i];
    }
    return names;
  }
  throw_error(ErrorCode::kUnimplemented, "relayout",
              "mesh {} holds devices of other processes and does not name them (global_devices); "
              "relayout across processes needs the multi-client runtime",
              mesh.to_string());
}

std::optional<std::vector<RelayoutTransfer>> block_transfers(const std::vector<MaybeBox>& before,
                                                             const std::vector<MaybeBox>& after,
                                                             const std::vector<int>& group) {
  // Distinct non-empty source blocks per group, with their holders in participant order.
  using Key = std::pair<int, std::pair<std::vector<int64_t>, std::vector<int64_t>>>;
  std::map<Key, std::vector<int>> holders;
  std::vector<Key> order;  // first-seen order, for a deterministic plan
  for (size_t p = 0; p < before.size(); ++p) {
    if (!before[p] || before[p]->empty()) continue;
    Key key{group[p], {before[p]->offsets, before[p]->extents}};
    auto [it, inserted] = holders.try_emplace(key);
    if (inserted) order.push_back(key);
    it->second.push_back(static_cast<int>(p));
  }
  std::map<Key, size_t> next_holder;  // round robin among a block's holders
  std::vector<RelayoutTransfer> transfers;
  for (size_t p = 0; p < after.size(); ++p) {
    if (!after[p] || after[p]->empty()) continue;
    int64_t covered = 0;
    for (const Key& key : order) {
      if (key.first != group[p]) continue;
      const Box block{key.second.first, key.second.second};
      Box region = intersect(*after[p], block);
      if (region.empty()) continue;
      const std::vector<int>& who = holders[key];
      int from = -1;
      for (int h : who) {
        if (h == static_cast<int>(p)) from = h;
      }
      if (from < 0) from = who[next_holder[key]++ % who.size()];
      covered += region.num_elements();
      transfers.push_back({from, static_cast<int>(p), std::move(region)});
    }
    if (covered != after[p]->num_elements()) return std::nullopt;
  }
  return transfers;
}

int64_t max_bytes_sent(const std::vector<RelayoutTransfer>& transfers, int participants,
                       DType dtype) {
  std::vector<int64_t> sent(static_cast<size_t>(participants), 0);
  for (const RelayoutTransfer& t : transfers) {
    if (t.from != t.to) sent[static_cast<size_t>(t.from)] += t.box.num_elements();
  }
  int64_t most = 0;
  for (int64_t s : sent) most = std::max(most, s);
  return most * static_cast<int64_t>(dtype_size(dtype));
}

int64_t total_bytes_sent(const std::vector<RelayoutTransfer>& transfers, DType dtype) {
  int64_t total = 0;
  for (const RelayoutTransfer& t : transfers) {
    if (t.from != t.to) total += t.box.num_elements();
  }
  return total * static_cast<int64_t>(dtype_size(dtype));
}

int64_t max_block_bytes(const std::vector<MaybeBox>& blocks, DType dtype) {
  int64_t most = 0;
  for (const MaybeBox& b : blocks) {
    if (b) most = std::max(most, b->num_elements());
  }
  return most * static_cast<int64_t>(dtype_size(dtype));
}

}  // namespace tessel::detail
