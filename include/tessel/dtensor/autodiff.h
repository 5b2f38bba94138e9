// Reverse-mode gradients of DTensor computations (TF's GradientTape), with layouts kept.
//
//   auto [loss, grads] = value_and_grad(
//       [&](const std::vector<DTensor>& p) { return reduce_mean(square_error(model(p, x), y)); },
//       params);
//   // grads[i] has params[i]'s layout (Partial terms reduced: data-parallel gradients are
//   // all-reduced together, in fused buckets, one collective per bucket).
//
// While a GradientTape lives on a thread, every op (ops.h) whose inputs depend on a watched
// tensor is recorded with its inputs and output. gradient() walks the records backwards calling
// each op's VJP (themselves ops, so distributed like the forward pass), summing the gradients
// of tensors used more than once. Each input's gradient is relaid out to the layout that input
// had (TF: the gradient of relayout is relayout_like to the forward input), Partial terms kept
// until the end; the sources' gradients are then reduced in one fused batch per group of mesh
// dimensions and dtype (relayout_batch).
//
// Errors: a non-scalar target is summed first (TF); an op without a VJP on the path:
// kUnimplemented naming it; gradient() twice on a non-persistent tape: kFailedPrecondition.
//
// Thread safety: a tape records the ops of the thread that made it; nested tapes record
// independently (higher-order gradients). A tape may be destroyed on any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "tessel/dtensor/dtensor.h"
#include "tessel/mesh/layout.h"

namespace tessel {

struct OpDef;
struct OpAttrs;

class GradientTape {
 public:
  explicit GradientTape(bool persistent = false);
  ~GradientTape();
  GradientTape(const GradientTape&) = delete;
  GradientTape& operator=(const GradientTape&) = delete;

  void watch(const DTensor& tensor);
  // Stops recording for good (TF: leaving the `with` block); gradient() still works.
  void stop_recording();
  // d sum(target) / d source for each source, in the source's layout; a source the target does
  // not depend on gets zeros.
  std::vector<DTensor> gradient(const DTensor& target, const std::vector<DTensor>& sources);

  // ---- internal: called by call_op ------------------------------------------------------
  struct Record;
  void record(const OpDef& def, const std::vector<DTensor>& original_inputs,
              const std::vector<DTensor>& inputs, const DTensor& output,
              std::shared_ptr<const OpAttrs> attrs);
  // The tapes recording on this thread, innermost last (empty fast when no tape exists).
  static std::vector<GradientTape*> active();

 private:
  bool depends(uint64_t id) const;
  bool persistent_;
  bool used_ = false;
  bool recording_ = true;
  std::vector<uint64_t> watched_;  // ids, sorted
  std::vector<Record> records_;
};

// fn(params) and the gradients of its (summed) result with respect to params.
std::pair<DTensor, std::vector<DTensor>> value_and_grad(
    const std::function<DTensor(const std::vector<DTensor>&)>& fn,
    const std::vector<DTensor>& params);

// Relayouts many tensors at once; the ones whose plan is a single all_reduce over the same mesh
// dimensions, op and dtype are reduced together in fused buckets (ScopedAllocator: one backing
// buffer, one collective per bucket of at most `bucket_bytes`), the rest one by one.
std::vector<DTensor> relayout_batch(const std::vector<DTensor>& tensors,
                                    const std::vector<Layout>& layouts,
                                    int64_t bucket_bytes = 25 << 20);

}  // namespace tessel
