// Internal: the optimizers' update of one embedding row (TF's TPU embedding formulas; see
// optimization_parameters.h for the order of clipping, weight decay and the update) and their
// slots (TF's names and initial values).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/embedding/optimization_parameters.h"

namespace tessel::detail {

// Slot names of an optimizer (TF's): adagrad {accumulators}, adam {momenta, velocities},
// momentum {momenta}, rms_prop {ms, mom}, centered_rms_prop {ms, mom, mg},
// ftrl {accumulators, linears}, proximal_adagrad {accumulators}, adadelta {accumulators,
// updates}; sgd none.
std::vector<std::string> embedding_slot_names(EmbeddingOptimizer optimizer);
// The value every element of slot `name` starts at: initial_accumulator for the accumulators of
// Adagrad, FTRL and ProximalAdagrad; 0 otherwise.
float slot_initial_value(const OptimizationParameters& o, const std::string& name);

// Updates row `w` (cols floats) with its summed gradient `g` at the step's learning rate `lr`.
// slots[k]: the row's floats of slot k (embedding_slot_names order). `g` is clipped in place.
void update_row(const OptimizationParameters& o, float lr, float* w, float* const* slots, float* g,
                int64_t cols);

}  // namespace tessel::detail
