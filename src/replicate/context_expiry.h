// Internal: expires a ReplicaContext when the scope that runs its computation ends, however it
// ends (a return or an exception), so that a context kept past the computation fails cleanly
// (replica_context.h, "Lifetime").
//
//   const auto ctx = std::make_shared<GroupReplicaContext>(r, mesh, runtime, group);
//   const ExpireOnExit expiry(*ctx, "replicate() returned");
//   computation(*ctx, inputs);
#pragma once

#include <string>
#include <utility>

#include "tessel/replicate/replica_context.h"

namespace tessel::detail {

class ExpireOnExit {
 public:
  ExpireOnExit(ReplicaContext& ctx, std::string what_ended)
      : ctx_(ctx), what_ended_(std::move(what_ended)) {}
  ~ExpireOnExit() { ctx_.expire(what_ended_); }
  ExpireOnExit(const ExpireOnExit&) = delete;
  ExpireOnExit& operator=(const ExpireOnExit&) = delete;

 private:
  ReplicaContext& ctx_;
  std::string what_ended_;
};

}  // namespace tessel::detail
