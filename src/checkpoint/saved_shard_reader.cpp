#include "checkpoint/saved_shard_reader.h"

#include <filesystem>

#include <fmt/ranges.h>

#include "checkpoint/chunk_crc.h"
#include "core/errors.h"
#include "tessel/core/crc32c.h"

namespace tessel::checkpoint::detail {
namespace {

constexpr std::string_view kComponent = "checkpoint";

template <typename... Args>
[[noreturn]] void data_loss(fmt::format_string<Args...> format, Args&&... args) {
  tessel::detail::throw_error(ErrorCode::kDataLoss, kComponent, format,
                              std::forward<Args>(args)...);
}

}  // namespace

SavedShardReader::SavedShardReader(std::string directory, const Manifest& manifest, bool verify)
    : directory_(std::move(directory)), manifest_(manifest), verify_(verify) {}

SavedShardReader::OpenFile& SavedShardReader::open(const std::string& file,
                                                   const std::string& tensor) {
  auto it = files_.find(file);
  if (it != files_.end()) return it->second;
  const std::string path = (std::filesystem::path(directory_) / file).string();
  auto listed = manifest_.files.find(file);
  if (listed == manifest_.files.end()) {
    data_loss("the manifest of '{}' lists a shard of tensor '{}' in '{}' but not the file",
              directory_, tensor, file);
  }
  OpenFile open;
  try {
    if (!std::filesystem::exists(path)) {
      tessel::detail::throw_error(ErrorCode::kNotFound, kComponent,
                                  "'{}' (holding tensor '{}') is missing", path, tensor);
    }
    const uint64_t size = file_size(path);
    if (size != listed->second.size) {
      data_loss(
          "'{}' (holding tensor '{}') has {} bytes; the manifest says {}: truncated or "
          "overwritten",
          path, tensor, size, listed->second.size);
    }
    open.header = SafetensorsHeader::read(path);
    open.map = std::make_unique<MappedFile>(path);
  } catch (const Error& e) {
    if (e.component() == kComponent) throw;
    tessel::detail::throw_error(e.code(), kComponent, "{} (reading tensor '{}')", e.what(), tensor);
  }
  return files_.emplace(file, std::move(open)).first->second;
}

namespace {

// Bytes [begin, end) of a row-major `shard` box that hold the elements of `part` (within it):
// from its first element to the end of its last.
std::pair<uint64_t, uint64_t> byte_span(const Box& shard, const Box& part, size_t item) {
  uint64_t first = 0, last = 0;
  for (size_t d = 0; d < shard.extents.size(); ++d) {
    const auto extent = static_cast<uint64_t>(shard.extents[d]);
    const auto at = static_cast<uint64_t>(part.offsets[d] - shard.offsets[d]);
    first = first * extent + at;
    last = last * extent + at + static_cast<uint64_t>(part.extents[d]) - 1;
  }
  return {first * item, (last + 1) * item};
}

}  // namespace

void SavedShardReader::verify_span(const std::string& tensor, const SavedShard& shard,
                                   const std::string& path, const unsigned char* data,
                                   uint64_t size, uint64_t begin, uint64_t end) {
  const bool chunked = !shard.chunk_crc32c.empty() || size == 0;
  if (chunked && shard.chunk_crc32c.size() != num_chunks(size)) {
    data_loss("'{}': tensor '{}' shard {} has {} chunk checksums in the manifest for {} bytes",
              path, tensor, shard.box().to_string(), shard.chunk_crc32c.size(), size);
  }
  const uint64_t chunk_bytes = chunked ? kCrcChunkBytes : std::max<uint64_t>(size, 1);
  std::vector<bool>& done = verified_[{shard.file, tensor}];
  done.resize(chunked ? shard.chunk_crc32c.size() : 1);
  for (uint64_t c = begin / chunk_bytes; c * chunk_bytes < end; ++c) {
    if (done[c]) continue;
    const uint64_t at = c * chunk_bytes, n = std::min(chunk_bytes, size - at);
    const uint32_t crc = crc32c(data + at, n);
    const uint32_t want = chunked ? shard.chunk_crc32c[c] : shard.crc32c;
    if (crc != want) {
      data_loss(
          "'{}': tensor '{}' shard {} has crc32c {:#010x} in bytes [{}, {}); the manifest says "
          "{:#010x}: the bytes are corrupt",
          path, tensor, shard.box().to_string(), crc, at, at + n, want);
    }
    done[c] = true;
    stats_.bytes_read += static_cast<int64_t>(n);
  }
}

const unsigned char* SavedShardReader::bytes(const std::string& tensor, const SavedShard& shard,
                                             const Box& part) {
  OpenFile& f = open(shard.file, tensor);
  const std::string path = (std::filesystem::path(directory_) / shard.file).string();
  if (!f.header.contains(tensor))
    data_loss("'{}' has no tensor '{}' the manifest lists", path, tensor);
  const SafetensorsEntry& e = f.header.entry(tensor, path);
  const SavedTensor& saved = manifest_.tensors.at(tensor);
  if (e.dtype != saved.dtype || e.shape.dims() != shard.extents) {
    data_loss("'{}': tensor '{}' is {} {} in the file; the manifest says {} [{}]", path, tensor,
              dtype_name(e.dtype), e.shape.to_string(), dtype_name(saved.dtype),
              fmt::join(shard.extents, ", "));
  }
  const unsigned char* p = f.map->data() + f.header.data_start + e.begin;
  const size_t item = dtype_size(saved.dtype);
  if (part.empty()) return p;
  const auto [begin, end] = byte_span(shard.box(), part, item);
  if (parts_.insert({shard.file, tensor, part.offsets, part.extents}).second) {
    stats_.bytes_needed += part.num_elements() * static_cast<int64_t>(item);
    if (!verify_) stats_.bytes_read += static_cast<int64_t>(end - begin);
  }
  if (verify_) verify_span(tensor, shard, path, p, e.end - e.begin, begin, end);
  return p;
}

}  // namespace tessel::checkpoint::detail
