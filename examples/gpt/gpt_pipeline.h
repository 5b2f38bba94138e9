// The GPT cut into pipeline stages (docs/pipeline.md): a mesh `stage x batch x model`, each
// stage's layers and parameters on its sub-mesh (batch x model: data and tensor parallel within
// the stage as GptModel is), the activations and their gradients moved between neighbouring
// stages by relayouts to the other stage's sub-mesh (one send_recv each), the microbatches run
// in the order of a schedule (train::PipelineSchedule: gpipe, 1f1b, interleaved or
// zero-bubble), their gradients accumulated.
//
//   Mesh mesh = parse_mesh("stage=2,batch=1,model=2");
//   GptPipeline pipe(GptConfig::preset("tiny"), mesh,
//                    {.schedule = train::ScheduleKind::k1F1B, .microbatches = 4});
//   std::vector<DTensor> params = pipe.init(1337);          // each on its stage's sub-mesh
//   PipelineGradients g = pipe.gradients(params, idx, targets, {.training = true});
//   auto [clipped, norm] = pipe.clip_by_global_norm(g.gradients, 1.0);
//
// Several processes (mpirun, the mesh made by create_distributed_mesh): every process runs the
// same schedule; ops on a stage whose devices are all elsewhere do nothing here (their DTensors
// have no local components), and the transfers between two processes' stages are relayouts
// across them. The loss, the gradient norm and the logits are brought to every stage's devices
// before they are read, so every process reports the same values.
//
// Placement: the n_layer blocks are split over the p * v virtual stages in order (the first
// n_layer % (p v) get one more), virtual stage k on stage k % p (Megatron's interleaving); the
// token and position embeddings live with the first, the final layer norm with the last. The
// tied token embedding is also the last stage's head: each step copies it there (one send_recv)
// and sends that copy's gradient back, added to the embedding's own (Megatron's tied-embedding
// all-reduce). Parameter names are GptModel's whatever the split: a checkpoint of a pipelined
// run restores onto a plain mesh and back.
//
// A step's loss is the mean of the microbatches' mean losses (each microbatch's loss scaled by
// 1/m before its backward pass): the non-pipelined loss of the same batch, up to rounding.
// Dropout masks are keyed per microbatch (the step's seed and the microbatch), so with dropout
// the masks differ from a non-pipelined run's.
//
// Faults: a transfer that does not complete by options.timeout (a stage that never sends or
// never receives) is kDeadlineExceeded from "pipeline" naming the late stage (the one whose
// device the relayout names), the microbatch, the direction (forward activation or backward
// gradient) and both stages, the relayout's error after it; it ends by the timeout + 10 %
// (+ 50 ms). Any other failure of a transfer keeps its code and gets the same names. With stage
// threads (the default in one process) a stage that waits longer than the timeout for what a
// neighbour sends names that neighbour ("... (stage 0 is late): it was not sent"), unless a
// stage's own work failed too (a launch or transfer that ran out names the late device): that
// error is thrown, once every stage's thread has ended, up to two timeouts after the stall.
//
// Errors before anything runs (kInvalidArgument from "pipeline" naming the values): a mesh whose
// first dimension is not `stage`; fewer layers than virtual stages; a batch size that does not
// split into the microbatches; the schedule's own (pipeline_schedule.h: interleaved needs m a
// multiple of p and v >= 2).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpt_config.h"
#include "gpt_model.h"
#include "pipeline_idle.h"
#include "pipeline_schedule.h"
#include "stage_threads.h"
#include "tessel/core/tensor.h"
#include "tessel/dtensor/dtensor.h"
#include "tessel/mesh/mesh.h"
#include "tessel/runtime/runtime.h"

namespace tessel::gpt {

// Who issues a pipelined step's actions (PipelineOptions::controllers).
enum class Controllers { kAuto, kOneController, kStageThreads };
// "auto", "one controller", "stage threads".
const char* controllers_name(Controllers c);

struct PipelineOptions {
  train::ScheduleKind schedule = train::ScheduleKind::k1F1B;
  int microbatches = 1;
  int chunks = 1;  // model chunks per stage (interleaved: >= 2)
  // The deadline of each transfer between stages (the relayout's timeout).
  std::chrono::milliseconds timeout{60000};
  // Called before each action of a step runs (tracing; the tests stall a stage here).
  std::function<void(const train::PipelineAction&)> before_action = nullptr;
  // gradients() measures each stage's idle time and its transfers' (pipeline_idle.h: the
  // devices' streams drained before the schedule's first action and after its last transfer,
  // which costs the overlap of a step's schedule with the work before and after it).
  bool measure_idle = false;
  // Who issues a step's actions (docs/pipeline.md, "Stage threads"; GptPipeline::
  // stage_threads() says which a pipeline took).
  //   kAuto (the default): a thread per stage when every device of the mesh is in this process
  //     (and there are 2 stages or more), else (a stage per process under mpirun) one
  //     controller per process.
  //   kOneController: one thread issues every action, in the simulated timeline's order (the
  //     groups of actions that start together issued at once, a thread each, when several
  //     stages are in this process).
  //   kStageThreads: a controller thread per stage: each issues its stage's actions in the
  //     schedule's order, sends what its actions produce to the neighbouring stage as soon as
  //     they are enqueued, and waits (up to `timeout`) for what its actions receive, so a stage's
  //     work is not held behind another stage's transfer. One process only (every stage's
  //     devices local: kInvalidArgument otherwise).
  // With stage threads, before_action is called from the stage's thread.
  Controllers controllers = Controllers::kAuto;
};

// The sub-meshes of a mesh along its first dimension: for each index of that dimension, the
// mesh of the remaining dimensions over those devices (global ids, local devices and global
// device names kept). A mesh of rank < 2: kInvalidArgument.
std::vector<Mesh> stage_meshes(const Mesh& mesh);

struct PipelineGradients {
  double loss = 0;                 // the mean of the microbatches' mean losses
  std::vector<DTensor> gradients;  // in the parameters' order and layouts, reduced
  // With PipelineOptions::measure_idle: the schedule's window, each stage's idle and transfers.
  std::optional<train::PipelineIdle> idle;
};

class GptPipeline {
 public:
  // `mesh`: stage first, then the dimensions of GptModel's meshes (batch, model).
  GptPipeline(GptConfig config, const Mesh& mesh, PipelineOptions options,
              Runtime* runtime = nullptr, bool sequence_parallel = false);

  const GptConfig& config() const { return config_; }
  int stages() const { return static_cast<int>(models_.size()); }
  const train::PipelineSchedule& schedule() const { return schedule_; }
  const PipelineOptions& options() const { return options_; }
  // Whether a step runs a controller thread per stage (options().controllers resolved against
  // the mesh: kAuto takes them when every device of the mesh is in this process).
  bool stage_threads() const { return stage_threads_; }
  const Mesh& stage_mesh(int stage) const { return models_.at(static_cast<size_t>(stage)).mesh(); }
  // The model on a stage's sub-mesh (its registry gives the layouts there).
  const GptModel& stage_model(int stage) const { return models_.at(static_cast<size_t>(stage)); }
  // Layers [first, last) of virtual stage k (0 .. p v - 1).
  std::pair<int, int> layers(int virtual_stage) const;
  // The stage a parameter (GptModel's order) lives on.
  int stage_of(size_t parameter) const { return placement_.at(parameter); }
  const std::vector<std::string>& names() const { return models_.front().names(); }
  // Each parameter's layout on its stage's sub-mesh.
  std::vector<Layout> layouts() const;
  // GptModel::init(seed)'s values (keyed by seed, parameter and global index), each parameter
  // made on its own stage only.
  std::vector<DTensor> init(uint64_t seed) const;

  // The loss and the accumulated gradients of host token ids and targets [B, T] (B the
  // configuration's batch size), running schedule(); the gradients are those of the loss times
  // `loss_scale` (dynamic loss scaling; the loss reported is unscaled). Wrong parameter count or
  // batch shape: kInvalidArgument.
  PipelineGradients gradients(const std::vector<DTensor>& params, const Tensor& idx,
                              const Tensor& targets, const ForwardOptions& options,
                              double loss_scale = 1.0) const;
  // Logits [B, T, V] of host token ids [B, T] (on every stage's devices: the mesh's layout, its
  // stage dimension replicated), the whole batch through the stages in turn (no microbatches, no
  // tape); loss() their mean cross-entropy.
  DTensor logits(const std::vector<DTensor>& params, const Tensor& idx) const;
  double loss(const std::vector<DTensor>& params, const Tensor& idx, const Tensor& targets) const;
  // Each stage's figures of `idle` (a window this process measured, gradients()' idle or a sum
  // of them) as the process holding the stage's devices measured them, on every process: under
  // mpirun a stage on another process has devices 0 here and its figures there. Each stage's
  // transfer time is then recomputed from every process's transfer log, a transfer counting the
  // shorter of its two sides' times (train::transfer_seconds_across: a side's time includes its
  // wait for the other process, and the side that arrived last waited for nobody). A collective
  // when the mesh spans processes (every process calls it, in the same order as its other
  // collectives; a few relayouts per stage); in one process `idle` itself. The wall time,
  // windows and transfer count stay this process's. `idle` without one figure per stage:
  // kInvalidArgument.
  train::PipelineIdle idle_everywhere(const train::PipelineIdle& idle) const;
  // The gradients scaled to global norm at most clip_norm, the norm summed over every stage's
  // gradients (clip_by_global_norm's arithmetic: scale clip_norm / max(norm, clip_norm)), and
  // that norm.
  std::pair<std::vector<DTensor>, double> clip_by_global_norm(const std::vector<DTensor>& grads,
                                                              double clip_norm) const;

 private:
  struct StepState;  // a step's activations, tapes and sums (gpt_pipeline.cpp)
  // A transfer between stages (transfer(), timed when the idle is measured).
  using Mover = std::function<DTensor(const DTensor&, int, int, const std::string&)>;
  // Action `a`'s forward on `input` (null for the first virtual stage): its tape recorded, its
  // output kept in `st`.
  void forward(const train::PipelineAction& a, StepState& st, DTensor input) const;
  // Action `a`'s backward given its output's gradient (null for the last virtual stage): the
  // parameters' gradients added to the sums, the input's gradient returned (null for the first).
  // When the schedule splits backwards (zero-bubble), only the input's gradient: the
  // parameters' wait on the microbatch's tape for weight_backward (the W action).
  DTensor backward(const train::PipelineAction& a, StepState& st,
                   const DTensor& output_gradient) const;
  void weight_backward(const train::PipelineAction& a, StepState& st) const;
  // Virtual stage k's parameters' gradients (in parameters_of(k)'s order) added to the sums.
  void add_to_sums(int k, const std::vector<DTensor>& grads, StepState& st) const;
  // Every stage's actions, each stage on its own thread (stage_threads()).
  void run_stage_threads(StepState& st, const Mover& move) const;
  // Every action from this thread, in the simulated timeline's order (gradients()); copy_wte
  // makes the last stage's copy of the tied embedding before its first forward.
  void run_one_controller(StepState& st, const Mover& move,
                          const std::function<void()>& copy_wte) const;
  // The parameters as stage `stage` reads them: the last stage's token embedding is `wte_copy`
  // (when it is not stage 0).
  std::vector<DTensor> view(const std::vector<DTensor>& params, int stage,
                            const DTensor& wte_copy) const;
  // The whole batch through the stages in turn (no microbatches, no tape): the logits, or with
  // targets the mean loss, on every stage (everywhere()).
  DTensor whole_batch(const std::vector<DTensor>& params, const Tensor& idx,
                      const Tensor* targets) const;
  // The parameters virtual stage k reads (indices into the params vector).
  std::vector<size_t> parameters_of(int virtual_stage) const;
  // `x` (a value of one stage) on every stage, its sharding kept over batch and model: what every
  // process can read when the stages are on different processes (the loss, the norm, logits).
  DTensor everywhere(const DTensor& x) const;
  // `x` (on stage `from`) on stage `to`'s sub-mesh, its sharding kept and pending sums reduced;
  // `what` names it in errors ("the forward activation of microbatch 3").
  DTensor transfer(const DTensor& x, int from, int to, const std::string& what) const;
  void check_params(const std::vector<DTensor>& params) const;
  // Each stage's devices of this process (the idle meter's view).
  std::vector<std::vector<Device*>> local_stage_devices() const;

  GptConfig config_;
  Mesh mesh_;  // stage x batch x model
  PipelineOptions options_;
  Runtime* runtime_;
  std::vector<GptModel> models_;  // one per stage
  train::PipelineSchedule schedule_;
  train::ScheduleSimulation order_;  // the timeline the single controller thread follows
  std::vector<int> placement_;       // stage of each parameter
  bool stage_threads_ = false;       // options_.controllers resolved (stage_threads())
  size_t wte_ = 0, wpe_ = 0, ln_f_ = 0;
  // With stage threads, or one controller with several stages in this process: a thread per
  // stage (the stage's actions, or the single controller's groups of actions).
  std::shared_ptr<train::StageThreads> threads_;
};

}  // namespace tessel::gpt
