// Internal: which threads run a replica of a replicated computation (replicate.h), so that the
// calls TF allows only in a cross-replica context (CrossDeviceOps' reduce, batch_reduce,
// broadcast, gather: BR-70-05) fail when a replica makes them, instead of each replica running
// its own cross-device step over devices the other replicas use.
//
//   {
//     ReplicaThreadScope scope(r, n);   // replicate()'s replica threads, around the computation
//     ... computation(ctx, inputs) ...  // current_replica_thread() == ReplicaThread{r, n}
//   }                                   // nullopt again (scopes nest; the innermost wins)
#pragma once

#include <optional>

namespace tessel::detail {

struct ReplicaThread {
  int replica = 0;
  int num_replicas = 1;
};

class ReplicaThreadScope {
 public:
  ReplicaThreadScope(int replica, int num_replicas);
  ~ReplicaThreadScope();
  ReplicaThreadScope(const ReplicaThreadScope&) = delete;
  ReplicaThreadScope& operator=(const ReplicaThreadScope&) = delete;

 private:
  std::optional<ReplicaThread> outer_;  // the enclosing scope's, restored on exit
};

// The replica this thread runs, when it runs one.
std::optional<ReplicaThread> current_replica_thread();

}  // namespace tessel::detail
