#include "checkpoint/saved_shard_reader.h"

#include <algorithm>
#include <array>
#include <filesystem>

#include <fmt/ranges.h>

#include "checkpoint/chunk_crc.h"
#include "checkpoint/phase_clock.h"
#include "core/errors.h"
#include "core/parallel_all_cores.h"
#include "core/stream_copy.h"
#include "tessel/core/crc32c.h"

namespace tessel::checkpoint::detail {
namespace {

constexpr std::string_view kComponent = "checkpoint";

// A part that is not one run of bytes is copied in slabs of about this many bytes of the shard
// (whole indices of its first dimension): each slab's chunks are checked, then copied from the
// cache.
constexpr uint64_t kSlabBytes = uint64_t{1} << 20;

// The read phase maps the pages of this many pieces (256 KiB chunks) per call: 4 MiB.
constexpr uint64_t kPopulatePieces = 16;

template <typename... Args>
[[noreturn]] void data_loss(fmt::format_string<Args...> format, Args&&... args) {
  tessel::detail::throw_error(ErrorCode::kDataLoss, kComponent, format,
                              std::forward<Args>(args)...);
}

// Bytes [begin, end) of a row-major `block` box that hold the elements of `part` (within it):
// from its first element to the end of its last.
std::pair<uint64_t, uint64_t> byte_span(const Box& block, const Box& part, size_t item) {
  uint64_t first = 0, last = 0;
  for (size_t d = 0; d < block.extents.size(); ++d) {
    const auto extent = static_cast<uint64_t>(block.extents[d]);
    const auto at = static_cast<uint64_t>(part.offsets[d] - block.offsets[d]);
    first = first * extent + at;
    last = last * extent + at + static_cast<uint64_t>(part.extents[d]) - 1;
  }
  return {first * item, (last + 1) * item};
}

}  // namespace

SavedShardReader::SavedShardReader(std::string directory, const Manifest& manifest, bool verify,
                                   RestoreStats& stats)
    : directory_(std::move(directory)), manifest_(manifest), verify_(verify), stats_(stats) {}

SavedShardReader::OpenFile& SavedShardReader::open(const std::string& file,
                                                   const std::string& tensor) {
  auto it = files_.find(file);
  if (it != files_.end()) return it->second;
  const AddElapsed timer(stats_.open_seconds);
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

SavedShardReader::ShardBytes SavedShardReader::shard_bytes(const std::string& tensor,
                                                           const SavedShard& shard) {
  OpenFile& f = open(shard.file, tensor);
  ShardBytes b;
  b.path = (std::filesystem::path(directory_) / shard.file).string();
  if (!f.header.contains(tensor))
    data_loss("'{}' has no tensor '{}' the manifest lists", b.path, tensor);
  const SafetensorsEntry& e = f.header.entry(tensor, b.path);
  const SavedTensor& saved = manifest_.tensors.at(tensor);
  if (e.dtype != saved.dtype || e.shape.dims() != shard.extents) {
    data_loss("'{}': tensor '{}' is {} {} in the file; the manifest says {} [{}]", b.path, tensor,
              dtype_name(e.dtype), e.shape.to_string(), dtype_name(saved.dtype),
              fmt::join(shard.extents, ", "));
  }
  b.map = f.map.get();
  b.offset = f.header.data_start + e.begin;
  b.data = f.map->data() + b.offset;
  b.size = e.end - e.begin;
  if (!verify_) return b;
  b.chunked = !shard.chunk_crc32c.empty() || b.size == 0;
  if (b.chunked && shard.chunk_crc32c.size() != num_chunks(b.size)) {
    data_loss("'{}': tensor '{}' shard {} has {} chunk checksums in the manifest for {} bytes",
              b.path, tensor, shard.box().to_string(), shard.chunk_crc32c.size(), b.size);
  }
  b.chunk_bytes = b.chunked ? kCrcChunkBytes : std::max<uint64_t>(b.size, 1);
  b.checked = &verified_[{shard.file, tensor}];
  b.checked->resize(b.chunked ? shard.chunk_crc32c.size() : 1);
  return b;
}

void SavedShardReader::check_chunk(const std::string& tensor, const SavedShard& shard,
                                   const ShardBytes& b, uint64_t c, uint32_t crc) {
  const uint64_t at = c * b.chunk_bytes, n = std::min(b.chunk_bytes, b.size - at);
  const uint32_t want = b.chunked ? shard.chunk_crc32c[c] : shard.crc32c;
  if (crc != want) {
    data_loss(
        "'{}': tensor '{}' shard {} has crc32c {:#010x} in bytes [{}, {}); the manifest says "
        "{:#010x}: the bytes are corrupt",
        b.path, tensor, shard.box().to_string(), crc, at, at + n, want);
  }
  (*b.checked)[c] = true;
  stats_.bytes_read += static_cast<int64_t>(n);
}

void SavedShardReader::verify_span(const std::string& tensor, const SavedShard& shard,
                                   const ShardBytes& b, uint64_t begin, uint64_t end) {
  const AddElapsed timer(stats_.crc_seconds);
  for (uint64_t c = begin / b.chunk_bytes; c * b.chunk_bytes < end; ++c) {
    if ((*b.checked)[c]) continue;
    const uint64_t at = c * b.chunk_bytes;
    check_chunk(tensor, shard, b, c, crc32c(b.data + at, std::min(b.chunk_bytes, b.size - at)));
  }
}

void SavedShardReader::copy_run(const std::string& tensor, const SavedShard& shard,
                                const ShardBytes& b, uint64_t begin, uint64_t end,
                                unsigned char* to) {
  // Pieces of the run: the chunks it touches (with verify), or chunk-sized pieces of it.
  const uint64_t piece = verify_ ? b.chunk_bytes : kCrcChunkBytes;
  const uint64_t first = begin / piece, count = (end - 1) / piece + 1 - first;
  const auto piece_range = [&](uint64_t i) {  // piece i: [at, stop) and its part [from, until)
    const uint64_t at = (first + i) * piece;
    const uint64_t stop = std::min(at + piece, verify_ ? b.size : end);
    return std::array<uint64_t, 4>{at, stop, std::max(at, begin), std::min(stop, end)};
  };
  {
    // The mapped pages brought in (page cache to map) in one go per kPopulatePieces pieces, on
    // every core, not faulted in one by one by the copy.
    const AddElapsed timer(stats_.read_seconds);
    tessel::detail::for_each_index_all_cores(
        (count + kPopulatePieces - 1) / kPopulatePieces, [&](uint64_t group) {
          const uint64_t lo = group * kPopulatePieces;
          const uint64_t at = piece_range(lo)[0];
          const uint64_t stop = piece_range(std::min(count, lo + kPopulatePieces) - 1)[1];
          b.map->populate(b.offset + at, stop - at);
        });
  }
  // Each piece copied by one thread; a chunk not checked yet is checksummed in the same pass
  // (the parts of it outside the run read around the copy), its CRC compared afterwards in order
  // (the first corrupt chunk is the one reported).
  std::vector<uint32_t> crcs(verify_ ? count : 0);
  {
    const AddElapsed timer(stats_.copy_seconds);
    tessel::detail::for_each_index_all_cores(count, [&](uint64_t i) {
      const auto [at, stop, from, until] = piece_range(i);
      unsigned char* out = to + (from - begin);
      if (!verify_ || (*b.checked)[first + i]) {
        tessel::detail::stream_copy(out, b.data + from, until - from);
        return;
      }
      uint32_t crc = crc32c(b.data + at, from - at);
      crc = tessel::detail::stream_copy_crc32c(out, b.data + from, until - from, crc);
      crcs[i] = crc32c_extend(crc, b.data + until, stop - until);
    });
  }
  if (!verify_) return;
  for (uint64_t i = 0; i < count; ++i) {
    if (!(*b.checked)[first + i]) check_chunk(tensor, shard, b, first + i, crcs[i]);
  }
}

void SavedShardReader::copy(const std::string& tensor, const SavedShard& shard, const Box& part,
                            void* dst, const Box& dst_block) {
  const ShardBytes b = shard_bytes(tensor, shard);
  if (part.empty()) return;
  const size_t item = dtype_size(manifest_.tensors.at(tensor).dtype);
  const auto [begin, end] = byte_span(shard.box(), part, item);
  if (parts_.insert({shard.file, tensor, part.offsets, part.extents}).second) {
    stats_.bytes_needed += part.num_elements() * static_cast<int64_t>(item);
    if (!verify_) stats_.bytes_read += static_cast<int64_t>(end - begin);
  }
  const auto [dst_begin, dst_end] = byte_span(dst_block, part, item);
  const auto bytes = static_cast<uint64_t>(part.num_elements()) * item;
  auto* out = static_cast<unsigned char*>(dst);
  if (end - begin == bytes && dst_end - dst_begin == bytes) {  // one run in both
    copy_run(tensor, shard, b, begin, end, out + dst_begin);
    return;
  }
  // Several runs (rank >= 2): slabs of whole indices of the first dimension.
  const uint64_t index_bytes = b.size / static_cast<uint64_t>(shard.extents[0]);
  const auto slab_rows = static_cast<int64_t>(std::max<uint64_t>(1, kSlabBytes / index_bytes));
  for (int64_t r = 0; r < part.extents[0]; r += slab_rows) {
    Box slab = part;
    slab.offsets[0] += r;
    slab.extents[0] = std::min(slab_rows, part.extents[0] - r);
    if (verify_) {
      const auto [slab_begin, slab_end] = byte_span(shard.box(), slab, item);
      verify_span(tensor, shard, b, slab_begin, slab_end);
    }
    const AddElapsed timer(stats_.copy_seconds);
    copy_box_bytes(b.data, shard.box(), dst, dst_block, slab, item);
  }
}

}  // namespace tessel::checkpoint::detail
