// Pipeline schedules as data: for p stages, m microbatches and v model chunks per stage (virtual
// stages), the ordered forward and backward actions each stage runs in a training step, made
// and checked before anything runs (docs/pipeline.md).
//
//   PipelineSchedule s = make_schedule(ScheduleKind::k1F1B, /*stages=*/2, /*microbatches=*/8);
//   check_schedule(s);                      // kFailedPrecondition naming a deadlock or a bad order
//   std::cout << s.to_string();             // `tessel train gpt --print-schedule`
//   ScheduleSimulation sim = simulate(s);   // idle fraction per stage, in-flight activations
//   double b = bubble_formula(s.kind, 2, 8, 1);   // (p - 1) / (m + p - 1) = 1/9
//
// The model is cut into p * v pieces, the virtual stages 0 .. p v - 1 in the model's order;
// virtual stage k runs on stage k % p as its chunk k / p (Megatron's interleaving: with v = 1,
// stage s holds the piece s). Dependencies: F(k, mb) needs F(k - 1, mb) (its input activation),
// B(k, mb) needs F(k, mb) and B(k + 1, mb) (its output's gradient); the last virtual stage's
// B(mb) needs only its own F(mb) (the loss is computed there). A zero-bubble schedule splits
// each backward in two: B(k, mb) computes only its input's gradient (what the previous stage
// waits for), W(k, mb) the weights' gradients later, after B(k, mb) on the same stage
// (GradientTape::backward_input / backward_weight).
//
// Schedules:
// - gpipe: every stage all its forwards, then all its backwards, microbatches in order; keeps
//   m microbatches' activations per stage. Any m >= 1.
// - 1f1b (PipeDream-flush): stage s runs min(p - s - 1, m) forwards, then one forward and one
//   backward alternately, then the remaining backwards; keeps at most p microbatches'
//   activations. Any m >= 1 (m < p is valid, with a larger bubble).
// - interleaved (Narayanan et al. 2021, Megatron-LM's interleaved 1F1B): v >= 2 chunks per
//   stage, forwards in groups of p microbatches per chunk, warm-up (p - s - 1) * 2 + (v - 1) * p
//   forwards (all of them when m == p); needs m to be a multiple of p (kInvalidArgument naming
//   m and p otherwise).
// - zero-bubble (ZB-H1 of Qi et al. 2024, "Zero Bubble Pipeline Parallelism"): 1f1b's order of
//   forwards and input backwards B; stage s runs each W s backwards after its B (the first s
//   W's wait), the waiting ones at the end, so the W's fill the time a stage would wait for a
//   gradient. At most p microbatches' activations on every stage (1f1b's stage 0); any m >= 1.
// The bubble (idle fraction of a step) of gpipe and 1f1b is (p - 1) / (m + p - 1); interleaving
// cuts it to (p - 1) / (v m + p - 1); zero-bubble to (p - 1) / (3 m + p - 1) when F, B and W take
// the same time and m >= p (bubble_formula). simulate() measures it on the schedule itself (unit
// costs: a chunk's forward 1, its backward 2, split as B 1 and W 1), and the CLI prints both.
//
// Errors: stages, microbatches or chunks < 1, v != 1 for gpipe or 1f1b, v < 2 or m % p != 0
// for interleaved: kInvalidArgument from "pipeline" naming the values. check_schedule throws
// kFailedPrecondition naming the action and what it waits for.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tessel::train {

enum class ScheduleKind { kGPipe, k1F1B, kInterleaved1F1B, kZeroBubble };

// "gpipe", "1f1b", "interleaved", "zero-bubble"; another name: kInvalidArgument listing them.
ScheduleKind parse_schedule_kind(std::string_view name);
std::string_view schedule_kind_name(ScheduleKind kind);

// kBackward: the whole backward pass of an action, or only its input's gradient when the
// schedule splits backwards (zero-bubble), kWeight then its weights' gradients.
enum class Pass { kForward, kBackward, kWeight };

struct PipelineAction {
  int stage = 0;
  int chunk = 0;  // the model chunk on this stage: virtual stage chunk * stages + stage
  int microbatch = 0;
  Pass pass = Pass::kForward;
  int virtual_stage(int stages) const { return chunk * stages + stage; }
  // "F3" / "B3" / "W3"; with chunks, "F3.1" (microbatch 3, chunk 1).
  std::string label(bool with_chunk) const;
  friend bool operator==(const PipelineAction&, const PipelineAction&) = default;
};

struct PipelineSchedule {
  ScheduleKind kind = ScheduleKind::k1F1B;
  int stages = 1;
  int microbatches = 1;
  int chunks = 1;  // model chunks per stage (v)
  // The actions of each stage, in the order that stage runs them.
  std::vector<std::vector<PipelineAction>> per_stage;

  int virtual_stages() const { return stages * chunks; }
  // Whether each backward is two actions, B and W (zero-bubble).
  bool splits_backward() const { return kind == ScheduleKind::kZeroBubble; }
  // A header line (kind, sizes, the formula's bubble and the simulated one, the most
  // microbatches in flight per stage), each stage's actions, and a time chart of the
  // simulation (a column per unit of time: a forward 1, a backward 2, or B 1 and W 1).
  std::string to_string() const;
};

// The schedule of `kind` (see above for the requirements on the sizes).
PipelineSchedule make_schedule(ScheduleKind kind, int stages, int microbatches, int chunks = 1);

// (p - 1) / (m + p - 1) for gpipe and 1f1b; (p - 1) / (v m + p - 1) for interleaved;
// (p - 1) / (3 m + p - 1) for zero-bubble (F, B and W of equal cost, m >= p).
double bubble_formula(ScheduleKind kind, int stages, int microbatches, int chunks = 1);

struct TimedAction {
  PipelineAction action;
  double start = 0;
  double end = 0;
};

// The schedule run with each stage executing its actions in order, each as soon as the stage is
// free and the actions it depends on have ended (transfers take no time).
struct ScheduleSimulation {
  double makespan = 0;
  std::vector<double> busy;          // per stage: the time it computes
  std::vector<double> idle_fraction;  // per stage: 1 - busy / makespan
  // Per stage: the most microbatch chunks whose forward has run and whose backward (W when the
  // backward is split) has not (the activations the stage keeps at once).
  std::vector<int> max_in_flight;
  // Every action with its times, ordered by start (ties by stage): an order in which one
  // thread can issue the whole schedule.
  std::vector<TimedAction> timeline;
  double max_idle_fraction() const;
};

// Simulates `schedule` (forward_cost, backward_cost: one chunk's; a split backward's B and W
// each half of it). A schedule that cannot run to its end (a deadlock: each stage left waits for
// an action that waits on it) or whose actions are not one F and one B (and one W when split)
// per (virtual stage, microbatch) on the right stage, F before B before W:
// kFailedPrecondition naming the stage, the action and what it waits for.
ScheduleSimulation simulate(const PipelineSchedule& schedule, double forward_cost = 1.0,
                            double backward_cost = 2.0);

// simulate()'s checks only.
void check_schedule(const PipelineSchedule& schedule);

}  // namespace tessel::train
