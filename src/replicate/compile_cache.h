// Internal: the compile cache behind compile() (compile.h): compiled computations by (function
// id, signature, options). Entries of a Function are evicted when its last copy dies.
//
//   CompileKey key = CompileKey::of(function, signature, options);
//   if (auto hit = compile_cache().find(key)) return hit;
//   compile_cache().insert(key, compiled);   // an entry already there wins (returned)
//
// Thread safety: every method locks one mutex; nothing is traced or run under it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "tessel/replicate/compile.h"

namespace tessel::detail {

struct CompileKey {
  uint64_t function_id = 0;
  InputSignature signature;
  ReplicateMetadata metadata;
  uint64_t runtime_id = 0;
  int64_t timeout_ms = 0;
  std::vector<int> packed_inputs;
  std::optional<std::vector<DType>> output_types;

  static CompileKey of(uint64_t function_id, const InputSignature& signature,
                       const CompileOptions& options, const Runtime& runtime);
  friend bool operator==(const CompileKey&, const CompileKey&) = default;
};

class CompileCache {
 public:
  // The entry for key, counting a hit or a miss.
  std::shared_ptr<const CompiledComputation> find(const CompileKey& key);
  // Stores `computation` unless an entry for key exists; returns the stored one.
  std::shared_ptr<const CompiledComputation> insert(
      const CompileKey& key, std::shared_ptr<const CompiledComputation> computation);
  void evict_function(uint64_t function_id);
  CompileCacheStats stats() const;
  void clear();

 private:
  struct Entry {
    CompileKey key;
    std::shared_ptr<const CompiledComputation> computation;
  };
  mutable std::mutex mu_;
  std::vector<Entry> entries_;  // few per function: a linear search by key
  int64_t hits_ = 0;
  int64_t misses_ = 0;
};

// The process's cache (never destroyed: Functions may die during exit).
CompileCache& compile_cache();

}  // namespace tessel::detail
