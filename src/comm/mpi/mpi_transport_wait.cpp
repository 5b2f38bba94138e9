// How an MpiTransport waits (comm/mpi/mpi_transport.h): every wait is poll_until (mpi_env.h)
// with the transport's pacing and chores (abort records, pings, finished sends, the local pid
// watch); wait_collective for MPI's own collectives, which say nothing about who is missing,
// probes the peers before the deadline; watch_stuck wires the operation to the stuck-call
// watchdog.

#include "comm/mpi/mpi_transport.h"
#include "core/errors.h"
#include "tessel/core/parallel.h"

namespace tessel::detail {
namespace {

// How often a wait checks that the processes of peers on this host still exist.
constexpr auto kWatchInterval = std::chrono::milliseconds(100);
// How long before a library collective's deadline its peers are probed for liveness (they answer
// from any wait, within microseconds when alive and waiting).
constexpr auto kProbeGrace = std::chrono::milliseconds(200);
// A wait polls without pause (as MPI's own blocking calls do) for kSpinTime, or only
// kOversubscribedSpinTime when this host runs more processes of the group than it has cores,
// then yields the CPU between polls, and after kSleepAfter sleeps kSleep between polls (a peer
// that late is not a hot path). Yielding early under oversubscription lets the peer that is
// being waited for run; without it, yielding would hand the core to unrelated processes in the
// middle of a transfer that only progresses while this process polls.
constexpr auto kSpinTime = std::chrono::milliseconds(20);
constexpr auto kOversubscribedSpinTime = std::chrono::microseconds(100);
constexpr auto kSleepAfter = std::chrono::seconds(1);
constexpr auto kSleep = std::chrono::microseconds(200);

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Clock::duration MpiTransport::spin_time_for(int here) {
  return here > machine_cores() ? std::chrono::duration_cast<Clock::duration>(kOversubscribedSpinTime)
                      : std::chrono::duration_cast<Clock::duration>(kSpinTime);
}

void MpiTransport::wait(const std::function<bool()>& poll, const Signature& signature,
                        Deadline deadline, const std::function<void(double)>& on_deadline) {
  const auto start = Clock::now();
  const PollPacing pacing{spin_time_, kSleepAfter, kSleep, kSleep};
  // Every poll first hears of aborts and answers pings; a poll that finds nothing reaps the
  // finished sends. While the group is being made, an abort record is a peer's later news: it
  // waits for the first wait after construction.
  auto chores_and_poll = [&] {
    if (!constructing_) {
      poll_aborts();
      answer_pings();
    }
    if (poll()) return true;
    reap_sends();
    return false;
  };
  PeriodicCheck watch;
  if (watch_local_peers_ && peers_.size() == static_cast<size_t>(size_)) {
    watch = {kWatchInterval, [&](double waited) { watch_peers(signature, waited); }};
  }
  if (poll_until(deadline, pacing, chores_and_poll, watch)) return;
  on_deadline(seconds_between(start, Clock::now()));
  // on_deadline throws; should one not, the caller must not read a result that never came.
  throw_error(ErrorCode::kInternal, kComponent, "{} passed the deadline of {} (sequence {})",
              who(rank_), signature.describe(members_), signature.sequence);
}

void MpiTransport::wait_collective(MPI_Request& request, std::string_view what,
                                   const Signature& signature, Deadline deadline) {
  // The library does not say who is missing when it does not complete. kProbeGrace before the
  // deadline every peer is asked whether it is alive; at the deadline the silent ones are named.
  uint64_t probe = 0;
  std::vector<bool> answered(static_cast<size_t>(size_), false);
  auto poll = [&] {
    int done = 0, rc = MPI_SUCCESS;
    {
      MpiCallLock lock;
      rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    }
    if (rc != MPI_SUCCESS) fail_naming_lost_peer(rc, what);
    if (done != 0) return true;
    if (probe == 0 && Clock::now() >= deadline - kProbeGrace) probe = start_probe();
    if (probe != 0) collect_pongs(probe, answered);
    return false;
  };
  auto on_deadline = [&](double waited) {
    std::vector<std::string> silent;
    for (int r = 0; r < size_; ++r) {
      if (!answered[static_cast<size_t>(r)]) silent.push_back(who(r));
    }
    const std::string missing =
        silent.empty() ? std::string("every rank answered a liveness probe: one is late")
                       : fmt::format("no answer to a liveness probe sent {} ms before the deadline "
                                     "from {}",
                                     kProbeGrace.count(), fmt::join(silent, ", "));
    const std::string message = fmt::format(
        "{} waited {:.3f} s in {} (sequence {}): {} did not complete; {}", who(rank_), waited,
        signature.describe(members_), signature.sequence, what, missing);
    abort_group(message, /*tell_peers=*/true);
    throw Error(ErrorCode::kDeadlineExceeded, kComponent, message);
  };
  wait(poll, signature, deadline, on_deadline);
}

// ---- the stuck-call watchdog ------------------------------------------------------------------

StuckWaitWatchdog::Watch MpiTransport::watch_stuck(const Signature& signature, Deadline deadline,
                                                   const std::atomic<int>* waiting_for) const {
  if (stuck_exit_after_.count() <= 0) return {};
  return StuckWaitWatchdog::global().watch(
      deadline + stuck_exit_after_, [this, &signature, waiting_for](double late) {
        const int rank = waiting_for ? waiting_for->load(std::memory_order_relaxed) : -1;
        return describe_stuck(signature, rank, late);
      });
}

std::string MpiTransport::describe_stuck(const Signature& signature, int waiting_for,
                                         double late) const {
  const double past = late + std::chrono::duration<double>(stuck_exit_after_).count();
  return fmt::format(
      "{} is stuck inside the MPI library {:.1f} s after the deadline of {} (sequence {}){}: the "
      "MPI call it polls has not returned (Open MPI 4.1's TCP transport can deadlock this way "
      "after losing a peer); ending the process with status {} "
      "(MpiCommunicatorOptions::stuck_exit_after, 0 turns this off)",
      who(rank_), past, signature.describe(members_), signature.sequence,
      waiting_for >= 0 ? fmt::format(", still waiting for {}", who(waiting_for)) : std::string(),
      StuckWaitWatchdog::kStuckExitCode);
}

}  // namespace tessel::detail
