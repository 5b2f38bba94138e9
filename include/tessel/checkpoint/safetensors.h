// safetensors: Hugging Face's tensor file format, read and written.
//
// A file is an 8-byte little-endian header length N, N bytes of JSON, then the raw little-endian
// tensor data. The JSON maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
// (byte offsets into the data, which starts at 8 + N) and may hold "__metadata__", a map of
// strings to strings. tessel writes the header padded with spaces so that the data starts at a
// multiple of 8.
//
//   SafetensorsFile f = SafetensorsFile::read("gpt_small_reference.safetensors");
//   Tensor logits = f.tensor("logits");                      // the whole file is read
//   SafetensorsHeader h = SafetensorsHeader::read(path);      // the header only
//   h.entry("logits").data_offsets                            // where its bytes are
//
// Errors name the file: a missing file (kNotFound); a file shorter than its header claims, a
// header that is not JSON or lacks a field, an unknown dtype, a byte range outside the data or
// disagreeing with the shape (kDataLoss: the stored bytes are not a valid file); an unknown
// tensor or metadata key (kNotFound).
//
// Thread safety: immutable values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessel/core/dtype.h"
#include "tessel/core/shape.h"
#include "tessel/core/tensor.h"

namespace tessel {

// safetensors' dtype names: F32, F64, BF16, F16, I32, I64, U8, BOOL.
std::string safetensors_dtype_name(DType dtype);
// The inverse; another name: kInvalidArgument naming it.
DType dtype_from_safetensors_name(const std::string& name);

// One tensor of a header.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;  // data_offsets[0]: first byte, relative to the start of the data
  uint64_t end = 0;    // data_offsets[1]: one past the last byte
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;        // in data order
  std::map<std::string, std::string> metadata;  // "__metadata__"
  uint64_t data_start = 0;                      // 8 + header length: where the data begins
  uint64_t file_size = 0;                       // bytes of the whole file

  // Reads and checks the header of the file at `path` (only the header's bytes are read).
  static SafetensorsHeader read(const std::string& path);
  // The entry named `name`: kNotFound naming the tensor and `path`.
  const SafetensorsEntry& entry(const std::string& name, const std::string& path) const;
  bool contains(const std::string& name) const;
  // The header's bytes as written: 8-byte length, then the JSON padded with spaces to a
  // multiple of 8. Entries must be in data order with consecutive byte ranges from 0.
  std::string encode() const;
};

// A whole file in host memory.
class SafetensorsFile {
 public:
  static SafetensorsFile read(const std::string& path);

  const Tensor& tensor(const std::string& name) const;
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const std::string& metadata(const std::string& key) const;

 private:
  std::string path_;
  std::map<std::string, Tensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace tessel
