// Busy time per device (busy_time.h): one set of atomic counters per device address, found
// through a table under a lock, and cached per thread (a device's worker thread looks its
// counters up once).
#include "tessel/runtime/busy_time.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace tessel {
namespace {

struct Counters {
  std::atomic<int64_t> kernel_ns{0}, communication_ns{0}, kernels{0}, collectives{0};
};

struct Table {
  std::mutex mu;
  // Entries are never removed, so a pointer to one stays valid (a device destroyed and another
  // made at its address share counters: readers take differences).
  std::unordered_map<const Device*, std::unique_ptr<Counters>> counters;
};

Table& table() {
  static auto* t = new Table();  // never destroyed: device threads may count at exit
  return *t;
}

Counters& counters_of(const Device& device) {
  thread_local const Device* cached_device = nullptr;
  thread_local Counters* cached = nullptr;
  if (cached_device == &device) return *cached;
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  std::unique_ptr<Counters>& entry = t.counters[&device];
  if (!entry) entry = std::make_unique<Counters>();
  cached_device = &device;
  cached = entry.get();
  return *cached;
}

int64_t nanoseconds(std::chrono::steady_clock::duration time) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(time).count();
}

}  // namespace

BusyTime busy_time(const Device& device) {
  const Counters& c = counters_of(device);
  return {static_cast<double>(c.kernel_ns.load(std::memory_order_relaxed)) * 1e-9,
          static_cast<double>(c.communication_ns.load(std::memory_order_relaxed)) * 1e-9,
          c.kernels.load(std::memory_order_relaxed), c.collectives.load(std::memory_order_relaxed)};
}

namespace detail {

void add_kernel_time(const Device& device, std::chrono::steady_clock::duration time) {
  Counters& c = counters_of(device);
  c.kernel_ns.fetch_add(nanoseconds(time), std::memory_order_relaxed);
  c.kernels.fetch_add(1, std::memory_order_relaxed);
}

void add_communication_time(const Device& device, std::chrono::steady_clock::duration time) {
  Counters& c = counters_of(device);
  c.communication_ns.fetch_add(nanoseconds(time), std::memory_order_relaxed);
  c.collectives.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace detail
}  // namespace tessel
