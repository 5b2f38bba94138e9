// What gradient tapes keep for their backward passes (activation memory), per device.
//
//   reset_tape_memory_peak();
//   auto [loss, grads] = value_and_grad(model, params);
//   for (const TapeMemoryStats& s : tape_memory_stats())
//     fmt::print("{}: {} bytes kept at most\n", s.device, s.peak_bytes);
//
// A tape keeps, per record, what the op's VJP reads (OpDef::saves, OpDef::save); these counters
// add up the device memory of those tensors, each storage once however many records and tapes
// hold it (a reshape's output and its input share one), and not the tensors a tape was told to
// watch (parameters are not activations). A record's tensors stop counting when the tape lets
// the record go (right after its VJP on a non-persistent tape; when the tape dies otherwise):
// whatever else still holds them, from then on they are not the tape's. This is the part of a
// training step's memory that Korthikanti et al. count as activations; a device's memory_stats()
// holds it together with parameters, gradients, optimizer state and temporaries.
//
// Thread safety: any thread; the counters are process-wide, keyed by device name (devices of
// several runtimes with one name share a line).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessel {

struct TapeMemoryStats {
  std::string device;      // Device::name()
  int64_t live_bytes = 0;  // kept now
  int64_t peak_bytes = 0;  // the most kept at once since the process began or the last reset
};

// Every device tapes have kept something on, by name.
std::vector<TapeMemoryStats> tape_memory_stats();
// Sets each device's peak_bytes to its live_bytes.
void reset_tape_memory_peak();

}  // namespace tessel
