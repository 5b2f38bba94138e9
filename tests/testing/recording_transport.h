// RecordingTransport: a detail::Transport that forwards to another endpoint and records every
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
#include "tessel/communicator.h"

namespace tessel::testing {

class RecordingTransport : public detail::Transport {
 public:
  explicit RecordingTransport(std::shared_ptr<detail::Transport> inner)
      : inner_(std::move(inner)) {}

  int collectives() const { return static_cast<int>(signatures_.size()); }
  const std::vector<std::string>& signatures() const { return signatures_; }
  void clear() {
    signatures_.clear();
    last_sequence_ = 0;
  }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::vector<std::string>& members() const override { return inner_->members(); }
  bool shares_memory() const override { return inner_->shares_memory(); }
  std::vector<detail::Post> exchange(const detail::Signature& signature, const detail::Post& mine,
                                     detail::Deadline deadline) override {
    record(signature);
    return inner_->exchange(signature, mine, deadline);
  }
  std::vector<detail::Post> share(const detail::Signature& signature, const detail::Post& mine,
                                  detail::Deadline deadline) override {
    record(signature);
    return inner_->share(signature, mine, deadline);
  }
  void barrier(const detail::Signature& signature, detail::Deadline deadline) override {
    record(signature);
    inner_->barrier(signature, deadline);
  }
  void send(int peer, int tag, const void* data, size_t bytes, const detail::Signature& signature,
            detail::Deadline deadline) override {
    record(signature);
    inner_->send(peer, tag, data, bytes, signature, deadline);
  }
  void recv(int peer, int tag, void* data, size_t bytes, const detail::Signature& signature,
            detail::Deadline deadline) override {
    record(signature);
    inner_->recv(peer, tag, data, bytes, signature, deadline);
  }
  void abort(const std::string& reason) override { inner_->abort(reason); }
  void fail(const std::string& reason) override { inner_->fail(reason); }
  Staging& staging() override { return inner_->staging(); }

 private:
  // A collective may use several transport calls; they share its sequence number.
  void record(const detail::Signature& signature) {
    if (signature.sequence != last_sequence_) {
      last_sequence_ = signature.sequence;
      signatures_.push_back(signature.text);
    }
  }

  std::shared_ptr<detail::Transport> inner_;
  std::vector<std::string> signatures_;
  uint64_t last_sequence_ = 0;
};

struct RecordingGroup {
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::shared_ptr<RecordingTransport>> recorders;  // per rank
};

inline RecordingGroup make_recording_group(int size) {
  std::vector<std::string> names;
  for (int r = 0; r < size; ++r) {
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
