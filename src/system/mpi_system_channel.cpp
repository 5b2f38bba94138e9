// The MPI SystemChannel (include/tessel/system/mpi_system_channel.h): point-to-point messages on the
// channel's own duplicate of MPI_COMM_WORLD, every wait non-blocking MPI polled against the
// caller's deadline. Compiled only with MPI (src/comm/mpi/CMakeLists.txt chooses it, as it
// chooses the MPI transport); mpi_system_channel_stub.cpp stands in without it. What it needs of
// MPI (the call lock, the checks, its tags, the wait loop, the duplication) is comm/mpi/mpi_env.h.
//
// Wire form: the caller's bytes, tag mpi_tags::kToCoordinator (host -> rank 0) or kToHost (rank
// 0 -> host); kClose ends a process's traffic to a peer (the destructor's handshake).
//
// Why the handshake: Open MPI (ob1) numbers the messages between two processes on a
// communicator, and a message that arrives after its communicator was freed is kept for the
// next communicator given the same context id, whose numbering it then corrupts: later messages
// on that communicator, of any tag, would never be matched. So a channel frees its communicator
// only once nothing more can arrive: it has received the close message of every process that
// sends to it (rank 0: every host; a host: rank 0), which MPI matches only after all that
// process's earlier messages, and its own sends have completed. Otherwise the communicator is
// kept (a few hundred bytes and one context id) and messages that arrive later stay there.
#include <mpi.h>

#include <climits>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "comm/mpi/mpi_env.h"
#include "core/errors.h"
#include "tessel/system/mpi_system_channel.h"

namespace tessel {
namespace {

using detail::check_mpi;
using detail::MpiCallLock;
using detail::poll_until;
using Clock = SystemChannel::Clock;
namespace mpi_tags = detail::mpi_tags;

constexpr std::string_view kComponent = "SystemChannel";
// Every wait of the channel: yields for the first 100 us, then sleeps with pauses growing to
// 1 ms: the system lifecycle is not latency-bound, and a waiting process leaves the cores to
// the peers it waits for (tests run more processes than cores).
constexpr detail::PollPacing kPacing{.spin = Clock::duration(0),
                                     .yield = std::chrono::microseconds(100),
                                     .sleep = std::chrono::microseconds(20),
                                     .max_sleep = std::chrono::microseconds(1000)};

class MpiSystemChannel final : public SystemChannel {
 public:
  MpiSystemChannel(MPI_Comm comm, int rank, int size, std::chrono::milliseconds close_timeout)
      : comm_(comm), rank_(rank), size_(size), close_timeout_(close_timeout) {}
  ~MpiSystemChannel() override;

  int num_hosts() const override { return size_; }

  void send_to_coordinator(int task, std::string message) override {
    check_self(task, "send_to_coordinator");
    post(0, mpi_tags::kToCoordinator, message);
  }

  std::optional<Envelope> receive_at_coordinator(Deadline deadline) override {
    check_coordinator("receive_at_coordinator");
    std::optional<Received> m = receive(coordinator_inbox_, MPI_ANY_SOURCE,
                                        mpi_tags::kToCoordinator, deadline);
    if (!m) return std::nullopt;
    return Envelope{m->source, std::move(m->body)};
  }

  void send_to_host(int task, std::string message) override {
    check_task(task, "send_to_host");
    check_coordinator("send_to_host");
    post(task, mpi_tags::kToHost, message);
  }

  std::optional<std::string> receive_at_host(int task, Deadline deadline) override {
    check_self(task, "receive_at_host");
    std::optional<Received> m = receive(host_inbox_, 0, mpi_tags::kToHost, deadline);
    if (!m) return std::nullopt;
    return std::move(m->body);
  }

 private:
  struct Received {
    int source = 0;
    std::string body;
  };
  // One direction's receive side: at most one matched message whose transfer is under way.
  struct Inbox {
    std::timed_mutex mu;  // one receiver at a time; held while it waits
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<char> buffer;  // (a vector: moving it keeps the storage MPI writes)
    int source = 0;
  };
  struct PendingSend {
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<char> buffer;  // MPI reads it until the request completes
  };

  void check_task(int task, const char* call) const {
    if (task < 0 || task >= size_) {
      detail::throw_invalid(kComponent, "{}: task {} is not a host of this channel (0..{})", call,
                            task, size_ - 1);
    }
  }
  // A process sends and receives as its own task only.
  void check_self(int task, const char* call) const {
    check_task(task, call);
    if (task != rank_) {
      detail::throw_invalid(kComponent,
                            "{}: this process is task {} (MPI rank {}) and cannot act for task {}",
                            call, rank_, rank_, task);
    }
  }
  void check_coordinator(const char* call) const {
    if (rank_ != 0) {
      detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                          "{}: the coordinator is task 0 (MPI rank 0); this process is task {}",
                          call, rank_);
    }
  }

  void post(int peer, int tag, const std::string& message);
  // Completes finished sends; send_mu_ held.
  void reap_sends_locked();
  std::optional<Received> receive(Inbox& inbox, int source, int tag, Deadline deadline);
  // One poll of `inbox`: true when a message is complete in inbox.buffer.
  bool poll_inbox(Inbox& inbox, int source, int tag);
  // The destructor's handshake: true when the communicator may be freed (see the top).
  bool close_handshake();

  MPI_Comm comm_;
  const int rank_;
  const int size_;
  const std::chrono::milliseconds close_timeout_;

  std::mutex send_mu_;              // guards sends_ (taken before MpiCallLock)
  std::deque<PendingSend> sends_;   // MPI_Isend not yet complete
  Inbox coordinator_inbox_;
  Inbox host_inbox_;
};

void MpiSystemChannel::post(int peer, int tag, const std::string& message) {
  if (message.size() > static_cast<size_t>(INT_MAX)) {
    detail::throw_invalid(kComponent, "a message of {} bytes is above MPI's limit of {}",
                          message.size(), INT_MAX);
  }
  PendingSend send;
  send.buffer.assign(message.begin(), message.end());
  std::lock_guard guard(send_mu_);
  {
    MpiCallLock lock;
    check_mpi(MPI_Isend(send.buffer.data(), static_cast<int>(send.buffer.size()), MPI_BYTE, peer,
                        tag, comm_, &send.request),
              "MPI_Isend");
  }
  sends_.push_back(std::move(send));
  reap_sends_locked();
}

void MpiSystemChannel::reap_sends_locked() {
  for (auto it = sends_.begin(); it != sends_.end();) {
    int done = 0;
    {
      MpiCallLock lock;
      check_mpi(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE), "MPI_Isend");
    }
    it = done ? sends_.erase(it) : std::next(it);
  }
}

bool MpiSystemChannel::poll_inbox(Inbox& inbox, int source, int tag) {
  MpiCallLock lock;
  if (inbox.request == MPI_REQUEST_NULL) {
    int flag = 0;
    MPI_Message message;
    MPI_Status status;
    check_mpi(MPI_Improbe(source, tag, comm_, &flag, &message, &status), "MPI_Improbe");
    if (!flag) return false;
    int count = 0;
    check_mpi(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
    inbox.buffer.resize(static_cast<size_t>(count));
    inbox.source = status.MPI_SOURCE;
    check_mpi(MPI_Imrecv(inbox.buffer.data(), count, MPI_BYTE, &message, &inbox.request),
              "MPI_Imrecv");
  }
  int done = 0;
  check_mpi(MPI_Test(&inbox.request, &done, MPI_STATUS_IGNORE), "MPI_Imrecv");
  return done != 0;
}

std::optional<MpiSystemChannel::Received> MpiSystemChannel::receive(Inbox& inbox, int source,
                                                                    int tag, Deadline deadline) {
  std::unique_lock serialize(inbox.mu, std::defer_lock);
  if (!serialize.try_lock_until(deadline)) return std::nullopt;
  const bool got = poll_until(deadline, kPacing, [&] {
    {
      std::lock_guard guard(send_mu_);
      reap_sends_locked();  // sends progress while this process waits
    }
    return poll_inbox(inbox, source, tag);
  });
  if (!got) return std::nullopt;
  Received out{inbox.source, std::string(inbox.buffer.begin(), inbox.buffer.end())};
  inbox.buffer.clear();
  return out;
}

bool MpiSystemChannel::close_handshake() {
  // Rank 0 talks with every host, a host with rank 0 only.
  std::vector<int> peers;
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && (rank_ == 0 || p == 0)) peers.push_back(p);
  }
  for (int p : peers) post(p, mpi_tags::kClose, "");
  std::vector<int> open = peers;  // peers whose close has not arrived
  std::lock_guard guard(send_mu_);
  return poll_until(Clock::now() + close_timeout_, kPacing, [&] {
    reap_sends_locked();
    for (auto it = open.begin(); it != open.end();) {
      int flag = 0;
      MPI_Message message;
      MpiCallLock lock;
      check_mpi(MPI_Improbe(*it, mpi_tags::kClose, comm_, &flag, &message, MPI_STATUS_IGNORE),
                "MPI_Improbe");
      if (!flag) {
        ++it;
        continue;
      }
      check_mpi(MPI_Mrecv(nullptr, 0, MPI_BYTE, &message, MPI_STATUS_IGNORE), "MPI_Mrecv");
      it = open.erase(it);
    }
    return open.empty() && sends_.empty();
  });
}

MpiSystemChannel::~MpiSystemChannel() {
  try {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;  // nothing can be freed any more
    bool safe = close_handshake();
    std::lock_guard guard(send_mu_);
    MpiCallLock lock;
    for (PendingSend& s : sends_) {
      MPI_Cancel(&s.request);
      MPI_Request_free(&s.request);
      new std::vector<char>(std::move(s.buffer));  // leaked on purpose: MPI may still read it
    }
    // A receive whose transfer began but was not taken (its receiver's deadline passed first).
    for (Inbox* inbox : {&coordinator_inbox_, &host_inbox_}) {
      if (inbox->request == MPI_REQUEST_NULL) continue;
      int done = 0;
      MPI_Test(&inbox->request, &done, MPI_STATUS_IGNORE);
      if (done) continue;
      MPI_Request_free(&inbox->request);
      new std::vector<char>(std::move(inbox->buffer));  // MPI may still write it
      safe = false;
    }
    if (safe) MPI_Comm_free(&comm_);
  } catch (...) {
    // A destructor must not throw (thread-level violations end here).
  }
}

}  // namespace

std::shared_ptr<SystemChannel> make_mpi_system_channel(const MpiSystemChannelOptions& options) {
  if (options.timeout.count() <= 0 || options.close_timeout.count() < 0) {
    detail::throw_invalid(kComponent,
                          "make_mpi_system_channel: timeout must be > 0 and close_timeout >= 0; "
                          "got {} ms and {} ms",
                          options.timeout.count(), options.close_timeout.count());
  }
  detail::require_mpi_initialized("make_mpi_system_channel");
  MPI_Comm comm = detail::idup_until(MPI_COMM_WORLD, Clock::now() + options.timeout, kPacing,
                                     kComponent, "make_mpi_system_channel", "channel");
  int rank = 0, size = 0;
  {
    MpiCallLock lock;
    check_mpi(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  }
  return std::make_shared<MpiSystemChannel>(comm, rank, size, options.close_timeout);
}

}  // namespace tessel
