// Internal: what every MPI call of tessel stands on, the MPI transport's (src/comm/mpi/) and the
// MPI system channel's (src/system/mpi_system_channel.cpp): the call lock and the thread level,
// the checks, the table of MPI tags, the one wait loop and the communicator duplication.
// Compiled only when tessel is built with MPI (src/comm/mpi/CMakeLists.txt).
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "tessel/comm/mpi.h"

namespace tessel::detail {

inline constexpr std::string_view kMpiComponent = "MPI";

// ---- MPI tags ------------------------------------------------------------------------------
//
// Every MPI tag tessel sends or receives under. Each MpiTransport and each MPI system channel
// runs on its own duplicate communicator, so the two lists below cannot meet (which is why the
// channel's may reuse the transport's numbers); they are kept in one place so that a new tag is
// chosen knowing all of them.
namespace mpi_tags {

// On an MpiTransport's communicator (src/comm/mpi/mpi_transport*.cpp):
// An abort record (the group's incarnation, then the reason), sent to every peer by the rank
// that aborts the group and received from any source by every wait.
inline constexpr int kAbort = 1;
// A rendezvous record (the signature, the post, the payload), one from every rank to every rank.
inline constexpr int kExchange = 2;
// A liveness probe (ping), sent to every peer shortly before the deadline of MPI's own
// collective, or after a failed call on any source to name the peer MPI lost.
inline constexpr int kPing = 3;
// The answer to a kPing, sent from any wait of the pinged rank.
inline constexpr int kPong = 4;
// MPI_Comm_create_group's tag on the cluster's world transport (mpi_cluster.cpp's join).
inline constexpr int kCreateGroup = 7;
// Transport algorithm tags -1 .. -7 (algorithms.h) travel as kAlgorithmBase + 1 .. + 7.
inline constexpr int kAlgorithmBase = 8;
// Transport tags t >= 0 travel as kFirstFree + t (up to the communicator's MPI_TAG_UB), and so
// does send_tagged/recv_tagged's raw traffic: the cluster's join meeting (kJoin) and the
// hierarchical transport's cross-process send/recv (kFirstFree + ((t + 8) * L + from) * L + to
// for L devices per process, mpi_hierarchy.cpp).
inline constexpr int kFirstFree = 16;
// The join meeting of make_mpi_cluster's groups: each owning process's digest of the group
// (mpi_cluster.cpp), on the cluster's world transport, where no transport tag is used.
inline constexpr int kJoin = kFirstFree;

// On an MPI system channel's communicator (src/system/mpi_system_channel.cpp):
// A host's message to the coordinator (task 0).
inline constexpr int kToCoordinator = 3;
// The coordinator's message to a host.
inline constexpr int kToHost = 4;
// The end of a process's traffic to a peer (the channel destructor's handshake).
inline constexpr int kClose = 5;

}  // namespace mpi_tags

// ---- MPI calls -----------------------------------------------------------------------------

// Held around every MPI call tessel makes: a process-wide mutex when MPI provides less than
// MPI_THREAD_MULTIPLE, nothing otherwise. Below MPI_THREAD_SERIALIZED, a thread other than the
// one that initialised MPI gets kFailedPrecondition; so does any thread once MPI is finalized
// (an MPI object used after its MpiEnvironment: MPI would abort the process).
class MpiCallLock {
 public:
  MpiCallLock();
  ~MpiCallLock();
  MpiCallLock(const MpiCallLock&) = delete;
  MpiCallLock& operator=(const MpiCallLock&) = delete;

 private:
  bool locked_ = false;
};

// The thread level MPI provides (MPI_THREAD_*), as MpiEnvironment found it: recorded by
// MpiEnvironment::init, or else queried on the first MpiCallLock.
void record_mpi_thread_level(int provided);
MpiThreadLevel mpi_thread_level_of(int provided);

// Throws kUnavailable "<call> failed: <MPI's error string>" unless rc is MPI_SUCCESS.
void check_mpi(int rc, std::string_view call);
// kFailedPrecondition unless MPI is initialised and not finalized.
void require_mpi_initialized(std::string_view what);
// MPI's text for error code `rc`; mpi_error_string under an MpiCallLock, locked_mpi_error_string
// outside one (it takes it).
std::string mpi_error_string(int rc);
std::string locked_mpi_error_string(int rc);

// Set once a wait saw a peer's process gone or MPI lost the connection to it: MPI_Finalize would
// wait for that peer forever, so ~MpiEnvironment then leaves MPI unfinalized.
std::atomic<bool>& mpi_peer_lost();

// ---- waiting -------------------------------------------------------------------------------

using MpiClock = std::chrono::steady_clock;

// How a wait paces its polls: back to back for `spin` (MPI progresses only while it is polled),
// then yielding the CPU between polls until `yield` has passed since the wait began, then
// sleeping between them, `sleep` at first, doubling up to `max_sleep` (never past the deadline).
struct PollPacing {
  MpiClock::duration spin{0};
  MpiClock::duration yield = MpiClock::duration::max();
  std::chrono::microseconds sleep{200};
  std::chrono::microseconds max_sleep{200};
};

// A check a wait runs every `interval` while it waits, with the seconds waited so far (the MPI
// transport's check that the processes of its peers on this host still run). It may throw,
// which ends the wait. Without `run`, nothing.
struct PeriodicCheck {
  MpiClock::duration interval{0};
  std::function<void(double waited_seconds)> run;
};

// The one wait loop of tessel's MPI code: calls poll() (e.g. an MPI_Test) until it returns true
// (then true) or `deadline` passes (then false); it polls at least once, and every exception of
// poll or check ends the wait. The stuck-call watchdog (stuck_wait_watchdog.h) is registered by
// the callers, one Watch for the whole operation around it (MpiTransport::watch_stuck).
bool poll_until(MpiClock::time_point deadline, const PollPacing& pacing,
                const std::function<bool()>& poll, const PeriodicCheck& check = {});

// Collective over `parent`: duplicates it with MPI_Comm_idup, polled with `pacing` until
// `deadline`, and returns the new communicator. At the deadline the other processes of `parent`
// did not all start theirs: kDeadlineExceeded from `component`, "<caller>: process r of n waited
// s for the other processes to make their <made> (MPI_Comm_idup); not all of them did". The
// request then stays with MPI (a collective cannot be cancelled), which may still write the new
// handle: it lives on the heap and is leaked, never on a stack that has gone.
MPI_Comm idup_until(MPI_Comm parent, MpiClock::time_point deadline, const PollPacing& pacing,
                    std::string_view component, std::string_view caller, std::string_view made);

}  // namespace tessel::detail
