// Checks the Llama against a reference that shares no code with tessel: the float64 JAX model of
// examples/llama/reference/ dumps, for the "test" configuration (untied) and one fixed batch,
// the initial parameters, the logits, the loss, every gradient and the losses of 10 AdamW steps,
// and the logits, loss and gradients of the same parameters with tied embeddings ("tied.*").
// check_reference loads them on `mesh`, runs the same computations in `dtype` and reports the
// largest errors (gpt::check_model, examples/gpt/gpt_reference.h).
//
//   gpt::ReferenceErrors e = check_reference(
//       "examples/llama/reference/llama_small_reference.safetensors", mesh, DType::kF32, &rt);
//   e.passes()   // logits and gradients within 1e-5 of the largest reference magnitude (f32),
//                // every step loss within 1e-4
#pragma once

#include <string>

#include "gpt_reference.h"
#include "tessel/core/dtype.h"
#include "tessel/mesh/mesh.h"
#include "tessel/runtime/runtime.h"

namespace tessel::llama {

// The worst of the untied check (with the 10 steps) and the tied one ("tied." names its
// gradients).
gpt::ReferenceErrors check_reference(const std::string& path, const Mesh& mesh, DType dtype,
                                     Runtime* runtime = nullptr);

}  // namespace tessel::llama
