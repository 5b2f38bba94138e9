// The compile cache (see compile_cache.h).
#include "replicate/compile_cache.h"

#include <algorithm>

namespace tessel::detail {

CompileKey CompileKey::of(uint64_t function_id, const InputSignature& signature,
                          const CompileOptions& options, const Runtime& runtime) {
  return CompileKey{function_id,
                    signature,
                    options.replicate.metadata,
                    runtime.id(),
                    options.replicate.timeout.count(),
                    options.replicate.packed_inputs,
                    options.output_types};
}

std::shared_ptr<const CompiledComputation> CompileCache::find(const CompileKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Entry& e : entries_) {
    if (e.key == key) {
      ++hits_;
      return e.computation;
    }
  }
  ++misses_;
  return nullptr;
}

std::shared_ptr<const CompiledComputation> CompileCache::insert(
    const CompileKey& key, std::shared_ptr<const CompiledComputation> computation) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Entry& e : entries_) {
    if (e.key == key) return e.computation;
  }
  entries_.push_back({key, computation});
  return computation;
}

void CompileCache::evict_function(uint64_t function_id) {
  std::vector<Entry> dropped;  // destroyed after the lock is released
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto keep = std::stable_partition(entries_.begin(), entries_.end(), [&](const Entry& e) {
      return e.key.function_id != function_id;
    });
    std::move(keep, entries_.end(), std::back_inserter(dropped));
    entries_.erase(keep, entries_.end());
  }
}

CompileCacheStats CompileCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {static_cast<int64_t>(entries_.size()), hits_, misses_};
}

void CompileCache::clear() {
  std::vector<Entry> dropped;
  std::lock_guard<std::mutex> lock(mu_);
  dropped.swap(entries_);
  hits_ = 0;
  misses_ = 0;
}

CompileCache& compile_cache() {
  static CompileCache* cache = new CompileCache();
  return *cache;
}

}  // namespace tessel::detail
