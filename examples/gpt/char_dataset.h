// Tiny Shakespeare at the character level, as nanoGPT's data/shakespeare_char/prepare.py makes it:
// the vocabulary is the sorted set of the text's characters, the first 90 % trains and the last
// 10 % validates. A batch is B random windows of T + 1 characters (inputs and the next
// characters as targets); window r of step s starts at an offset keyed by (seed, split, s, r)
// alone, so every mesh shape and process count trains on the same batches.
//
//   CharDataset data = CharDataset::load("data/shakespeare_char/input.txt");
//   auto [idx, targets] = data.batch(Split::kTrain, /*step=*/0, /*batch=*/12, /*block=*/64, seed);
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tessel/core/tensor.h"

namespace tessel::gpt {

enum class Split { kTrain, kVal };

class CharDataset {
 public:
  // Reads the text (kNotFound naming the path when it cannot be opened; kInvalidArgument when
  // it has fewer than 2 distinct characters).
  static CharDataset load(const std::string& path);
  explicit CharDataset(const std::string& text);

  int vocab_size() const { return static_cast<int>(chars_.size()); }
  const std::string& chars() const { return chars_; }
  int64_t size(Split split) const;
  std::vector<int32_t> encode(const std::string& text) const;  // unknown chars: kInvalidArgument
  std::string decode(const std::vector<int32_t>& ids) const;

  // [batch, block] i32 inputs and targets (host tensors). The split must hold block + 1
  // characters (kInvalidArgument otherwise).
  std::pair<Tensor, Tensor> batch(Split split, int64_t step, int batch, int block,
                                  uint64_t seed) const;

 private:
  std::string chars_;            // sorted distinct characters
  std::vector<int32_t> ids_;     // the whole text encoded
  int64_t train_size_ = 0;       // first 90 %
};

}  // namespace tessel::gpt
