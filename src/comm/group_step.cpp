// One collective step on every device's stream (group_step.h).
#include "comm/group_step.h"

#include <chrono>
#include <utility>

#include "tessel/runtime/busy_time.h"

namespace tessel::detail {

GroupStep::GroupStep(std::string component, std::shared_ptr<GroupService> service,
                     std::shared_ptr<CommunicatorPool> pool, Scratch scratch)
    : component_(std::move(component)),
      owner_(pool),
      evict_([service = std::move(service), pool] { service->evict(pool); }),
      scratch_(scratch) {}

GroupStep::GroupStep(std::string component, std::shared_ptr<CommGroup> group,
                     std::function<void()> evict, Scratch scratch)
    : component_(std::move(component)),
      owner_(group),
      group_(std::move(group)),
      evict_(std::move(evict)),
      scratch_(scratch) {}

void GroupStep::add(Device& device, Communicator* comm, std::function<void()> fn) {
  if (comm == nullptr) {
    tasks_.push_back({&device, std::move(fn)});
    return;
  }
  comms_.push_back(comm);
  Allocator* scratch = scratch_ == Scratch::kDevice ? device.allocator() : nullptr;
  // `owner` keeps comm alive for as long as the task exists (see group_step.h, Lifetime). The
  // task's time counts as its device's communication (busy_time.h), failed or not.
  tasks_.push_back({&device, [owner = owner_, comm, scratch, device = &device, fn = std::move(fn)] {
                      comm->set_scratch_allocator(scratch);
                      struct Count {
                        const Device* device;
                        std::chrono::steady_clock::time_point start;
                        ~Count() {
                          add_communication_time(*device, std::chrono::steady_clock::now() - start);
                        }
                      } count{device, std::chrono::steady_clock::now()};
                      fn();
                    }});
}

void GroupStep::run(const std::string& step, const CallDeadline& deadline) {
  // Held by the launch, which may call it after this step threw (a task dropped later).
  const auto abort = [owner = owner_, group = group_, comms = comms_](const std::string& reason) {
    if (group) return group->abort(reason);
    for (Communicator* c : comms) c->abort(reason);
  };
  try {
    run_on_streams(component_, step, std::move(tasks_), deadline, abort);
  } catch (...) {
    evict_();
    throw;
  }
  tasks_.clear();
}

}  // namespace tessel::detail
