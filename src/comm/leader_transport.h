// Internal: a subset of a group's ranks as a group of their own, for algorithms that run a
// collective among some ranks only (the hosts' leaders of the hierarchical all-reduces): only
// send/recv are offered, mapped to the parent transport's ranks.
#pragma once

#include <string>
#include <vector>

#include "comm/transport.h"
#include "core/errors.h"

namespace tessel::detail {

class LeaderTransport : public Transport {
 public:
  LeaderTransport(Transport& t, std::vector<int> ranks, int my_index)
      : t_(t), ranks_(std::move(ranks)), index_(my_index) {
    for (int r : ranks_) names_.push_back(t.members()[r]);
  }
  int rank() const override { return index_; }
  int size() const override { return static_cast<int>(ranks_.size()); }
  const std::vector<std::string>& members() const override { return names_; }
  bool shares_memory() const override { return false; }
  std::vector<Post> exchange(const Signature&, const Post&, Deadline) override { unused(); }
  void barrier(const Signature&, Deadline) override { unused(); }
  void send(int peer, int tag, const void* data, size_t bytes, const Signature& s,
            Deadline d) override {
    t_.send(ranks_[peer], tag, data, bytes, s, d);
  }
  void recv(int peer, int tag, void* data, size_t bytes, const Signature& s, Deadline d) override {
    t_.recv(ranks_[peer], tag, data, bytes, s, d);
  }
  void abort(const std::string& reason) override { t_.abort(reason); }

 private:
  [[noreturn]] static void unused() {
    throw_error(ErrorCode::kInternal, "Communicator", "leader transport supports send/recv only");
  }
  Transport& t_;
  std::vector<int> ranks_;  // global ranks of the leaders
  int index_;
  std::vector<std::string> names_;
};

}  // namespace tessel::detail
