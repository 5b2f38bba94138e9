#include "llama_config.h"

#include <fmt/format.h>

#include "tessel/core/error.h"

namespace tessel::llama {
namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, "llama", message);
}

}  // namespace

LlamaConfig LlamaConfig::preset(const std::string& name) {
  LlamaConfig c;
  if (name == "tiny") return c;
  if (name == "test") {
    c.n_layer = 2;
    c.n_head = 4;
    c.n_kv_head = 2;
    c.n_embd = 32;
    c.ffn_hidden = 96;
    c.block_size = 16;
    c.batch_size = 4;
    c.tie_embeddings = false;
    return c;
  }
  invalid("unknown configuration '" + name + "': one of tiny, test");
}

int64_t LlamaConfig::num_parameters() const {
  const int64_t c = n_embd, d = head_dim(), f = ffn_hidden;
  const int64_t attention = 2 * c * n_head * d + 2 * c * n_kv_head * d;  // wq, wo; wk, wv
  const int64_t per_layer = attention + 3 * c * f + 2 * c;               // w1, w2, w3; 2 norms
  const int64_t tables = (tie_embeddings ? 1 : 2) * static_cast<int64_t>(vocab_size) * c;
  return tables + n_layer * per_layer + c;
}

void LlamaConfig::validate() const {
  const auto positive = [](int v, const char* field) {
    if (v <= 0) invalid(fmt::format("{} must be positive, got {}", field, v));
  };
  positive(n_layer, "n_layer");
  positive(n_head, "n_head");
  positive(n_kv_head, "n_kv_head");
  positive(n_embd, "n_embd");
  positive(ffn_hidden, "ffn_hidden");
  positive(block_size, "block_size");
  positive(vocab_size, "vocab_size");
  positive(batch_size, "batch_size");
  if (n_embd % n_head != 0) {
    invalid(fmt::format("n_embd {} is not a multiple of n_head {}", n_embd, n_head));
  }
  if (n_head % n_kv_head != 0) {
    invalid(fmt::format("n_head {} is not a multiple of n_kv_head {}", n_head, n_kv_head));
  }
  if (head_dim() % 2 != 0) {
    invalid(
        fmt::format("head_dim {} (n_embd / n_head) must be even: rotary embeddings turn "
                    "pairs",
                    head_dim()));
  }
  if (!(rope_theta > 0)) invalid(fmt::format("rope_theta must be > 0, got {}", rope_theta));
  if (!(norm_eps > 0)) invalid(fmt::format("norm_eps must be > 0, got {}", norm_eps));
}

}  // namespace tessel::llama
