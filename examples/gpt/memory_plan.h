// The memory a training step will take on each local device, planned from the parameters'
// layouts before anything is allocated (`tessel train gpt|llama --memory-plan`), and the check
// that refuses a device memory limit the step cannot fit under before training starts.
//
//   GptModel model(vocab, mesh, ...);                  // registers layouts, allocates nothing
//   auto plan = plan_memory(model, activation_bytes);  // one entry per local device
//   check_memory_plan(plan, "gpt");                    // kResourceExhausted: cannot fit
//
// Per device: the stored blocks of the parameters, as many bytes of gradients, AdamW's two
// moments, and, with fsdp, the parameters gathered into their compute layouts (one layer at a
// time under full recomputation, every layer otherwise: the tape keeps them); the
// activations are the caller's estimate (korthikanti_activation_bytes for the GPT, gpt_memory.h).
// A layer is the parameters whose names share the prefix "<stack>.<index>." ("h.3.", "layers.0.");
// any other parameter is a layer of its own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "language_model.h"

namespace tessel::gpt {

struct DeviceMemoryPlan {
  std::string device;
  int64_t limit_bytes = 0;  // the device's memory limit (Device::memory_limit)
  int64_t parameter_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t optimizer_bytes = 0;  // AdamW's m and v
  // fsdp: the largest layer's parameters in their compute layouts on this device (0 without).
  std::string largest_layer;
  int64_t largest_layer_bytes = 0;
  // fsdp: the gathered parameters alive at once: the largest layer, or every layer where the
  // gradient tape keeps them to the backward pass (no full recomputation; docs/memory.md).
  int64_t gathered_bytes = 0;
  int64_t activation_bytes = 0;  // the caller's estimate for one step

  int64_t state_bytes() const { return parameter_bytes + gradient_bytes + optimizer_bytes; }
  int64_t peak_bytes() const { return state_bytes() + gathered_bytes + activation_bytes; }
};

// One entry per local device of model.mesh(), in the mesh's order. keeps_gathered: the step
// keeps every gathered parameter to the backward pass (fsdp without full recomputation).
std::vector<DeviceMemoryPlan> plan_memory(const LanguageModel& model, int64_t activation_bytes,
                                          bool keeps_gathered = false);

// kResourceExhausted from `component` when a device cannot hold the training state with one
// layer gathered (naming the device, the layer, its bytes, the state's and the limit): a step
// could never fit. The activations are an estimate and are not checked here (see
// format_memory_plan).
void check_memory_plan(const std::vector<DeviceMemoryPlan>& plan, const std::string& component);

// A table of the plan, one line per device, in MiB; a device whose planned peak passes its limit
// is marked so (the activations being an estimate, the run may still fit).
std::string format_memory_plan(const std::vector<DeviceMemoryPlan>& plan);

}  // namespace tessel::gpt
