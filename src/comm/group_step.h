// Internal: one collective step of a multi-device operation (a relayout step, relayout_batch's
// fused all-reduce, a ShardedEmbedding lookup, a CrossDeviceOps all-reduce): one task per device
// of this client, each on its device's stream with its rank's communicator, run together and
// waited for by the caller (runtime/launch.h's run_on_streams).
//
//   auto service = GroupService::of(runtime);
//   std::shared_ptr<CommunicatorPool> pool = service->pool();
//   GroupStep step("relayout", service, pool, GroupStep::Scratch::kDevice);
//   for (...) {                                       // this client's devices of the mesh
//     Communicator* comm = &pool->get(mesh, {"x"}, offset, deadline.left());
//     step.add(device, comm, [comm, x]() mutable { comm->all_reduce(x, x, ReduceOp::kSum); });
//   }
//   step.run("all_reduce", deadline);   // throws what the first failing device threw
//
// The communicators come from a CommunicatorPool (relayout, embedding: the runtime's pool, whose
// groups are the group service's) or from one CommGroup (CrossDeviceOps: the group over its
// device set). What a step guarantees:
// - Scratch: just before a task runs, on its device's stream, its communicator's scratch
//   allocator is set (Scratch::kDevice: the device's allocator, so that the device's memory
//   statistics include the collective's temporaries; kHost: the host allocator). Set there
//   because groups are shared (relayout and CrossDeviceOps use the same group over the same
//   devices) and every user of a rank runs on that rank's stream. A task without a
//   communicator (a local copy between collective steps) runs as given.
// - Time: a task with a communicator counts its time as its device's communication
//   (tessel/runtime/busy_time.h).
// - Abort: a task that fails, a task its stream drops (an earlier op on it failed) and the
//   deadline abort the step's communicators, so that the peers still waiting in a collective
//   fail at once with kAborted instead of waiting out their deadline. Over a pool: every
//   communicator added; over a group: the whole group.
// - Deadline: run() returns or throws by the deadline (plus launch.h's slack, so that a
//   collective's own deadline, which names the late peer, normally fires first); a task not
//   started or still running then is kDeadlineExceeded naming its device. Errors are launch.h's:
//   Error(code of the root cause, component, "<step> on <device> failed: <what>").
// - Eviction: when run() throws, the pool (evicted from its service, with every group it handed
//   out) or the group (by the `evict` given) is evicted, since an aborted group stays aborted:
//   the next call gets fresh ones. The error is rethrown unchanged.
// - Lifetime: every task and the abort hold the pool or group (and so the communicators) until
//   they are destroyed: after a failure a task may still run, or be dropped by its stream and
//   abort, once run() has thrown and the pool was evicted.
//
// Thread safety: one thread builds and runs a step; a step runs once.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm_group.h"
#include "comm/group_service.h"
#include "runtime/launch.h"
#include "tessel/comm/communicator.h"
#include "tessel/comm/mesh_groups.h"
#include "tessel/runtime/device.h"

namespace tessel::detail {

class GroupStep {
 public:
  // Whose memory a task's collective temporaries come from (see above).
  enum class Scratch { kDevice, kHost };

  // A step over communicators of `pool`, which `service` handed out; a failure evicts `pool`
  // from `service`. `component` names the operation in errors ("relayout").
  GroupStep(std::string component, std::shared_ptr<GroupService> service,
            std::shared_ptr<CommunicatorPool> pool, Scratch scratch);
  // A step over `group`; a failure aborts the whole group and calls `evict`.
  GroupStep(std::string component, std::shared_ptr<CommGroup> group, std::function<void()> evict,
            Scratch scratch);

  // Adds `fn`, to run on `device`'s stream with `comm` (which it captures; null: it runs no
  // collective). `comm` must belong to the step's pool or group.
  void add(Device& device, Communicator* comm, std::function<void()> fn);
  // Runs the tasks added (none: returns at once) and waits for them, as described above. `step`
  // names them in the streams and in errors ("all_gather").
  void run(const std::string& step, const CallDeadline& deadline);

 private:
  std::string component_;
  std::shared_ptr<const void> owner_;  // the pool or the group: kept alive by tasks and abort
  std::shared_ptr<CommGroup> group_;   // over a group: aborted whole
  std::function<void()> evict_;
  Scratch scratch_;
  std::vector<StreamTask> tasks_;
  std::vector<Communicator*> comms_;  // the tasks' communicators, aborted over a pool
};

}  // namespace tessel::detail
