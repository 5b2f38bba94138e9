// Where a device's memory goes while a language model (the GPT, the Llama) trains: its peak split into parameters, gradients,
// optimizer state and activations, and the activation count of Korthikanti et al. ("Reducing
// Activation Recomputation in Large Transformer Models") to compare with.
//
//   reset_memory_peaks(trainer);                 // after a warm-up step
//   trainer.step();
//   for (const DeviceMemory& d : memory_report(trainer)) ...
//   double k = korthikanti_activation_bytes(trainer.config(), 1, 1, false);
//
// The parameters, their gradients and AdamW's moments are what the device holds of each
// (gradients: as many bytes as the parameters, their layouts). Activations are the rest of the
// peak: what the step keeps for its backward pass and the temporaries alive at the peak
// (the measure: the peak less parameters, gradients and optimizer state). saved_bytes is
// the part the gradient tapes keep (tape_memory.h), the quantity Korthikanti et al. count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpt_config.h"
#include "language_model_trainer.h"

namespace tessel::gpt {

struct DeviceMemory {
  std::string device;
  int64_t peak_bytes = 0;  // memory_stats().peak_bytes since the last reset
  int64_t parameter_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t optimizer_bytes = 0;   // 0 before the first update
  int64_t activation_bytes = 0;  // peak - parameters - gradients - optimizer state (>= 0)
  int64_t saved_bytes = 0;       // the most the gradient tapes kept at once on the device
};

// Resets the peaks of the trainer's devices and of the tapes' counters.
void reset_memory_peaks(const LanguageModelTrainer& trainer);

// One entry per local device of the trainer's mesh, in the mesh's order.
std::vector<DeviceMemory> memory_report(const LanguageModelTrainer& trainer);

// Korthikanti et al.'s activation bytes of one training step of `config` per device, in fp32
// (twice their 16-bit count): n_layer * 2 * s*b*h * (10 + 24/t + 5*a*s/(h*t)) with s the context,
// b the batch per device (over `batch_shards`), h the width, a the heads and t = `model_shards`
// (tensor parallelism; 34 + 5*a*s/h without it), or n_layer * 2 * s*b*h/t * (34 + 5*a*s/h) with
// sequence parallelism.
double korthikanti_activation_bytes(const GptConfig& config, int64_t batch_shards,
                                    int64_t model_shards, bool sequence_parallel);

// The activation bytes a training step of `config` is planned to keep per device (memory_plan.h),
// in fp32: Korthikanti's count for the recomputation chosen (selective: without attention's
// 5*a*s/h part except for the one layer rebuilt at a time; full: each block's input plus one
// block; the fused attention: no 5*a*s/h part at all), plus the logits and their gradient.
int64_t planned_activation_bytes(const GptConfig& config, int64_t batch_shards,
                                 int64_t model_shards);

}  // namespace tessel::gpt
