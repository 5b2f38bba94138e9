// memory_report and Korthikanti's count (gpt_memory.h).
#include "gpt_memory.h"

#include <algorithm>
#include <map>

#include "tessel/dtensor/tape_memory.h"

namespace tessel::gpt {
namespace {

// Adds each local block's bytes of `tensors` to its device's entry of `bytes`.
void add_blocks(const std::vector<DTensor>& tensors, std::map<std::string, int64_t>& bytes) {
  for (const DTensor& t : tensors) {
    for (int i = 0; i < t.num_components(); ++i) {
      bytes[t.device(i).name()] += static_cast<int64_t>(t.component(i).nbytes());
    }
  }
}

}  // namespace

void reset_memory_peaks(const LanguageModelTrainer& trainer) {
  Runtime& rt = *trainer.language_model().runtime();
  for (const std::string& name : trainer.language_model().mesh().local_devices()) {
    rt.device(name).reset_peak_memory();
  }
  reset_tape_memory_peak();
}

std::vector<DeviceMemory> memory_report(const LanguageModelTrainer& trainer) {
  std::map<std::string, int64_t> params, moments, saved;
  add_blocks(trainer.params(), params);
  for (const auto& [slot, tensors] : trainer.optimizer().slots()) add_blocks(tensors, moments);
  for (const TapeMemoryStats& s : tape_memory_stats()) saved[s.device] = s.peak_bytes;
  Runtime& rt = *trainer.language_model().runtime();
  // The model's mesh's devices, then any other holding parameters (a pipeline's later stages).
  std::vector<std::string> devices = trainer.language_model().mesh().local_devices();
  for (const auto& [name, bytes] : params) {
    if (std::find(devices.begin(), devices.end(), name) == devices.end()) devices.push_back(name);
  }
  std::vector<DeviceMemory> out;
  for (const std::string& name : devices) {
    DeviceMemory d;
    d.device = name;
    d.peak_bytes = rt.device(name).memory_stats().peak_bytes;
    d.parameter_bytes = params[name];
    d.gradient_bytes = params[name];
    d.optimizer_bytes = moments[name];
    d.activation_bytes = std::max<int64_t>(
        0, d.peak_bytes - d.parameter_bytes - d.gradient_bytes - d.optimizer_bytes);
    d.saved_bytes = saved[name];
    out.push_back(std::move(d));
  }
  return out;
}

double korthikanti_activation_bytes(const GptConfig& config, int64_t batch_shards,
                                    int64_t model_shards, bool sequence_parallel) {
  const double s = config.block_size, h = config.n_embd, a = config.n_head;
  const double b = static_cast<double>(config.batch_size) / static_cast<double>(batch_shards);
  const double t = static_cast<double>(model_shards);
  const double attention = 5 * a * s / h;
  const double per_layer_16bit = sequence_parallel ? s * b * h / t * (34 + attention)
                                                   : s * b * h * (10 + 24 / t + attention / t);
  return config.n_layer * 2 * per_layer_16bit;
}

int64_t planned_activation_bytes(const GptConfig& config, int64_t batch_shards,
                                 int64_t model_shards) {
  const double s = config.block_size, h = config.n_embd, a = config.n_head;
  const double b = static_cast<double>(config.batch_size) / static_cast<double>(batch_shards);
  const double t = static_cast<double>(model_shards);
  const double kept = s * b * h * (10 + 24 / t);  // a layer's count without attention's part
  // The [B, H, T, T] maps; the fused attention keeps none (its operands and output are views
  // of tensors kept anyway).
  const double attention =
      config.attention == Attention::kFused ? 0.0 : s * b * h * 5 * a * s / (h * t);
  double per_step = 0;  // 16-bit bytes
  switch (config.recompute) {
    case Recompute::kNone:
      per_step = config.n_layer * (kept + attention);
      break;
    case Recompute::kSelective:
      per_step = config.n_layer * kept + attention;  // one layer's scores rebuilt at a time
      break;
    case Recompute::kFull:  // each block's input, and one block rebuilt at a time
      per_step = config.n_layer * s * b * h + kept + attention;
      break;
  }
  const double logits = 2 * s * b * config.vocab_size / t * 2;  // logits and their gradient
  return static_cast<int64_t>(2 * (per_step + logits));
}

}  // namespace tessel::gpt
