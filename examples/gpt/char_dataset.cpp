#include "char_dataset.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "tessel/core/error.h"

namespace tessel::gpt {
namespace {

// splitmix64's output function: a well-mixed 64-bit hash of the counter.
uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

CharDataset CharDataset::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::kNotFound, "CharDataset", "cannot open '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return CharDataset(text.str());
}

CharDataset::CharDataset(const std::string& text) {
  std::array<bool, 256> seen{};
  for (unsigned char c : text) seen[c] = true;
  for (int c = 0; c < 256; ++c) {
    if (seen[static_cast<size_t>(c)]) chars_.push_back(static_cast<char>(c));
  }
  if (chars_.size() < 2) {
    throw Error(ErrorCode::kInvalidArgument, "CharDataset",
                fmt::format("the text has {} distinct characters; at least 2 are needed",
                            chars_.size()));
  }
  ids_ = encode(text);
  train_size_ = static_cast<int64_t>(static_cast<double>(ids_.size()) * 0.9);
}

int64_t CharDataset::size(Split split) const {
  return split == Split::kTrain ? train_size_ : static_cast<int64_t>(ids_.size()) - train_size_;
}

std::vector<int32_t> CharDataset::encode(const std::string& text) const {
  std::array<int32_t, 256> id;
  id.fill(-1);
  for (size_t i = 0; i < chars_.size(); ++i) id[static_cast<unsigned char>(chars_[i])] = static_cast<int32_t>(i);
  std::vector<int32_t> out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (id[c] < 0) {
      throw Error(ErrorCode::kInvalidArgument, "CharDataset",
                  fmt::format("character {} is not in the vocabulary", static_cast<int>(c)));
    }
    out.push_back(id[c]);
  }
  return out;
}

std::string CharDataset::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t i : ids) {
    if (i < 0 || i >= vocab_size()) {
      throw Error(ErrorCode::kInvalidArgument, "CharDataset",
                  fmt::format("id {} is outside the vocabulary of {}", i, vocab_size()));
    }
    out.push_back(chars_[static_cast<size_t>(i)]);
  }
  return out;
}

std::pair<Tensor, Tensor> CharDataset::batch(Split split, int64_t step, int batch, int block,
                                             uint64_t seed) const {
  const int64_t n = size(split);
  const int64_t first = split == Split::kTrain ? 0 : train_size_;
  if (batch <= 0 || block <= 0 || n < block + 1) {
    throw Error(ErrorCode::kInvalidArgument, "CharDataset",
                fmt::format("a batch of {} x {} needs block + 1 characters; the split has {}",
                            batch, block, n));
  }
  Tensor idx = Tensor::zeros(Shape{batch, block}, DType::kI32);
  Tensor targets = Tensor::zeros(Shape{batch, block}, DType::kI32);
  int32_t* x = idx.data<int32_t>();
  int32_t* y = targets.data<int32_t>();
  const uint64_t stream = mix64(seed ^ mix64(split == Split::kTrain ? 1 : 2));
  for (int r = 0; r < batch; ++r) {
    const uint64_t key = mix64(stream ^ mix64(static_cast<uint64_t>(step) * 1000003 + r));
    const int64_t start = first + static_cast<int64_t>(key % static_cast<uint64_t>(n - block));
    for (int t = 0; t < block; ++t) {
      x[r * block + t] = ids_[static_cast<size_t>(start + t)];
      y[r * block + t] = ids_[static_cast<size_t>(start + t + 1)];
    }
  }
  return {idx, targets};
}

}  // namespace tessel::gpt
