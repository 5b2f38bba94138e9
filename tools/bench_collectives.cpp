#include "bench_collectives.h"

#include <atomic>
#include <cstring>

namespace tessel::cli::bench {

Collective::Collective(const CollectiveParams& p, std::vector<std::unique_ptr<Communicator>>& comms)
    : p_(p), comms_(comms), n_(p.devices), item_(dtype_size(p.dtype)) {
  options_.algorithm = p.algorithm;
}

Pattern Collective::input_pattern(int rank) const {
  return Pattern(p_.dtype, [&](int64_t j) { return input_value(p_.dtype, p_.op, n_, rank, j); });
}

Pattern Collective::reduced_pattern() const {
  return Pattern(p_.dtype, [&](int64_t j) { return reduced_value(p_.dtype, p_.op, n_, j); });
}

void Collective::poison(Tensor& t) {
  if (t.nbytes() > 0) std::memset(t.data(), 0xA5, t.nbytes());
}

namespace {

// all_reduce: out-of-place (input -> output) and in place (output -> output).
class AllReduce : public Collective {
 public:
  AllReduce(const CollectiveParams& p, std::vector<std::unique_ptr<Communicator>>& comms)
      : Collective(p, comms), in_(n_), out_(n_), reduced_(reduced_pattern()) {
    for (int r = 0; r < n_; ++r) inputs_.push_back(input_pattern(r));
  }
  double bus_factor() const override { return 2.0 * (n_ - 1) / n_; }
  double min_traffic(int64_t count) const override { return 2.0 * n_ * size_of(count); }
  double footprint(int64_t count) const override { return 2.0 * n_ * size_of(count); }
  std::string redop() const override { return std::string(reduce_op_name(p_.op)); }
  bool has_mode(bool) const override { return true; }

  void setup(int r, int64_t count) override {
    in_[r] = Tensor::zeros(Shape{count}, p_.dtype);
    out_[r] = Tensor::zeros(Shape{count}, p_.dtype);
    inputs_[r].fill(in_[r].data(), 0, count);
    inputs_[r].fill(out_[r].data(), 0, count);  // in-place timing starts from inputs too
  }
  void prepare_check(int r, bool in_place) override {
    const int64_t count = in_[r].num_elements();
    if (in_place) {
      inputs_[r].fill(out_[r].data(), 0, count);
    } else {
      inputs_[r].fill(in_[r].data(), 0, count);
      poison(out_[r]);
    }
  }
  Tensor call(int r, bool in_place) override {
    comms_[r]->all_reduce(in_place ? out_[r] : in_[r], out_[r], p_.op, options_);
    return {};
  }
  int64_t check(int r, bool, const Tensor&) override {
    return reduced_.count_wrong(out_[r].data(), 0, out_[r].num_elements());
  }
  void teardown(int r) override { in_[r] = out_[r] = Tensor(); }

 private:
  std::vector<Tensor> in_, out_;
  std::vector<Pattern> inputs_;
  Pattern reduced_;
};

// broadcast: the API is in place only (every rank's tensor becomes the root's).
class Broadcast : public Collective {
 public:
  Broadcast(const CollectiveParams& p, std::vector<std::unique_ptr<Communicator>>& comms)
      : Collective(p, comms), buf_(n_), source_(input_pattern(p.root)) {}
  double bus_factor() const override { return 1.0; }
  double min_traffic(int64_t count) const override { return 1.0 * n_ * size_of(count); }
  double footprint(int64_t count) const override { return 1.0 * n_ * size_of(count); }
  int root() const override { return p_.root; }
  bool has_mode(bool in_place) const override { return in_place; }

  void setup(int r, int64_t count) override {
    buf_[r] = Tensor::zeros(Shape{count}, p_.dtype);
    if (r == p_.root) source_.fill(buf_[r].data(), 0, count);
  }
  void prepare_check(int r, bool) override {
    if (r == p_.root) {
      source_.fill(buf_[r].data(), 0, buf_[r].num_elements());
    } else {
      poison(buf_[r]);
    }
  }
  Tensor call(int r, bool) override {
    comms_[r]->broadcast(buf_[r], p_.root, options_);
    return {};
  }
  int64_t check(int r, bool, const Tensor&) override {
    return source_.count_wrong(buf_[r].data(), 0, buf_[r].num_elements());
  }
  void teardown(int r) override { buf_[r] = Tensor(); }

 private:
  std::vector<Tensor> buf_;
  Pattern source_;
};

// The collectives that move count elements to or from every peer (N*count on the larger side of
// each rank) and have only the separate-output form: each rank's input tensor and input pattern.
class PerPeerCollective : public Collective {
 public:
  PerPeerCollective(const CollectiveParams& p, std::vector<std::unique_ptr<Communicator>>& comms)
      : Collective(p, comms), in_(n_) {
    for (int r = 0; r < n_; ++r) inputs_.push_back(input_pattern(r));
  }
  int64_t count_for(int64_t bytes) const override { return bytes / static_cast<int64_t>(item_) / n_; }
  int64_t size_of(int64_t count) const override { return count * n_ * static_cast<int64_t>(item_); }
  double bus_factor() const override { return (n_ - 1.0) / n_; }
  bool has_mode(bool in_place) const override { return !in_place; }
  void teardown(int r) override { in_[r] = Tensor(); }

 protected:
  std::vector<Tensor> in_;
  std::vector<Pattern> inputs_;
};

// all_gather: count elements per rank; the call returns a new [N*count] tensor.
class AllGather : public PerPeerCollective {
 public:
  using PerPeerCollective::PerPeerCollective;
  double min_traffic(int64_t count) const override { return (n_ + 1.0) * size_of(count); }
  double footprint(int64_t count) const override { return (n_ + 1.0) * size_of(count) + n_ * size_of(count); }

  void setup(int r, int64_t count) override {
    in_[r] = Tensor::zeros(Shape{count}, p_.dtype);
    inputs_[r].fill(in_[r].data(), 0, count);
  }
  void prepare_check(int r, bool) override { inputs_[r].fill(in_[r].data(), 0, in_[r].num_elements()); }
  Tensor call(int r, bool) override { return comms_[r]->all_gather(in_[r], 0, options_); }
  int64_t check(int, bool, const Tensor& result) override {
    const int64_t count = in_[0].num_elements();
    if (result.num_elements() != count * n_) return count * n_;
    int64_t wrong = 0;
    const auto* p = static_cast<const unsigned char*>(result.data());
    for (int k = 0; k < n_; ++k) wrong += inputs_[k].count_wrong(p + k * count * item_, 0, count);
    return wrong;
  }
};

// reduce_scatter: N*count elements in per rank, count out (rank r keeps block r).
class ReduceScatter : public PerPeerCollective {
 public:
  ReduceScatter(const CollectiveParams& p, std::vector<std::unique_ptr<Communicator>>& comms)
      : PerPeerCollective(p, comms), reduced_(reduced_pattern()) {}
  double min_traffic(int64_t count) const override { return (n_ + 1.0) * size_of(count); }
  double footprint(int64_t count) const override { return (n_ + 1.0) * size_of(count) + size_of(count); }
  std::string redop() const override { return std::string(reduce_op_name(p_.op)); }

  void setup(int r, int64_t count) override {
    count_ = count;
    in_[r] = Tensor::zeros(Shape{count * n_}, p_.dtype);
    inputs_[r].fill(in_[r].data(), 0, count * n_);
  }
  void prepare_check(int r, bool) override { inputs_[r].fill(in_[r].data(), 0, count_ * n_); }
  Tensor call(int r, bool) override { return comms_[r]->reduce_scatter(in_[r], p_.op, {}, options_); }
  int64_t check(int r, bool, const Tensor& result) override {
    if (result.num_elements() != count_) return count_;
    return reduced_.count_wrong(result.data(), r * count_, count_);
  }

 private:
  Pattern reduced_;
  std::atomic<int64_t> count_{0};  // every rank stores the same value in setup()
};

// all_to_all: count elements to every peer; N*count in and out per rank.
class AllToAll : public PerPeerCollective {
 public:
  using PerPeerCollective::PerPeerCollective;
  double min_traffic(int64_t count) const override { return 2.0 * n_ * size_of(count); }
  double footprint(int64_t count) const override { return 3.0 * n_ * size_of(count); }

  void setup(int r, int64_t count) override {
    count_ = count;
    in_[r] = Tensor::zeros(Shape{count * n_}, p_.dtype);
    inputs_[r].fill(in_[r].data(), 0, count * n_);
  }
  void prepare_check(int r, bool) override { inputs_[r].fill(in_[r].data(), 0, count_ * n_); }
  Tensor call(int r, bool) override { return comms_[r]->all_to_all(in_[r], {}, options_); }
  int64_t check(int r, bool, const Tensor& result) override {
    if (result.num_elements() != count_ * n_) return count_ * n_;
    int64_t wrong = 0;
    const auto* p = static_cast<const unsigned char*>(result.data());
    for (int k = 0; k < n_; ++k) wrong += inputs_[k].count_wrong(p + k * count_ * item_, r * count_, count_);
    return wrong;
  }

 private:
  std::atomic<int64_t> count_{0};  // every rank stores the same value in setup()
};

}  // namespace

std::unique_ptr<Collective> make_collective(const CollectiveParams& p,
                                            std::vector<std::unique_ptr<Communicator>>& comms) {
  if (p.collective == "all_reduce") return std::make_unique<AllReduce>(p, comms);
  if (p.collective == "broadcast") return std::make_unique<Broadcast>(p, comms);
  if (p.collective == "all_gather") return std::make_unique<AllGather>(p, comms);
  if (p.collective == "reduce_scatter") return std::make_unique<ReduceScatter>(p, comms);
  return std::make_unique<AllToAll>(p, comms);
}

}  // namespace tessel::cli::bench
