// Internal: the sharding rule of a two-operand einsum (ops_matmul.cpp's header comment has it),
// for ops whose sharding is an einsum's over the dims they name with letters: the convolutions
// of ops_conv.cpp are bilinear and contract their channels as an einsum does.
#pragma once

#include <string>

#include "tessel/dtensor/op_registry.h"

namespace tessel::detail {

// The einsum rule for operands a and b whose dims carry the letters a_letters and b_letters (one
// each, none repeated within an operand) and an output with out_letters (each in a or b).
ShardingDecision einsum_sharding(const std::string& a_letters, const std::string& b_letters,
                                 const std::string& out_letters, const TensorSpec& a,
                                 const TensorSpec& b);

}  // namespace tessel::detail
