// GptPipeline: the GPT's stages on their sub-meshes and a training step run by a pipeline
// schedule (gpt_pipeline.h).
#include "gpt_pipeline.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <memory>
#include <utility>

#include <fmt/format.h>

#include "tessel/core/error.h"
#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/relayout.h"

namespace tessel::gpt {
namespace {

constexpr const char* kComponent = "pipeline";

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, kComponent, message);
}

double scalar_of(const DTensor& t) { return host_value(t).to_doubles().at(0); }

// Each microbatch its own dropout masks: the step's seed mixed with the microbatch.
ForwardOptions for_microbatch(ForwardOptions options, int microbatch) {
  options.dropout_seed = options.dropout_seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(microbatch);
  return options;
}

DTensor add_or_take(const DTensor& sum, const DTensor& term) {
  return sum.defined() ? add(sum, term) : term;
}

}  // namespace

std::vector<Mesh> stage_meshes(const Mesh& mesh) {
  if (mesh.rank() < 2) {
    invalid(fmt::format("a pipeline's mesh has the stage dimension first and then the stages' "
                        "own, got {} dimension(s): {}",
                        mesh.rank(), mesh.to_string()));
  }
  const std::vector<std::string> names = mesh.dim_names();
  const std::vector<int64_t> shape = mesh.shape();
  const std::vector<std::string> inner_names(names.begin() + 1, names.end());
  const std::vector<int64_t> inner_shape(shape.begin() + 1, shape.end());
  const int64_t per_stage = mesh.size() / shape[0];
  std::vector<Mesh> out;
  for (int64_t s = 0; s < shape[0]; ++s) {
    std::vector<int64_t> ids, local_ids;
    std::vector<std::string> local_devices, global_devices;
    for (int64_t o = s * per_stage; o < (s + 1) * per_stage; ++o) {
      ids.push_back(mesh.global_device_ids()[static_cast<size_t>(o)]);
      if (!mesh.global_devices().empty()) {
        global_devices.push_back(mesh.global_devices()[static_cast<size_t>(o)]);
      }
    }
    for (size_t i = 0; i < mesh.local_device_ids().size(); ++i) {
      const int64_t id = mesh.local_device_ids()[i];
      if (std::find(ids.begin(), ids.end(), id) != ids.end()) {
        local_ids.push_back(id);
        local_devices.push_back(mesh.local_devices()[i]);
      }
    }
    out.emplace_back(inner_names, inner_shape, ids, local_ids, local_devices, "", global_devices);
  }
  return out;
}

GptPipeline::GptPipeline(GptConfig config, const Mesh& mesh, PipelineOptions options,
                         Runtime* runtime, bool sequence_parallel)
    : config_(std::move(config)),
      mesh_(mesh),
      options_(options),
      runtime_(runtime != nullptr ? runtime : &Runtime::global()) {
  config_.validate();
  if (mesh.rank() < 2 || mesh.dim_names().front() != "stage") {
    invalid(fmt::format("the pipeline's mesh must have `stage` as its first dimension (e.g. "
                        "stage=2,batch=1,model=2), got {}",
                        mesh.to_string()));
  }
  const int p = static_cast<int>(mesh.dim_size("stage"));
  const int m = options_.microbatches, v = options_.chunks;
  schedule_ = train::make_schedule(options_.schedule, p, m, v);
  order_ = train::simulate(schedule_);
  if (config_.n_layer < p * v) {
    invalid(fmt::format("{} layers do not fill {} virtual stages ({} stages x {} chunks): each "
                        "needs at least one layer",
                        config_.n_layer, p * v, p, v));
  }
  if (config_.batch_size % m != 0) {
    invalid(fmt::format("the batch of {} rows does not split into {} microbatches of equal size",
                        config_.batch_size, m));
  }
  for (const Mesh& sub : stage_meshes(mesh)) {
    models_.emplace_back(config_, sub, runtime_, sequence_parallel);
  }
  const GptModel& first = models_.front();
  wte_ = first.index("wte");
  wpe_ = first.index("wpe");
  ln_f_ = first.index("ln_f.weight");
  placement_.assign(first.names().size(), 0);
  placement_[ln_f_] = p - 1;
  for (int k = 0; k < p * v; ++k) {
    for (size_t i : parameters_of(k)) {
      if (i != wte_ && i != wpe_ && i != ln_f_) placement_[i] = k % p;
    }
  }
}

std::pair<int, int> GptPipeline::layers(int k) const {
  const int pieces = schedule_.virtual_stages();
  const int base = config_.n_layer / pieces, extra = config_.n_layer % pieces;
  const int first = k * base + std::min(k, extra);
  return {first, first + base + (k < extra ? 1 : 0)};
}

std::vector<size_t> GptPipeline::parameters_of(int k) const {
  const GptModel& model = models_.front();
  std::vector<size_t> out;
  if (k == 0) out = {wte_, wpe_};
  const auto [first, last] = layers(k);
  for (int l = first; l < last; ++l) {
    for (size_t i = 0; i < model.names().size(); ++i) {
      if (model.names()[i].rfind(fmt::format("h.{}.", l), 0) == 0) out.push_back(i);
    }
  }
  if (k == schedule_.virtual_stages() - 1) {
    out.push_back(ln_f_);
    if (k != 0) out.push_back(wte_);  // the tied head
  }
  return out;
}

std::vector<Layout> GptPipeline::layouts() const {
  std::vector<Layout> out;
  for (size_t i = 0; i < placement_.size(); ++i) {
    out.push_back(models_[static_cast<size_t>(placement_[i])].layouts()[i]);
  }
  return out;
}

std::vector<DTensor> GptPipeline::init(uint64_t seed) const {
  std::vector<DTensor> out;
  for (size_t i = 0; i < placement_.size(); ++i) {
    out.push_back(models_[static_cast<size_t>(placement_[i])].init_parameter(i, seed));
  }
  return out;
}

void GptPipeline::check_params(const std::vector<DTensor>& params) const {
  if (params.size() != placement_.size()) {
    invalid(fmt::format("{} parameters given, the model has {}", params.size(), placement_.size()));
  }
}

DTensor GptPipeline::everywhere(const DTensor& x) const {
  return relayout(x, Layout(x.layout().sharding_spec_strings(), mesh_),
                  RelayoutOptions{options_.timeout});
}

DTensor GptPipeline::transfer(const DTensor& x, int from, int to, const std::string& what) const {
  const Mesh& target = stage_mesh(to);
  if (x.layout().mesh() == target) return x;
  try {
    return relayout(x, Layout(x.layout().sharding_spec_strings(), target),
                    RelayoutOptions{options_.timeout});
  } catch (const Error& e) {
    // The stages whose devices the relayout's error names as late (a communicator's "waited ...
    // for ranks [...]", else anywhere in the message; a full name, not a prefix of one).
    const std::string cause = e.what();
    std::string named = cause;
    if (const size_t open = cause.find("for ranks ["); open != std::string::npos) {
      named = cause.substr(open, cause.find(']', open) - open);
    }
    std::vector<int> late;
    for (int s : {from, to}) {
      // Every device of the stage (a mesh across processes names them all; else its own).
      const Mesh& mesh = stage_mesh(s);
      for (const std::string& device :
           mesh.global_devices().empty() ? mesh.local_devices() : mesh.global_devices()) {
        for (size_t at = named.find(device); at != std::string::npos;
             at = named.find(device, at + 1)) {
          const size_t end = at + device.size();
          if (end == named.size() || std::isdigit(static_cast<unsigned char>(named[end])) == 0) {
            if (std::find(late.begin(), late.end(), s) == late.end()) late.push_back(s);
            break;
          }
        }
      }
    }
    const std::string who =
        late.size() == 1 ? fmt::format("stage {} is late", late.front())
        : late.empty()   ? std::string("no stage named")
                         : fmt::format("stages {} named", fmt::join(late, " and "));
    throw Error(e.code(), kComponent,
                fmt::format("{} from stage {} to stage {} did not arrive within {} ms ({}): {}",
                            what, from, to, options_.timeout.count(), who, cause));
  }
}

std::vector<DTensor> GptPipeline::view(const std::vector<DTensor>& params, int stage,
                                       const DTensor& wte_copy) const {
  std::vector<DTensor> out = params;
  if (stage == stages() - 1 && stage != 0) out[wte_] = wte_copy;
  return out;
}

PipelineGradients GptPipeline::gradients(const std::vector<DTensor>& params, const Tensor& idx,
                                         const Tensor& targets, const ForwardOptions& options,
                                         double loss_scale) const {
  check_params(params);
  const int p = stages(), m = schedule_.microbatches, last_k = schedule_.virtual_stages() - 1;
  if (idx.shape().rank() != 2 || idx.shape() != targets.shape() || idx.shape().dim(0) % m != 0) {
    invalid(fmt::format("token ids {} and targets {} must be [B, T] with B a multiple of the {} "
                        "microbatches",
                        idx.shape().to_string(), targets.shape().to_string(), m));
  }
  const int64_t rows = idx.shape().dim(0) / m;
  // The last stage's copy of the tied embedding, made when its first forward has its input.
  std::vector<std::vector<DTensor>> views;
  for (int s = 0; s < p; ++s) views.push_back(view(params, s, DTensor()));
  const auto ensure_wte_copy = [&](int stage) {
    if (stage == p - 1 && stage != 0 && !views[static_cast<size_t>(stage)][wte_].defined()) {
      views[static_cast<size_t>(stage)][wte_] =
          transfer(params[wte_], 0, stage, "the tied token embedding");
    }
  };

  // What each (virtual stage, microbatch) keeps between its forward and its backward.
  struct Work {
    DTensor input;   // the activation received (null for the first virtual stage)
    std::unique_ptr<GradientTape> tape;
    DTensor output;  // the activation sent on, or the last stage's scaled loss
    DTensor output_gradient;  // received from the next virtual stage
  };
  std::vector<Work> work(static_cast<size_t>((last_k + 1) * m));
  std::vector<DTensor> sums(params.size());
  DTensor wte_copy_sum, loss_sum;
  for (const train::TimedAction& timed : order_.timeline) {
    const train::PipelineAction& a = timed.action;
    if (options_.before_action) options_.before_action(a);
    const int k = a.virtual_stage(p), mb = a.microbatch;
    Work& w = work[static_cast<size_t>(k * m + mb)];
    const GptModel& model = models_[static_cast<size_t>(a.stage)];
    const std::vector<DTensor>& pv = views[static_cast<size_t>(a.stage)];
    const std::vector<size_t> used = parameters_of(k);
    if (a.pass == train::Pass::kForward) {
      const ForwardOptions mb_options = for_microbatch(options, mb);
      if (k > 0) {
        w.input = transfer(work[static_cast<size_t>((k - 1) * m + mb)].output, (k - 1) % p,
                           a.stage, fmt::format("the forward activation of microbatch {}", mb));
      }
      if (k == last_k) ensure_wte_copy(a.stage);
      w.tape = std::make_unique<GradientTape>();
      if (k > 0) w.tape->watch(w.input);
      for (size_t i : used) w.tape->watch(pv[i]);
      const auto [first, last] = layers(k);
      DTensor x = k == 0 ? model.embed(pv, model.tokens(idx.slice(0, mb * rows, (mb + 1) * rows)),
                                       mb_options)
                         : w.input;
      x = model.blocks(pv, x, first, last, mb_options);
      if (k == last_k) {
        const DTensor loss = reduce_mean(sparse_softmax_cross_entropy_with_logits(
            model.tokens(targets.slice(0, mb * rows, (mb + 1) * rows)), model.head(pv, x)));
        loss_sum = add_or_take(loss_sum, loss);
        x = multiply(loss, loss_scale / m);
      }
      w.tape->stop_recording();
      w.output = x;
      continue;
    }
    std::vector<DTensor> sources;
    if (k > 0) sources.push_back(w.input);
    for (size_t i : used) sources.push_back(pv[i]);
    const std::vector<DTensor> g = w.tape->gradient(w.output, sources, w.output_gradient);
    w = Work{};  // the activations this microbatch kept here are let go
    size_t next = 0;
    if (k > 0) {
      Work& before = work[static_cast<size_t>((k - 1) * m + mb)];
      before.output_gradient =
          transfer(g[next++], a.stage, (k - 1) % p,
                   fmt::format("the backward gradient of microbatch {}", mb));
    }
    for (size_t i : used) {
      const DTensor& gi = g[next++];
      if (i == wte_ && k != 0) {
        wte_copy_sum = add_or_take(wte_copy_sum, gi);
      } else {
        sums[i] = add_or_take(sums[i], gi);
      }
    }
  }
  if (wte_copy_sum.defined()) {
    // The head's share of the tied embedding's gradient, sent back to stage 0.
    sums[wte_] = add_or_take(
        sums[wte_], transfer(wte_copy_sum, p - 1, 0, "the tied token embedding's gradient"));
  }
  return {scalar_of(everywhere(loss_sum)) / m, std::move(sums)};
}

DTensor GptPipeline::whole_batch(const std::vector<DTensor>& params, const Tensor& idx,
                                 const Tensor* targets) const {
  check_params(params);
  const int p = stages(), last_k = schedule_.virtual_stages() - 1;
  const DTensor wte_copy =
      p > 1 ? transfer(params[wte_], 0, p - 1, "the tied token embedding") : DTensor();
  DTensor x;
  for (int k = 0; k <= last_k; ++k) {
    const int s = k % p;
    const GptModel& model = models_[static_cast<size_t>(s)];
    const std::vector<DTensor> pv = view(params, s, wte_copy);
    const auto [first, last] = layers(k);
    if (k > 0) x = transfer(x, (k - 1) % p, s, "the activation");
    x = model.blocks(pv, k == 0 ? model.embed(pv, model.tokens(idx)) : x, first, last);
    if (k == last_k) x = model.head(pv, x);
    if (k == last_k && targets != nullptr) {
      x = reduce_mean(sparse_softmax_cross_entropy_with_logits(model.tokens(*targets), x));
    }
  }
  return everywhere(x);
}

DTensor GptPipeline::logits(const std::vector<DTensor>& params, const Tensor& idx) const {
  return whole_batch(params, idx, nullptr);
}

double GptPipeline::loss(const std::vector<DTensor>& params, const Tensor& idx,
                         const Tensor& targets) const {
  return scalar_of(whole_batch(params, idx, &targets));
}

std::pair<std::vector<DTensor>, double> GptPipeline::clip_by_global_norm(
    const std::vector<DTensor>& grads, double clip_norm) const {
  if (!(clip_norm > 0) || !std::isfinite(clip_norm)) {
    invalid(fmt::format("clip_norm must be a finite number > 0, got {}", clip_norm));
  }
  // Each stage's sum of squares where its gradients live, then the stages' sums on the host.
  std::vector<DTensor> stage_sums(static_cast<size_t>(stages()));
  for (size_t i = 0; i < grads.size(); ++i) {
    DTensor& sum = stage_sums[static_cast<size_t>(placement_.at(i))];
    sum = add_or_take(sum, reduce_sum(square(grads[i])));
  }
  double squares = 0;
  for (const DTensor& sum : stage_sums) {
    if (sum.defined()) squares += scalar_of(everywhere(sum));
  }
  const double norm = std::sqrt(squares);
  const double scale = clip_norm / std::max(norm, clip_norm);
  std::vector<DTensor> clipped;
  for (const DTensor& g : grads) clipped.push_back(scale < 1 ? multiply(g, scale) : g);
  return {std::move(clipped), norm};
}

}  // namespace tessel::gpt
