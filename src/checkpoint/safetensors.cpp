// safetensors headers: parsed with nlohmann/json from the file's first bytes (pread, so a header
// read costs the header's bytes only), encoded with the padding the format allows.
#include "tessel/checkpoint/safetensors.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "checkpoint/file_io.h"
#include "core/errors.h"

namespace tessel {
namespace {

constexpr std::string_view kComponent = "safetensors";
constexpr uint64_t kLengthBytes = 8;
// A header larger than this is not one (safetensors itself refuses above 100 MB).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::kF32, "F32"}, {DType::kF64, "F64"}, {DType::kBF16, "BF16"}, {DType::kF16, "F16"},
    {DType::kI32, "I32"}, {DType::kI64, "I64"}, {DType::kU8, "U8"},     {DType::kBool, "BOOL"},
    {DType::kU32, "U32"}, {DType::kI8, "I8"},
};

template <typename... Args>
[[noreturn]] void corrupt(const std::string& path, fmt::format_string<Args...> format,
                          Args&&... args) {
  detail::throw_error(ErrorCode::kDataLoss, kComponent, "'{}': {}", path,
                      fmt::format(format, std::forward<Args>(args)...));
}

uint64_t little_endian_u64(const std::string& bytes) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = v << 8 | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  return v;
}

SafetensorsEntry parse_entry(const std::string& name, const nlohmann::json& j,
                             const std::string& path) {
  SafetensorsEntry e;
  e.name = name;
  try {
    e.dtype = dtype_from_safetensors_name(j.at("dtype").get<std::string>());
  } catch (const Error& err) {
    corrupt(path, "tensor '{}': {}", name, err.message());
  }
  const auto shape = j.at("shape").get<std::vector<int64_t>>();
  for (int64_t d : shape) {
    if (d < 0) corrupt(path, "tensor '{}' has shape [{}]", name, fmt::join(shape, ", "));
  }
  e.shape = Shape(shape);
  const auto range = j.at("data_offsets").get<std::vector<uint64_t>>();
  const uint64_t want = static_cast<uint64_t>(e.shape.num_elements()) * dtype_size(e.dtype);
  if (range.size() != 2 || range[0] > range[1] || range[1] - range[0] != want) {
    corrupt(path, "tensor '{}': data_offsets [{}] do not hold its {} bytes", name,
            fmt::join(range, ", "), want);
  }
  e.begin = range[0];
  e.end = range[1];
  return e;
}

}  // namespace

std::string safetensors_dtype_name(DType dtype) {
  for (const DTypeName& d : kDTypeNames) {
    if (d.dtype == dtype) return d.name;
  }
  detail::throw_invalid(kComponent, "dtype {} has no safetensors name", dtype_name(dtype));
}

DType dtype_from_safetensors_name(const std::string& name) {
  for (const DTypeName& d : kDTypeNames) {
    if (name == d.name) return d.dtype;
  }
  detail::throw_invalid(kComponent,
                        "dtype '{}' is not one of F32, F64, BF16, F16, I32, I64, U8, BOOL, U32, I8", name);
}

SafetensorsHeader SafetensorsHeader::read(const std::string& path) {
  SafetensorsHeader h;
  h.file_size = checkpoint::detail::file_size(path);
  if (h.file_size < kLengthBytes) corrupt(path, "{} bytes: no header length", h.file_size);
  const uint64_t length = little_endian_u64(checkpoint::detail::read_range(path, 0, kLengthBytes));
  if (length > kMaxHeaderBytes || length > h.file_size - kLengthBytes) {
    corrupt(path, "the header claims {} bytes; the file has {} after the length", length,
            h.file_size - kLengthBytes);
  }
  h.data_start = kLengthBytes + length;
  const uint64_t data_size = h.file_size - h.data_start;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(checkpoint::detail::read_range(path, kLengthBytes, length));
  } catch (const nlohmann::json::exception& e) {
    corrupt(path, "the header is not JSON: {}", e.what());
  }
  if (!header.is_object()) corrupt(path, "the header is not a JSON object");
  try {
    for (const auto& [name, value] : header.items()) {
      if (name == "__metadata__") {
        for (const auto& [k, v] : value.items()) h.metadata[k] = v.get<std::string>();
        continue;
      }
      SafetensorsEntry e = parse_entry(name, value, path);
      if (e.end > data_size) {
        corrupt(path, "tensor '{}': bytes [{}, {}) lie past the {} data bytes", name, e.begin,
                e.end, data_size);
      }
      h.entries.push_back(std::move(e));
    }
  } catch (const nlohmann::json::exception& e) {
    corrupt(path, "malformed header entry: {}", e.what());
  }
  std::sort(h.entries.begin(), h.entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.begin < b.begin; });
  return h;
}

const SafetensorsEntry& SafetensorsHeader::entry(const std::string& name,
                                                 const std::string& path) const {
  for (const SafetensorsEntry& e : entries) {
    if (e.name == name) return e;
  }
  detail::throw_error(ErrorCode::kNotFound, kComponent, "'{}': no tensor '{}'", path, name);
}

bool SafetensorsHeader::contains(const std::string& name) const {
  for (const SafetensorsEntry& e : entries) {
    if (e.name == name) return true;
  }
  return false;
}

std::string SafetensorsHeader::encode() const {
  // ordered_json keeps __metadata__ first and the tensors in data order.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t next = 0;
  for (const SafetensorsEntry& e : entries) {
    if (e.begin != next || e.end < e.begin) {
      detail::throw_error(ErrorCode::kInternal, kComponent,
                          "tensor '{}': bytes [{}, {}) do not follow the previous end {}", e.name,
                          e.begin, e.end, next);
    }
    next = e.end;
    header[e.name] = {{"dtype", safetensors_dtype_name(e.dtype)},
                      {"shape", e.shape.dims()},
                      {"data_offsets", {e.begin, e.end}}};
  }
  std::string json = header.dump();
  json.append((kLengthBytes - json.size() % kLengthBytes) % kLengthBytes, ' ');
  std::string out(kLengthBytes, '\0');
  uint64_t length = json.size();
  for (size_t i = 0; i < kLengthBytes; ++i, length >>= 8) out[i] = static_cast<char>(length & 0xFF);
  return out + json;
}

SafetensorsFile SafetensorsFile::read(const std::string& path) {
  const SafetensorsHeader header = SafetensorsHeader::read(path);
  const std::string bytes = checkpoint::detail::read_file(path);
  SafetensorsFile file;
  file.path_ = path;
  file.metadata_ = header.metadata;
  for (const SafetensorsEntry& e : header.entries) {
    Tensor t = Tensor::zeros(e.shape, e.dtype);
    if (e.end > e.begin)
      std::memcpy(t.data(), bytes.data() + header.data_start + e.begin, e.end - e.begin);
    file.tensors_.emplace(e.name, std::move(t));
  }
  return file;
}

const Tensor& SafetensorsFile::tensor(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    detail::throw_error(ErrorCode::kNotFound, kComponent, "'{}': no tensor '{}'", path_, name);
  }
  return it->second;
}

const std::string& SafetensorsFile::metadata(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) {
    detail::throw_error(ErrorCode::kNotFound, kComponent, "'{}': no metadata '{}'", path_, key);
  }
  return it->second;
}

}  // namespace tessel
