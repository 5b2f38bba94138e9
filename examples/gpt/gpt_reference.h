// Checks the GPT against a reference that shares no code with tessel (llm.c's method): the
// float64 JAX model of examples/gpt/reference/ dumps, for the "test" configuration and one fixed
// batch, the initial parameters, the logits, the loss, every gradient and the losses of 10 AdamW
// steps (warm-up, cosine decay, clipping). check_reference loads the same parameters on `mesh`,
// runs the same computation in `dtype` and reports the largest errors.
//
//   ReferenceErrors e = check_reference("examples/gpt/reference/gpt_small_reference.safetensors",
//                                       mesh, DType::kF32, &runtime);
//   e.passes()   // logits and gradients within 1e-5 of the largest reference magnitude (f32),
//                // every step loss within 1e-4
#pragma once

#include <string>

#include "language_model.h"
#include "tessel/checkpoint/safetensors.h"
#include "tessel/core/dtype.h"
#include "tessel/core/tensor.h"
#include "tessel/mesh/mesh.h"
#include "tessel/runtime/runtime.h"

namespace tessel::gpt {

struct ReferenceErrors {
  // max |tessel - reference| / max |reference| over the tensor (the worst gradient's).
  double logits = 0;
  double loss = 0;  // |difference| / |reference|
  double gradients = 0;
  std::string worst_gradient;
  double step_losses = 0;  // max |difference| over the 10 steps (absolute)
  // The tolerances: 1e-5 (logits, gradients; f32) and 1e-4 (step losses).
  bool passes(double relative = 1e-5, double steps = 1e-4) const;
  std::string to_string() const;
  // Each error the worse of this and `other`'s (`other`'s worst gradient named with `label`).
  void include(const ReferenceErrors& other, const std::string& label);
};

// max |got - want| / max |want| (the reference's scale); infinite when the sizes differ or any
// element of either is NaN (a NaN is a mismatch, never a pass).
double relative_error(const Tensor& got, const Tensor& want);

ReferenceErrors check_reference(const std::string& path, const Mesh& mesh, DType dtype,
                                Runtime* runtime = nullptr);

// The check itself, for any model built on the dump's configuration: the parameters
// "param.<name>" (the model's names) loaded in `dtype`, the batch "idx" and "targets", then the
// logits, loss and every gradient against "<prefix>logits", "<prefix>loss" and
// "<prefix>grad.<name>" and, with `steps`, the losses of 10 AdamW steps on that batch against
// "step_losses" (lr 1e-3 warmed up over 3 steps and decayed to 1e-4 at 10, betas 0.9/0.99, weight
// decay 0.1, clipping at norm 1: the dumps' training). A missing tensor: kNotFound.
ReferenceErrors check_model(const LanguageModel& model, const SafetensorsFile& ref, DType dtype,
                            const std::string& prefix = "", bool steps = true);

}  // namespace tessel::gpt
