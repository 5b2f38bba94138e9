// The ground of tessel's MPI calls (comm/mpi/mpi_env.h): call lock, thread level, checks, the
// wait loop and the communicator duplication.
#include "comm/mpi/mpi_env.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <thread>

#include "core/errors.h"

namespace tessel::detail {
namespace {

// Process-wide MPI state.
std::mutex g_call_mu;                 // serializes MPI calls below MPI_THREAD_MULTIPLE
std::atomic<int> g_level{-1};         // provided thread level (MPI_THREAD_*), -1: not known yet
std::atomic<bool> g_multiple{false};  // g_level == MPI_THREAD_MULTIPLE

// The provided level, queried once MPI is up.
int thread_level() {
  int level = g_level.load();
  if (level < 0) {
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    record_mpi_thread_level(provided);
    level = provided;
  }
  return level;
}

double seconds_since(MpiClock::time_point start) {
  return std::chrono::duration<double>(MpiClock::now() - start).count();
}

}  // namespace

// ---- MPI calls ----------------------------------------------------------------------------

MpiThreadLevel mpi_thread_level_of(int provided) {
  switch (provided) {
    case MPI_THREAD_SINGLE: return MpiThreadLevel::kSingle;
    case MPI_THREAD_FUNNELED: return MpiThreadLevel::kFunneled;
    case MPI_THREAD_SERIALIZED: return MpiThreadLevel::kSerialized;
    default: return MpiThreadLevel::kMultiple;
  }
}

void record_mpi_thread_level(int provided) {
  g_level.store(provided);
  g_multiple.store(provided == MPI_THREAD_MULTIPLE);
}

MpiCallLock::MpiCallLock() {
  // A communicator, cluster or channel kept past MPI_Finalize (its MpiEnvironment destroyed)
  // fails here: any MPI call now would abort the process. (MPI_Finalized is allowed at any time.)
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    throw_error(ErrorCode::kFailedPrecondition, kMpiComponent,
                "used after MPI was finalized (the MpiEnvironment that initialised it was "
                "destroyed); destroy MPI communicators, clusters and channels before it");
  }
  if (g_multiple.load(std::memory_order_relaxed)) return;
  const int level = thread_level();
  if (level == MPI_THREAD_MULTIPLE) return;
  g_call_mu.lock();
  locked_ = true;
  if (level < MPI_THREAD_SERIALIZED) {
    int main_thread = 0;
    MPI_Is_thread_main(&main_thread);
    if (!main_thread) {
      g_call_mu.unlock();
      locked_ = false;
      throw_error(ErrorCode::kFailedPrecondition, kMpiComponent,
                  "MPI provides thread level '{}': only the thread that initialised MPI may use MPI "
                  "communicators (initialise MPI with MPI_THREAD_SERIALIZED or above, e.g. by "
                  "MpiEnvironment)",
                  mpi_thread_level_name(mpi_thread_level_of(level)));
    }
  }
}

MpiCallLock::~MpiCallLock() {
  if (locked_) g_call_mu.unlock();
}

std::string mpi_error_string(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) return fmt::format("MPI error {}", rc);
  return std::string(text, static_cast<size_t>(length));
}

std::string locked_mpi_error_string(int rc) {
  MpiCallLock lock;
  return mpi_error_string(rc);
}

void check_mpi(int rc, std::string_view call) {
  if (rc == MPI_SUCCESS) return;
  throw_error(ErrorCode::kUnavailable, kMpiComponent, "{} failed: {}", call, mpi_error_string(rc));
}

void require_mpi_initialized(std::string_view what) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    throw_error(ErrorCode::kFailedPrecondition, kMpiComponent,
                "{}: MPI is {} (create a tessel::MpiEnvironment first)", what,
                finalized ? "already finalized" : "not initialised");
  }
}

std::atomic<bool>& mpi_peer_lost() {
  static std::atomic<bool> lost{false};
  return lost;
}

// ---- waiting -------------------------------------------------------------------------------

bool poll_until(MpiClock::time_point deadline, const PollPacing& pacing,
                const std::function<bool()>& poll, const PeriodicCheck& check) {
  const auto start = MpiClock::now();
  auto next_check = start + check.interval;
  auto sleep = std::chrono::duration_cast<MpiClock::duration>(pacing.sleep);
  const auto max_sleep = std::chrono::duration_cast<MpiClock::duration>(pacing.max_sleep);
  for (;;) {
    if (poll()) return true;
    const auto now = MpiClock::now();
    if (now >= deadline) return false;
    if (check.run && now >= next_check) {
      check.run(std::chrono::duration<double>(now - start).count());
      next_check = now + check.interval;
    }
    const auto waited = now - start;
    if (waited < pacing.spin) continue;
    if (waited < pacing.yield) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(std::min(sleep, deadline - now));
    sleep = std::min(sleep * 2, max_sleep);
  }
}

MPI_Comm idup_until(MPI_Comm parent, MpiClock::time_point deadline, const PollPacing& pacing,
                    std::string_view component, std::string_view caller, std::string_view made) {
  const auto start = MpiClock::now();
  // MPI writes the new handle when the collective completes, which after a deadline it still
  // may: the handle lives on the heap and is then leaked.
  auto comm = std::make_unique<MPI_Comm>(MPI_COMM_NULL);
  MPI_Request request = MPI_REQUEST_NULL;
  {
    MpiCallLock lock;
    check_mpi(MPI_Comm_idup(parent, comm.get(), &request), "MPI_Comm_idup");
  }
  bool done = false;
  try {
    done = poll_until(deadline, pacing, [&] {
      int flag = 0;
      MpiCallLock lock;
      check_mpi(MPI_Test(&request, &flag, MPI_STATUS_IGNORE), "MPI_Comm_idup");
      return flag != 0;
    });
  } catch (...) {
    (void)comm.release();  // the request may still be with MPI
    throw;
  }
  if (done) return *comm;
  (void)comm.release();  // the request stays with MPI: a collective cannot be cancelled
  int rank = 0, size = 0;
  {
    MpiCallLock lock;
    MPI_Comm_rank(parent, &rank);
    MPI_Comm_size(parent, &size);
  }
  throw_error(ErrorCode::kDeadlineExceeded, component,
              "{}: process {} of {} waited {:.3f} s for the other processes to make their {} "
              "(MPI_Comm_idup); not all of them did",
              caller, rank, size, seconds_since(start), made);
}

}  // namespace tessel::detail
