// Making and unmaking an MpiTransport (comm/mpi/mpi_transport.h): the communicator's duplicate,
// the peer records every process publishes, the drain of a transport being destroyed, and
// make_mpi_communicator (tessel/comm/mpi.h).
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include "comm/algorithms.h"
#include "comm/mpi/mpi_transport.h"
#include "core/errors.h"

namespace tessel {
namespace detail {
namespace {

// How long a transport being destroyed waits for its buffered sends to be received.
constexpr auto kDrainLimit = std::chrono::seconds(10);
constexpr auto kAbortedDrainLimit = std::chrono::milliseconds(200);
// The duplication's wait: it yields between polls and never sleeps (it is one collective, and
// MPI progresses it only while it is polled).
constexpr PollPacing kIdupPacing{};

// MpiTransport::incarnation_ proposed by the next group this process makes.
std::atomic<uint64_t> g_next_incarnation{1};

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

}  // namespace

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
  rank_names_ = members_;
}

std::shared_ptr<MpiTransport> MpiTransport::create(MPI_Comm parent,
                                                   const MpiCommunicatorOptions& options,
                                                   int64_t extra) {
  require_mpi_initialized("make_mpi_communicator");
  const auto timeout = options.timeout.count() > 0 ? options.timeout : default_collective_timeout();
  const Deadline deadline = Clock::now() + timeout;
  const MPI_Comm comm = idup_until(parent, deadline, kIdupPacing, kMpiComponent,
                                   "make_mpi_communicator", "communicator");
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
  rank_names_ = members_;
  int here = 0;
  for (const Peer& p : peers_) here += p.host == peers_[rank_].host;
  spin_time_ = spin_time_for(here);
}

std::string MpiTransport::who(int r) const {
  return fmt::format("rank {} ({})", r, rank_names_[r]);
}

void MpiTransport::name_ranks(std::vector<std::string> names) {
  if (names.size() != static_cast<size_t>(size_)) {
    throw_error(ErrorCode::kInternal, kComponent, "{} rank names for a group of {}", names.size(),
                size_);
  }
  rank_names_ = std::move(names);
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

}  // namespace detail

std::unique_ptr<Communicator> make_mpi_communicator(const MpiCommunicatorOptions& options) {
  return std::make_unique<Communicator>(detail::MpiTransport::create(MPI_COMM_WORLD, options));
}

}  // namespace tessel
