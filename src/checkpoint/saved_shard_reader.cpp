#include "checkpoint/saved_shard_reader.h"

#include <filesystem>

#include <fmt/ranges.h>

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

const unsigned char* SavedShardReader::bytes(const std::string& tensor, const SavedShard& shard) {
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
  if (verify_ && verified_.insert({shard.file, tensor}).second) {
    const uint32_t crc = crc32c(p, e.end - e.begin);
    if (crc != shard.crc32c) {
      verified_.erase({shard.file, tensor});
      data_loss(
          "'{}': tensor '{}' shard {} has crc32c {:#010x}; the manifest says {:#010x}: the "
          "bytes are corrupt",
          path, tensor, shard.box().to_string(), crc, shard.crc32c);
    }
  }
  return p;
}

}  // namespace tessel::checkpoint::detail
