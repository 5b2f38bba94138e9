// Internal: the shared state behind one in-process group, and its per-rank Transport.
//
// Ranks meet in numbered phases. A rank arriving at phase p writes its post and signature to
// bank p % 2, marks itself arrived, and waits until all N have arrived; then it reads the
// others' posts. A bank is rewritten only two phases later, after every rank has left phase p
// and reached p + 1, so posts are never overwritten while being read.
// Waiting spins briefly (yielding) and then sleeps on a condition variable until the deadline,
// so more ranks than cores do not burn the CPU.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "comm/transport.h"

namespace tessel::detail {

class InProcessHub {
 public:
  explicit InProcessHub(std::vector<std::string> members);

  int size() const { return static_cast<int>(members_.size()); }
  const std::vector<std::string>& members() const { return members_; }

  // `shared`: the posted buffers are touched by peers until the next phase (see fail).
  std::vector<Post> exchange(int rank, const Signature& signature, const Post& mine,
                             Deadline deadline, bool shared = false);
  // Rank `rank` leaves its collective by an error: it stops touching peers' buffers, aborts the
  // group, and if its own buffers are shared, waits (at most kDrainLimit) until every peer has
  // either reached the next phase or left too.
  void fail(int rank, const std::string& reason);
  void send(int from, int to, int tag, const void* data, size_t bytes, Deadline deadline);
  void recv(int to, int from, int tag, void* data, size_t bytes, const Signature& signature,
            Deadline deadline);
  void abort(const std::string& reason);
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  Transport::Staging& staging(int rank) { return slots_[rank].staging; }

 private:
  struct alignas(64) Slot {
    std::atomic<uint64_t> arrived{0};  // phases this rank has arrived at
    uint64_t hash[2] = {0, 0};          // per bank: hash of Signature::agreed
    std::string agreed[2];              // per bank
    std::string text[2];                // per bank
    uint64_t sequence[2] = {0, 0};
    Post post[2];
    Transport::Staging staging;  // this rank's (Transport::staging); lives as long as the hub
  };

  // Blocks until phase `target` completed (all ranks arrived), the group aborts or `deadline`.
  void wait_for_phase(int rank, uint64_t target, const Signature& signature, Deadline deadline);
  [[noreturn]] void throw_aborted();
  void check_signatures(int rank, uint64_t bank, const Signature& signature);

  const std::vector<std::string> members_;
  std::vector<Slot> slots_;
  std::vector<uint64_t> local_phase_;       // per rank, touched only by that rank
  std::vector<uint8_t> sharing_;            // per rank, owner only: buffers shared this phase
  std::unique_ptr<std::atomic<bool>[]> retired_;  // per rank: left by an error
  alignas(64) std::atomic<int> arrivals_{0};
  alignas(64) std::atomic<uint64_t> completed_{0};  // phases completed by all ranks
  std::atomic<bool> aborted_{false};
  std::atomic<int> sleepers_{0};

  std::mutex mu_;  // guards the fields below and the sleeping side of every wait
  std::condition_variable cv_;
  std::string abort_reason_;
  std::map<std::tuple<int, int, int>, std::deque<std::vector<uint8_t>>> mailboxes_;
};

// Rank `rank`'s endpoint on a hub.
class InProcessTransport : public Transport {
 public:
  InProcessTransport(std::shared_ptr<InProcessHub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return hub_->size(); }
  const std::vector<std::string>& members() const override { return hub_->members(); }
  bool shares_memory() const override { return true; }
  Staging& staging() override { return hub_->staging(rank_); }
  std::vector<Post> exchange(const Signature& signature, const Post& mine, Deadline deadline) override {
    return hub_->exchange(rank_, signature, mine, deadline);
  }
  std::vector<Post> share(const Signature& signature, const Post& mine, Deadline deadline) override {
    return hub_->exchange(rank_, signature, mine, deadline, /*shared=*/true);
  }
  void fail(const std::string& reason) override { hub_->fail(rank_, reason); }
  void barrier(const Signature& signature, Deadline deadline) override {
    hub_->exchange(rank_, signature, Post{}, deadline);
  }
  void send(int peer, int tag, const void* data, size_t bytes, const Signature&,
            Deadline deadline) override {
    hub_->send(rank_, peer, tag, data, bytes, deadline);
  }
  void recv(int peer, int tag, void* data, size_t bytes, const Signature& signature,
            Deadline deadline) override {
    hub_->recv(rank_, peer, tag, data, bytes, signature, deadline);
  }
  void abort(const std::string& reason) override { hub_->abort(reason); }

 private:
  std::shared_ptr<InProcessHub> hub_;
  const int rank_;
};

// The endpoints of one new in-process group, rank order.
std::vector<std::shared_ptr<Transport>> make_in_process_transports(std::vector<std::string> members);

}  // namespace tessel::detail
