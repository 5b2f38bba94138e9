// SavedShardReader: copies parts of saved shards out of memory maps of the checkpoint's files,
// each file checked once against the manifest (size, header) and each 256 KiB chunk of a shard
// that a part's byte span touches checked against its crc32c (once per reader; a shard without
// chunk checksums is one chunk). A part that is one contiguous run of bytes in the shard and in
// the destination (whole rows of both) is checksummed in the same pass that copies it
// (stream_copy_crc32c); any other part is copied slab by slab, each slab's chunks checked just
// before the slab is copied, while they are in the cache. It counts the bytes it touched and the
// bytes needed, and times its phases (RestoreStats: open, read, crc, copy).
// Errors name the file and the tensor: a missing file kNotFound; a size, header or checksum that
// disagrees with the manifest kDataLoss (the checksum's with the chunk's byte range).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "checkpoint/file_io.h"
#include "checkpoint/manifest.h"
#include "tessel/checkpoint/checkpoint.h"
#include "tessel/checkpoint/safetensors.h"

namespace tessel::checkpoint::detail {

class SavedShardReader {
 public:
  // Counts what it reads, and the seconds of its phases, in `stats`.
  SavedShardReader(std::string directory, const Manifest& manifest, bool verify,
                   RestoreStats& stats);
  // Copies the elements of `part` (a box within the shard's) of `shard` of tensor `tensor` into
  // `dst`, a row-major block of the tensor's dtype holding the box `dst_block` (which contains
  // `part`).
  void copy(const std::string& tensor, const SavedShard& shard, const Box& part, void* dst,
            const Box& dst_block);

 private:
  struct OpenFile {
    std::unique_ptr<MappedFile> map;
    SafetensorsHeader header;
  };
  // A shard's bytes in its mapped file, checked against the manifest.
  struct ShardBytes {
    std::string path;
    const MappedFile* map = nullptr;
    uint64_t offset = 0;  // of the shard's first byte in the file
    const unsigned char* data = nullptr;
    uint64_t size = 0;
    // With verify: the chunks (all of the shard, one chunk, for a manifest without chunk crcs)
    // and which of them were checked.
    bool chunked = false;
    uint64_t chunk_bytes = 0;
    std::vector<bool>* checked = nullptr;
  };
  OpenFile& open(const std::string& file, const std::string& tensor);
  ShardBytes shard_bytes(const std::string& tensor, const SavedShard& shard);
  // The crc32c of chunk `c` (bytes [at, at + n) of the shard) is `crc`, or kDataLoss.
  void check_chunk(const std::string& tensor, const SavedShard& shard, const ShardBytes& b,
                   uint64_t c, uint32_t crc);
  // Checks the chunks of the shard over its bytes [begin, end) not checked yet.
  void verify_span(const std::string& tensor, const SavedShard& shard, const ShardBytes& b,
                   uint64_t begin, uint64_t end);
  // Bytes [begin, end) of the shard copied to `to`, the chunks they touch checked in the pass.
  void copy_run(const std::string& tensor, const SavedShard& shard, const ShardBytes& b,
                uint64_t begin, uint64_t end, unsigned char* to);

  std::string directory_;
  const Manifest& manifest_;
  bool verify_;
  std::map<std::string, OpenFile> files_;
  // (file, tensor) -> which of the shard's chunks were checked
  std::map<std::pair<std::string, std::string>, std::vector<bool>> verified_;
  std::set<std::tuple<std::string, std::string, std::vector<int64_t>, std::vector<int64_t>>>
      parts_;  // (file, tensor, part offsets, extents) counted in bytes_needed
  RestoreStats& stats_;
};

}  // namespace tessel::checkpoint::detail
