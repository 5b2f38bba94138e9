#include "gpt_reference.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "gpt_model.h"
#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/optimizers.h"

namespace tessel::gpt {

double relative_error(const Tensor& got, const Tensor& want) {
  const std::vector<double> a = got.to_doubles(), b = want.to_doubles();
  if (a.size() != b.size()) return INFINITY;
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double d = std::abs(a[i] - b[i]);
    if (std::isnan(d)) return INFINITY;
    diff = std::max(diff, d);
    scale = std::max(scale, std::abs(b[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

bool ReferenceErrors::passes(double relative, double steps) const {
  return logits <= relative && loss <= relative && gradients <= relative && step_losses <= steps;
}

void ReferenceErrors::include(const ReferenceErrors& other, const std::string& label) {
  logits = std::max(logits, other.logits);
  loss = std::max(loss, other.loss);
  if (other.gradients >= gradients) {
    gradients = other.gradients;
    worst_gradient = label + other.worst_gradient;
  }
  step_losses = std::max(step_losses, other.step_losses);
}

std::string ReferenceErrors::to_string() const {
  return fmt::format(
      "logits {:.2e}, loss {:.2e}, gradients {:.2e} (worst: {}), 10 step losses "
      "{:.2e}",
      logits, loss, gradients, worst_gradient, step_losses);
}

ReferenceErrors check_model(const LanguageModel& model, const SafetensorsFile& ref, DType dtype,
                            const std::string& prefix, bool steps) {
  std::vector<Tensor> initial;
  for (const std::string& name : model.names()) {
    initial.push_back(ref.tensor("param." + name).astype(dtype));
  }
  std::vector<DTensor> params = model.from_host(initial);
  const DTensor idx = model.tokens(ref.tensor("idx"));
  const DTensor targets = model.tokens(ref.tensor("targets"));
  const auto loss_of = [&](const std::vector<DTensor>& p) { return model.loss(p, idx, targets); };

  ReferenceErrors e;
  e.logits = relative_error(host_value(model.logits(params, idx)), ref.tensor(prefix + "logits"));
  auto [loss, grads] = value_and_grad(loss_of, params);
  e.loss = relative_error(host_value(loss), ref.tensor(prefix + "loss"));
  for (size_t i = 0; i < grads.size(); ++i) {
    const std::string& name = model.names()[i];
    const double err = relative_error(host_value(grads[i]), ref.tensor(prefix + "grad." + name));
    if (err >= e.gradients) {
      e.gradients = err;
      e.worst_gradient = name;
    }
  }
  if (!steps) return e;
  // 10 AdamW steps on the same batch, as the reference's metadata describes.
  AdamW optimizer(1e-3, 0.9, 0.99, 1e-8, 0.1);
  const WarmupCosineDecay schedule{1e-3, 1e-4, 3, 10};
  const std::vector<double> want = ref.tensor("step_losses").to_doubles();
  for (size_t s = 0; s < want.size(); ++s) {
    optimizer.set_learning_rate(schedule(static_cast<int64_t>(s)));
    auto [step_loss, step_grads] = value_and_grad(loss_of, params);
    auto clipped = clip_by_global_norm(step_grads, 1.0).first;
    const double got = host_value(step_loss).to_doubles().at(0);
    e.step_losses = std::max(e.step_losses, std::isnan(got) ? INFINITY : std::abs(got - want[s]));
    optimizer.apply(params, clipped);
  }
  return e;
}

ReferenceErrors check_reference(const std::string& path, const Mesh& mesh, DType dtype,
                                Runtime* runtime) {
  return check_model(GptModel(GptConfig::preset("test"), mesh, runtime),
                     SafetensorsFile::read(path), dtype);
}

}  // namespace tessel::gpt
