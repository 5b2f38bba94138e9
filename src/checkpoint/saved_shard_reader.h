// SavedShardReader: the bytes of saved shards, from memory maps of the checkpoint's files, each
// file checked once against the manifest (size, header) and, before a part of a shard is used,
// the crc32c of each chunk of the shard that the part's byte span touches (each chunk once; a
// shard without chunk checksums whole). It counts the bytes it touched and the bytes needed.
// Errors name the file and the tensor: a missing file kNotFound; a size, header or checksum that
// disagrees with the manifest kDataLoss.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "checkpoint/file_io.h"
#include "checkpoint/manifest.h"
#include "tessel/checkpoint/safetensors.h"

namespace tessel::checkpoint::detail {

class SavedShardReader {
 public:
  SavedShardReader(std::string directory, const Manifest& manifest, bool verify);
  // The first byte of `shard` of tensor `tensor` (its bytes are the shard's box, row-major), of
  // which the caller reads the elements in `part` (a box within the shard's).
  const unsigned char* bytes(const std::string& tensor, const SavedShard& shard, const Box& part);
  const RestoreStats& stats() const { return stats_; }

 private:
  struct OpenFile {
    std::unique_ptr<MappedFile> map;
    SafetensorsHeader header;
  };
  OpenFile& open(const std::string& file, const std::string& tensor);
  // Checks the chunks of `shard` over bytes [begin, end) of it not checked yet.
  void verify_span(const std::string& tensor, const SavedShard& shard, const std::string& path,
                   const unsigned char* data, uint64_t size, uint64_t begin, uint64_t end);

  std::string directory_;
  const Manifest& manifest_;
  bool verify_;
  std::map<std::string, OpenFile> files_;
  // (file, tensor) -> which of the shard's chunks were checked
  std::map<std::pair<std::string, std::string>, std::vector<bool>> verified_;
  std::set<std::tuple<std::string, std::string, std::vector<int64_t>, std::vector<int64_t>>>
      parts_;  // (file, tensor, part offsets, extents) counted in bytes_needed
  RestoreStats stats_;
};

}  // namespace tessel::checkpoint::detail
