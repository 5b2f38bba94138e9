#include "safetensors_file.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"

namespace tessel::gpt {
namespace {

[[noreturn]] void invalid(const std::string& path, const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, "safetensors", fmt::format("{}: {}", path, what));
}

DType dtype_of(const std::string& name, const std::string& path) {
  if (name == "F64") return DType::kF64;
  if (name == "F32") return DType::kF32;
  if (name == "I64") return DType::kI64;
  if (name == "I32") return DType::kI32;
  invalid(path, fmt::format("dtype '{}' is not one of F64, F32, I64, I32", name));
}

}  // namespace

SafetensorsFile SafetensorsFile::read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::kNotFound, "safetensors", fmt::format("cannot open '{}'", path));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 8) invalid(path, fmt::format("{} bytes: no header length", bytes.size()));
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = header_size << 8 | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  if (header_size > bytes.size() - 8) {
    invalid(path, fmt::format("the header claims {} bytes; the file has {} after the length",
                              header_size, bytes.size() - 8));
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.substr(8, header_size));
  } catch (const nlohmann::json::exception& e) {
    invalid(path, fmt::format("the header is not JSON: {}", e.what()));
  }
  const size_t data_start = 8 + header_size;
  const size_t data_size = bytes.size() - data_start;
  SafetensorsFile file;
  file.path_ = path;
  try {
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        for (const auto& [k, v] : entry.items()) file.metadata_[k] = v.get<std::string>();
        continue;
      }
      const DType dtype = dtype_of(entry.at("dtype").get<std::string>(), path);
      const std::vector<int64_t> shape = entry.at("shape").get<std::vector<int64_t>>();
      const auto range = entry.at("data_offsets").get<std::vector<uint64_t>>();
      Tensor t = Tensor::zeros(Shape(shape), dtype);
      const uint64_t want = static_cast<uint64_t>(t.num_elements()) * dtype_size(dtype);
      if (range.size() != 2 || range[0] > range[1] || range[1] > data_size ||
          range[1] - range[0] != want) {
        invalid(path, fmt::format("tensor '{}': byte range [{}] does not hold {} bytes inside the "
                                  "{} data bytes",
                                  name, fmt::join(range, ", "), want, data_size));
      }
      if (want > 0) std::memcpy(t.data(), bytes.data() + data_start + range[0], want);
      file.tensors_.emplace(name, std::move(t));
    }
  } catch (const nlohmann::json::exception& e) {
    invalid(path, fmt::format("malformed header entry: {}", e.what()));
  }
  return file;
}

const Tensor& SafetensorsFile::tensor(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    throw Error(ErrorCode::kNotFound, "safetensors", fmt::format("{}: no tensor '{}'", path_, name));
  }
  return it->second;
}

const std::string& SafetensorsFile::metadata(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) {
    throw Error(ErrorCode::kNotFound, "safetensors", fmt::format("{}: no metadata '{}'", path_, key));
  }
  return it->second;
}

}  // namespace tessel::gpt
