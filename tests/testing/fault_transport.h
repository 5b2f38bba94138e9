// FaultTransport: a ForwardingTransport that wraps another endpoint and injects faults, so that
// tests can make one participant of a group late, stuck, failing or lossy.
//
//   Faults f;
//   f.stall_at = 3;                                   // collective #3 of this rank never arrives
//   auto group = make_faulty_group(4, {{2, f}});     // rank 2 wrapped, the others plain
//   run_ranks(4, [&](int r) { ...group.comms[r]->all_reduce(...)... });
//   group.release_all();                              // end the stall so the thread can exit
//
// Faults (all optional, combinable):
// - delay: sleep before every exchange, barrier, send and recv.
// - stall_at = k: at transport call number `stall_call` (0: the first) whose
//   Signature::sequence is k, sleep until
//   release() or stall_limit (bounded, so a test cannot hang), then carry on into the wrapped
//   transport (which by then usually throws kAborted: the others gave up on this rank).
// - fail_at = k: at exchange or barrier number `fail_call` (0: the first) of sequence k, throw
//   Error(kInvalidArgument, "FaultTransport", "injected fault ...") instead of arriving. The
//   Communicator treats it like any failure of this rank and aborts the group. fail_call = 1
//   fails a two-phase collective after its first rendezvous (at its closing barrier).
// - drop: sends to (peer, tag) are swallowed: they return at once and are never delivered.
// Sequence numbers start at 1 (the first collective a Communicator starts); 0 means "never".
//
// Thread safety: like any Transport, one thread calls a rank's endpoint; release() and the
// observers may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/in_process_hub.h"
#include "comm/transport.h"
#include "tessel/comm/communicator.h"
#include "tessel/core/error.h"
#include "testing/forwarding_transport.h"

namespace tessel::testing {

struct Faults {
  std::chrono::milliseconds delay{0};
  uint64_t stall_at = 0;
  int stall_call = 0;
  std::chrono::milliseconds stall_limit{std::chrono::seconds(10)};
  uint64_t fail_at = 0;
  int fail_call = 0;
  std::optional<std::pair<int, int>> drop;  // (peer, tag) of sends never delivered
};

class FaultTransport : public ForwardingTransport {
 public:
  FaultTransport(std::shared_ptr<detail::Transport> inner, Faults faults)
      : ForwardingTransport(std::move(inner)), faults_(std::move(faults)) {}

  // Ends a current or future stall at once.
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }
  // True once the stall has begun (the rank is now "missing").
  bool stalling() const { return stall_begun_.load(); }
  bool failed() const { return failed_.load(); }
  int dropped() const { return dropped_.load(); }

  void send(int peer, int tag, const void* data, size_t bytes, const detail::Signature& signature,
            detail::Deadline deadline) override {
    before(signature, /*collective=*/false);
    if (faults_.drop && faults_.drop->first == peer && faults_.drop->second == tag) {
      dropped_.fetch_add(1);
      return;
    }
    inner().send(peer, tag, data, bytes, signature, deadline);
  }

 private:
  void before(const detail::Signature& signature, bool collective) override {
    if (faults_.delay.count() > 0) std::this_thread::sleep_for(faults_.delay);
    if (faults_.stall_at != 0 && signature.sequence == faults_.stall_at && !stall_begun_.load() &&
        calls_at_stall_sequence_++ == faults_.stall_call) {
      stall_begun_.store(true);
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, faults_.stall_limit, [&] { return released_; });
    }
    if (collective && faults_.fail_at != 0 && signature.sequence == faults_.fail_at &&
        !failed_.load() && calls_at_fail_sequence_++ == faults_.fail_call) {
      failed_.store(true);
      throw Error(ErrorCode::kInvalidArgument, "FaultTransport",
                  "injected fault in " + signature.text + " (sequence " +
                      std::to_string(signature.sequence) + ")");
    }
  }

  const Faults faults_;
  std::atomic<bool> stall_begun_{false};
  std::atomic<bool> failed_{false};
  std::atomic<int> dropped_{0};
  int calls_at_fail_sequence_ = 0;  // touched only by the rank's thread
  int calls_at_stall_sequence_ = 0;  // touched only by the rank's thread
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
};

// One in-process group whose ranks listed in `faults` are wrapped in a FaultTransport.
struct FaultyGroup {
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::shared_ptr<FaultTransport>> faults;  // per rank; null where not wrapped

  void release_all() {
    for (auto& f : faults) {
      if (f) f->release();
    }
  }
};

inline FaultyGroup make_faulty_group(int size, const std::map<int, Faults>& faults,
                                     std::vector<std::string> names = {}) {
  if (names.empty()) {
    for (int r = 0; r < size; ++r) names.push_back("rank " + std::to_string(r));
  }
  FaultyGroup group;
  group.faults.resize(static_cast<size_t>(size));
  auto transports = detail::make_in_process_transports(std::move(names));
  for (int r = 0; r < size; ++r) {
    std::shared_ptr<detail::Transport> t = transports[static_cast<size_t>(r)];
    if (auto it = faults.find(r); it != faults.end()) {
      auto wrapped = std::make_shared<FaultTransport>(std::move(t), it->second);
      group.faults[static_cast<size_t>(r)] = wrapped;
      t = wrapped;
    }
    group.comms.push_back(std::make_unique<Communicator>(std::move(t)));
  }
  return group;
}

}  // namespace tessel::testing
