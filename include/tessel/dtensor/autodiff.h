// Reverse-mode gradients of DTensor computations (TF's GradientTape), with layouts kept.
//
//   auto [loss, grads] = value_and_grad(
//       [&](const std::vector<DTensor>& p) { return reduce_mean(square_error(model(p, x), y)); },
//       params);
//   // grads[i] has params[i]'s layout (Partial terms reduced: data-parallel gradients are
//   // all-reduced together, in fused buckets, one collective per bucket).
//
// While a GradientTape lives on a thread, every op (ops.h) whose inputs depend on a watched
// tensor is recorded with what its VJP reads (OpDef::saves: some of its inputs, as the kernel
// read them, and its output; OpDef::save: anything else the VJP needs, such as layer norm's
// statistics). gradient() walks the records backwards calling each op's VJP (themselves ops, so
// distributed like the forward pass), summing the gradients of tensors used more than once.
// Each input's gradient is relaid out to the layout that input had (TF: the gradient of
// relayout is relayout_like to the forward input), Partial terms kept until the end; the
// sources' gradients are then reduced in one fused batch per group of mesh dimensions and dtype
// (relayout_batch), in the op profile's phase "gradient reduction" (op_profile.h).
//
// Activation memory: a tape keeps nothing a VJP does not read, and a non-persistent tape lets go
// of each record's tensors as soon as its VJP has run, and of each gradient as soon as the VJP it
// feeds has run, so a tensor's memory returns to its device at its last use in the backward pass
// (tape_memory.h counts what tapes keep). recompute_grad.h keeps even less: a function's inputs,
// its inside recomputed in the backward pass.
//
// The backward pass in two halves (zero-bubble pipeline schedules, Qi et al. 2024; PyTorch's
// stage_backward_input / stage_backward_weight):
//
//   std::vector<DTensor> dx = tape.backward_input(y, {x}, dy);   // what the previous stage needs
//   ...                                                           // other work meanwhile
//   std::vector<DTensor> dw = tape.backward_weight({w1, w2});     // the weights' gradients
//
// backward_input runs the VJPs of the ops a watched input `x` flows into, asking each only for
// the gradients on that path (VjpArgs::wanted): matmul and layer norm (OpDef::vjp_skips_unwanted)
// then leave out the weights' (dw = x^T dy); other ops compute them anyway, and those are kept
// aside. The records whose weight gradients wait stay on the tape with their output's gradient;
// backward_weight computes those, adds what was kept aside, then walks the rest (the ops on the
// weights alone: a cast, an fsdp gather). Together they give gradient()'s values bit for bit:
// the same VJPs, each gradient summed in the same order. What the weight half reads stays alive
// (and counted in tape_memory.h) until it runs; between the halves the tape records nothing.
//
// Errors: a non-scalar target is summed first (TF), or weighted by output_gradient; an op
// without a VJP on the path: kUnimplemented naming it; gradient() twice on a non-persistent
// tape, backward_weight without backward_input before it, backward_input twice, gradient()
// between the two halves, the halves on a persistent tape: kFailedPrecondition; an
// output_gradient of another shape or dtype than the target: kInvalidArgument naming both.
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
namespace detail {
class TapeSuspension;  // src/dtensor/framework/tape_suspension.h
}  // namespace detail

class GradientTape {
 public:
  explicit GradientTape(bool persistent = false);
  ~GradientTape();
  GradientTape(const GradientTape&) = delete;
  GradientTape& operator=(const GradientTape&) = delete;

  void watch(const DTensor& tensor);
  // Stops recording for good (TF: leaving the `with` block); gradient() still works.
  void stop_recording();
  // d sum(target * output_gradient) / d source for each source, in the source's layout
  // (output_gradient null: ones, d sum(target) / d source; TF's output_gradients); a source the
  // target does not depend on gets zeros.
  std::vector<DTensor> gradient(const DTensor& target, const std::vector<DTensor>& sources,
                                const DTensor& output_gradient = DTensor());
  // The first half of gradient(): the gradients of `inputs` only (see above). A non-persistent
  // tape only.
  std::vector<DTensor> backward_input(const DTensor& target, const std::vector<DTensor>& inputs,
                                      const DTensor& output_gradient = DTensor());
  // The second half: the gradients of `weights` (any watched tensors but backward_input's
  // inputs: kInvalidArgument) from what backward_input left on the tape, each reduced to its
  // tensor's layout as gradient() reduces it.
  std::vector<DTensor> backward_weight(const std::vector<DTensor>& weights);

  // ---- internal: called by call_op, relayout and recompute_grad --------------------------
  struct Record;
  // Whether any tape exists in the process (a relaxed read: call_op's fast path).
  static bool any();
  // Records a call on each tape recording on this thread that watches something `original_inputs`
  // depend on (inputs: as the kernel read them). `def` is kept by pointer unless `owned_def`
  // holds it (recompute_grad's, made per call). While recompute_grad's function runs its
  // forward pass, the call is not recorded but checked (recompute_grad.h).
  static void record_call(const OpDef& def, const std::vector<DTensor>& original_inputs,
                          const std::vector<DTensor>& inputs, const DTensor& output,
                          std::shared_ptr<const OpAttrs> attrs,
                          std::shared_ptr<const OpDef> owned_def = nullptr);
  // gradient() without the final reduction: each source's gradient in its layout with the
  // Partial terms still pending (a null DTensor where the target does not depend on it), for a
  // gradient inside another tape's backward pass (recompute_grad), whose tape reduces them with
  // the rest at its end.
  std::vector<DTensor> gradient_with_pending(const DTensor& target,
                                             const std::vector<DTensor>& sources,
                                             const DTensor& output_gradient);

 private:
  friend class detail::TapeSuspension;
  // The tapes recording on this thread, innermost last (empty fast when no tape exists).
  static std::vector<GradientTape*> active();
  bool depends(uint64_t id) const;
  bool records(const std::vector<DTensor>& original_inputs) const;
  void add_record(Record record);
  void release(Record& record);
  // Which records a walk of the tape runs (see backward_input).
  enum class Half { kWhole, kInput, kWeight };
  struct Split;  // what backward_input leaves for backward_weight
  std::vector<DTensor> backward(const DTensor& target, const std::vector<DTensor>& sources,
                                const DTensor& output_gradient, bool reduce);
  // The gradients of the target (d target = output_gradient, or ones) to start a walk with.
  void start(const DTensor& target, const DTensor& output_gradient);
  // Walks the records backwards from the gradients in split_, running the VJPs `half` takes;
  // the gradients of `sources` are kept (not let go after use).
  void walk(Half half, const std::vector<DTensor>& sources);
  // Each source's gradient (zeros where none reached it), reduced to its layout when `reduce`.
  std::vector<DTensor> collect(const std::vector<DTensor>& sources, bool reduce);
  bool persistent_;
  bool used_ = false;
  bool recording_ = true;
  std::vector<uint64_t> watched_;  // ids, sorted: the watched tensors and what depends on them
  std::vector<uint64_t> sources_;  // ids, sorted: the tensors watch() was given
  std::vector<Record> records_;
  std::unique_ptr<Split> split_;  // a walk's gradients; between the halves, what waits
};

// fn(params) and the gradients of its (summed) result with respect to params.
std::pair<DTensor, std::vector<DTensor>> value_and_grad(
    const std::function<DTensor(const std::vector<DTensor>&)>& fn,
    const std::vector<DTensor>& params);

// Relayouts many tensors at once; the ones whose plan is a single all_reduce over the same mesh
// dimensions, op and dtype are reduced together in fused buckets (ScopedAllocator: one backing
// buffer, one collective per bucket of at most `bucket_bytes`), likewise the ones whose plan is
// a single all_gather or reduce_scatter (each device packs its parts into one buffer, uneven
// shards unpadded), the rest one by one. Each result is recorded on the gradient tapes as
// relayout() records it.
std::vector<DTensor> relayout_batch(const std::vector<DTensor>& tensors,
                                    const std::vector<Layout>& layouts,
                                    int64_t bucket_bytes = 25 << 20);

}  // namespace tessel
