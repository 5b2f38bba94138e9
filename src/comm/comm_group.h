// Internal: one communicator group, shared by everyone who runs collectives in it.
//
// A CommGroup holds the rank-ordered communicators of its members (in-process: all of them; a
// group joined through a Cluster: this client's, nullptr for the other clients' members). The
// runtime's GroupService (group_service.h) hands groups out by their member list; whoever saw a
// collective of a group fail evicts it there, since an aborted group stays aborted.
//
//   std::shared_ptr<CommGroup> g = GroupService::of(runtime)->group({"/cpu:0", "/cpu:1"});
//   g->at("/cpu:1").all_reduce(x, x, ReduceOp::kSum);   // on CPU:1's stream
//
// Thread safety: the members and communicators never change; each communicator follows
// Communicator's rules (one thread at a time); abort() may be called from anywhere.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessel/comm/communicator.h"

namespace tessel::detail {

struct CommGroup {
  CommGroup(std::vector<std::string> members, std::vector<std::unique_ptr<Communicator>> comms);
  ~CommGroup();
  CommGroup(const CommGroup&) = delete;
  CommGroup& operator=(const CommGroup&) = delete;

  const std::vector<std::string> members;                  // names, rank order
  const std::vector<std::unique_ptr<Communicator>> comms;  // rank r's (nullptr: another client's)

  // The communicator of member `name` (kInternal naming it and the group if it is not a member
  // of this client).
  Communicator& at(const std::string& name) const;
  int rank_of(const std::string& name) const;  // -1 when not a member
  // Aborts the group: every current and later call of every member throws kAborted.
  void abort(const std::string& reason) const;

  // CommGroups alive in this process (tests: the groups of a dead runtime are gone).
  static int64_t num_live();
};

// A group over `members` (rank order) made by make_in_process_communicators.
std::shared_ptr<CommGroup> make_in_process_group(std::vector<std::string> members);

}  // namespace tessel::detail
