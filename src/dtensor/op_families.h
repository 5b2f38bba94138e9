// Internal: the built-in op families, each registered by one explicit function (one file each).
#pragma once

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

inline void register_builtin_ops(OpRegistry& registry) {
  register_elementwise_ops(registry);
  register_matmul_ops(registry);
  register_reduction_ops(registry);
  register_nn_ops(registry);
  register_shape_ops(registry);
  register_indexing_ops(registry);
  register_creation_ops(registry);
  register_optimizer_ops(registry);
}

}  // namespace tessel::detail
