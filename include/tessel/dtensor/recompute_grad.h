// Recomputation (activation checkpointing): TF's tf.recompute_grad, JAX's jax.checkpoint
// (jax.remat), PyTorch's torch.utils.checkpoint.
//
//   const auto block = recompute_grad([&](const std::vector<DTensor>& in) {
//     return mlp(in[0], in[1], in[2]);                 // x, w1, w2
//   });
//   DTensor y = block({x, w1, w2});                    // under a GradientTape
//
// The function returned runs `fn` without recording it: a gradient tape keeps only the inputs
// (one record, in place of every op `fn` calls), so the memory of fn's intermediate values is
// free as soon as the forward pass has used them. In the backward pass, that record's VJP runs
// `fn` again on the same inputs under a tape of its own and differentiates it with the gradient
// of its output; the gradients it returns keep their Partial terms pending, reduced with the
// rest at the end of the outer gradient(), so a run with recomputation gives bit for bit the
// losses and gradients of the run without (fn's ops are deterministic, dropout masks are keyed
// by seed and element index). Without a tape recording on the thread it just calls fn.
//
// fn must be a function of its inputs: every tensor it reads that a tape watches (or computed
// from what a tape watches) must be one of them, else the call is kInvalidArgument naming the
// tensor (its gradient would be lost). Tensors the tapes do not watch (constants, token ids) may
// be captured. fn runs twice, so what it captures must live until the backward pass. A null fn:
// kInvalidArgument; fn returning a null DTensor: kInvalidArgument.
//
// Nesting works (recompute_grad inside fn), and so do higher-order gradients (an outer tape
// records the recomputation like any VJP's ops).
#pragma once

#include <functional>
#include <vector>

#include "tessel/dtensor/dtensor.h"

namespace tessel {

using DTensorFunction = std::function<DTensor(const std::vector<DTensor>&)>;

DTensorFunction recompute_grad(DTensorFunction fn);

}  // namespace tessel
