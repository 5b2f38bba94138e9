// RecordingTransport: a ForwardingTransport that records every
// collective this rank takes part in (one entry per sequence number, with its signature text),
// so that tests can prove how many collectives a call ran (e.g. N tensors in K fusion buckets
// -> exactly K all-reduces).
//
//   auto group = make_recording_group(4);
//   run_ranks(4, [&](int r) { ...group.comms[r]... });
//   group.recorders[0]->collectives();          // e.g. 3
//   group.recorders[0]->signatures()[0];        // "all_reduce(f32, 1040 elements, sum) ..."
//
// Thread safety: the rank's thread records; read the records after run_ranks returns.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/in_process_hub.h"
#include "comm/transport.h"
#include "tessel/comm/communicator.h"
#include "testing/forwarding_transport.h"

namespace tessel::testing {

class RecordingTransport : public ForwardingTransport {
 public:
  explicit RecordingTransport(std::shared_ptr<detail::Transport> inner)
      : ForwardingTransport(std::move(inner)) {}

  int collectives() const { return static_cast<int>(signatures_.size()); }
  const std::vector<std::string>& signatures() const { return signatures_; }
  void clear() {
    signatures_.clear();
    last_sequence_ = 0;
  }

 private:
  // A collective may use several transport calls; they share its sequence number.
  void before(const detail::Signature& signature, bool /*collective*/) override {
    if (signature.sequence != last_sequence_) {
      last_sequence_ = signature.sequence;
      signatures_.push_back(signature.text);
    }
  }

  std::vector<std::string> signatures_;
  uint64_t last_sequence_ = 0;
};

struct RecordingGroup {
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::shared_ptr<RecordingTransport>> recorders;  // per rank
};

// `names` label the ranks (default "rank 0", "rank 1", ...).
inline RecordingGroup make_recording_group(int size, std::vector<std::string> names = {}) {
  for (int r = static_cast<int>(names.size()); r < size; ++r) {
    std::string name = "rank ";  // by append: gcc 12 warns falsely (-Wrestrict) on "rank " + ...
    name += std::to_string(r);
    names.push_back(std::move(name));
  }
  RecordingGroup group;
  auto transports = detail::make_in_process_transports(std::move(names));
  for (int r = 0; r < size; ++r) {
    auto rec = std::make_shared<RecordingTransport>(transports[static_cast<size_t>(r)]);
    group.recorders.push_back(rec);
    group.comms.push_back(std::make_unique<Communicator>(rec));
  }
  return group;
}

}  // namespace tessel::testing
