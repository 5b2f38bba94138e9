// Internal: the MPI transport (include/tessel/comm/mpi.h describes its behaviour). Compiled only
// when tessel is built with MPI (src/comm/mpi/CMakeLists.txt); only src/comm/mpi/ and the
// white-box tests (tests/mpi) include it. What the system layer needs of MPI is in mpi_env.h.
//
// One MpiTransport is one process's endpoint of a duplicate of a parent communicator. All its
// waits go through wait(): non-blocking requests polled against the deadline (poll_until,
// mpi_env.h), while also reaping finished buffered sends, receiving abort records
// (mpi_tags::kAbort, from any source), answering liveness pings and, every kWatchInterval,
// checking that the processes of peers on this host still exist.
//
// Its members are defined by concern:
//   mpi_transport_create.cpp      creation (the communicator dup, the peer records), destruction
//   mpi_transport_send.cpp        buffered sends and their buffers, the send fault seam
//   mpi_transport_recv.cpp        receives
//   mpi_transport_rendezvous.cpp  exchange records, the rendezvous and the signature check
//   mpi_transport_abort.cpp       aborting the group and hearing of its abort
//   mpi_transport_liveness.cpp    liveness pings, the local pid watch, naming a lost peer
//   mpi_transport_wait.cpp        the wait loop, MPI's own collectives, the watchdog wiring
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "comm/mpi/mpi_env.h"
#include "comm/stuck_wait_watchdog.h"
#include "comm/transport.h"
#include "tessel/comm/mpi.h"

namespace tessel::detail {

class HostShm;  // host_shm.h

// Test seam: while one exists, every MpiTransport's send to rank `peer` fails as MPI fails a
// send over a connection it has lost (MPI_ERR_INTERN, as Open MPI's TCP BTL after a reset).
// The destructor also forgets the lost peer, so that the test process still finalizes MPI.
class ScopedMpiSendFault {
 public:
  explicit ScopedMpiSendFault(int peer);
  ~ScopedMpiSendFault();
  ScopedMpiSendFault(const ScopedMpiSendFault&) = delete;
  ScopedMpiSendFault& operator=(const ScopedMpiSendFault&) = delete;

 private:
  bool peer_lost_before_;
};

// True when process `pid` (on this host) no longer runs: gone, or a zombie not yet reaped
// (mpi_transport_liveness.cpp).
bool process_gone(int64_t pid);

class MpiTransport : public Transport {
 public:
  // One rank's exchange record.
  struct Record {
    uint64_t sequence = 0;
    uint64_t hash = 0;
    int64_t count = 0;
    int64_t aux = 0;
    std::string agreed;
    std::string text;
    std::string payload;  // exchange_records' extra bytes
    uint64_t incarnation = 0;  // the group's (see incarnation_)
  };

  // What every process tells the others when the transport is made.
  struct Peer {
    std::string name;  // members()[rank]
    std::string host;  // host name, boot id and pid namespace: equal iff pids are comparable
    int64_t pid = 0;
    int64_t extra = 0;  // creator-defined (hierarchical: local device count)
  };

  // Collective over `parent`: duplicates it (idup_until, mpi_env.h) and exchanges every
  // process's Peer record. `extra` is published in peers()[rank].extra.
  static std::shared_ptr<MpiTransport> create(MPI_Comm parent, const MpiCommunicatorOptions& options,
                                              int64_t extra = 0);
  ~MpiTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<std::string>& members() const override { return members_; }
  bool shares_memory() const override { return false; }

  std::vector<Post> exchange(const Signature& signature, const Post& mine, Deadline deadline) override;
  // No collective calls it: over a transport that does not share memory they all run point to
  // point (p2p_collectives.h). Kept as a safety net: the rendezvous happens (so that mismatched
  // calls are still reported as such), then every rank throws kUnimplemented, as no process can
  // read another's buffers. The group stays usable.
  std::vector<Post> share(const Signature& signature, const Post& mine, Deadline deadline) override;
  void barrier(const Signature& signature, Deadline deadline) override;
  void send(int peer, int tag, const void* data, size_t bytes, const Signature& signature,
            Deadline deadline) override;
  void recv(int peer, int tag, void* data, size_t bytes, const Signature& signature,
            Deadline deadline) override;
  void abort(const std::string& reason) override;
  void fail(const std::string& reason) override;

  // ---- for the MPI algorithms and the hierarchical transport ---------------------------------
  MPI_Comm comm() const { return comm_; }
  // exchange() that also carries `payload` (any bytes) from every rank: returns every rank's
  // record (rank order) after the same signature check.
  std::vector<Record> exchange_records(const Signature& signature, const Post& mine,
                                       const std::string& payload, Deadline deadline);
  const std::vector<Peer>& peers() const { return peers_; }
  // How this transport's messages name each rank ("rank r (<names[r]>)"), in place of its
  // process name: a group whose members are not the processes themselves (make_process_group)
  // names, for each process, the members it holds, so that a late process is named by the
  // members its callers know. Call before the transport is shared with other threads.
  void name_ranks(std::vector<std::string> names);
  // send/recv under a raw MPI tag (>= mpi_tags::kFirstFree) instead of a transport tag.
  void send_tagged(int peer, int mpi_tag, const void* data, size_t bytes, const Signature& signature,
                   Deadline deadline);
  void recv_tagged(int peer, int mpi_tag, void* data, size_t bytes, const Signature& signature,
                   Deadline deadline, std::string_view tag_text);
  // Registers the calling thread's MPI calls for `signature` with the stuck-call watchdog until
  // the returned Watch dies (nothing when stuck_exit_after is 0): stuck inside MPI
  // stuck_exit_after past `deadline`, the process ends naming `*waiting_for` (the rank still
  // waited for, kept current by the caller; null or -1: not known). See stuck_wait_watchdog.h.
  // `signature` and `*waiting_for` must outlive the Watch.
  StuckWaitWatchdog::Watch watch_stuck(const Signature& signature, Deadline deadline,
                                       const std::atomic<int>* waiting_for = nullptr) const;
  // Waits for a non-blocking collective started on comm(); `what` names it in errors. On the
  // deadline the request stays with MPI (a collective cannot be cancelled) and the group aborts.
  void wait_collective(MPI_Request& request, std::string_view what, const Signature& signature,
                       Deadline deadline);
  // Throws kAborted if the group was aborted.
  void check_aborted();
  // Receives pending abort records; throws kAborted if there was one (or the group is aborted).
  // (The shared-memory all-reduce, which makes no MPI call on one host, calls it first.)
  void poll_aborts();
  // The largest MPI tag this communicator allows.
  int tag_upper_bound() const { return tag_ub_; }

  // The shared-memory level of this group's all-reduce (host_shm.h), made by the first
  // all-reduce that wants it (host_shm_tried: made, or found unavailable).
  std::shared_ptr<HostShm> host_shm;
  bool host_shm_tried = false;

  MpiTransport(MPI_Comm comm, const MpiCommunicatorOptions& options);

 private:
  static constexpr std::string_view kComponent = "Communicator";
  // Messages longer than this travel in pieces (MPI counts are int).
  static constexpr size_t kMaxPiece = size_t{1} << 30;

  struct PendingSend {
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<uint8_t> buffer;
    int peer = -1;
  };

  // ---- creation (mpi_transport_create.cpp)
  void exchange_peers(const MpiCommunicatorOptions& options, int64_t extra, Deadline deadline);
  std::string who(int r) const;  // "rank r (name)"

  // ---- sends (mpi_transport_send.cpp)
  // Copies `bytes` and starts an MPI_Isend of the copy. A send that fails (here or in
  // reap_sends) means MPI lost the connection to its peer: see lost_peer.
  void post_send(int peer, int mpi_tag, const void* data, size_t bytes);
  void reap_sends();
  // Frees the request of a send whose MPI_Test failed, if MPI still holds it, leaking its
  // buffer. Called under MpiCallLock.
  void release_failed(PendingSend& s);
  // The MPI tag of transport tag `tag` (kInvalidArgument above the communicator's limit).
  int mpi_tag_of(int tag, std::string_view op) const;

  // ---- rendezvous (mpi_transport_rendezvous.cpp)
  // Sends this rank's record to every peer and returns every rank's, in rank order (no checks).
  std::vector<Record> rendezvous(const Signature& signature, const Post& mine, Deadline deadline,
                                 const std::string& payload = {});
  // kFailedPrecondition (and the group aborted) unless every record has rank 0's signature.
  void check_signatures(const std::vector<Record>& records);

  // ---- aborts (mpi_transport_abort.cpp)
  // Marks the group aborted with `reason` (the first reason wins) and, if `tell_peers`, sends
  // the reason to every peer but `lost` (a peer MPI lost: a send to it may hang in MPI).
  // Returns false when it was already aborted.
  bool abort_group(const std::string& reason, bool tell_peers, int lost = -1);
  [[noreturn]] void throw_aborted();

  // ---- liveness (mpi_transport_liveness.cpp)
  // Aborts the group naming `peer`, whose `call` failed with `rc`, and throws kAborted.
  [[noreturn]] void lost_peer(int peer, std::string_view call, int rc);
  // For a failed call on any source (`rc`): pings every peer, so that a lost one is named by
  // lost_peer; throws check_mpi's kUnavailable when every ping goes out.
  [[noreturn]] void fail_naming_lost_peer(int rc, std::string_view call);
  // Receives the next probe record (a Probe) under `tag` from any source into `probe`, if one
  // has arrived; returns its source, or -1 when none is waiting.
  int receive_probe(int tag, void* probe);
  // Throws kAborted naming the first peer on this host whose process is gone.
  void watch_peers(const Signature& signature, double waited);
  // Answers the liveness probes of peers (every wait does, so a waiting process is alive).
  void answer_pings();
  // Liveness probe of every peer: start_probe sends a ping (a fresh nonce, returned);
  // collect_pongs marks in `answered` (one flag per rank) the peers whose pong came back.
  // Waiting peers answer within microseconds; silent ones have stopped, are unreachable, or are
  // busy outside tessel's waits.
  uint64_t start_probe();
  void collect_pongs(uint64_t nonce, std::vector<bool>& answered);

  // ---- waiting (mpi_transport_wait.cpp)
  // Polls `poll` until it returns true; throws kAborted (abort record, lost peer) or calls
  // `on_deadline` (which throws) at the deadline. Its callers hold a watch_stuck for the whole
  // operation (recv_tagged, rendezvous, and MPI all-reduce around wait_collective).
  void wait(const std::function<bool()>& poll, const Signature& signature, Deadline deadline,
            const std::function<void(double waited)>& on_deadline);
  // How long a wait polls without pause when `here` processes of the group run on this host.
  static Clock::duration spin_time_for(int here);
  // The watchdog's message for a wait stuck inside MPI (`late`: seconds past the deadline).
  std::string describe_stuck(const Signature& signature, int waiting_for, double late) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int tag_ub_ = 32767;
  bool watch_local_peers_ = true;
  std::chrono::milliseconds stuck_exit_after_{0};  // MpiCommunicatorOptions::stuck_exit_after
  // How long a wait polls before it starts yielding (spin_time_for, set once the peers are known).
  std::chrono::steady_clock::duration spin_time_ = std::chrono::microseconds(100);
  std::vector<std::string> members_;
  std::vector<std::string> rank_names_;  // who() names rank r by rank_names_[r] (name_ranks)
  std::vector<Peer> peers_;
  std::mutex send_mu_;                        // guards sends_ and spare_ (taken before MpiCallLock)
  std::deque<PendingSend> sends_;            // buffered sends in flight
  std::vector<std::vector<uint8_t>> spare_;  // send buffers to reuse

  std::atomic<bool> aborted_{false};
  std::mutex abort_mu_;         // guards abort_reason_
  std::string abort_reason_;   // "group aborted: ..."
  bool unsupported_ = false;   // share() threw kUnimplemented: the following fail() is local
  bool constructing_ = false;  // in the construction rendezvous
  // Identifies this group among the communicators this process made (equal on every rank: the
  // ranks agree on it at construction). Exchange and abort records carry it, and records of
  // another group are dropped: MPI reuses a freed communicator's context id, so a late record
  // of an old group could otherwise match in a new one.
  uint64_t incarnation_ = 0;
  uint64_t probes_ = 0;  // liveness probes sent (their nonce)
};

}  // namespace tessel::detail
