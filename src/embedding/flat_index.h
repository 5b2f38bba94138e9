// Internal: an open-addressing hash index from 64-bit keys to dense indices 0, 1, 2, ... in
// insertion order (the distinct rows of a lookup). One flat array, linear probing, no node per
// entry: a lookup of 100k ids costs no allocation once the index has grown, and clear() keeps
// the capacity for the next step.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace tessel::detail {

class FlatIndex {
 public:
  // Forgets every key; makes room for `expected` keys without growing.
  void clear(std::size_t expected) {
    std::size_t capacity = 16;
    while (capacity < 2 * expected) capacity *= 2;
    if (slots_.size() < capacity) slots_.resize(capacity);
    std::fill(slots_.begin(), slots_.end(), Slot{});
    mask_ = slots_.size() - 1;
    size_ = 0;
  }
  // The index of `key`, and whether it was inserted now (it gets the next index, size()).
  std::pair<int64_t, bool> insert(uint64_t key) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    for (std::size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.index < 0) {
        s = {key, static_cast<int64_t>(size_++)};
        return {s.index, true};
      }
      if (s.key == key) return {s.index, false};
    }
  }
  std::size_t size() const { return size_; }
  // Asks for the slot where `key` starts its probe (call a few keys ahead of insert).
  void prefetch(uint64_t key) const { __builtin_prefetch(slots_.data() + (hash(key) & mask_)); }

 private:
  struct Slot {
    uint64_t key = 0;
    int64_t index = -1;  // -1: empty
  };
  static std::size_t hash(uint64_t key) {  // splitmix64's finalizer: spreads neighbouring ids
    key = (key ^ (key >> 30)) * 0xBF58476D1CE4E5B9ull;
    key = (key ^ (key >> 27)) * 0x94D049BB133111EBull;
    return static_cast<std::size_t>(key ^ (key >> 31));
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 16 : 2 * old.size(), Slot{});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.index < 0) continue;
      std::size_t i = hash(s.key) & mask_;
      while (slots_[i].index >= 0) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

}  // namespace tessel::detail
