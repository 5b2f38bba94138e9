// ForwardingTransport: a detail::Transport that forwards every call to another endpoint, for
// test wrappers (FaultTransport, RecordingTransport) that observe or alter some of them.
// Before each exchange, share, barrier, send and recv it calls before(signature, collective)
// (collective: exchange, share and barrier), which a wrapper overrides; a wrapper that changes
// a call itself (e.g. drops a send) overrides that call and forwards through inner().
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/transport.h"

namespace tessel::testing {

class ForwardingTransport : public detail::Transport {
 public:
  explicit ForwardingTransport(std::shared_ptr<detail::Transport> inner)
      : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::vector<std::string>& members() const override { return inner_->members(); }
  bool shares_memory() const override { return inner_->shares_memory(); }
  std::vector<detail::Post> exchange(const detail::Signature& signature, const detail::Post& mine,
                                     detail::Deadline deadline) override {
    before(signature, /*collective=*/true);
    return inner_->exchange(signature, mine, deadline);
  }
  std::vector<detail::Post> share(const detail::Signature& signature, const detail::Post& mine,
                                  detail::Deadline deadline) override {
    before(signature, /*collective=*/true);
    return inner_->share(signature, mine, deadline);
  }
  void barrier(const detail::Signature& signature, detail::Deadline deadline) override {
    before(signature, /*collective=*/true);
    inner_->barrier(signature, deadline);
  }
  void send(int peer, int tag, const void* data, size_t bytes, const detail::Signature& signature,
            detail::Deadline deadline) override {
    before(signature, /*collective=*/false);
    inner_->send(peer, tag, data, bytes, signature, deadline);
  }
  void recv(int peer, int tag, void* data, size_t bytes, const detail::Signature& signature,
            detail::Deadline deadline) override {
    before(signature, /*collective=*/false);
    inner_->recv(peer, tag, data, bytes, signature, deadline);
  }
  void abort(const std::string& reason) override { inner_->abort(reason); }
  void fail(const std::string& reason) override { inner_->fail(reason); }
  Staging& staging() override { return inner_->staging(); }

 protected:
  virtual void before(const detail::Signature& /*signature*/, bool /*collective*/) {}
  detail::Transport& inner() { return *inner_; }

 private:
  const std::shared_ptr<detail::Transport> inner_;
};

}  // namespace tessel::testing
