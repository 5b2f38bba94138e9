// tessel.json: written with nlohmann/json in a fixed key order, read back with every field
// checked (a manifest that does not parse is data loss, never a crash).
#include <cstdint>

#include "checkpoint/manifest.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "checkpoint/chunk_crc.h"
#include "checkpoint/file_io.h"
#include "core/errors.h"

namespace tessel::checkpoint::detail {
namespace {

using Json = nlohmann::ordered_json;
constexpr std::string_view kComponent = "checkpoint";

Json value_json(const Value& v) {
  return std::visit([](const auto& x) { return Json(x); }, v);
}

Value value_of(const Json& j, const std::string& name) {
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_number_float()) return j.get<double>();
  if (j.is_string()) return j.get<std::string>();
  tessel::detail::throw_invalid(kComponent, "value '{}' is {}, not a bool, number or string", name,
                                j.type_name());
}

// An unsigned integer field of at most `max`: a float, a negative or a larger number is a bad
// manifest (nlohmann would convert it with undefined behaviour; found by the fuzzer).
uint64_t unsigned_field(const Json& j, const char* key, uint64_t max) {
  const Json& v = j.at(key);
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
    throw Json::type_error::create(302, fmt::format("'{}' is not an unsigned integer", key), &v);
  }
  const uint64_t value = v.get<uint64_t>();
  if (value > max) {
    throw Json::out_of_range::create(406, fmt::format("'{}' = {} is out of range", key, value), &v);
  }
  return value;
}

Json shard_json(const SavedShard& s) {
  return Json{{"file", s.file},
              {"saved_offsets", s.offsets},
              {"shape", s.extents},
              {"crc32c", s.crc32c},
              {"chunk_bytes", kCrcChunkBytes},
              {"chunk_crc32c", s.chunk_crc32c}};
}

SavedShard shard_of(const Json& j, const std::string& path) {
  SavedShard s;
  s.file = j.at("file").get<std::string>();
  s.offsets = j.at("saved_offsets").get<std::vector<int64_t>>();
  s.extents = j.at("shape").get<std::vector<int64_t>>();
  s.crc32c = static_cast<uint32_t>(unsigned_field(j, "crc32c", UINT32_MAX));
  if (j.contains("chunk_crc32c")) {
    if (j.at("chunk_bytes").get<uint64_t>() != kCrcChunkBytes) {
      tessel::detail::throw_error(ErrorCode::kDataLoss, kComponent,
                                  "'{}': a shard of '{}' has chunk_bytes {}; this tessel reads {}",
                                  path, s.file, j.at("chunk_bytes").get<uint64_t>(),
                                  kCrcChunkBytes);
    }
    s.chunk_crc32c = j.at("chunk_crc32c").get<std::vector<uint32_t>>();
  }
  return s;
}

}  // namespace

std::string Manifest::to_json() const {
  Json j;
  j["format"] = kFormatName;
  j["version"] = kFormatVersion;
  j["processes"] = processes;
  j["mesh"] = mesh;
  Json& tensors_json = j["tensors"] = Json::object();
  for (const auto& [name, t] : tensors) {
    Json shards = Json::array();
    for (const SavedShard& s : t.shards) shards.push_back(shard_json(s));
    tensors_json[name] = {{"dtype", std::string(dtype_name(t.dtype))},
                          {"shape", t.shape.dims()},
                          {"layout", t.layout},
                          {"shards", shards}};
  }
  Json& values_json = j["values"] = Json::object();
  for (const auto& [name, v] : values) values_json[name] = value_json(v);
  Json& files_json = j["files"] = Json::object();
  for (const auto& [name, f] : files) files_json[name] = {{"size", f.size}, {"crc32c", f.crc32c}};
  return j.dump(1);
}

Manifest Manifest::parse(const std::string& text, const std::string& path) {
  Manifest m;
  try {
    const Json j = Json::parse(text);
    const std::string format = j.at("format").get<std::string>();
    const int version = j.at("version").get<int>();
    if (format != kFormatName || version != kFormatVersion) {
      tessel::detail::throw_error(ErrorCode::kDataLoss, kComponent,
                                  "'{}' is format '{}' version {}; this tessel reads '{}' "
                                  "version {}",
                                  path, format, version, kFormatName, kFormatVersion);
    }
    m.processes = j.at("processes").get<int>();
    m.mesh = j.at("mesh").get<std::string>();
    for (const auto& [name, t] : j.at("tensors").items()) {
      SavedTensor st;
      st.dtype = dtype_from_name(t.at("dtype").get<std::string>());
      st.shape = Shape(t.at("shape").get<std::vector<int64_t>>());
      st.layout = t.at("layout").get<std::string>();
      for (const Json& s : t.at("shards")) st.shards.push_back(shard_of(s, path));
      m.tensors[name] = std::move(st);
    }
    for (const auto& [name, v] : j.at("values").items()) m.values[name] = value_of(v, name);
    for (const auto& [name, f] : j.at("files").items()) {
      m.files[name] = SavedFile{unsigned_field(f, "size", UINT64_MAX),
                                static_cast<uint32_t>(unsigned_field(f, "crc32c", UINT32_MAX))};
    }
  } catch (const Json::exception& e) {
    tessel::detail::throw_error(ErrorCode::kDataLoss, kComponent,
                                "'{}' is not a valid manifest: {}", path, e.what());
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kDataLoss) throw;
    tessel::detail::throw_error(ErrorCode::kDataLoss, kComponent,
                                "'{}' is not a valid manifest: {}", path, e.what());
  }
  return m;
}

Manifest Manifest::read(const std::string& directory) {
  std::error_code ec;
  if (!std::filesystem::is_directory(directory, ec)) {
    tessel::detail::throw_error(ErrorCode::kNotFound, kComponent, "no checkpoint directory '{}'",
                                directory);
  }
  const std::string path = (std::filesystem::path(directory) / kManifestName).string();
  if (!std::filesystem::exists(path, ec)) {
    tessel::detail::throw_error(ErrorCode::kNotFound, kComponent,
                                "'{}' is not a complete checkpoint: it has no {}", directory,
                                kManifestName);
  }
  return parse(read_file(path), path);
}

void Manifest::merge_index(const Manifest& index) {
  for (const auto& [name, f] : index.files) files[name] = f;
  for (const auto& [name, t] : index.tensors) {
    std::vector<SavedShard>& shards = tensors[name].shards;
    shards.insert(shards.end(), t.shards.begin(), t.shards.end());
  }
}

}  // namespace tessel::checkpoint::detail
