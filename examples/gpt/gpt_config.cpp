#include "gpt_config.h"

#include <cstdlib>

#include "tessel/core/error.h"
#include "tessel/dtensor/op_registry.h"

namespace tessel::gpt {

Recompute parse_recompute(std::string_view name) {
  if (name == "none") return Recompute::kNone;
  if (name == "selective") return Recompute::kSelective;
  if (name == "full") return Recompute::kFull;
  throw Error(ErrorCode::kInvalidArgument, "gpt",
              "unknown recomputation '" + std::string(name) + "': one of none, selective, full");
}

std::string_view recompute_name(Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "none";
}

Attention parse_attention(std::string_view name) {
  if (name == "fused") return Attention::kFused;
  if (name == "composed") return Attention::kComposed;
  throw Error(ErrorCode::kInvalidArgument, "gpt",
              "unknown attention '" + std::string(name) + "': one of fused, composed");
}

std::string_view attention_name(Attention attention) {
  return attention == Attention::kFused ? "fused" : "composed";
}

bool gpu_fused_attention_enabled() {
  const char* v = std::getenv("TESSEL_GPU_FUSED_ATTENTION");
  if (v == nullptr || std::string_view(v).empty() || std::string_view(v) == "0") return false;
  if (std::string_view(v) == "1") return true;
  throw Error(ErrorCode::kInvalidArgument, "gpt",
              "TESSEL_GPU_FUSED_ATTENTION='" + std::string(v) + "' is not 0 or 1");
}

Attention attention_on(Attention requested, std::string_view device_type) {
  const bool opted_in = gpu_fused_attention_enabled();  // a bad value is refused on every build
  if (device_type == "GPU" && !(opted_in && has_gpu_kernel("causal_attention"))) {
    return Attention::kComposed;
  }
  return requested;
}

DType parse_matmul_dtype(std::string_view name) {
  if (name == "f32") return DType::kF32;
  if (name == "bf16") return DType::kBF16;
  if (name == "f16") return DType::kF16;
  throw Error(ErrorCode::kInvalidArgument, "gpt",
              "unknown matmul dtype '" + std::string(name) + "': one of f32, bf16, f16");
}

void set_matmul_dtype(train::TrainingConfig& c, std::string_view name) {
  c.dtype = parse_matmul_dtype(name);
  c.loss_scale = c.dtype == DType::kF16 ? 65536 : 0;
}

GptConfig GptConfig::preset(const std::string& name) {
  GptConfig c;
  if (name == "tiny") return c;
  if (name == "baby") {
    c.n_layer = 6;
    c.n_head = 6;
    c.n_embd = 384;
    c.block_size = 256;
    c.dropout = 0.2;
    c.batch_size = 64;
    c.max_iters = 5000;
    c.lr_decay_iters = 5000;
    c.eval_interval = 250;
    c.eval_iters = 200;
    return c;
  }
  if (name == "gpt2") {  // GPT-2 small's shape on the character set, context 256
    c.n_layer = 12;
    c.n_head = 12;
    c.n_embd = 768;
    c.block_size = 256;
    c.batch_size = 8;
    c.learning_rate = 6e-4;
    c.min_lr = 6e-5;
    c.beta2 = 0.95;
    c.max_iters = 5000;
    c.lr_decay_iters = 5000;
    c.eval_interval = 250;
    c.eval_iters = 20;
    return c;
  }
  if (name == "test") {
    c.n_layer = 2;
    c.n_head = 4;
    c.n_embd = 32;
    c.block_size = 16;
    c.batch_size = 4;
    return c;
  }
  throw Error(ErrorCode::kInvalidArgument, "gpt",
              "unknown configuration '" + name + "': one of tiny, baby, gpt2, test");
}

int64_t GptConfig::num_parameters() const {
  const int64_t c = n_embd;
  const int64_t per_layer = 12 * c * c + 2 * c;  // q, k, v, proj (4 C^2), MLP (8 C^2), 2 norms
  return static_cast<int64_t>(vocab_size) * c + n_layer * per_layer + c;
}

double GptConfig::flops_per_token() const {
  const double n = static_cast<double>(num_parameters()) + static_cast<double>(block_size) * n_embd;
  return 6 * n + 12.0 * n_layer * n_head * head_dim() * block_size;
}

void GptConfig::validate() const {
  const auto positive = [](int v, const char* name) {
    if (v <= 0) {
      throw Error(ErrorCode::kInvalidArgument, "gpt",
                  std::string(name) + " must be positive, got " + std::to_string(v));
    }
  };
  positive(n_layer, "n_layer");
  positive(n_head, "n_head");
  positive(n_embd, "n_embd");
  positive(block_size, "block_size");
  positive(vocab_size, "vocab_size");
  positive(batch_size, "batch_size");
  if (n_embd % n_head != 0) {
    throw Error(ErrorCode::kInvalidArgument, "gpt",
                "n_embd " + std::to_string(n_embd) + " is not a multiple of n_head " +
                    std::to_string(n_head));
  }
  if (!(dropout >= 0 && dropout < 1)) {
    throw Error(ErrorCode::kInvalidArgument, "gpt",
                "dropout must be in [0, 1), got " + std::to_string(dropout));
  }
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    throw Error(ErrorCode::kInvalidArgument, "gpt",
                "dtype must be f32, bf16 or f16, got " + std::string(dtype_name(dtype)));
  }
}

}  // namespace tessel::gpt
