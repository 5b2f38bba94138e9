// Optimizers for DTensor parameters: SGD with momentum and Adam (TF's Keras semantics). Their
// state (velocity, first and second moments) has each parameter's layout, so a sharded parameter
// has sharded state and the update runs where the parameter lives, with no communication.
//
//   Adam adam(/*learning_rate=*/1e-3);
//   auto [loss, grads] = value_and_grad(loss_fn, params);
//   adam.apply(params, grads);          // params are replaced by their updated values
//
// Errors: params and grads of different counts, a gradient whose shape or layout differs from
// its parameter's: kInvalidArgument naming the index; a parameter list that changes between
// calls (count, shapes, or the runtime the parameters live on): kInvalidArgument (the state
// belongs to the first list).
//
// Thread safety: one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tessel/dtensor/dtensor.h"

namespace tessel {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every parameter (in place in the vector: each entry becomes its new value).
  void apply(std::vector<DTensor>& params, const std::vector<DTensor>& grads);
  int64_t iterations() const { return iterations_; }
  // The learning rate of the next apply(); a schedule sets it before each step (negative or not
  // finite: kInvalidArgument).
  double learning_rate() const { return learning_rate_; }
  void set_learning_rate(double learning_rate);

  // The state for checkpoints: the optimizer's tensors by slot name, one per parameter in
  // apply()'s order ("m" and "v" for Adam and AdamW, "velocity" for SGD with momentum); no slots
  // before the first apply().
  virtual std::map<std::string, std::vector<DTensor>> slots() const = 0;
  // Puts back what iterations() and slots() gave (e.g. restored from a checkpoint, any layout
  // relaid out to the parameters' first) for `params`, the parameters the next apply() gets: it
  // then continues as the saved optimizer's would have. iterations < 0, slot names other than
  // this optimizer's (none when iterations is 0), a slot whose count, shapes or layouts differ
  // from params': kInvalidArgument naming the slot and the index.
  void restore(int64_t iterations, const std::vector<DTensor>& params,
               const std::map<std::string, std::vector<DTensor>>& slots);

 protected:
  explicit Optimizer(double learning_rate);
  virtual void update(size_t index, DTensor& param, const DTensor& grad) = 0;
  virtual void init_state(const std::vector<DTensor>& params) = 0;
  // The slot names restore() expects once iterations > 0, and the setter of checked slots.
  virtual std::vector<std::string> slot_names() const = 0;
  virtual void set_slots(const std::map<std::string, std::vector<DTensor>>& slots) = 0;

 private:
  int64_t iterations_ = 0;
  double learning_rate_;
  // Records the runtime of each parameter's state (slots()), checked by apply() every step.
  void note_state_runtimes();

  std::vector<Shape> shapes_;  // of the parameters of the first call
  std::vector<const Runtime*> state_runtimes_;  // of each parameter's state; empty without state
};

// v = momentum * v - learning_rate * g; p = p + v (nesterov: p = p + momentum * v - lr * g).
class SGD : public Optimizer {
 public:
  explicit SGD(double learning_rate = 0.01, double momentum = 0.0, bool nesterov = false);
  std::map<std::string, std::vector<DTensor>> slots() const override;

 private:
  void update(size_t index, DTensor& param, const DTensor& grad) override;
  void init_state(const std::vector<DTensor>& params) override;
  std::vector<std::string> slot_names() const override;
  void set_slots(const std::map<std::string, std::vector<DTensor>>& slots) override;
  double momentum_;
  bool nesterov_;
  std::vector<DTensor> velocity_;
};

// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr_t m / (sqrt(v) + eps) with
// lr_t = lr sqrt(1-b2^t) / (1-b1^t) (Keras' Adam).
class Adam : public Optimizer {
 public:
  explicit Adam(double learning_rate = 0.001, double beta_1 = 0.9, double beta_2 = 0.999,
                double epsilon = 1e-7);
  std::map<std::string, std::vector<DTensor>> slots() const override;

 private:
  void init_state(const std::vector<DTensor>& params) override;
  std::vector<std::string> slot_names() const override;
  void set_slots(const std::map<std::string, std::vector<DTensor>>& slots) override;

 protected:
  void update(size_t index, DTensor& param, const DTensor& grad) override;
  // The moments' update and p = decay * p - step_size * m / (sqrt(v) + epsilon), three
  // one-pass kernels (decay: AdamW's 1 - lr * weight_decay, in the same pass).
  void adam_step(size_t index, DTensor& param, const DTensor& grad, double step_size,
                 double epsilon, double decay = 1.0);
  double beta_1_, beta_2_, epsilon_;
  std::vector<DTensor> m_, v_;
};

// Adam with decoupled weight decay (Loshchilov & Hutter; torch.optim.AdamW's arithmetic):
// p *= 1 - lr * weight_decay for the parameters that decay, then m and v as Adam and
// p -= lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + epsilon).
// Which parameters decay: set_decay_mask (one flag per parameter, in apply()'s order); by
// default every parameter of rank >= 2 (matrices and embeddings decay; gains and biases do
// not: nanoGPT's parameter groups).
class AdamW : public Adam {
 public:
  explicit AdamW(double learning_rate = 0.001, double beta_1 = 0.9, double beta_2 = 0.999,
                 double epsilon = 1e-8, double weight_decay = 0.01);
  void set_decay_mask(std::vector<bool> decays);
  double weight_decay() const { return weight_decay_; }

 private:
  void update(size_t index, DTensor& param, const DTensor& grad) override;
  double weight_decay_;
  std::vector<bool> decays_;  // empty: by rank
};

// The gradients scaled so that their global L2 norm is at most clip_norm (TF's
// clip_by_global_norm: t * clip_norm / max(global_norm, clip_norm)), and that norm (a replicated
// scalar DTensor, before clipping). The squared norms of every gradient are summed while still
// Partial over their sharded mesh dimensions, so the whole norm costs one all-reduce per group of
// mesh dimensions, not one per gradient. Null gradients stay null. clip_norm <= 0 or not finite,
// no defined gradient, gradients on different meshes: kInvalidArgument. Memory: each gradient
// is released once its clipped copy exists, so a caller that moves its gradients in
// (clip_by_global_norm(std::move(grads), c)) holds one gradient twice at most, not all of them.
std::pair<std::vector<DTensor>, DTensor> clip_by_global_norm(std::vector<DTensor> grads,
                                                            double clip_norm);

// The learning rate of nanoGPT's schedule at `step` (0-based): a linear warm-up
// peak * (step + 1) / (warmup_steps + 1) for step < warmup_steps, then a cosine decay from peak
// to minimum that ends at decay_steps, then minimum.
struct WarmupCosineDecay {
  double peak = 1e-3;
  double minimum = 1e-4;
  int64_t warmup_steps = 100;
  int64_t decay_steps = 2000;
  double operator()(int64_t step) const;
};

}  // namespace tessel
