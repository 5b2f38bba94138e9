// MessagePassingTransport: an in-process endpoint that reports shares_memory() == false, so that
// a Communicator over it runs the point-to-point collectives (src/comm/p2p_collectives.h), the
// ones MPI runs, inside one test process. share() is refused with kInternal before any
// rendezvous: no collective may read a peer's buffers over a transport that does not share
// memory, and one that tried fails its test loudly.
//
//   auto comms = make_message_passing_communicators(4);          // like make_in_process_...
//   auto group = make_message_passing_faulty_group(4, {{2, f}});  // rank 2 also faulty
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessel/comm/communicator.h"
#include "tessel/core/error.h"
#include "testing/fault_transport.h"
#include "testing/forwarding_transport.h"

namespace tessel::testing {

class MessagePassingTransport : public ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;

  bool shares_memory() const override { return false; }
  std::vector<detail::Post> share(const detail::Signature& signature, const detail::Post&,
                                  detail::Deadline) override {
    throw Error(ErrorCode::kInternal, "MessagePassingTransport",
                signature.text + " called share() over a transport that does not share memory");
  }
};

// make_faulty_group (fault_transport.h) with every rank's endpoint then wrapped in a
// MessagePassingTransport. The wrapped endpoints belong to the inner group's communicators,
// which the new transports keep alive (they are never called).
inline FaultyGroup make_message_passing_faulty_group(int size, const std::map<int, Faults>& faults) {
  auto inner = std::make_shared<FaultyGroup>(make_faulty_group(size, faults));
  FaultyGroup group;
  group.faults = inner->faults;
  for (auto& comm : inner->comms) {
    std::shared_ptr<detail::Transport> endpoint(inner, &comm->transport());  // shares inner's ownership
    group.comms.push_back(std::make_unique<Communicator>(std::make_shared<MessagePassingTransport>(endpoint)));
  }
  return group;
}

// A message-passing group of `size` ranks without faults.
inline std::vector<std::unique_ptr<Communicator>> make_message_passing_communicators(int size) {
  return make_message_passing_faulty_group(size, {}).comms;
}

}  // namespace tessel::testing
