// Internal: the ReplicaContext replicate() hands each replica — its collectives run on the
// CrossReplicaGroup's communicators: each call prepares this replica's part (one task per core)
// and hands it to the group's rendezvous, which enqueues every replica's part together (see
// replica_context.h for the semantics, cross_replica_group.h for the shared state).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "replicate/cross_replica_group.h"
#include "runtime/launch.h"
#include "tessel/replicate/replica_context.h"

namespace tessel::detail {

class GroupReplicaContext final : public ReplicaContext {
 public:
  GroupReplicaContext(int replica_id, Mesh mesh, Runtime& runtime,
                      std::shared_ptr<CrossReplicaGroup> group);

  // replicate() binds the replica's variables and reads back what it assigned.
  using ReplicaContext::bind_variables;
  using ReplicaContext::variables;
  using ReplicaContext::VariableSlot;

  // replicate()'s write-back across clients (variable_write_back.h): every replica's `value`
  // (a contiguous 1-D tensor in host memory, of one dtype and length on every replica),
  // concatenated in replica order, through logical core 0's group. A collective of the call as
  // the others are (rendezvous, order check, the call's deadline), `what` naming it in errors;
  // called after the computation returned, so not through the context's expiring API.
  Tensor gather_for_write_back(const Tensor& value, const std::string& what);

 private:
  // The collectives (the expiry checks are the base class's).
  DTensor run_all_reduce(const DTensor& x, ReduceOp op) override;
  DTensor run_all_gather(const DTensor& x, int axis) override;
  DTensor run_broadcast(const DTensor& x, int root_replica) override;
  void run_barrier() override;

  // One task per core, made by task(core, that core's communicator, the group); this replica's
  // part of the collective, launched by the group's rendezvous; returns when all have finished.
  template <typename MakeTask>
  void run_on_cores(const std::string& collective, const std::string& signature, MakeTask&& task);

  std::shared_ptr<CrossReplicaGroup> group_;  // the tasks hold it too: it owns the communicators
};

}  // namespace tessel::detail
