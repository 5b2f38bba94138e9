// The memory plan of a training step (memory_plan.h).
#include "memory_plan.h"

#include <fmt/format.h>

#include <cctype>
#include <map>

#include "tessel/core/error.h"

namespace tessel::gpt {
namespace {

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// "h.3.attn.wq" -> "h.3", "layers.0.attention.wq" -> "layers.0", "wte" -> "wte".
std::string layer_of(const std::string& name) {
  const size_t first = name.find('.');
  if (first == std::string::npos) return name;
  const size_t second = name.find('.', first + 1);
  if (second == std::string::npos || second == first + 1) return name;
  for (size_t i = first + 1; i < second; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return name;
  }
  return name.substr(0, second);
}

// The bytes of parameter `p`'s block on the device at mesh offset `offset` under `layout`.
int64_t block_bytes(const LanguageModel& model, size_t p, const Layout& layout, int64_t offset) {
  const Shape local = layout.local_shape(model.shapes()[p], offset);
  return local.num_elements() * 4;  // parameters are f32 (GptConfig::dtype casts activations)
}

}  // namespace

std::vector<DeviceMemoryPlan> plan_memory(const LanguageModel& model, int64_t activation_bytes,
                                          bool keeps_gathered) {
  const Mesh& mesh = model.mesh();
  Runtime& runtime = model.runtime() ? *model.runtime() : Runtime::global();
  std::vector<DeviceMemoryPlan> plan;
  const std::vector<int64_t>& ids = mesh.local_device_ids();
  for (size_t d = 0; d < ids.size(); ++d) {
    const int64_t offset = ids[d];
    DeviceMemoryPlan entry;
    entry.device = mesh.local_devices()[d];
    entry.limit_bytes = runtime.device(entry.device).memory_limit();
    std::map<std::string, int64_t> gathered;  // layer -> its compute blocks' bytes
    for (size_t p = 0; p < model.names().size(); ++p) {
      entry.parameter_bytes += block_bytes(model, p, model.layouts()[p], offset);
      if (model.fsdp()) {
        gathered[layer_of(model.names()[p])] +=
            block_bytes(model, p, model.compute_layouts()[p], offset);
      }
    }
    entry.gradient_bytes = entry.parameter_bytes;
    entry.optimizer_bytes = 2 * entry.parameter_bytes;
    for (const auto& [layer, bytes] : gathered) {
      if (bytes > entry.largest_layer_bytes) {
        entry.largest_layer = layer;
        entry.largest_layer_bytes = bytes;
      }
      if (keeps_gathered) entry.gathered_bytes += bytes;
    }
    if (!keeps_gathered) entry.gathered_bytes = entry.largest_layer_bytes;
    entry.activation_bytes = activation_bytes;
    plan.push_back(std::move(entry));
  }
  return plan;
}

void check_memory_plan(const std::vector<DeviceMemoryPlan>& plan, const std::string& component) {
  for (const DeviceMemoryPlan& d : plan) {
    const int64_t floor = d.state_bytes() + d.largest_layer_bytes;
    if (floor > d.limit_bytes) {
      throw Error(
          ErrorCode::kResourceExhausted, component,
          fmt::format(
              "the training state does not fit on {}: parameters, gradients and AdamW's "
              "moments take {:.1f} MiB{} there, more than its memory limit of {:.1f} MiB "
              "({} bytes); shard more (--fsdp, a larger batch or model dimension) or "
              "raise the limit",
              d.device, mib(d.state_bytes()),
              d.largest_layer.empty()
                  ? std::string()
                  : fmt::format(" and layer '{}' gathered {:.1f} MiB ({} bytes)", d.largest_layer,
                                mib(d.largest_layer_bytes), d.largest_layer_bytes),
              mib(d.limit_bytes), d.limit_bytes));
    }
  }
}

std::string format_memory_plan(const std::vector<DeviceMemoryPlan>& plan) {
  std::string out =
      fmt::format("{:<44} {:>9} {:>9} {:>9} {:>9} {:>11} {:>9} {:>9}\n", "memory plan (MiB)",
                  "params", "grads", "AdamW", "gathered", "activations", "peak", "limit");
  for (const DeviceMemoryPlan& d : plan) {
    out += fmt::format("{:<44} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>11.1f} {:>9.1f} {:>9.1f}{}\n",
                       d.device, mib(d.parameter_bytes), mib(d.gradient_bytes),
                       mib(d.optimizer_bytes), mib(d.gathered_bytes), mib(d.activation_bytes),
                       mib(d.peak_bytes()), mib(d.limit_bytes),
                       d.peak_bytes() > d.limit_bytes ? "  over the limit (estimate)" : "");
  }
  return out;
}

}  // namespace tessel::gpt
