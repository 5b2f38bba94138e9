// SavedShardReader: the bytes of saved shards, from memory maps of the checkpoint's files, each
// file checked once against the manifest (size, header) and each shard's crc32c checked once
// before its first use. Errors name the file and the tensor: a missing file kNotFound; a size,
// header or checksum that disagrees with the manifest kDataLoss.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>

#include "checkpoint/file_io.h"
#include "checkpoint/manifest.h"
#include "tessel/checkpoint/safetensors.h"

namespace tessel::checkpoint::detail {

class SavedShardReader {
 public:
  SavedShardReader(std::string directory, const Manifest& manifest, bool verify);
  // The first byte of `shard` of tensor `tensor` (its bytes are the shard's box, row-major).
  const unsigned char* bytes(const std::string& tensor, const SavedShard& shard);

 private:
  struct OpenFile {
    std::unique_ptr<MappedFile> map;
    SafetensorsHeader header;
  };
  OpenFile& open(const std::string& file, const std::string& tensor);

  std::string directory_;
  const Manifest& manifest_;
  bool verify_;
  std::map<std::string, OpenFile> files_;
  std::set<std::pair<std::string, std::string>> verified_;  // (file, tensor)
};

}  // namespace tessel::checkpoint::detail
