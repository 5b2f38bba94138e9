// Pipeline schedules: making them, checking them by simulation, printing them
// (pipeline_schedule.h).
#include "pipeline_schedule.h"

#include <algorithm>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "tessel/core/error.h"

namespace tessel::train {
namespace {

constexpr const char* kComponent = "pipeline";
constexpr int kMaxChartColumns = 240;  // wider time charts are left out of to_string()

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, kComponent, message);
}

[[noreturn]] void broken(const PipelineSchedule& s, const std::string& message) {
  throw Error(ErrorCode::kFailedPrecondition, kComponent,
              fmt::format("schedule {} ({} stages, {} microbatches, {} chunks): {}",
                          schedule_kind_name(s.kind), s.stages, s.microbatches, s.chunks, message));
}

void check_sizes(ScheduleKind kind, int p, int m, int v) {
  if (p < 1 || m < 1 || v < 1) {
    invalid(fmt::format("stages ({}), microbatches ({}) and chunks ({}) must be >= 1", p, m, v));
  }
  if (kind != ScheduleKind::kInterleaved1F1B && v != 1) {
    invalid(fmt::format("schedule {} runs one chunk per stage, got {} chunks (interleaved runs "
                        "several)",
                        schedule_kind_name(kind), v));
  }
  if (kind == ScheduleKind::kInterleaved1F1B) {
    if (v < 2) invalid(fmt::format("schedule interleaved needs >= 2 chunks per stage, got {}", v));
    if (m % p != 0) {
      invalid(fmt::format("schedule interleaved needs the microbatches ({}) to be a multiple of "
                          "the stages ({}): its forwards go in groups of one microbatch per stage",
                          m, p));
    }
  }
}

PipelineAction action(int stage, int chunk, int microbatch, Pass pass) {
  return PipelineAction{stage, chunk, microbatch, pass};
}

// 1F1B over a list of forwards and one of backwards (in the order they run): `warmup`
// forwards, then one forward and one backward alternately, then the remaining backwards.
std::vector<PipelineAction> one_forward_one_backward(const std::vector<PipelineAction>& forwards,
                                                     const std::vector<PipelineAction>& backwards,
                                                     size_t warmup) {
  std::vector<PipelineAction> out(forwards.begin(), forwards.begin() + warmup);
  size_t b = 0;
  for (size_t f = warmup; f < forwards.size(); ++f) {
    out.push_back(forwards[f]);
    out.push_back(backwards[b++]);
  }
  out.insert(out.end(), backwards.begin() + static_cast<std::ptrdiff_t>(b), backwards.end());
  return out;
}

// ZB-H1: `one_f_one_b` (stage s's 1f1b order, its backwards now input backwards B) with each
// weight backward W run `s` backwards after its B (the first s wait), the waiting ones last.
std::vector<PipelineAction> with_weight_backwards(const std::vector<PipelineAction>& one_f_one_b,
                                                  int s) {
  std::vector<PipelineAction> out, waiting;
  int backwards = 0;
  for (const PipelineAction& a : one_f_one_b) {
    out.push_back(a);
    if (a.pass != Pass::kBackward) continue;
    waiting.push_back(action(a.stage, a.chunk, a.microbatch, Pass::kWeight));
    if (++backwards > s) {
      out.push_back(waiting.front());
      waiting.erase(waiting.begin());
    }
  }
  out.insert(out.end(), waiting.begin(), waiting.end());
  return out;
}

std::vector<PipelineAction> stage_actions(ScheduleKind kind, int s, int p, int m, int v) {
  std::vector<PipelineAction> forwards, backwards;
  if (kind == ScheduleKind::kZeroBubble) {
    return with_weight_backwards(stage_actions(ScheduleKind::k1F1B, s, p, m, v), s);
  }
  if (kind != ScheduleKind::kInterleaved1F1B) {
    for (int mb = 0; mb < m; ++mb) {
      forwards.push_back(action(s, 0, mb, Pass::kForward));
      backwards.push_back(action(s, 0, mb, Pass::kBackward));
    }
    const size_t warmup = kind == ScheduleKind::kGPipe ? forwards.size()
                                                      : static_cast<size_t>(std::min(p - s - 1, m));
    return one_forward_one_backward(forwards, backwards, warmup);
  }
  // Megatron-LM's interleaved order: the k-th forward is of chunk (k mod p v) / p and of
  // microbatch (k / p v) p + k mod p; the backwards go through the chunks the other way.
  const int total = m * v;
  for (int k = 0; k < total; ++k) {
    const int chunk = (k % (p * v)) / p;
    const int mb = (k / (p * v)) * p + k % p;
    forwards.push_back(action(s, chunk, mb, Pass::kForward));
    backwards.push_back(action(s, v - 1 - chunk, mb, Pass::kBackward));
  }
  const int warmup = m == p ? total : std::min((p - s - 1) * 2 + (v - 1) * p, total);
  return one_forward_one_backward(forwards, backwards, static_cast<size_t>(warmup));
}

constexpr size_t kPasses = 3;  // forward, backward, weight

// Where an action's end time is kept: one slot per (pass, virtual stage, microbatch).
size_t slot(const PipelineSchedule& s, int virtual_stage, int microbatch, Pass pass) {
  return (static_cast<size_t>(pass) * static_cast<size_t>(s.virtual_stages()) +
          static_cast<size_t>(virtual_stage)) *
             static_cast<size_t>(s.microbatches) +
         static_cast<size_t>(microbatch);
}

// The passes each (virtual stage, microbatch) has in `s`.
std::vector<Pass> passes(const PipelineSchedule& s) {
  if (s.splits_backward()) return {Pass::kForward, Pass::kBackward, Pass::kWeight};
  return {Pass::kForward, Pass::kBackward};
}

std::string describe(const PipelineSchedule& s, int virtual_stage, int microbatch, Pass pass) {
  const PipelineAction a = action(virtual_stage % s.stages, virtual_stage / s.stages, microbatch,
                                  pass);
  return fmt::format("{} of stage {}", a.label(s.chunks > 1), a.stage);
}

// Every action on its own stage, chunk and microbatch in range, each (virtual stage,
// microbatch) with exactly one F and one B (and one W when the schedule splits backwards), in
// that order.
void check_actions(const PipelineSchedule& s) {
  if (static_cast<int>(s.per_stage.size()) != s.stages) {
    broken(s, fmt::format("{} action lists for {} stages", s.per_stage.size(), s.stages));
  }
  std::vector<int> seen(kPasses * static_cast<size_t>(s.virtual_stages() * s.microbatches), 0);
  for (int st = 0; st < s.stages; ++st) {
    for (const PipelineAction& a : s.per_stage[static_cast<size_t>(st)]) {
      const bool with_chunk = s.chunks > 1;
      if (a.stage != st || a.chunk < 0 || a.chunk >= s.chunks || a.microbatch < 0 ||
          a.microbatch >= s.microbatches) {
        broken(s, fmt::format("stage {} lists {} of stage {} (chunk {}, microbatch {}): out of "
                              "range or on another stage",
                              st, a.label(with_chunk), a.stage, a.chunk, a.microbatch));
      }
      const int vs = a.virtual_stage(s.stages);
      int& count = seen[slot(s, vs, a.microbatch, a.pass)];
      if (++count > 1) broken(s, fmt::format("stage {} runs {} twice", st, a.label(with_chunk)));
      if (a.pass == Pass::kWeight && !s.splits_backward()) {
        broken(s, fmt::format("stage {} lists {}: schedule {} does not split backwards", st,
                              a.label(with_chunk), schedule_kind_name(s.kind)));
      }
      if (a.pass == Pass::kBackward && seen[slot(s, vs, a.microbatch, Pass::kForward)] == 0) {
        broken(s, fmt::format("stage {} runs {} before its forward", st, a.label(with_chunk)));
      }
      if (a.pass == Pass::kWeight && seen[slot(s, vs, a.microbatch, Pass::kBackward)] == 0) {
        broken(s, fmt::format("stage {} runs {} before its input backward", st,
                              a.label(with_chunk)));
      }
    }
  }
  for (int vs = 0; vs < s.virtual_stages(); ++vs) {
    for (int mb = 0; mb < s.microbatches; ++mb) {
      for (Pass pass : passes(s)) {
        if (seen[slot(s, vs, mb, pass)] == 0) {
          broken(s, fmt::format("{} is missing", describe(s, vs, mb, pass)));
        }
      }
    }
  }
}

// The action `a` waits for besides its stage's previous one (none for the first virtual
// stage's forwards).
std::vector<size_t> dependencies(const PipelineSchedule& s, const PipelineAction& a) {
  const int vs = a.virtual_stage(s.stages);
  if (a.pass == Pass::kWeight) return {slot(s, vs, a.microbatch, Pass::kBackward)};
  if (a.pass == Pass::kForward) {
    if (vs == 0) return {};
    return {slot(s, vs - 1, a.microbatch, Pass::kForward)};
  }
  std::vector<size_t> deps{slot(s, vs, a.microbatch, Pass::kForward)};
  if (vs + 1 < s.virtual_stages()) deps.push_back(slot(s, vs + 1, a.microbatch, Pass::kBackward));
  return deps;
}

}  // namespace

ScheduleKind parse_schedule_kind(std::string_view name) {
  if (name == "gpipe") return ScheduleKind::kGPipe;
  if (name == "1f1b") return ScheduleKind::k1F1B;
  if (name == "interleaved") return ScheduleKind::kInterleaved1F1B;
  if (name == "zero-bubble") return ScheduleKind::kZeroBubble;
  invalid(fmt::format("unknown schedule '{}': expected gpipe, 1f1b, interleaved or zero-bubble",
                      name));
}

std::string_view schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe: return "gpipe";
    case ScheduleKind::k1F1B: return "1f1b";
    case ScheduleKind::kInterleaved1F1B: return "interleaved";
    case ScheduleKind::kZeroBubble: return "zero-bubble";
  }
  return "?";
}

std::string PipelineAction::label(bool with_chunk) const {
  const char pass_letter = pass == Pass::kForward ? 'F' : pass == Pass::kBackward ? 'B' : 'W';
  return with_chunk ? fmt::format("{}{}.{}", pass_letter, microbatch, chunk)
                    : fmt::format("{}{}", pass_letter, microbatch);
}

PipelineSchedule make_schedule(ScheduleKind kind, int stages, int microbatches, int chunks) {
  check_sizes(kind, stages, microbatches, chunks);
  PipelineSchedule s{kind, stages, microbatches, chunks, {}};
  for (int st = 0; st < stages; ++st) {
    s.per_stage.push_back(stage_actions(kind, st, stages, microbatches, chunks));
  }
  return s;
}

double bubble_formula(ScheduleKind kind, int stages, int microbatches, int chunks) {
  check_sizes(kind, stages, microbatches, chunks);
  const double p = stages, m = microbatches, v = chunks;
  // A zero-bubble stage's W's fill all but (p - 1) of its 3 m units (F, B, W one each).
  if (kind == ScheduleKind::kZeroBubble) return (p - 1) / (3 * m + p - 1);
  return (p - 1) / (v * m + p - 1);
}

double ScheduleSimulation::max_idle_fraction() const {
  return idle_fraction.empty() ? 0.0 : *std::max_element(idle_fraction.begin(), idle_fraction.end());
}

ScheduleSimulation simulate(const PipelineSchedule& s, double forward_cost, double backward_cost) {
  check_actions(s);
  std::vector<std::optional<double>> ended(kPasses *
                                          static_cast<size_t>(s.virtual_stages() * s.microbatches));
  const double split = s.splits_backward() ? 0.5 : 1.0;  // a split backward's share in B and W
  // Activations are let go at the end of the backward: W when split, else B.
  const Pass frees = s.splits_backward() ? Pass::kWeight : Pass::kBackward;
  std::vector<size_t> next(static_cast<size_t>(s.stages), 0);
  std::vector<double> free_at(static_cast<size_t>(s.stages), 0.0);
  ScheduleSimulation sim;
  sim.busy.assign(static_cast<size_t>(s.stages), 0.0);
  sim.max_in_flight.assign(static_cast<size_t>(s.stages), 0);
  std::vector<int> in_flight(static_cast<size_t>(s.stages), 0);
  size_t remaining = 0;
  for (const auto& actions : s.per_stage) remaining += actions.size();
  while (remaining > 0) {
    bool progressed = false;
    for (size_t st = 0; st < next.size(); ++st) {
      const auto& actions = s.per_stage[st];
      while (next[st] < actions.size()) {
        const PipelineAction& a = actions[next[st]];
        double start = free_at[st];
        bool ready = true;
        for (size_t dep : dependencies(s, a)) {
          if (!ended[dep]) {
            ready = false;
            break;
          }
          start = std::max(start, *ended[dep]);
        }
        if (!ready) break;
        const double cost = a.pass == Pass::kForward ? forward_cost : backward_cost * split;
        ended[slot(s, a.virtual_stage(s.stages), a.microbatch, a.pass)] = start + cost;
        free_at[st] = start + cost;
        sim.busy[st] += cost;
        in_flight[st] += a.pass == Pass::kForward ? 1 : a.pass == frees ? -1 : 0;
        sim.max_in_flight[st] = std::max(sim.max_in_flight[st], in_flight[st]);
        sim.timeline.push_back({a, start, start + cost});
        ++next[st];
        --remaining;
        progressed = true;
      }
    }
    if (!progressed) {
      std::vector<std::string> waits;
      for (size_t st = 0; st < next.size(); ++st) {
        if (next[st] >= s.per_stage[st].size()) continue;
        const PipelineAction& a = s.per_stage[st][next[st]];
        for (size_t dep : dependencies(s, a)) {
          if (ended[dep]) continue;
          const size_t per_pass = static_cast<size_t>(s.virtual_stages() * s.microbatches);
          const Pass pass = static_cast<Pass>(dep / per_pass);
          const int vs = static_cast<int>((dep % per_pass) / static_cast<size_t>(s.microbatches));
          const int mb = static_cast<int>(dep % static_cast<size_t>(s.microbatches));
          waits.push_back(fmt::format("stage {} at {} waits for {}", st, a.label(s.chunks > 1),
                                      describe(s, vs, mb, pass)));
          break;
        }
      }
      broken(s, fmt::format("deadlock: {}", fmt::join(waits, "; ")));
    }
  }
  for (double t : free_at) sim.makespan = std::max(sim.makespan, t);
  for (double b : sim.busy) sim.idle_fraction.push_back(sim.makespan > 0 ? 1 - b / sim.makespan : 0);
  std::stable_sort(sim.timeline.begin(), sim.timeline.end(),
                   [](const TimedAction& a, const TimedAction& b) {
                     return a.start != b.start ? a.start < b.start
                                               : a.action.stage < b.action.stage;
                   });
  return sim;
}

void check_schedule(const PipelineSchedule& schedule) { static_cast<void>(simulate(schedule)); }

std::string PipelineSchedule::to_string() const {
  const ScheduleSimulation sim = simulate(*this);
  const bool with_chunk = chunks > 1;
  std::ostringstream out;
  out << fmt::format(
      "schedule {}: {} stages x {} chunk{}, {} microbatches; bubble {} = {:.4f}, simulated "
      "idle {:.4f} on the idlest stage ({}); activations kept at most: {} "
      "microbatch{} per stage\n",
      schedule_kind_name(kind), stages, chunks, chunks == 1 ? "" : "s", microbatches,
      with_chunk               ? "(p-1)/(v*m+p-1)"
      : splits_backward()      ? "(p-1)/(3*m+p-1)"
                               : "(p-1)/(m+p-1)",
      bubble_formula(kind, stages, microbatches, chunks), sim.max_idle_fraction(),
      splits_backward() ? "forward 1, input backward 1, weight backward 1"
                        : "forward 1, backward 2",
      fmt::join(sim.max_in_flight, ", "), with_chunk ? " chunks" : "es");
  for (int st = 0; st < stages; ++st) {
    std::vector<std::string> labels;
    for (const PipelineAction& a : per_stage[static_cast<size_t>(st)]) {
      labels.push_back(a.label(with_chunk));
    }
    out << fmt::format("stage {}: {}\n", st, fmt::join(labels, " "));
  }
  const int columns = static_cast<int>(sim.makespan);
  if (columns > kMaxChartColumns) {
    out << fmt::format("(time chart left out: {} columns)\n", columns);
    return out.str();
  }
  size_t width = 1;
  for (const TimedAction& t : sim.timeline) width = std::max(width, t.action.label(with_chunk).size());
  std::vector<std::vector<std::string>> chart(static_cast<size_t>(stages),
                                              std::vector<std::string>(static_cast<size_t>(columns),
                                                                       "."));
  for (const TimedAction& t : sim.timeline) {
    for (int c = static_cast<int>(t.start); c < static_cast<int>(t.end); ++c) {
      chart[static_cast<size_t>(t.action.stage)][static_cast<size_t>(c)] =
          t.action.label(with_chunk);
    }
  }
  out << (splits_backward() ? "time (one column per forward, input backward or weight backward):\n"
                            : "time (one column per forward; a backward takes two):\n");
  for (int st = 0; st < stages; ++st) {
    out << fmt::format("stage {} |", st);
    for (const std::string& cell : chart[static_cast<size_t>(st)]) {
      out << fmt::format("{:<{}}|", cell, width);
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace tessel::train
