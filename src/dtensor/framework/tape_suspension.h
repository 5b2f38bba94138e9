// Internal: suspending the gradient tapes of this thread (implemented in autodiff.cpp).
//
// While a TapeSuspension lives, the tapes recording on its thread when it was made record
// nothing. Two uses:
// - recompute_grad's forward pass (checked): the function's calls are not recorded, but each is
//   checked: an input that is neither one of the function's inputs nor made inside it, and that
//   a suspended tape watches (or computed from what it watches), is kInvalidArgument naming it
//   (its gradient would be lost: the backward pass differentiates the function's inputs only).
// - an OpDef::save computing what a VJP will read (unchecked): those ops are no part of the
//   computation being differentiated.
// Suspensions nest; the innermost one decides. Tapes made while one lives record as usual.
#pragma once

#include <cstdint>
#include <unordered_set>
#include <vector>

#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor.h"

namespace tessel::detail {

class TapeSuspension {
 public:
  // `function_inputs` non-null: checked, for recompute_grad's function of those inputs.
  explicit TapeSuspension(const std::vector<DTensor>* function_inputs = nullptr);
  ~TapeSuspension();
  TapeSuspension(const TapeSuspension&) = delete;
  TapeSuspension& operator=(const TapeSuspension&) = delete;

  // Whether a tape was recording on this thread when the suspension began.
  bool suspends_any() const { return !tapes_.empty(); }

 private:
  friend class tessel::GradientTape;
  bool suspends(const GradientTape* tape) const;
  // A call made while suspended (checked mode: see above).
  void observe(const std::vector<DTensor>& inputs, const DTensor& output);

  std::vector<GradientTape*> tapes_;
  bool checked_;
  std::unordered_set<uint64_t> known_;  // checked: the function's inputs and what it made
};

}  // namespace tessel::detail
