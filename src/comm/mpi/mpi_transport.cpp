// The MPI transport and environment (include/tessel/comm/mpi.h, comm/mpi/mpi_transport.h).
#include "comm/mpi/mpi_transport.h"

#include <sched.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <functional>
#include <thread>

#include "comm/algorithms.h"
#include "core/errors.h"

namespace tessel {
namespace detail {
namespace {

constexpr std::string_view kComm = "Communicator";
// How often a wait checks that the processes of peers on this host still exist.
constexpr auto kWatchInterval = std::chrono::milliseconds(100);
// How long before a library collective's deadline its peers are probed for liveness (they answer
// from any wait, within microseconds when alive and waiting).
constexpr auto kProbeGrace = std::chrono::milliseconds(200);
// A wait polls without pause (as MPI's own blocking calls do) for kSpinTime, or only
// kOversubscribedSpinTime when this host runs more processes of the group than it has cores,
// then yields the CPU between polls, and after kSleepAfter sleeps between polls (a peer that
// late is not a hot path). Yielding early under oversubscription lets the peer that is being
// waited for run; without it, yielding would hand the core to unrelated processes in the middle
// of a transfer that only progresses while this process polls.
constexpr auto kSpinTime = std::chrono::milliseconds(20);
constexpr auto kOversubscribedSpinTime = std::chrono::microseconds(100);
constexpr auto kSleepAfter = std::chrono::seconds(1);
// How long a transport being destroyed waits for its buffered sends to be received.
constexpr auto kDrainLimit = std::chrono::seconds(10);
constexpr auto kAbortedDrainLimit = std::chrono::milliseconds(200);
// Messages longer than this travel in pieces (MPI counts are int).
constexpr size_t kMaxPiece = size_t{1} << 30;
// Longest signature text an exchange record carries (the agreed part is never cut).
constexpr size_t kMaxText = 4096;

// Process-wide MPI state.
std::mutex g_call_mu;                    // serializes MPI calls below MPI_THREAD_MULTIPLE
std::atomic<int> g_level{-1};            // provided thread level (MPI_THREAD_*), -1: not known yet
std::atomic<bool> g_multiple{false};     // g_level == MPI_THREAD_MULTIPLE
std::atomic<bool> g_peer_lost{false};    // a wait saw a peer's process gone: do not finalize
std::atomic<uint64_t> g_next_incarnation{1};  // MpiTransport::incarnation_ of the next group
std::atomic<int> g_failing_peer{-1};     // ScopedMpiSendFault's peer, -1: none

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

MpiThreadLevel level_from_mpi(int provided) {
  switch (provided) {
    case MPI_THREAD_SINGLE: return MpiThreadLevel::kSingle;
    case MPI_THREAD_FUNNELED: return MpiThreadLevel::kFunneled;
    case MPI_THREAD_SERIALIZED: return MpiThreadLevel::kSerialized;
    default: return MpiThreadLevel::kMultiple;
  }
}

void record_level(int provided) {
  g_level.store(provided);
  g_multiple.store(provided == MPI_THREAD_MULTIPLE);
}

// The provided level, queried once MPI is up.
int thread_level() {
  int level = g_level.load();
  if (level < 0) {
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    record_level(provided);
    level = provided;
  }
  return level;
}

std::string error_string(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) return fmt::format("MPI error {}", rc);
  return std::string(text, static_cast<size_t>(length));
}

// error_string for callers outside an MpiCallLock.
std::string locked_error_string(int rc) {
  MpiCallLock lock;
  return error_string(rc);
}

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Host name, boot id and pid namespace: two processes with the same key can see each other's
// pids.
std::string host_key() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  char ns[128] = {};
  const ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  return fmt::format("{}|{}|{}", host, read_first_line("/proc/sys/kernel/random/boot_id"),
                     n > 0 ? std::string(ns, static_cast<size_t>(n)) : "");
}

std::string short_host() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

// True when process `pid` (on this host) no longer runs: gone, or a zombie not yet reaped.
bool process_gone(int64_t pid) {
  if (pid <= 0) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
  const std::string stat = read_first_line(fmt::format("/proc/{}/stat", pid).c_str());
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  const char state = stat[paren + 2];
  return state == 'Z' || state == 'X';
}

// Exchange record: fixed header, then the agreed signature and this rank's text.
struct RecordHeader {
  uint64_t incarnation;
  uint64_t sequence;
  uint64_t hash;
  int64_t count;
  int64_t aux;
  uint32_t agreed_bytes;
  uint32_t text_bytes;
  uint32_t payload_bytes;
};

std::vector<uint8_t> encode(const Signature& s, const Post& p, const std::string& payload,
                            uint64_t incarnation) {
  const std::string_view text = std::string_view(s.text).substr(0, kMaxText);
  RecordHeader h{incarnation, s.sequence, std::hash<std::string>()(s.agreed), p.count, p.aux,
                 static_cast<uint32_t>(s.agreed.size()), static_cast<uint32_t>(text.size()),
                 static_cast<uint32_t>(payload.size())};
  std::vector<uint8_t> out(sizeof h + s.agreed.size() + text.size() + payload.size());
  uint8_t* at = out.data();
  std::memcpy(at, &h, sizeof h);
  std::memcpy(at += sizeof h, s.agreed.data(), s.agreed.size());
  std::memcpy(at += s.agreed.size(), text.data(), text.size());
  std::memcpy(at += text.size(), payload.data(), payload.size());
  return out;
}

MpiTransport::Record decode(const std::vector<uint8_t>& bytes, int from) {
  RecordHeader h;
  if (bytes.size() < sizeof h) {
    throw_error(ErrorCode::kInternal, kComm, "malformed exchange record from rank {} ({} bytes)",
                from, bytes.size());
  }
  std::memcpy(&h, bytes.data(), sizeof h);
  if (bytes.size() != sizeof h + h.agreed_bytes + h.text_bytes + h.payload_bytes) {
    throw_error(ErrorCode::kInternal, kComm, "malformed exchange record from rank {} ({} bytes)",
                from, bytes.size());
  }
  MpiTransport::Record r{h.sequence, h.hash, h.count, h.aux, {}, {}, {}, h.incarnation};
  const char* p = reinterpret_cast<const char*>(bytes.data()) + sizeof h;
  r.agreed.assign(p, h.agreed_bytes);
  r.text.assign(p + h.agreed_bytes, h.text_bytes);
  r.payload.assign(p + h.agreed_bytes + h.text_bytes, h.payload_bytes);
  return r;
}

}  // namespace

// ---- MPI calls ----------------------------------------------------------------------------

MpiCallLock::MpiCallLock() {
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
                  mpi_thread_level_name(level_from_mpi(level)));
    }
  }
}

MpiCallLock::~MpiCallLock() {
  if (locked_) g_call_mu.unlock();
}

void check_mpi(int rc, std::string_view call) {
  if (rc == MPI_SUCCESS) return;
  throw_error(ErrorCode::kUnavailable, kMpiComponent, "{} failed: {}", call, error_string(rc));
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

// ---- MpiTransport: construction -----------------------------------------------------------

MpiTransport::MpiTransport(MPI_Comm comm, const MpiCommunicatorOptions& options)
    : comm_(comm),
      watch_local_peers_(options.watch_local_peers),
      stuck_exit_after_(options.stuck_exit_after) {
  MpiCallLock lock;
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  void* ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &found);
  if (found && ub != nullptr) tag_ub_ = *static_cast<int*>(ub);
  members_.resize(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) members_[r] = fmt::format("process {}", r);
}

std::shared_ptr<MpiTransport> MpiTransport::create(MPI_Comm parent,
                                                   const MpiCommunicatorOptions& options,
                                                   int64_t extra) {
  require_mpi_initialized("make_mpi_communicator");
  const auto timeout = options.timeout.count() > 0 ? options.timeout : default_collective_timeout();
  const Deadline deadline = Clock::now() + timeout;
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  {
    MpiCallLock lock;
    check_mpi(MPI_Comm_idup(parent, &comm, &request), "MPI_Comm_idup");
  }
  const auto start = Clock::now();
  for (int done = 0; !done;) {
    {
      MpiCallLock lock;
      check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Comm_idup");
    }
    if (done) break;
    if (Clock::now() >= deadline) {
      // The request stays with MPI: a collective cannot be cancelled.
      int rank = 0, size = 0;
      MPI_Comm_rank(parent, &rank);
      MPI_Comm_size(parent, &size);
      throw_error(ErrorCode::kDeadlineExceeded, kMpiComponent,
                  "make_mpi_communicator: process {} of {} waited {:.3f} s for the other processes "
                  "to make their communicator (MPI_Comm_idup); not all of them did",
                  rank, size, seconds_between(start, Clock::now()));
    }
    std::this_thread::yield();
  }
  auto transport = std::make_shared<MpiTransport>(comm, options);
  transport->exchange_peers(options, extra, deadline);
  return transport;
}

void MpiTransport::exchange_peers(const MpiCommunicatorOptions& options, int64_t extra,
                                  Deadline deadline) {
  const int64_t pid = static_cast<int64_t>(getpid());
  const std::string name = options.name.empty() ? fmt::format("{}:{}", short_host(), pid) : options.name;
  // The identity travels as the record's text (name and host key), pid and extra as count and
  // aux.
  Signature s;
  s.agreed = "make_mpi_communicator()";
  s.text = name + '\n' + host_key();
  Post post;
  post.count = pid;
  post.aux = extra;
  constructing_ = true;
  incarnation_ = g_next_incarnation.load();
  const std::vector<Record> records = rendezvous(s, post, deadline);
  constructing_ = false;
  // The group's incarnation: the largest proposal (equal everywhere unless some process made a
  // communicator the others did not, e.g. one that failed to form); the next group's is above.
  for (const Record& r : records) incarnation_ = std::max(incarnation_, r.incarnation);
  uint64_t next = g_next_incarnation.load();
  while (next <= incarnation_ && !g_next_incarnation.compare_exchange_weak(next, incarnation_ + 1)) {
  }
  peers_.assign(static_cast<size_t>(size_), Peer{});
  for (int r = 0; r < size_; ++r) {
    const std::string& t = records[r].text;
    const size_t newline = t.find('\n');
    peers_[r].name = t.substr(0, newline);
    peers_[r].host = newline == std::string::npos ? "" : t.substr(newline + 1);
    peers_[r].pid = records[r].count;
    peers_[r].extra = records[r].aux;
  }
  for (int r = 0; r < size_; ++r) members_[r] = peers_[r].name;
  int here = 0;
  for (const Peer& p : peers_) here += p.host == peers_[rank_].host;
  cpu_set_t cpus;
  const int cores = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus)
                                                                 : static_cast<int>(std::thread::hardware_concurrency());
  spin_time_ = here > cores ? std::chrono::duration_cast<Clock::duration>(kOversubscribedSpinTime)
                            : std::chrono::duration_cast<Clock::duration>(kSpinTime);
}

MpiTransport::~MpiTransport() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || comm_ == MPI_COMM_NULL) return;  // nothing can be freed any more
  try {
    std::lock_guard<std::mutex> guard(send_mu_);
    MpiCallLock lock;
    const auto limit = Clock::now() + (aborted_.load() ? std::chrono::duration_cast<Clock::duration>(kAbortedDrainLimit)
                                                       : std::chrono::duration_cast<Clock::duration>(kDrainLimit));
    while (!sends_.empty() && Clock::now() < limit) {
      int done = 0;
      MPI_Test(&sends_.front().request, &done, MPI_STATUS_IGNORE);
      if (done) {
        sends_.pop_front();
      } else {
        std::this_thread::yield();
      }
    }
    // Sends nobody received: cancel them; their buffers are leaked on purpose, MPI may still
    // read them.
    const bool undelivered = !sends_.empty();
    for (PendingSend& s : sends_) {
      MPI_Cancel(&s.request);
      MPI_Request_free(&s.request);
      new std::vector<uint8_t>(std::move(s.buffer));
    }
    sends_.clear();
    // An aborted group may still have messages in flight to or from this process (abort
    // records, segments nobody received). MPI reuses a freed communicator's context id for the
    // next one, where stale data messages would match (stale records are dropped by their
    // incarnation): keep such a group's communicator (a few hundred bytes) so that its id is
    // never reused. A group that ended cleanly has none in flight: every rendezvous and receive
    // completed.
    if (!aborted_.load() && !undelivered) MPI_Comm_free(&comm_);
  } catch (...) {
    // A destructor must not throw (thread-level violations end here).
  }
}

// ---- MpiTransport: waiting ------------------------------------------------------------------

std::string MpiTransport::who(int r) const { return fmt::format("rank {} ({})", r, members_[r]); }

int MpiTransport::mpi_tag_of(int tag, std::string_view op) const {
  if (tag < 0) {
    if (tag < -7) throw_error(ErrorCode::kInternal, kComm, "{}: algorithm tag {} out of range", op, tag);
    return kAlgorithmTagBase - tag;
  }
  if (tag > tag_ub_ - kFirstFreeTag) {
    throw_invalid(kComm, "{}: tag {} is above this MPI's limit of {}", op, tag, tag_ub_ - kFirstFreeTag);
  }
  return kFirstFreeTag + tag;
}

bool MpiTransport::abort_group(const std::string& reason, bool tell_peers, int lost) {
  std::string text;
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (aborted_.load()) return false;
    abort_reason_ = reason.rfind("group aborted", 0) == 0 ? reason : "group aborted: " + reason;
    text = abort_reason_;
    aborted_.store(true, std::memory_order_release);
  }
  if (tell_peers) {
    // The group's incarnation, then the reason.
    std::string record(sizeof incarnation_, '\0');
    std::memcpy(record.data(), &incarnation_, sizeof incarnation_);
    record += text;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_ || p == lost) continue;
      try {
        post_send(p, kAbortTag, record.data(), record.size());
      } catch (const Error&) {
        // Best effort: a peer we cannot reach will hit its deadline.
      }
    }
  }
  return true;
}

void MpiTransport::throw_aborted() {
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    reason = abort_reason_;
  }
  throw Error(ErrorCode::kAborted, kComm, reason);
}

void MpiTransport::check_aborted() {
  if (aborted_.load(std::memory_order_acquire)) throw_aborted();
}

namespace {

// A probe's payload: the group's incarnation and the prober's nonce.
struct Probe {
  uint64_t incarnation = 0;
  uint64_t nonce = 0;
};

}  // namespace

int MpiTransport::receive_probe(int tag, void* probe) {
  int flag = 0, rc = MPI_SUCCESS;
  MPI_Message message;
  MPI_Status status;
  {
    MpiCallLock lock;
    rc = MPI_Improbe(MPI_ANY_SOURCE, tag, comm_, &flag, &message, &status);
    if (rc == MPI_SUCCESS && flag) {
      check_mpi(MPI_Mrecv(probe, sizeof(Probe), MPI_BYTE, &message, MPI_STATUS_IGNORE), "MPI_Mrecv");
      return status.MPI_SOURCE;
    }
  }
  if (rc != MPI_SUCCESS) fail_naming_lost_peer(rc, "MPI_Improbe");
  return -1;
}

void MpiTransport::answer_pings() {
  Probe probe;
  for (int from; (from = receive_probe(kPingTag, &probe)) >= 0;) {
    if (probe.incarnation == incarnation_) post_send(from, kPongTag, &probe, sizeof probe);
  }
}

uint64_t MpiTransport::start_probe() {
  const Probe mine{incarnation_, ++probes_};
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) post_send(r, kPingTag, &mine, sizeof mine);
  }
  return mine.nonce;
}

void MpiTransport::collect_pongs(uint64_t nonce, std::vector<bool>& answered) {
  answered[static_cast<size_t>(rank_)] = true;
  Probe pong;
  for (int from; (from = receive_probe(kPongTag, &pong)) >= 0;) {
    if (pong.incarnation == incarnation_ && pong.nonce == nonce) answered[static_cast<size_t>(from)] = true;
  }
}

void MpiTransport::poll_aborts() {
  check_aborted();
  std::string reason;
  int rc = MPI_SUCCESS;
  {
    int flag = 0;
    MPI_Message message;
    MPI_Status status;
    MpiCallLock lock;
    rc = MPI_Improbe(MPI_ANY_SOURCE, kAbortTag, comm_, &flag, &message, &status);
    if (rc == MPI_SUCCESS && !flag) return;
    if (rc == MPI_SUCCESS) {
      int bytes = 0;
      MPI_Get_count(&status, MPI_CHAR, &bytes);
      reason.assign(static_cast<size_t>(bytes), '\0');
      check_mpi(MPI_Mrecv(reason.data(), bytes, MPI_CHAR, &message, MPI_STATUS_IGNORE), "MPI_Mrecv");
    }
  }
  if (rc != MPI_SUCCESS) fail_naming_lost_peer(rc, "MPI_Improbe");
  uint64_t incarnation = 0;
  if (reason.size() >= sizeof incarnation) std::memcpy(&incarnation, reason.data(), sizeof incarnation);
  if (incarnation != incarnation_) return;  // an older group's (see incarnation_)
  reason.erase(0, sizeof incarnation);
  abort_group(reason, /*tell_peers=*/false);
  throw_aborted();
}

void MpiTransport::watch_peers(const Signature& signature, double waited) {
  // Every peer that is gone is named: survivors that already failed and exited may be among
  // them, next to the process that was lost first.
  const Peer& me = peers_[rank_];
  std::vector<std::string> gone;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || peers_[p].host != me.host || !process_gone(peers_[p].pid)) continue;
    gone.push_back(fmt::format("{} (pid {})", who(p), peers_[p].pid));
  }
  if (gone.empty()) return;
  const std::string message = fmt::format(
      "{} lost {}: {} no longer running; {} waited {:.3f} s in {} (sequence {})", who(rank_),
      fmt::join(gone, ", "), gone.size() == 1 ? "its process is" : "their processes are",
      who(rank_), waited, signature.describe(members_), signature.sequence);
  g_peer_lost.store(true);
  abort_group(message, /*tell_peers=*/true);
  throw_aborted();
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

StuckWaitWatchdog::Watch MpiTransport::watch_stuck(const Signature& signature, Deadline deadline,
                                                   const std::atomic<int>* waiting_for) const {
  if (stuck_exit_after_.count() <= 0) return {};
  return StuckWaitWatchdog::global().watch(
      deadline + stuck_exit_after_, [this, &signature, waiting_for](double late) {
        const int rank = waiting_for ? waiting_for->load(std::memory_order_relaxed) : -1;
        return describe_stuck(signature, rank, late);
      });
}

void MpiTransport::wait(const std::function<bool()>& poll, const Signature& signature,
                        Deadline deadline, const std::function<void(double)>& on_deadline) {
  const auto start = Clock::now();
  auto next_watch = start + kWatchInterval;
  for (;;) {
    // While the group is being made, an abort record is a peer's later news: it waits for the
    // first wait after construction.
    if (!constructing_) {
      poll_aborts();
      answer_pings();
    }
    if (poll()) return;
    reap_sends();
    const auto now = Clock::now();
    if (now >= deadline) on_deadline(seconds_between(start, now));
    if (watch_local_peers_ && now >= next_watch && peers_.size() == static_cast<size_t>(size_)) {
      watch_peers(signature, seconds_between(start, now));
      next_watch = now + kWatchInterval;
    }
    if (now - start < spin_time_) continue;
    if (now - start < kSleepAfter) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

// ---- MpiTransport: point to point -----------------------------------------------------------

void MpiTransport::post_send(int peer, int mpi_tag, const void* data, size_t bytes) {
  int rc = MPI_SUCCESS;
  std::string_view call = "MPI_Isend";
  {
    std::lock_guard<std::mutex> guard(send_mu_);
    PendingSend s;
    s.peer = peer;
    if (!spare_.empty()) {
      s.buffer = std::move(spare_.back());
      spare_.pop_back();
    }
    s.buffer.resize(bytes);
    if (bytes > 0) std::memcpy(s.buffer.data(), data, bytes);
    MpiCallLock lock;
    rc = peer == g_failing_peer.load(std::memory_order_relaxed)
             ? MPI_ERR_INTERN
             : MPI_Isend(s.buffer.data(), static_cast<int>(bytes), MPI_BYTE, peer, mpi_tag, comm_,
                         &s.request);
    int done = 0;
    if (rc == MPI_SUCCESS) {
      call = "MPI_Test of an MPI_Isend";
      rc = MPI_Test(&s.request, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) release_failed(s);
    }
    if (rc == MPI_SUCCESS && !done) {
      sends_.push_back(std::move(s));
    } else if (rc == MPI_SUCCESS && spare_.size() < 4) {
      spare_.push_back(std::move(s.buffer));
    }
  }
  if (rc != MPI_SUCCESS) lost_peer(peer, call, rc);
}

void MpiTransport::reap_sends() {
  int rc = MPI_SUCCESS;
  int peer = -1;
  {
    std::lock_guard<std::mutex> guard(send_mu_);
    while (!sends_.empty()) {
      int done = 0;
      {
        MpiCallLock lock;
        rc = MPI_Test(&sends_.front().request, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) release_failed(sends_.front());
      }
      if (rc != MPI_SUCCESS) peer = sends_.front().peer;
      if (rc == MPI_SUCCESS && !done) break;
      if (rc == MPI_SUCCESS && spare_.size() < 4) spare_.push_back(std::move(sends_.front().buffer));
      sends_.pop_front();
      if (rc != MPI_SUCCESS) break;
    }
  }
  if (rc != MPI_SUCCESS) lost_peer(peer, "MPI_Test of an MPI_Isend", rc);
}

void MpiTransport::release_failed(PendingSend& s) {
  // MPI may still hold a request whose test failed: free it, and leak the buffer it may read
  // (as the destructor does for undelivered sends). Under MpiCallLock.
  if (s.request != MPI_REQUEST_NULL) {
    MPI_Request_free(&s.request);
    new std::vector<uint8_t>(std::move(s.buffer));
  }
}

void MpiTransport::lost_peer(int peer, std::string_view call, int rc) {
  // MPI fails a call with a peer when it lost the connection to it (e.g. a TCP reset from a
  // killed process on another host): the peer is named and the group aborted, as watch_peers
  // does. Called without send_mu_ or MpiCallLock: abort_group sends to the other peers.
  g_peer_lost.store(true);
  abort_group(fmt::format("{} lost {}: {} to it failed: {}", who(rank_), who(peer), call,
                          locked_error_string(rc)),
              /*tell_peers=*/true, /*lost=*/peer);
  throw_aborted();
}

ScopedMpiSendFault::ScopedMpiSendFault(int peer) : peer_lost_before_(g_peer_lost.load()) {
  g_failing_peer.store(peer);
}

ScopedMpiSendFault::~ScopedMpiSendFault() {
  g_failing_peer.store(-1);
  g_peer_lost.store(peer_lost_before_);
}

void MpiTransport::fail_naming_lost_peer(int rc, std::string_view call) {
  // MPI does not say which peer failed a call on any source: a ping to a lost peer that fails
  // at once names it (lost_peer); otherwise the call's own error is reported (the pings stay
  // queued, to be reaped or cancelled with the group).
  start_probe();
  throw_error(ErrorCode::kUnavailable, kMpiComponent, "{} failed: {}", call,
              locked_error_string(rc));
}

void MpiTransport::send_tagged(int peer, int mpi_tag, const void* data, size_t bytes,
                               const Signature& signature, Deadline deadline) {
  const std::atomic<int> to{peer};
  const auto watch = watch_stuck(signature, deadline, &to);
  poll_aborts();
  const auto* p = static_cast<const uint8_t*>(data);
  // Pieces of at most kMaxPiece; a message of 0 bytes is one empty piece.
  size_t offset = 0;
  do {
    const size_t piece = std::min(kMaxPiece, bytes - offset);
    post_send(peer, mpi_tag, p + offset, piece);
    offset += piece;
  } while (offset < bytes);
}

void MpiTransport::recv_tagged(int peer, int mpi_tag, void* data, size_t bytes,
                               const Signature& signature, Deadline deadline,
                               std::string_view tag_text) {
  // Watched as a whole: MPI_Irecv and the cancellation below are MPI calls too.
  const std::atomic<int> from{peer};
  const auto watch = watch_stuck(signature, deadline, &from);
  poll_aborts();
  auto* p = static_cast<uint8_t*>(data);
  size_t offset = 0;
  do {
    const size_t piece = std::min(kMaxPiece, bytes - offset);
    MPI_Request request = MPI_REQUEST_NULL;
    int posted = MPI_SUCCESS;
    {
      MpiCallLock lock;
      posted = MPI_Irecv(p + offset, static_cast<int>(piece), MPI_BYTE, peer, mpi_tag, comm_, &request);
    }
    if (posted != MPI_SUCCESS) lost_peer(peer, "MPI_Irecv", posted);
    MPI_Status status;
    int rc = MPI_SUCCESS;
    auto poll = [&] {
      int done = 0;
      MpiCallLock lock;
      rc = MPI_Test(&request, &done, &status);
      return done != 0 || rc != MPI_SUCCESS;
    };
    auto on_deadline = [&](double waited) {
      const std::string message = fmt::format(
          "{} waited {:.3f} s for a message from {} with tag {} in {} (sequence {}); it did not "
          "arrive",
          who(rank_), waited, who(peer), tag_text, signature.describe(members_), signature.sequence);
      abort_group(message, /*tell_peers=*/true);
      throw Error(ErrorCode::kDeadlineExceeded, kComm, message);
    };
    try {
      wait(poll, signature, deadline, on_deadline);
    } catch (...) {
      // The buffer goes back to the caller: take the receive back from MPI first.
      MpiCallLock lock;
      if (request != MPI_REQUEST_NULL) {
        MPI_Cancel(&request);
        const auto limit = Clock::now() + std::chrono::milliseconds(100);
        int done = 0;
        while (!done && Clock::now() < limit) MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        if (!done) MPI_Request_free(&request);
      }
      throw;
    }
    int got = 0;
    if (rc == MPI_SUCCESS) MPI_Get_count(&status, MPI_BYTE, &got);
    int error_class = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &error_class);
    if (error_class == MPI_ERR_TRUNCATE || (rc == MPI_SUCCESS && static_cast<size_t>(got) != piece)) {
      throw_invalid(kComm, "{} expected {} bytes from {} (tag {}) but {} were sent", who(rank_),
                    bytes, who(peer), tag_text,
                    error_class == MPI_ERR_TRUNCATE ? fmt::format("more than {}", piece)
                                                    : std::to_string(offset + got));
    }
    if (rc != MPI_SUCCESS) lost_peer(peer, "MPI_Irecv", rc);
    offset += piece;
  } while (offset < bytes);
}

void MpiTransport::send(int peer, int tag, const void* data, size_t bytes,
                        const Signature& signature, Deadline deadline) {
  send_tagged(peer, mpi_tag_of(tag, "send"), data, bytes, signature, deadline);
}

void MpiTransport::recv(int peer, int tag, void* data, size_t bytes, const Signature& signature,
                        Deadline deadline) {
  recv_tagged(peer, mpi_tag_of(tag, "recv"), data, bytes, signature, deadline, std::to_string(tag));
}

// ---- MpiTransport: rendezvous ---------------------------------------------------------------

std::vector<MpiTransport::Record> MpiTransport::rendezvous(const Signature& signature,
                                                           const Post& mine, Deadline deadline,
                                                           const std::string& payload) {
  std::vector<Record> records(static_cast<size_t>(size_));
  std::vector<bool> have(static_cast<size_t>(size_), false);
  have[rank_] = true;
  int missing = size_ - 1;
  // The first rank whose record has not arrived, for the watchdog (watch_stuck), which watches
  // the whole rendezvous: the sends of this rank's record are MPI calls too.
  const auto first_missing = [&] {
    for (int p = 0; p < size_; ++p) {
      if (!have[p]) return p;
    }
    return -1;
  };
  std::atomic<int> waiting_for{first_missing()};
  const auto watch = watch_stuck(signature, deadline, &waiting_for);
  if (!constructing_) poll_aborts();
  const std::vector<uint8_t> record = encode(signature, mine, payload, incarnation_);
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) post_send(p, kExchangeTag, record.data(), record.size());
  }
  std::vector<uint8_t> bytes;
  auto poll = [&] {
    for (int p = 0; p < size_ && missing > 0; ++p) {
      while (!have[p]) {
        int flag = 0;
        MPI_Message message;
        MPI_Status status;
        int rc = MPI_SUCCESS;
        const char* call = "MPI_Improbe";
        {
          MpiCallLock lock;
          rc = MPI_Improbe(p, kExchangeTag, comm_, &flag, &message, &status);
          if (rc == MPI_SUCCESS && !flag) break;
          if (rc == MPI_SUCCESS) {
            int count = 0;
            MPI_Get_count(&status, MPI_BYTE, &count);
            bytes.resize(static_cast<size_t>(count));
            call = "MPI_Mrecv";
            rc = MPI_Mrecv(bytes.data(), count, MPI_BYTE, &message, MPI_STATUS_IGNORE);
          }
        }
        if (rc != MPI_SUCCESS) lost_peer(p, call, rc);
        Record r = decode(bytes, p);
        // A record of an older group that had this communicator's context id: dropped.
        const bool ours = constructing_ ? r.sequence == signature.sequence && r.agreed == signature.agreed
                                        : r.incarnation == incarnation_;
        if (!ours) continue;
        records[p] = std::move(r);
        have[p] = true;
        --missing;
        waiting_for.store(first_missing(), std::memory_order_relaxed);
      }
    }
    return missing == 0;
  };
  auto on_deadline = [&](double waited) {
    std::vector<std::string> late;
    for (int p = 0; p < size_; ++p) {
      if (!have[p]) late.push_back(who(p).substr(5));  // "r (name)"
    }
    const std::string message = fmt::format(
        "{} waited {:.3f} s for ranks [{}] in {} (sequence {}); they did not arrive", who(rank_),
        waited, fmt::join(late, ", "), signature.describe(members_), signature.sequence);
    abort_group(message, /*tell_peers=*/true);
    throw Error(ErrorCode::kDeadlineExceeded, kComm, message);
  };
  wait(poll, signature, deadline, on_deadline);

  records[rank_] = Record{signature.sequence, std::hash<std::string>()(signature.agreed), mine.count,
                          mine.aux, signature.agreed, signature.text.substr(0, kMaxText), payload,
                          incarnation_};
  return records;
}

std::vector<Post> MpiTransport::exchange(const Signature& signature, const Post& mine,
                                         Deadline deadline) {
  const std::vector<Record> records = rendezvous(signature, mine, deadline);
  check_signatures(records);
  std::vector<Post> posts(static_cast<size_t>(size_));
  for (int p = 0; p < size_; ++p) {
    posts[p].count = records[p].count;
    posts[p].aux = records[p].aux;
  }
  posts[rank_] = mine;
  return posts;
}

std::vector<MpiTransport::Record> MpiTransport::exchange_records(const Signature& signature,
                                                                 const Post& mine,
                                                                 const std::string& payload,
                                                                 Deadline deadline) {
  std::vector<Record> records = rendezvous(signature, mine, deadline, payload);
  check_signatures(records);
  return records;
}

void MpiTransport::check_signatures(const std::vector<Record>& records) {
  const Record& first = records[0];
  for (int r = 1; r < size_; ++r) {
    const Record& other = records[r];
    if (other.hash == first.hash && other.agreed == first.agreed && other.sequence == first.sequence) {
      continue;
    }
    const std::string message = fmt::format(
        "collectives differ: rank 0 ({}) called {} over group [{}] (sequence {}) but rank {} ({}) "
        "called {} over group [{}] (sequence {})",
        members_[0], first.text, fmt::join(members_, ", "), first.sequence, r, members_[r],
        other.text, fmt::join(members_, ", "), other.sequence);
    // Every rank sees the same records and fails the same way: nobody needs telling.
    abort_group(message, /*tell_peers=*/false);
    throw Error(ErrorCode::kFailedPrecondition, kComm, message);
  }
}

std::vector<Post> MpiTransport::share(const Signature& signature, const Post& mine,
                                      Deadline deadline) {
  exchange(signature, mine, deadline);
  unsupported_ = true;
  throw_error(ErrorCode::kUnimplemented, kComm,
              "{} reads peers' buffers directly (the in-process algorithms, e.g. Algorithm::kDirect); "
              "ranks in different processes share no memory",
              signature.text);
}

void MpiTransport::barrier(const Signature& signature, Deadline deadline) {
  exchange(signature, Post{}, deadline);
}

void MpiTransport::abort(const std::string& reason) { abort_group(reason, /*tell_peers=*/true); }

void MpiTransport::fail(const std::string& reason) {
  if (unsupported_) {
    // share() refused on every rank alike, after a successful rendezvous: the group is intact.
    unsupported_ = false;
    return;
  }
  abort(reason);
}

// ---- non-blocking collectives ---------------------------------------------------------------

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
    throw Error(ErrorCode::kDeadlineExceeded, kComm, message);
  };
  wait(poll, signature, deadline, on_deadline);
}

}  // namespace detail

// ---- public API -----------------------------------------------------------------------------

bool mpi_available() { return true; }

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS) return "unknown MPI";
  std::string version(text, static_cast<size_t>(length));
  const size_t newline = version.find_first_of("\r\n");
  if (newline != std::string::npos) version.resize(newline);
  while (!version.empty() && (version.back() == ',' || version.back() == ' ')) version.pop_back();
  return version;
}


void MpiEnvironment::init(int* argc, char*** argv) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) {
    detail::throw_error(ErrorCode::kFailedPrecondition, detail::kMpiComponent,
                        "MPI was finalized in this process; it cannot be initialised again");
  }
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    MPI_Query_thread(&provided);
  } else {
    detail::check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    owns_ = true;
  }
  detail::record_level(provided);
  level_ = detail::level_from_mpi(provided);
}

MpiEnvironment::~MpiEnvironment() {
  if (!owns_) return;
  // MPI_Finalize waits for every process of the job, a dead one included: it would never return.
  if (detail::g_peer_lost.load()) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

int mpi_rank() {
  detail::require_mpi_initialized("mpi_rank");
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int mpi_size() {
  detail::require_mpi_initialized("mpi_size");
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

std::unique_ptr<Communicator> make_mpi_communicator(const MpiCommunicatorOptions& options) {
  return std::make_unique<Communicator>(detail::MpiTransport::create(MPI_COMM_WORLD, options));
}

}  // namespace tessel
