// GptPipeline: the GPT's stages on their sub-meshes and a training step run by a pipeline
// schedule (gpt_pipeline.h).
#include "gpt_pipeline.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "tessel/core/error.h"
#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_profile.h"
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
  options.dropout_seed =
      options.dropout_seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(microbatch);
  return options;
}

DTensor add_or_take(const DTensor& sum, const DTensor& term) {
  return sum.defined() ? add(sum, term) : term;
}

// What the stage threads hand each other (activations and gradients under a key), and the
// step's first failure, which ends every wait.
class Mailbox {
 public:
  void put(size_t key, DTensor value) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      values_[key] = std::move(value);
    }
    changed_.notify_all();
  }
  // The value under `key`, once there (taken out); nullopt when the step failed meanwhile, or
  // when it is not there by `deadline`: then the step fails with kDeadlineExceeded, `late` the
  // message (a wait's failure, see error()).
  std::optional<DTensor> take(size_t key, std::chrono::steady_clock::time_point deadline,
                              const std::function<std::string()>& late) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!changed_.wait_until(lock, deadline, [&] { return failed_ || values_.count(key) > 0; })) {
      lock.unlock();
      fail(std::make_exception_ptr(Error(ErrorCode::kDeadlineExceeded, kComponent, late())),
           /*waiting=*/true);
      return std::nullopt;
    }
    if (failed_) return std::nullopt;
    DTensor out = std::move(values_[key]);
    values_.erase(key);
    return out;
  }
  // The step fails with `error`: a stage's own work's (waiting false) or a wait's that ran out.
  void fail(std::exception_ptr error, bool waiting) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      failed_ = true;
      std::exception_ptr& first = waiting ? wait_error_ : work_error_;
      if (!first) first = std::move(error);
    }
    changed_.notify_all();
  }
  // What the step throws once every stage's thread has ended: the first failure of a stage's
  // own work, else the first wait's. A wait that runs out names the stage that did not send,
  // but that stage may be held in a launch or a transfer on a stalled device (its own, or the
  // waiting stage's: a transfer needs both sides); that one's error, which comes by its own
  // deadline, names the device that is late.
  std::exception_ptr error() {
    std::lock_guard<std::mutex> lock(mu_);
    return work_error_ ? work_error_ : wait_error_;
  }
  bool failed() {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<size_t, DTensor> values_;
  bool failed_ = false;
  std::exception_ptr work_error_, wait_error_;
};

}  // namespace

const char* controllers_name(Controllers c) {
  switch (c) {
    case Controllers::kAuto:
      return "auto";
    case Controllers::kOneController:
      return "one controller";
    case Controllers::kStageThreads:
      return "stage threads";
  }
  return "unknown";
}

std::vector<Mesh> stage_meshes(const Mesh& mesh) {
  if (mesh.rank() < 2) {
    invalid(
        fmt::format("a pipeline's mesh has the stage dimension first and then the stages' "
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
    invalid(
        fmt::format("the pipeline's mesh must have `stage` as its first dimension (e.g. "
                    "stage=2,batch=1,model=2), got {}",
                    mesh.to_string()));
  }
  const int p = static_cast<int>(mesh.dim_size("stage"));
  const int m = options_.microbatches, v = options_.chunks;
  const bool all_local = mesh.num_local_devices() == mesh.size();
  if (options_.controllers == Controllers::kStageThreads && !all_local) {
    invalid(
        fmt::format("stage threads run every stage in this process; {} of the mesh's {} "
                    "devices are here",
                    mesh.num_local_devices(), mesh.size()));
  }
  stage_threads_ = p > 1 && (options_.controllers == Controllers::kStageThreads ||
                             (options_.controllers == Controllers::kAuto && all_local));
  schedule_ = train::make_schedule(options_.schedule, p, m, v);
  order_ = train::simulate(schedule_);
  if (config_.n_layer < p * v) {
    invalid(
        fmt::format("{} layers do not fill {} virtual stages ({} stages x {} chunks): each "
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
  // Stage threads; or, for the single controller when several stages are in this process,
  // threads that issue each group's work (gradients()).
  const auto local_stages = std::count_if(models_.begin(), models_.end(), [](const GptModel& m) {
    return m.mesh().num_local_devices() > 0;
  });
  if (stage_threads_ || local_stages > 1) {
    threads_ = std::make_shared<train::StageThreads>(p);
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

train::PipelineIdle GptPipeline::idle_everywhere(const train::PipelineIdle& idle) const {
  if (idle.stages.size() != static_cast<size_t>(stages())) {
    invalid(fmt::format("the idle figures name {} stages, the pipeline has {}", idle.stages.size(),
                        stages()));
  }
  if (mesh_.num_local_devices() == mesh_.size()) return idle;
  // Values of the process that holds stage s, on every process: replicated on the stage's
  // devices (none here: no components, `values` only gives the shape), then on every stage's.
  const auto from_stage = [&](int s, const std::vector<double>& values) {
    const Tensor t =
        Tensor::from_vector<double>(values, Shape{static_cast<int64_t>(values.size())});
    const Mesh& sub = stage_mesh(s);
    const std::vector<Tensor> parts(std::max<size_t>(sub.num_local_devices(), 1), t);
    return host_value(everywhere(pack(parts, Layout::replicated(sub, 1), *runtime_))).to_doubles();
  };
  train::PipelineIdle out = idle;
  std::vector<double> walls(static_cast<size_t>(stages()));
  std::vector<size_t> log_sizes(static_cast<size_t>(stages()));
  for (int s = 0; s < stages(); ++s) {
    const train::StageIdle& here = idle.stages[static_cast<size_t>(s)];
    const std::vector<double> got = from_stage(
        s, {static_cast<double>(here.devices), here.computing_seconds, here.communication_seconds,
            here.transfer_seconds, here.idle_fraction, here.transfer_fraction, idle.wall_seconds,
            static_cast<double>(idle.log.size())});
    out.stages[static_cast<size_t>(s)] = {.devices = static_cast<int>(got[0]),
                                          .computing_seconds = got[1],
                                          .communication_seconds = got[2],
                                          .transfer_seconds = got[3],
                                          .idle_fraction = got[4],
                                          .transfer_fraction = got[5]};
    walls[static_cast<size_t>(s)] = got[6];
    log_sizes[static_cast<size_t>(s)] = static_cast<size_t>(got[7]);
  }
  // Each transfer's time is the shorter of its two sides' (the side that arrived last waited for
  // nobody), from the logs of the processes holding its stages; every process decides alike from
  // the sizes they all received whether the logs line up.
  const bool aligned =
      !idle.log.empty() && std::all_of(log_sizes.begin(), log_sizes.end(),
                                       [&](size_t n) { return n == idle.log.size(); });
  if (!aligned) return out;
  std::vector<std::vector<train::TransferRecord>> logs;
  for (int s = 0; s < stages(); ++s) {
    std::vector<double> mine;
    for (const train::TransferRecord& r : idle.log) mine.push_back(r.seconds);
    const std::vector<double> got = from_stage(s, mine);
    std::vector<train::TransferRecord> log = idle.log;
    for (size_t i = 0; i < log.size(); ++i) log[i].seconds = got[i];
    logs.push_back(std::move(log));
  }
  const std::vector<double> moved = train::transfer_seconds_across(logs);
  for (int s = 0; s < stages(); ++s) {
    train::StageIdle& st = out.stages[static_cast<size_t>(s)];
    if (st.devices == 0 || !(walls[static_cast<size_t>(s)] > 0)) continue;
    st.transfer_seconds = moved[static_cast<size_t>(s)];
    st.transfer_fraction = st.transfer_seconds / walls[static_cast<size_t>(s)];
  }
  return out;
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
    const std::string who = late.size() == 1 ? fmt::format("stage {} is late", late.front())
                            : late.empty()
                                ? std::string("no stage named")
                                : fmt::format("stages {} named", fmt::join(late, " and "));
    throw Error(e.code(), kComponent,
                fmt::format("{} from stage {} to stage {} did not arrive within {} ms ({}): {}",
                            what, from, to, options_.timeout.count(), who, cause));
  }
}

std::vector<std::vector<Device*>> GptPipeline::local_stage_devices() const {
  std::vector<std::vector<Device*>> out;
  for (int s = 0; s < stages(); ++s) {
    std::vector<Device*> devices;
    for (const std::string& name : stage_mesh(s).local_devices()) {
      devices.push_back(&runtime_->device(name));
    }
    out.push_back(std::move(devices));
  }
  return out;
}

std::vector<DTensor> GptPipeline::view(const std::vector<DTensor>& params, int stage,
                                       const DTensor& wte_copy) const {
  std::vector<DTensor> out = params;
  if (stage == stages() - 1 && stage != 0) out[wte_] = wte_copy;
  return out;
}

// A step's state: what each (virtual stage, microbatch) keeps between its forward and its
// backward, and the sums. With stage threads each thread touches only its own stage's entries
// (its virtual stages' work, its parameters' sums; the last stage the loss and the head's copy of
// the tied embedding), so they share it without a lock.
struct GptPipeline::StepState {
  struct Work {
    std::unique_ptr<GradientTape> tape;
    DTensor input;   // the activation received (null for the first virtual stage)
    DTensor output;  // the activation sent on, or the last stage's scaled loss
  };
  const Tensor& idx;
  const Tensor& targets;
  ForwardOptions options;
  int64_t rows = 0;                         // per microbatch
  std::vector<std::vector<DTensor>> views;  // the parameters as each stage reads them
  std::vector<Work> work;                   // [virtual stage * m + microbatch]
  std::vector<DTensor> sums;
  DTensor wte_copy_sum, loss_sum;
  double loss_scale = 1.0;  // each microbatch's backward pass starts from its loss times this / m
};

void GptPipeline::forward(const train::PipelineAction& a, StepState& st, DTensor input) const {
  // The stage's own collectives (its model-parallel sums) have the transfers' deadline.
  const RelayoutTimeoutScope deadline(options_.timeout);
  const int p = stages(), m = schedule_.microbatches, last_k = schedule_.virtual_stages() - 1;
  const int k = a.virtual_stage(p), mb = a.microbatch;
  StepState::Work& w = st.work[static_cast<size_t>(k * m + mb)];
  const GptModel& model = models_[static_cast<size_t>(a.stage)];
  const std::vector<DTensor>& pv = st.views[static_cast<size_t>(a.stage)];
  const ForwardOptions mb_options = for_microbatch(st.options, mb);
  w.input = std::move(input);
  w.tape = std::make_unique<GradientTape>();
  if (k > 0) w.tape->watch(w.input);
  for (size_t i : parameters_of(k)) w.tape->watch(pv[i]);
  const auto [first, last] = layers(k);
  const int64_t rows = st.rows;
  DTensor x = k == 0 ? model.embed(pv, model.tokens(st.idx.slice(0, mb * rows, (mb + 1) * rows)),
                                   mb_options)
                     : w.input;
  x = model.blocks(pv, x, first, last, mb_options);
  if (k == last_k) {
    const DTensor loss = reduce_mean(sparse_softmax_cross_entropy_with_logits(
        model.tokens(st.targets.slice(0, mb * rows, (mb + 1) * rows)), model.head(pv, x)));
    st.loss_sum = add_or_take(st.loss_sum, loss);
    x = multiply(loss, st.loss_scale / m);
  }
  w.tape->stop_recording();
  w.output = x;
}

DTensor GptPipeline::backward(const train::PipelineAction& a, StepState& st,
                              const DTensor& output_gradient) const {
  // The stage's own collectives (its gradients' reductions over batch) have the transfers'
  // deadline.
  const RelayoutTimeoutScope deadline(options_.timeout);
  const int p = stages(), m = schedule_.microbatches;
  const int k = a.virtual_stage(p);
  StepState::Work& w = st.work[static_cast<size_t>(k * m + a.microbatch)];
  const std::vector<DTensor>& pv = st.views[static_cast<size_t>(a.stage)];
  if (schedule_.splits_backward()) {
    // The input's gradient only; the weights' wait on the tape for the W action.
    std::vector<DTensor> inputs;
    if (k > 0) inputs.push_back(w.input);
    const std::vector<DTensor> g = w.tape->backward_input(w.output, inputs, output_gradient);
    w.input = w.output = DTensor();  // the tape keeps what the weight gradients read
    return k > 0 ? g[0] : DTensor();
  }
  const std::vector<size_t> used = parameters_of(k);
  std::vector<DTensor> sources;
  if (k > 0) sources.push_back(w.input);
  for (size_t i : used) sources.push_back(pv[i]);
  std::vector<DTensor> g = w.tape->gradient(w.output, sources, output_gradient);
  w = StepState::Work{};  // the activations this microbatch kept here are let go
  DTensor input_gradient;
  if (k > 0) {
    input_gradient = g.front();
    g.erase(g.begin());
  }
  add_to_sums(k, g, st);
  return input_gradient;
}

void GptPipeline::weight_backward(const train::PipelineAction& a, StepState& st) const {
  const RelayoutTimeoutScope deadline(options_.timeout);  // the gradients' reductions over batch
  const int k = a.virtual_stage(stages());
  StepState::Work& w = st.work[static_cast<size_t>(k * schedule_.microbatches + a.microbatch)];
  const std::vector<DTensor>& pv = st.views[static_cast<size_t>(a.stage)];
  std::vector<DTensor> weights;
  for (size_t i : parameters_of(k)) weights.push_back(pv[i]);
  const std::vector<DTensor> g = w.tape->backward_weight(weights);
  w = StepState::Work{};  // the activations this microbatch kept here are let go
  add_to_sums(k, g, st);
}

void GptPipeline::add_to_sums(int k, const std::vector<DTensor>& grads, StepState& st) const {
  const std::vector<size_t> used = parameters_of(k);
  for (size_t j = 0; j < used.size(); ++j) {
    const size_t i = used[j];
    if (i == wte_ && k != 0) {
      st.wte_copy_sum = add_or_take(st.wte_copy_sum, grads[j]);
    } else {
      st.sums[i] = add_or_take(st.sums[i], grads[j]);
    }
  }
}

void GptPipeline::run_stage_threads(StepState& st, const Mover& move) const {
  const int p = stages(), m = schedule_.microbatches, last_k = schedule_.virtual_stages() - 1;
  const size_t backward_keys = st.work.size();  // forward inputs first, then backward gradients
  const auto key = [m](int k, int mb) { return static_cast<size_t>(k * m + mb); };
  Mailbox mail;
  std::vector<std::function<void()>> jobs;
  const int phase = detail::current_profile_phase();  // the trainer's, for the stage threads
  for (int s = 0; s < p; ++s) {
    jobs.emplace_back([&, s] {
      const detail::InheritedProfilePhase inherit(phase);
      try {
        for (const train::PipelineAction& a : schedule_.per_stage[static_cast<size_t>(s)]) {
          if (mail.failed()) return;
          if (options_.before_action) options_.before_action(a);
          if (a.pass == train::Pass::kWeight) {  // local: nothing moves
            weight_backward(a, st);
            continue;
          }
          const int k = a.virtual_stage(p), mb = a.microbatch;
          const bool forward_pass = a.pass == train::Pass::kForward;
          // What this action receives: the previous virtual stage's activation, or the next
          // one's gradient.
          DTensor received;
          if (forward_pass ? k > 0 : k < last_k) {
            const int from = forward_pass ? (k - 1) % p : (k + 1) % p;
            const std::string what =
                fmt::format("the {} of microbatch {}",
                            forward_pass ? "forward activation" : "backward gradient", mb);
            std::optional<DTensor> value =
                mail.take(forward_pass ? key(k, mb) : backward_keys + key(k, mb),
                          std::chrono::steady_clock::now() + options_.timeout, [&] {
                            return fmt::format(
                                "{} from stage {} to stage {} did not arrive "
                                "within {} ms (stage {} is late): it was not sent",
                                what, from, s, options_.timeout.count(), from);
                          });
            if (!value) return;  // another stage failed: its error ends the step
            received = std::move(*value);
          }
          if (forward_pass) {
            forward(a, st, received);
            if (k < last_k) {
              mail.put(key(k + 1, mb),
                       move(st.work[key(k, mb)].output, s, (k + 1) % p,
                            fmt::format("the forward activation of microbatch {}", mb)));
            }
            continue;
          }
          const DTensor g = backward(a, st, received);
          if (k > 0) {
            mail.put(
                backward_keys + key(k - 1, mb),
                move(g, s, (k - 1) % p, fmt::format("the backward gradient of microbatch {}", mb)));
          }
        }
      } catch (...) {
        mail.fail(std::current_exception(), /*waiting=*/false);
      }
    });
  }
  threads_->run(std::move(jobs));
  if (std::exception_ptr error = mail.error()) std::rethrow_exception(error);
}

void GptPipeline::run_one_controller(StepState& st, const Mover& move,
                                     const std::function<void()>& copy_wte) const {
  const int p = stages(), m = schedule_.microbatches, last_k = schedule_.virtual_stages() - 1;
  // One controller thread issues every action in the order of the simulated timeline, the
  // actions that start at the same simulated time as a group: first every transfer the group
  // receives, each fetched for the action that reads it (the previous virtual stage's
  // activation, the next one's gradient), then the group's work. A transfer across processes
  // holds this process's controller until the other side arrives, and issuing an action's
  // kernels holds it for about the action's run time (dispatch runs a few kernels ahead of a
  // device): a transfer fetched after a local action of the same time, or when its sender's
  // action started rather than when its reader's does, kept the neighbouring stage waiting
  // for data that was ready (the `baby` pipeline over 2 processes ran its stages in turn).
  std::vector<DTensor> output_gradients(st.work.size());
  const std::vector<train::TimedAction>& timeline = order_.timeline;
  std::vector<DTensor> received;
  for (size_t first = 0, end = 0; first < timeline.size(); first = end) {
    end = first + 1;
    while (end < timeline.size() && timeline[end].start <= timeline[first].start) ++end;
    received.assign(end - first, DTensor());
    for (size_t i = first; i < end; ++i) {
      const train::PipelineAction& a = timeline[i].action;
      if (options_.before_action) options_.before_action(a);
      const int k = a.virtual_stage(p), mb = a.microbatch;
      if (a.pass == train::Pass::kWeight) continue;  // receives nothing
      if (a.pass == train::Pass::kForward) {
        if (k > 0) {
          received[i - first] =
              move(st.work[static_cast<size_t>((k - 1) * m + mb)].output, (k - 1) % p, a.stage,
                   fmt::format("the forward activation of microbatch {}", mb));
        }
        if (k == last_k) copy_wte();
      } else if (k < last_k) {
        DTensor& sent = output_gradients[static_cast<size_t>(k * m + mb)];
        received[i - first] = move(sent, (k + 1) % p, a.stage,
                                   fmt::format("the backward gradient of microbatch {}", mb));
        sent = DTensor();
      }
    }
    // The group's work: each action on its stage's devices. A stage runs one action at a
    // time, so each action of a group is a different stage's; when several are in this
    // process they are issued at once, one thread each (issuing an action takes about its run
    // time), else one after the other here. Each stage's ops are the same, in the same order.
    const auto work = [&](size_t i) {
      const train::PipelineAction& a = timeline[i].action;
      const int k = a.virtual_stage(p), mb = a.microbatch;
      if (a.pass == train::Pass::kForward) {
        forward(a, st, std::move(received[i - first]));
        return;
      }
      if (a.pass == train::Pass::kWeight) {
        weight_backward(a, st);
        return;
      }
      const DTensor g = backward(a, st, received[i - first]);
      received[i - first] = DTensor();
      if (k > 0) output_gradients[static_cast<size_t>((k - 1) * m + mb)] = g;
    };
    std::vector<std::function<void()>> jobs(static_cast<size_t>(p));
    const int phase = detail::current_profile_phase();  // the trainer's, for the threads
    int local = 0;
    for (size_t i = first; i < end; ++i) {
      const int stage = timeline[i].action.stage;
      if (stage_mesh(stage).num_local_devices() > 0) ++local;
      std::function<void()>& job = jobs[static_cast<size_t>(stage)];
      job = [previous = std::move(job), i, &work, phase] {
        if (previous) {
          previous();
        }
        const detail::InheritedProfilePhase inherit(phase);
        work(i);
      };
    }
    if (local > 1 && threads_) {
      threads_->run(std::move(jobs));
    } else {
      for (const std::function<void()>& job : jobs) {
        if (job) job();
      }
    }
  }
}

PipelineGradients GptPipeline::gradients(const std::vector<DTensor>& params, const Tensor& idx,
                                         const Tensor& targets, const ForwardOptions& options,
                                         double loss_scale) const {
  check_params(params);
  const int p = stages(), m = schedule_.microbatches, last_k = schedule_.virtual_stages() - 1;
  if (idx.shape().rank() != 2 || idx.shape() != targets.shape() || idx.shape().dim(0) % m != 0) {
    invalid(
        fmt::format("token ids {} and targets {} must be [B, T] with B a multiple of the {} "
                    "microbatches",
                    idx.shape().to_string(), targets.shape().to_string(), m));
  }
  std::optional<train::PipelineIdleMeter> meter;
  const auto deadline = [this] { return std::chrono::steady_clock::now() + options_.timeout; };
  if (options_.measure_idle) meter.emplace(local_stage_devices(), deadline());
  // A transfer between stages, timed for the meter when there is one.
  const Mover move = [&](const DTensor& x, int from, int to, const std::string& what) {
    if (!meter) return transfer(x, from, to, what);
    return meter->transfer(from, to, [&] { return transfer(x, from, to, what); });
  };
  StepState st{idx, targets, options, idx.shape().dim(0) / m, {}, {}, {}, {}, {}, loss_scale};
  for (int s = 0; s < p; ++s) st.views.push_back(view(params, s, DTensor()));
  st.work.resize(static_cast<size_t>((last_k + 1) * m));
  st.sums.resize(params.size());
  // The last stage's copy of the tied embedding: made before the stage threads start, or by the
  // single controller when the last stage's first forward has its input (so that a stage=2 step
  // under mpirun first meets across the processes in the forward activation's transfer).
  const auto copy_wte = [&] {
    DTensor& copy = st.views[static_cast<size_t>(p - 1)][wte_];
    if (p > 1 && !copy.defined()) copy = move(params[wte_], 0, p - 1, "the tied token embedding");
  };
  if (stage_threads_) {
    copy_wte();
    run_stage_threads(st, move);
  } else {
    run_one_controller(st, move, copy_wte);
  }
  if (st.wte_copy_sum.defined()) {
    // The head's share of the tied embedding's gradient, sent back to stage 0.
    st.sums[wte_] = add_or_take(
        st.sums[wte_], move(st.wte_copy_sum, p - 1, 0, "the tied token embedding's gradient"));
  }
  std::optional<train::PipelineIdle> idle;
  if (meter) idle = meter->finish(deadline());
  return {scalar_of(everywhere(st.loss_sum)) / m, std::move(st.sums), std::move(idle)};
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
