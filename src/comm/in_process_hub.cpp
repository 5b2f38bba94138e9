#include "comm/in_process_hub.h"

#include <cstring>
#include <functional>
#include <thread>

#include "core/errors.h"

namespace tessel::detail {
namespace {

constexpr std::string_view kComm = "Communicator";
// How long a waiter spins (yielding) before it sleeps: short collectives finish within it.
constexpr auto kSpinTime = std::chrono::microseconds(50);
// How long a failing rank waits for peers to stop touching its shared buffers: they only have
// their share of one collective's memory traffic left, so this is never reached in practice;
// it bounds the wait if a peer thread is stuck for another reason.
constexpr auto kDrainLimit = std::chrono::seconds(30);

uint64_t signature_hash(const Signature& s) {
  return std::hash<std::string>()(s.agreed) * 1000003u ^ s.sequence;
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

InProcessHub::InProcessHub(std::vector<std::string> members)
    : members_(std::move(members)),
      slots_(members_.size()),
      local_phase_(members_.size(), 0),
      sharing_(members_.size(), 0),
      retired_(new std::atomic<bool>[members_.size()]) {
  for (size_t r = 0; r < members_.size(); ++r) retired_[r].store(false);
}

std::vector<Post> InProcessHub::exchange(int rank, const Signature& signature, const Post& mine,
                                         Deadline deadline, bool shared) {
  const uint64_t phase = local_phase_[rank];
  if (aborted()) {
    // Arriving means "done with the previous phase's buffers", which a draining peer waits for.
    slots_[rank].arrived.store(phase + 1, std::memory_order_release);
    throw_aborted();
  }
  const uint64_t bank = phase % 2;
  Slot& slot = slots_[rank];
  slot.hash[bank] = signature_hash(signature);
  slot.agreed[bank] = signature.agreed;
  slot.text[bank] = signature.text;
  slot.sequence[bank] = signature.sequence;
  slot.post[bank] = mine;
  slot.arrived.store(phase + 1, std::memory_order_release);
  if (arrivals_.fetch_add(1, std::memory_order_acq_rel) == size() - 1) {
    // Last to arrive: reset the count before anyone can see the phase complete.
    arrivals_.store(0, std::memory_order_relaxed);
    completed_.store(phase + 1);
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_.notify_all();
    }
  } else {
    wait_for_phase(rank, phase + 1, signature, deadline);
  }
  local_phase_[rank] = phase + 1;
  sharing_[rank] = shared;
  check_signatures(rank, bank, signature);
  std::vector<Post> posts(members_.size());
  for (size_t i = 0; i < posts.size(); ++i) posts[i] = slots_[i].post[bank];
  return posts;
}

void InProcessHub::wait_for_phase(int rank, uint64_t target, const Signature& signature,
                                  Deadline deadline) {
  const auto start = Clock::now();
  const auto spin_until = std::min(deadline, start + kSpinTime);
  while (Clock::now() < spin_until) {
    if (completed_.load(std::memory_order_acquire) >= target) return;
    if (aborted()) throw_aborted();
    std::this_thread::yield();
  }
  std::unique_lock<std::mutex> lock(mu_);
  sleepers_.fetch_add(1);
  cv_.wait_until(lock, deadline, [&] { return completed_.load() >= target || aborted(); });
  sleepers_.fetch_sub(1);
  if (completed_.load() >= target) return;
  if (aborted()) {
    lock.unlock();
    throw_aborted();
  }
  std::vector<std::string> missing;
  for (int r = 0; r < size(); ++r) {
    if (slots_[r].arrived.load() < target) missing.push_back(fmt::format("{} ({})", r, members_[r]));
  }
  const std::string message = fmt::format(
      "rank {} ({}) waited {:.3f} s for ranks [{}] in {} (sequence {}); they did not arrive",
      rank, members_[rank], seconds_between(start, Clock::now()), fmt::join(missing, ", "),
      signature.describe(members_), signature.sequence);
  abort_reason_ = "group aborted: " + message;
  aborted_.store(true, std::memory_order_release);
  cv_.notify_all();
  throw Error(ErrorCode::kDeadlineExceeded, kComm, message);
}

void InProcessHub::check_signatures(int rank, uint64_t bank, const Signature& signature) {
  const Slot& first = slots_[0];
  for (int r = 1; r < size(); ++r) {
    const Slot& other = slots_[r];
    if (other.hash[bank] == first.hash[bank] && other.agreed[bank] == first.agreed[bank] &&
        other.sequence[bank] == first.sequence[bank]) {
      continue;
    }
    const std::string message = fmt::format(
        "collectives differ: rank 0 ({}) called {} over group [{}] (sequence {}) but rank {} ({}) "
        "called {} over group [{}] (sequence {})",
        members_[0], first.text[bank], fmt::join(members_, ", "), first.sequence[bank], r,
        members_[r], other.text[bank], fmt::join(members_, ", "), other.sequence[bank]);
    (void)rank;
    (void)signature;
    abort(message);
    throw Error(ErrorCode::kFailedPrecondition, kComm, message);
  }
}

void InProcessHub::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_.load()) {
    abort_reason_ = reason.rfind("group aborted", 0) == 0 ? reason : "group aborted: " + reason;
    aborted_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

void InProcessHub::fail(int rank, const std::string& reason) {
  retired_[rank].store(true, std::memory_order_release);
  abort(reason);
  if (!sharing_[rank]) return;
  // Peers past the exchange may still be reading or writing this rank's buffers; they are done
  // once they arrive at the next phase (or leave by an error themselves).
  const uint64_t next = local_phase_[rank] + 1;
  const auto limit = Clock::now() + kDrainLimit;
  for (int r = 0; r < size(); ++r) {
    while (r != rank && slots_[r].arrived.load(std::memory_order_acquire) < next &&
           !retired_[r].load(std::memory_order_acquire) && Clock::now() < limit) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  sharing_[rank] = 0;
}

void InProcessHub::throw_aborted() {
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(mu_);
    reason = abort_reason_;
  }
  throw Error(ErrorCode::kAborted, kComm, reason);
}

void InProcessHub::send(int from, int to, int tag, const void* data, size_t bytes, Deadline) {
  if (aborted()) throw_aborted();
  const auto* p = static_cast<const uint8_t*>(data);
  std::vector<uint8_t> message(p, p + bytes);
  std::lock_guard<std::mutex> lock(mu_);
  mailboxes_[{from, to, tag}].push_back(std::move(message));
  cv_.notify_all();
}

void InProcessHub::recv(int to, int from, int tag, void* data, size_t bytes,
                        const Signature& signature, Deadline deadline) {
  const auto start = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  auto& box = mailboxes_[{from, to, tag}];
  cv_.wait_until(lock, deadline, [&] { return !box.empty() || aborted(); });
  if (!box.empty()) {
    std::vector<uint8_t> message = std::move(box.front());
    box.pop_front();
    lock.unlock();
    if (message.size() != bytes) {
      detail::throw_invalid(kComm, "rank {} expected {} bytes from rank {} (tag {}) but {} were sent",
                            to, bytes, from, tag, message.size());
    }
    if (bytes > 0) std::memcpy(data, message.data(), bytes);
    return;
  }
  if (aborted()) {
    lock.unlock();
    throw_aborted();
  }
  const std::string message = fmt::format(
      "rank {} ({}) waited {:.3f} s for a message from rank {} ({}) with tag {} in {} (sequence "
      "{}); it did not arrive",
      to, members_[to], seconds_between(start, Clock::now()), from, members_[from], tag,
      signature.describe(members_), signature.sequence);
  abort_reason_ = "group aborted: " + message;
  aborted_.store(true, std::memory_order_release);
  cv_.notify_all();
  throw Error(ErrorCode::kDeadlineExceeded, kComm, message);
}

std::vector<std::shared_ptr<Transport>> make_in_process_transports(std::vector<std::string> members) {
  auto hub = std::make_shared<InProcessHub>(std::move(members));
  std::vector<std::shared_ptr<Transport>> out;
  for (int r = 0; r < hub->size(); ++r) out.push_back(std::make_shared<InProcessTransport>(hub, r));
  return out;
}

}  // namespace tessel::detail
