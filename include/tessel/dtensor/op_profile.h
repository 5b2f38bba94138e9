// The op profile: where a program's time goes, per op and per phase of a step.
//
// Between start_op_profile() and stop_op_profile(), every op kernel a device runs is timed on the
// thread that runs it, and so is the allocation of every op's output blocks; the time relayouts
// spend in collectives (relayout_stats().seconds) is read at both ends. A ProfilePhase names the
// phase ("forward", "backward", "optimizer", ...) that the ops this thread launches while it
// lives count toward; ops launched outside any phase count toward "other".
//
// Times are device time summed over the devices (a 2x2 mesh running one op for 1 ms on each of
// its 4 devices adds 4 ms), as torch.profiler's "Self CPU total" sums its threads.
//
// A relayout's collectives count toward the phase of the thread that launched the relayout, per
// collective step ("all_reduce", "fused all_reduce", "all_gather", ...): collective_rows, apart
// from the kernels (a device's time in a collective includes its wait for the slowest peer).
// A gradient tape's final reduction of its sources' gradients runs in the phase "gradient
// reduction" (autodiff.h), so that its share of a training step can be read off the table.
//
//   tessel::start_op_profile();
//   { tessel::ProfilePhase p("forward");  loss = model.loss(x, y); }
//   { tessel::ProfilePhase p("backward"); grads = tape.gradient(loss, params); }
//   tessel::OpProfile profile = tessel::stop_op_profile();
//   std::cout << profile.table(/*steps=*/10);
//
// Profiling costs two clock reads and one short lock per kernel; off, one relaxed atomic load.
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessel {

struct OpProfileRow {
  std::string phase;   // the ProfilePhase the op was launched in, or "other"
  std::string op;      // the op's name, or "(allocate outputs)"
  int64_t calls = 0;   // device kernel calls (one per device block)
  double seconds = 0;  // summed over devices
};

struct OpProfile {
  std::vector<OpProfileRow> rows;  // by phase, then by seconds (most first)
  // The relayouts' collectives per phase and step: op is the step's name, calls one device's
  // part of one collective, seconds summed over devices; ordered as rows.
  std::vector<OpProfileRow> collective_rows;
  double wall_seconds = 0;        // from start_op_profile to stop_op_profile
  double collective_seconds = 0;  // relayouts' time in collectives (summed over devices)
  int64_t collectives = 0;        // relayout collectives run
  // Seconds per phase, summed over its rows (kernels; collectives not included).
  double phase_seconds(std::string_view phase) const;
  // Seconds in the relayouts' collectives launched in `phase`, summed over devices.
  double phase_collective_seconds(std::string_view phase) const;
  // A text table: per phase, its total and its ops (the `top` most expensive, the rest summed),
  // with ms per step (divided by `steps` >= 1) and the share of all kernel time; then the
  // collectives per phase and step, with their share of all collective time.
  std::string table(int64_t steps = 1, int top = 12) const;
};

// Clears what was recorded and starts recording (again, if it was on).
void start_op_profile();
// Stops recording and returns what was recorded since start_op_profile (empty if never started).
OpProfile stop_op_profile();
bool op_profile_enabled();

// Names the phase of the ops this thread launches while it lives; phases nest (the innermost
// counts) and end in reverse order. An empty name: kInvalidArgument.
class ProfilePhase {
 public:
  explicit ProfilePhase(std::string_view name);
  ~ProfilePhase();
  ProfilePhase(const ProfilePhase&) = delete;
  ProfilePhase& operator=(const ProfilePhase&) = delete;

 private:
  int previous_;
};

namespace detail {
// For the op launcher: the phase id this thread launches in, a clock read when profiling (else
// 0), and the record of one timed interval.
int current_profile_phase();
// Makes this thread launch in phase `phase` (another thread's current_profile_phase()) while it
// lives, then restores its own: worker threads count toward the phase of the thread that handed
// them their work (a pipeline's stage threads toward the trainer's).
class InheritedProfilePhase {
 public:
  explicit InheritedProfilePhase(int phase);
  ~InheritedProfilePhase();
  InheritedProfilePhase(const InheritedProfilePhase&) = delete;
  InheritedProfilePhase& operator=(const InheritedProfilePhase&) = delete;

 private:
  int previous_;
};
double profile_clock();
void record_profile(int phase, std::string_view op, double start);
// The same for one device's part of a relayout collective (collective_rows), `step` its name.
void record_collective_profile(int phase, std::string_view step, double start);
}  // namespace detail

}  // namespace tessel
