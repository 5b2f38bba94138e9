// op_profile.h: the recorder (one table under a lock) and the text table.
#include "tessel/dtensor/op_profile.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include "core/errors.h"
#include "tessel/dtensor/relayout.h"

namespace tessel {
namespace {

std::atomic<bool> g_enabled{false};
thread_local int t_phase = 0;  // index into Recorder::phases; 0 is "other"

struct Totals {
  int64_t calls = 0;
  double seconds = 0;
};

struct Recorder {
  std::mutex mu;
  std::vector<std::string> phases{"other"};
  std::map<std::pair<int, std::string>, Totals, std::less<>> totals;
  std::map<std::pair<int, std::string>, Totals, std::less<>> collective_totals;
  double started = 0;
  RelayoutStats relayouts_at_start;

  int phase_id(std::string_view name) {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < phases.size(); ++i) {
      if (phases[i] == name) return static_cast<int>(i);
    }
    phases.emplace_back(name);
    return static_cast<int>(phases.size() - 1);
  }
};

Recorder& recorder() {
  static auto* r = new Recorder();  // never destroyed: device threads may record at exit
  return *r;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void add(std::map<std::pair<int, std::string>, Totals, std::less<>>& to, int phase,
         std::string_view op, double start) {
  if (start == 0.0) return;  // not profiling when the interval began
  const double seconds = now() - start;
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  Totals& t = to[std::pair<int, std::string>(phase, std::string(op))];
  ++t.calls;
  t.seconds += seconds;
}

// Rows by the phase's first appearance in the recorder (its order of first use), then most time.
std::vector<OpProfileRow> sorted_rows(
    const Recorder& r, const std::map<std::pair<int, std::string>, Totals, std::less<>>& totals) {
  std::vector<OpProfileRow> rows;
  for (const auto& [key, t] : totals) {
    rows.push_back({r.phases[static_cast<size_t>(key.first)], key.second, t.calls, t.seconds});
  }
  std::stable_sort(rows.begin(), rows.end(), [&](const OpProfileRow& a, const OpProfileRow& b) {
    const auto pa = std::find(r.phases.begin(), r.phases.end(), a.phase);
    const auto pb = std::find(r.phases.begin(), r.phases.end(), b.phase);
    if (pa != pb) return pa < pb;
    return a.seconds > b.seconds;
  });
  return rows;
}

}  // namespace

namespace {

double seconds_in(const std::vector<OpProfileRow>& rows, std::string_view phase) {
  double total = 0;
  for (const OpProfileRow& row : rows) {
    if (row.phase == phase) total += row.seconds;
  }
  return total;
}

}  // namespace

double OpProfile::phase_seconds(std::string_view phase) const { return seconds_in(rows, phase); }

double OpProfile::phase_collective_seconds(std::string_view phase) const {
  return seconds_in(collective_rows, phase);
}

std::string OpProfile::table(int64_t steps, int top) const {
  steps = std::max<int64_t>(steps, 1);
  double kernels = 0;
  for (const OpProfileRow& row : rows) kernels += row.seconds;
  const auto ms = [&](double s) { return 1e3 * s / static_cast<double>(steps); };
  const auto share = [&](double s) { return kernels > 0 ? 100.0 * s / kernels : 0.0; };
  size_t w = 12;  // the phase column: the longest phase name
  for (const auto* list : {&rows, &collective_rows}) {
    for (const OpProfileRow& row : *list) w = std::max(w, row.phase.size());
  }
  std::string out = fmt::format("{:<{}} {:<44} {:>9} {:>12} {:>7}\n", "phase", w, "op",
                                "calls/step", "ms/step", "share");
  std::vector<std::string> phase_order;
  for (const OpProfileRow& row : rows) {
    if (std::find(phase_order.begin(), phase_order.end(), row.phase) == phase_order.end()) {
      phase_order.push_back(row.phase);
    }
  }
  for (const std::string& phase : phase_order) {
    const double total = phase_seconds(phase);
    out += fmt::format("{:<{}} {:<44} {:>9} {:>12.3f} {:>6.1f}%\n", phase, w, "(all ops)", "",
                       ms(total), share(total));
    int shown = 0;
    double rest = 0;
    int64_t rest_calls = 0;
    for (const OpProfileRow& row : rows) {
      if (row.phase != phase) continue;
      if (shown++ < top) {
        out += fmt::format("{:<{}} {:<44} {:>9.1f} {:>12.3f} {:>6.1f}%\n", "", w, row.op,
                           static_cast<double>(row.calls) / static_cast<double>(steps),
                           ms(row.seconds), share(row.seconds));
      } else {
        rest += row.seconds;
        rest_calls += row.calls;
      }
    }
    if (shown > top) {
      out += fmt::format("{:<{}} {:<44} {:>9.1f} {:>12.3f} {:>6.1f}%\n", "", w,
                         fmt::format("({} other ops)", shown - top),
                         static_cast<double>(rest_calls) / static_cast<double>(steps), ms(rest),
                         share(rest));
    }
  }
  // The collectives per phase and step, their share of all collective time.
  double in_collectives = 0;
  for (const OpProfileRow& row : collective_rows) in_collectives += row.seconds;
  for (const OpProfileRow& row : collective_rows) {
    out += fmt::format("{:<{}} {:<44} {:>9.1f} {:>12.3f} {:>6.1f}%\n", row.phase, w,
                       "(collective) " + row.op,
                       static_cast<double>(row.calls) / static_cast<double>(steps), ms(row.seconds),
                       in_collectives > 0 ? 100.0 * row.seconds / in_collectives : 0.0);
  }
  out += fmt::format("{:<{}} {:<44} {:>9} {:>12.3f}\n", "all", w, "kernels, summed over devices",
                     "", ms(kernels));
  out += fmt::format(
      "{:<{}} {:<44} {:>9.1f} {:>12.3f}\n", "all", w, "relayout collectives, summed over devices",
      static_cast<double>(collectives) / static_cast<double>(steps), ms(collective_seconds));
  out +=
      fmt::format("{:<{}} {:<44} {:>9} {:>12.3f}\n", "all", w, "wall clock", "", ms(wall_seconds));
  return out;
}

void start_op_profile() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  r.totals.clear();
  r.collective_totals.clear();
  r.relayouts_at_start = relayout_stats();
  r.started = now();
  g_enabled.store(true, std::memory_order_release);
}

OpProfile stop_op_profile() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  OpProfile profile;
  if (!g_enabled.exchange(false)) return profile;
  profile.wall_seconds = now() - r.started;
  const RelayoutStats end = relayout_stats();
  profile.collective_seconds = end.seconds - r.relayouts_at_start.seconds;
  profile.collectives = end.collectives - r.relayouts_at_start.collectives;
  profile.rows = sorted_rows(r, r.totals);
  profile.collective_rows = sorted_rows(r, r.collective_totals);
  r.totals.clear();
  r.collective_totals.clear();
  return profile;
}

bool op_profile_enabled() { return g_enabled.load(std::memory_order_relaxed); }

ProfilePhase::ProfilePhase(std::string_view name) : previous_(t_phase) {
  if (name.empty()) detail::throw_invalid("ProfilePhase", "the phase name is empty");
  t_phase = recorder().phase_id(name);
}

ProfilePhase::~ProfilePhase() { t_phase = previous_; }

namespace detail {

int current_profile_phase() { return t_phase; }

InheritedProfilePhase::InheritedProfilePhase(int phase) : previous_(t_phase) { t_phase = phase; }

InheritedProfilePhase::~InheritedProfilePhase() { t_phase = previous_; }

double profile_clock() { return g_enabled.load(std::memory_order_relaxed) ? now() : 0.0; }

void record_profile(int phase, std::string_view op, double start) {
  add(recorder().totals, phase, op, start);
}

void record_collective_profile(int phase, std::string_view step, double start) {
  add(recorder().collective_totals, phase, step, start);
}

}  // namespace detail
}  // namespace tessel
