// The in-process SystemChannel: one queue into the coordinator, one queue per host, one mutex
// and condition variable; every wait is a wait_until on the caller's deadline.
#include <condition_variable>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "tessel/system/system_channel.h"

namespace tessel {
namespace {

class InProcessSystemChannel final : public SystemChannel {
 public:
  explicit InProcessSystemChannel(int num_hosts) : to_hosts_(static_cast<size_t>(num_hosts)) {}

  int num_hosts() const override { return static_cast<int>(to_hosts_.size()); }

  void send_to_coordinator(int task, std::string message) override {
    check_task(task, "send_to_coordinator");
    {
      std::lock_guard lock(mu_);
      to_coordinator_.push_back({task, std::move(message)});
    }
    cv_.notify_all();
  }

  std::optional<Envelope> receive_at_coordinator(Deadline deadline) override {
    std::unique_lock lock(mu_);
    if (!cv_.wait_until(lock, deadline, [&] { return !to_coordinator_.empty(); })) {
      return std::nullopt;
    }
    Envelope out = std::move(to_coordinator_.front());
    to_coordinator_.pop_front();
    return out;
  }

  void send_to_host(int task, std::string message) override {
    check_task(task, "send_to_host");
    {
      std::lock_guard lock(mu_);
      to_hosts_[static_cast<size_t>(task)].push_back(std::move(message));
    }
    cv_.notify_all();
  }

  std::optional<std::string> receive_at_host(int task, Deadline deadline) override {
    check_task(task, "receive_at_host");
    std::deque<std::string>& queue = to_hosts_[static_cast<size_t>(task)];
    std::unique_lock lock(mu_);
    if (!cv_.wait_until(lock, deadline, [&] { return !queue.empty(); })) return std::nullopt;
    std::string out = std::move(queue.front());
    queue.pop_front();
    return out;
  }

 private:
  void check_task(int task, const char* call) const {
    if (task < 0 || task >= num_hosts()) {
      detail::throw_invalid("SystemChannel", "{}: task {} is not a host of this channel (0..{})",
                            call, task, num_hosts() - 1);
    }
  }

  std::mutex mu_;  // guards both queues
  std::condition_variable cv_;
  std::deque<Envelope> to_coordinator_;
  std::vector<std::deque<std::string>> to_hosts_;  // per task
};

}  // namespace

std::shared_ptr<SystemChannel> make_in_process_system_channel(int num_hosts) {
  if (num_hosts < 1) {
    detail::throw_invalid("SystemChannel", "num_hosts must be >= 1; got {}", num_hosts);
  }
  return std::make_shared<InProcessSystemChannel>(num_hosts);
}

}  // namespace tessel
