// Internal: the built-in op families, each registered by one explicit function (one file each).
#pragma once

#include <cstddef>
#include <string>

#include "tessel/dtensor/op_registry.h"

namespace tessel::detail {

void register_elementwise_ops(OpRegistry& registry);  // ops_elementwise.cpp
void register_matmul_ops(OpRegistry& registry);       // ops_matmul.cpp
void register_reduction_ops(OpRegistry& registry);    // ops_reduction.cpp
void register_nn_ops(OpRegistry& registry);           // ops_nn.cpp
void register_shape_ops(OpRegistry& registry);        // ops_shape.cpp
void register_indexing_ops(OpRegistry& registry);     // ops_indexing.cpp
void register_creation_ops(OpRegistry& registry);     // ops_creation.cpp
void register_optimizer_ops(OpRegistry& registry);    // ops_optimizer.cpp
void register_norm_ops(OpRegistry& registry);         // ops_norm.cpp
void register_attention_ops(OpRegistry& registry);    // ops_attention.cpp
void register_fused_attention_ops(OpRegistry& registry);  // ops_fused_attention.cpp
void register_dropout_ops(OpRegistry& registry);      // ops_dropout.cpp
void register_parallel_xent_ops(OpRegistry& registry);  // ops_parallel_xent.cpp
void register_sampling_ops(OpRegistry& registry);     // ops_sampling.cpp
void register_gather_ops(OpRegistry& registry);       // ops_gather.cpp
void register_structural_ops(OpRegistry& registry);   // ops_structural.cpp
void register_conv_ops(OpRegistry& registry);         // ops_conv.cpp
void register_pool_ops(OpRegistry& registry);         // ops_pool.cpp

// concat's ops of fixed arity, "concat2" .. "concat8" (OpDef has a fixed arity; ops_shape.cpp):
// the most inputs one of them takes, and the name of the one that takes `arity`.
constexpr int kMaxConcatArity = 8;
std::string concat_name(size_t arity);

// GPU kernels of the built-in ops (OpDef::gpu_kernel): src/dtensor/cuda/ with the CUDA backend,
// else gpu_kernels_stub.cpp, which registers none.
void register_gpu_kernels(OpRegistry& registry);

// The cross-entropy of logits whose class axis is sharded, without gathering them
// (ops_parallel_xent.cpp; sparse_softmax_cross_entropy_with_logits calls it).
DTensor vocab_parallel_cross_entropy(const DTensor& labels, const DTensor& logits);

inline void register_builtin_ops(OpRegistry& registry) {
  register_elementwise_ops(registry);
  register_matmul_ops(registry);
  register_reduction_ops(registry);
  register_nn_ops(registry);
  register_shape_ops(registry);
  register_indexing_ops(registry);
  register_creation_ops(registry);
  register_optimizer_ops(registry);
  register_norm_ops(registry);
  register_attention_ops(registry);
  register_fused_attention_ops(registry);
  register_dropout_ops(registry);
  register_parallel_xent_ops(registry);
  register_sampling_ops(registry);
  register_gather_ops(registry);
  register_structural_ops(registry);
  register_conv_ops(registry);
  register_pool_ops(registry);
}

}  // namespace tessel::detail
