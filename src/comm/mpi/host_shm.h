// Internal: the shared-memory level between the processes of one host (host_shm.cpp), used by
// the all-reduce of MPI groups whose processes share a host (shm_all_reduce.cpp).
//
// One POSIX shared-memory segment per group and host: the host's first process creates it
// (named /tessel-shm.<pid>.<n>), every other process of the host maps it, and the creator
// unlinks it as soon as all have mapped it, so that a crash afterwards leaves nothing in
// /dev/shm; a crash in between leaves a segment whose creator is gone, which the next creation on
// the host removes. The segment holds a control block (a barrier of every participant of the
// host: a counter and a generation word that waiters sleep on with futex; the group's abort
// flag and reason; each participant's current signature) and the data area: two banks of one
// slot per participant, and two result areas, `slot_bytes` each.
//
// Every wait takes the collective's deadline, and while waiting checks that the processes of
// the host's other participants still exist (pidfd, else kill/proc): a killed peer ends every
// survivor's wait with kAborted naming its rank, name and pid; the deadline with
// kDeadlineExceeded naming the participants that have not arrived; an abort of the group heard
// over MPI with kAborted carrying its reason.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/transport.h"

namespace tessel::detail {

class MpiTransport;

// One participant of the host: a member of the group driven by a thread of one process.
struct HostParticipant {
  int rank = 0;          // in the group
  std::string name;      // the group member's name
  int process = 0;       // the MPI rank of its process
  int64_t pid = 0;       // its process's pid
};

class HostShm {
 public:
  // Bytes of one slot (and of one result area), the pipelining chunk of the all-reduce: by
  // default kSlotBytes; the environment variable TESSEL_SHM_SLOT_BYTES (the same on every
  // process, at least 4096) sets another, for tuning.
  static constexpr size_t kSlotBytes = size_t{1} << 20;
  size_t slot_bytes() const { return slot_bytes_; }

  // False when the environment variable TESSEL_SHM is "0" (every process must agree): groups
  // then keep their MPI paths (for comparisons).
  static bool enabled();

  // Collective over every process of `mpi` (one thread each, all calling with the same
  // arguments): participants_of[q] lists the group ranks (ascending) that process q drives and
  // names[r] is rank r's member name. Processes on the same host (MpiTransport::Peer::host) meet
  // in one segment per host. Returns null on every process when no host has two processes or
  // when creating or mapping a segment failed on any process (the caller then keeps using MPI;
  // `why_not` says why). Throws what the MPI rendezvous throws (deadline, abort).
  static std::shared_ptr<HostShm> create(MpiTransport& mpi,
                                         const std::vector<std::vector<int>>& participants_of,
                                         const std::vector<std::string>& names,
                                         const Signature& signature, Deadline deadline,
                                         std::string* why_not);
  ~HostShm();
  HostShm(const HostShm&) = delete;
  HostShm& operator=(const HostShm&) = delete;

  // This host's participants, in group rank order (a participant's index is its slot).
  const std::vector<HostParticipant>& participants() const { return participants_; }
  int size() const { return static_cast<int>(participants_.size()); }
  // The index of group rank `rank` among this host's participants (-1: not on this host).
  int index_of_rank(int rank) const;
  // True when the group also has processes on other hosts.
  bool multi_host() const { return multi_host_; }
  // The host leaders: per host, the MPI rank of its first process (ascending), and this host's.
  const std::vector<int>& host_leaders() const { return host_leaders_; }
  int my_host_leader() const { return my_host_leader_; }

  unsigned char* slot(int bank, int participant) const;
  unsigned char* result(int bank) const;

  // Participant `me` publishes its call (sequence, agreed hash, count, text) before its barrier
  // `round`; after that barrier, check_calls (same round) throws kFailedPrecondition (and aborts
  // the group) unless every participant published the same call.
  void publish_call(int me, uint64_t round, const Signature& signature, int64_t count);
  void check_calls(int me, uint64_t round, const Signature& signature);

  // Waits until every participant has arrived at its round `round` (each participant counts its
  // own barriers; all pass the same sequence). Throws kAborted (the group aborted, or a peer's
  // process gone) or kDeadlineExceeded naming the participants that have not arrived.
  void barrier(int me, uint64_t round, const Signature& signature, Deadline deadline);

  // Marks the group aborted (the first reason wins) and wakes every waiter: their waits, and
  // every later one, throw kAborted carrying the reason.
  void abort(const std::string& reason);

  // The round counter of participant `me` (its next barrier's number), kept here so that a
  // participant's successive calls alternate the banks.
  uint64_t& rounds(int me) { return rounds_[static_cast<size_t>(me)]; }

  // Removes /dev/shm segments named by tessel whose creating process is gone (crash leftovers).
  static void remove_stale_segments();

 private:
  struct Control;
  HostShm() = default;
  Control* control() const { return reinterpret_cast<Control*>(base_); }
  // Throws kAborted if the group was aborted or a peer's process is gone.
  void check_alive(int me, const Signature& signature);

  std::vector<HostParticipant> participants_;
  std::vector<int> host_leaders_;
  int my_host_leader_ = 0;
  bool multi_host_ = false;
  unsigned char* base_ = nullptr;
  size_t bytes_ = 0;
  size_t data_offset_ = 0;
  size_t slot_bytes_ = kSlotBytes;
  std::vector<uint64_t> rounds_;
  // Run by this process's first participant at every look while it sleeps in a barrier: the MPI
  // transport's poll for abort records (a group aborted over MPI, e.g. by a rank on another
  // host or in another collective, ends the wait with kAborted).
  std::function<void()> poll_mpi_;
  int first_local_ = 0;
  int spins_ = 0;  // polls of the barrier before it yields (none when oversubscribed)
  // The other processes of the host: MPI rank, pid, pidfd (-1: watched through kill and /proc).
  struct Watched {
    int process;
    int64_t pid;
    int fd;
  };
  std::vector<Watched> watched_;
};

// all_reduce through `shm` as its participant `me` (shm_all_reduce.cpp): every participant of
// the host calls it; group_size is the group's size (kMean's divisor). With several hosts the
// host leaders' ring all-reduce runs over `mpi`. An error aborts the segment (every participant
// of the host then fails too) and is rethrown.
struct AllReduceArgs;
void host_shm_all_reduce(HostShm& shm, int me, const AllReduceArgs& a, int64_t group_size,
                         MpiTransport& mpi);

}  // namespace tessel::detail
