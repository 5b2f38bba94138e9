// Internal: the names of the cross-entropy ops, in one place for the three files that register
// them or their kernels: ops_nn.cpp (the op on whole rows of classes and its gradient),
// ops_parallel_xent.cpp (the stages of the vocabulary-parallel one) and cuda/gpu_xent.cpp (the
// GPU kernels of both).
#pragma once

#include <string_view>

namespace tessel::detail {

constexpr std::string_view kXent = "sparse_softmax_cross_entropy_with_logits";
constexpr std::string_view kXentGrad = "sparse_softmax_cross_entropy_grad";
// The vocabulary-parallel stages. The last one carries the public op's name, so that a kernel
// error (a bad label) names the op the user called.
constexpr std::string_view kXentParts = "xent_parts";
constexpr std::string_view kXentPartsGrad = "xent_parts_grad";
constexpr std::string_view kXentFinish = "sparse_softmax_cross_entropy_with_logits.vocab_parallel";
constexpr std::string_view kXentFinishGrad = "xent_finish_grad";

}  // namespace tessel::detail
