// The manifest tessel.json of a checkpoint directory (docs/checkpoints.md): what every file and
// shard holds and their checksums, the tensors' dtypes, shapes and layouts, the plain values.
// Also the per-process index a writer leaves for process 0 (the same JSON with only "files" and
// the tensors' "shards").
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessel/checkpoint/checkpoint.h"
#include "tessel/core/box.h"

namespace tessel::checkpoint::detail {

inline constexpr int kFormatVersion = 1;
inline constexpr const char* kFormatName = "tessel-checkpoint";
inline constexpr const char* kManifestName = "tessel.json";

// One saved block of a tensor: where it lies in the global tensor and which file holds it.
struct SavedShard {
  std::string file;              // relative to the checkpoint directory
  std::vector<int64_t> offsets;  // DCP's saved_offsets
  std::vector<int64_t> extents;  // the shard's shape
  uint32_t crc32c = 0;           // of the shard's bytes
  // Of each kCrcChunkBytes piece of them (chunk_crc.h); empty in a manifest that has none, whose
  // shards are checked whole.
  std::vector<uint32_t> chunk_crc32c;
  Box box() const { return Box{offsets, extents}; }
};

struct SavedTensor {
  DType dtype = DType::kF32;
  Shape shape;
  std::string layout;  // TF layout text of the saved (non-Partial) layout
  std::vector<SavedShard> shards;
};

struct SavedFile {
  uint64_t size = 0;
  uint32_t crc32c = 0;  // of the whole file
};

// A plain value of a State (every Item but DTensor).
using Value = std::variant<bool, int64_t, double, std::string>;

struct Manifest {
  int processes = 1;
  std::string mesh;  // the mesh the processes agreed over ("" without tensors)
  std::map<std::string, SavedTensor> tensors;
  std::map<std::string, Value> values;
  std::map<std::string, SavedFile> files;

  std::string to_json() const;
  // `path` names the source in errors: not JSON, a missing field, another format or version:
  // kDataLoss.
  static Manifest parse(const std::string& text, const std::string& path);
  // The manifest of `directory`: no directory or no tessel.json there: kNotFound.
  static Manifest read(const std::string& directory);
  // Adds another process's index (its files and its tensors' shards).
  void merge_index(const Manifest& index);
};

}  // namespace tessel::checkpoint::detail
