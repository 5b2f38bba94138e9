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
// calls (count or shapes): kInvalidArgument (the state belongs to the first list).
//
// Thread safety: one thread at a time.
#pragma once

#include <cstdint>
#include <vector>

#include "tessel/dtensor/dtensor.h"

namespace tessel {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every parameter (in place in the vector: each entry becomes its new value).
  void apply(std::vector<DTensor>& params, const std::vector<DTensor>& grads);
  int64_t iterations() const { return iterations_; }

 protected:
  virtual void update(size_t index, DTensor& param, const DTensor& grad) = 0;
  virtual void init_state(const std::vector<DTensor>& params) = 0;

 private:
  int64_t iterations_ = 0;
  std::vector<Shape> shapes_;  // of the parameters of the first call
};

// v = momentum * v - learning_rate * g; p = p + v (nesterov: p = p + momentum * v - lr * g).
class SGD : public Optimizer {
 public:
  explicit SGD(double learning_rate = 0.01, double momentum = 0.0, bool nesterov = false);

 private:
  void update(size_t index, DTensor& param, const DTensor& grad) override;
  void init_state(const std::vector<DTensor>& params) override;
  double learning_rate_, momentum_;
  bool nesterov_;
  std::vector<DTensor> velocity_;
};

// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr_t m / (sqrt(v) + eps) with
// lr_t = lr sqrt(1-b2^t) / (1-b1^t) (Keras' Adam).
class Adam : public Optimizer {
 public:
  explicit Adam(double learning_rate = 0.001, double beta_1 = 0.9, double beta_2 = 0.999,
                double epsilon = 1e-7);

 private:
  void update(size_t index, DTensor& param, const DTensor& grad) override;
  void init_state(const std::vector<DTensor>& params) override;
  double learning_rate_, beta_1_, beta_2_, epsilon_;
  std::vector<DTensor> m_, v_;
};

}  // namespace tessel
