// The counters of tape_memory.h: a table of the storages tapes hold (tape_memory_counter.h).
#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>

#include "dtensor/framework/tape_memory_counter.h"
#include "tessel/dtensor/tape_memory.h"

namespace tessel {
namespace {

struct Held {
  std::string device;
  int64_t bytes = 0;  // the largest view of the storage a tape holds
  int64_t holders = 0;
};

struct Counters {
  std::mutex mu;
  std::unordered_map<const void*, Held> storages;  // by the storage's first byte
  std::map<std::string, TapeMemoryStats> devices;
};

Counters& counters() {
  static Counters* c = new Counters();  // never destroyed: tapes may die during exit
  return *c;
}

// Where component `t`'s storage begins: one key for every view of it.
const void* storage_key(const Tensor& t) {
  return static_cast<const char*>(t.data_ptr()) -
         t.storage_offset() * static_cast<int64_t>(dtype_size(t.dtype()));
}

// Calls f(key, device name, bytes) for each component of `t` that holds memory; bytes: the
// storage up to the view's end (a slice view at an offset keeps the storage before it alive too).
template <typename F>
void for_each_block(const DTensor& t, const F& f) {
  if (!t.defined() || t.is_abstract()) return;
  for (int i = 0; i < t.num_components(); ++i) {
    const Tensor& block = t.component(i);
    if (!block.defined() || block.nbytes() == 0) continue;
    const int64_t before = block.storage_offset() * static_cast<int64_t>(dtype_size(block.dtype()));
    f(storage_key(block), t.device(i).name(), before + static_cast<int64_t>(block.nbytes()));
  }
}

}  // namespace

namespace detail {

void tape_memory_keep(const DTensor& tensor) {
  Counters& c = counters();
  std::lock_guard<std::mutex> lock(c.mu);
  for_each_block(tensor, [&](const void* key, const std::string& device, int64_t bytes) {
    Held& held = c.storages[key];
    ++held.holders;
    if (held.device.empty()) held.device = device;
    const int64_t more = std::max<int64_t>(0, bytes - held.bytes);
    if (more == 0) return;
    held.bytes += more;
    TapeMemoryStats& s = c.devices[held.device];
    s.device = held.device;
    s.live_bytes += more;
    s.peak_bytes = std::max(s.peak_bytes, s.live_bytes);
  });
}

void tape_memory_release(const DTensor& tensor) {
  Counters& c = counters();
  std::lock_guard<std::mutex> lock(c.mu);
  for_each_block(tensor, [&](const void* key, const std::string&, int64_t) {
    auto it = c.storages.find(key);
    if (it == c.storages.end() || --it->second.holders > 0) return;
    c.devices[it->second.device].live_bytes -= it->second.bytes;
    c.storages.erase(it);
  });
}

}  // namespace detail

std::vector<TapeMemoryStats> tape_memory_stats() {
  Counters& c = counters();
  std::lock_guard<std::mutex> lock(c.mu);
  std::vector<TapeMemoryStats> out;
  for (const auto& [name, s] : c.devices) out.push_back(s);
  return out;
}

void reset_tape_memory_peak() {
  Counters& c = counters();
  std::lock_guard<std::mutex> lock(c.mu);
  for (auto& [name, s] : c.devices) s.peak_bytes = s.live_bytes;
}

}  // namespace tessel
