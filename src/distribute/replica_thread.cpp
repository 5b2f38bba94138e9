// The per-thread replica marker (replica_thread.h).
#include "distribute/replica_thread.h"

namespace tessel::detail {
namespace {

thread_local std::optional<ReplicaThread> current;

}  // namespace

ReplicaThreadScope::ReplicaThreadScope(int replica, int num_replicas) : outer_(current) {
  current = ReplicaThread{replica, num_replicas};
}

ReplicaThreadScope::~ReplicaThreadScope() { current = outer_; }

std::optional<ReplicaThread> current_replica_thread() { return current; }

}  // namespace tessel::detail
