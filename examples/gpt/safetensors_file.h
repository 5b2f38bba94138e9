// Reads a safetensors file (the format of Hugging Face's safetensors: an 8-byte little-endian
// header length, a JSON header naming each tensor's dtype, shape and byte range, then the raw
// little-endian data) into host Tensors. Enough for the GPT reference dump; F64, F32, I64 and
// I32 only.
//
//   SafetensorsFile f = SafetensorsFile::read("gpt_small_reference.safetensors");
//   Tensor logits = f.tensor("logits");
//   std::string config = f.metadata("config");
//
// Errors name the file: a missing file (kNotFound), a header or data range that does not fit the
// file, an unknown dtype, a shape whose size disagrees with its byte range (kInvalidArgument),
// an unknown tensor or metadata key (kNotFound).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tessel/core/tensor.h"

namespace tessel::gpt {

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

}  // namespace tessel::gpt
