// Internal: placements and their per-thread cache (see placement.h).
#include "dtensor/placement.h"

#include "dtensor/dtensor_internal.h"
#include "tessel/mesh/shard_map.h"

namespace tessel::detail {
namespace {

struct Entry {
  uint64_t runtime = 0;
  Layout layout;
  Shape shape;
  std::shared_ptr<const Placement> placement;
};

constexpr size_t kCacheSize = 32;

}  // namespace

std::shared_ptr<const Placement> placement(const Layout& layout, const Shape& shape,
                                           Runtime& runtime, std::string_view component) {
  thread_local std::vector<Entry> cache;  // most recently used first
  for (size_t i = 0; i < cache.size(); ++i) {
    if (cache[i].runtime == runtime.id() && cache[i].shape == shape && cache[i].layout == layout) {
      if (i != 0) std::swap(cache[i], cache[0]);
      return cache[0].placement;
    }
  }
  check_tensor_layout(layout, component);
  auto p = std::make_shared<Placement>();
  p->devices = resolve_local_devices(layout.mesh(), runtime, component);
  p->offsets = local_offsets(layout.mesh());
  const ShardMap map(layout, shape);
  for (int64_t offset : p->offsets) {
    const ShardBlock& b = map.block(offset);
    p->blocks.push_back(Box{b.offsets, b.extents});
  }
  if (cache.size() == kCacheSize) cache.pop_back();
  cache.insert(cache.begin(), Entry{runtime.id(), layout, shape, p});
  return p;
}

}  // namespace tessel::detail
