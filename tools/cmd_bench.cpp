// tessel bench: collective benchmark over N in-process devices, in nccl-tests' table format.
//
// Participants are N worker threads, each with its own Communicator of one in-process group
// (make_in_process_communicators), which is what a runtime's device workers are. For every size
// from -b to -e (times -f), each mode (out-of-place, in-place) runs `warmup` untimed and `iters`
// timed calls, then one extra call on fresh inputs whose results are checked element by element
// against an exact reference (bench_check.h): #wrong is counted, never assumed.
//
// Timing: before every call the workers meet at a spin-yield barrier; each times its own call
// on the steady clock; one call's time is the slowest worker's; the reported time is the median
// over the timed calls. algbw and busbw follow nccl-tests (reference §B.2):
//   algbw = S / time, S = max(send, recv) bytes of one rank (the table's size column);
//   busbw = algbw * factor: all_reduce 2(N-1)/N; all_gather, reduce_scatter, all_to_all (N-1)/N;
//   broadcast 1.
//
// Efficiency = (fewest bytes the collective must move through memory / time) / memcpy bandwidth,
// where the memcpy bandwidth is measured in the same run and also counts bytes read + bytes
// written (bench_team.h, measure_memcpy_gbps). The fewest bytes, for N devices in one process
// that share memory and a per-rank size S (the size column):
//   all_reduce:     N*S read (every input once) + N*S written (every output once)   = 2*N*S
//   reduce_scatter: N*S read (every input once) + N * S/N written (each rank's block) = (N+1)*S
//   all_gather:     N * S/N read (every input once) + N*S written (every output)      = (N+1)*S
//   broadcast:      S read (the root's buffer) + (N-1)*S written (the other ranks')   = N*S
//   all_to_all:     N*S read + N*S written                                           = 2*N*S
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench_check.h"
#include "bench_team.h"
#include "commands.h"
#include "tessel/comm/collective_options.h"
#include "tessel/comm/communicator.h"
#include "tessel/core/dtype.h"
#include "tessel/core/error.h"
#include "tessel/core/reduce_op.h"
#include "tessel/core/tensor.h"

namespace tessel::cli {
namespace {

using bench::Pattern;
using bench::Team;

constexpr const char* kHelp =
    "usage: tessel bench <collective> [options]\n"
    "\n"
    "Times a collective over N in-process devices (one thread and one Communicator each) and\n"
    "prints nccl-tests' table (size, count, type, redop, root, then time, algbw, busbw, #wrong\n"
    "out-of-place and in-place) with an efficiency column: the fewest bytes the collective must\n"
    "move through memory per second, over this machine's memcpy bandwidth measured in the same\n"
    "run. Results are checked against an exact reference; the exit status is 1 if any is wrong.\n"
    "\n"
    "  <collective>        all_reduce, all_gather, reduce_scatter, broadcast or all_to_all\n"
    "                      (tessel bench fusion --help: the fused batch all-reduce;\n"
    "                      tessel bench relayout --help: a DTensor relayout;\n"
    "                      tessel bench matmul --help, tessel bench dispatch --help: SPMD ops;\n"
    "                      tessel bench replicate --help: a compiled replicated training step)\n"
    "  --devices N         participants (default 4, at most 64)\n"
    "  -b, --minbytes S    smallest size (default 4K; K, M, G are powers of 1024)\n"
    "  -e, --maxbytes S    largest size (default 256M)\n"
    "  -f, --stepfactor F  multiply the size by F (>= 2) between rows (default 2)\n"
    "  --algo A            all_reduce algorithm: auto, direct, ring, tree (= halving_doubling),\n"
    "                      halving_doubling, reduce_to_one (default auto); the other\n"
    "                      collectives have one in-process algorithm (auto or direct)\n"
    "  --dtype T           f32, f64, bf16, f16, i32, i64, u8, bool (default f32)\n"
    "  --op OP             sum, mean, max, min, prod (all_reduce, reduce_scatter; default sum)\n"
    "  --root R            broadcast root (default 0)\n"
    "  -n, --iters N       timed calls per size and mode (default 20); time = their median\n"
    "  -w, --warmup N      untimed calls before them (default 5)\n"
    "  --memcpy-threads T  threads of the memcpy baseline (default min(devices, hardware threads))\n"
    "  --json              print one JSON object instead of the table\n"
    "\n"
    "Bad arguments print 'tessel: error: <reason>' and exit with status 2.\n";

constexpr size_t kMemcpyBytes = size_t{64} << 20;
constexpr int kMemcpyRepetitions = 10;
constexpr int kMaxDevices = 64;

struct Config {
  std::string collective;
  int devices = 4;
  int64_t min_bytes = 4 << 10;
  int64_t max_bytes = int64_t{256} << 20;
  int64_t factor = 2;
  Algorithm algorithm = Algorithm::kAuto;
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  bool op_given = false;
  int root = 0;
  int iters = 20;
  int warmup = 5;
  int memcpy_threads = 0;  // 0: min(devices, hardware threads)
  bool json = false;
};

// A usage error: printed by run_bench as "tessel: error: bench: <message>", exit status 2.
struct UsageError {
  std::string message;
};

[[noreturn]] void usage(std::string message) { throw UsageError{std::move(message)}; }

// "4096", "4K", "16M", "1G" (optionally followed by "B" or "iB"): powers of 1024.
int64_t parse_size(const std::string& flag, const std::string& text) {
  size_t pos = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  if (pos == 0 || pos > 12) usage(flag + ": '" + text + "' is not a size (e.g. 4096, 4K, 16M, 1G)");
  int64_t value = std::stoll(text.substr(0, pos));
  std::string unit = text.substr(pos);
  if (unit.size() > 1 && (unit.substr(1) == "B" || unit.substr(1) == "iB")) unit = unit.substr(0, 1);
  int shift = 0;
  if (unit.empty() || unit == "B") shift = 0;
  else if (unit == "K" || unit == "k") shift = 10;
  else if (unit == "M" || unit == "m") shift = 20;
  else if (unit == "G" || unit == "g") shift = 30;
  else usage(flag + ": '" + text + "' is not a size (e.g. 4096, 4K, 16M, 1G)");
  if (value > (int64_t{1} << 40) >> shift) usage(flag + ": " + text + " is larger than 1 TiB");
  return value << shift;
}

int parse_int(const std::string& flag, const std::string& text, int low, int high) {
  size_t used = 0;
  long value = 0;
  try {
    value = std::stol(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) usage(flag + ": '" + text + "' is not an integer");
  if (value < low || value > high) {
    usage(flag + ": " + text + " is outside [" + std::to_string(low) + ", " + std::to_string(high) + "]");
  }
  return static_cast<int>(value);
}

Config parse_args(const Args& args) {
  Config c;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::optional<std::string> inline_value;
    if (flag.rfind("--", 0) == 0 && flag.find('=') != std::string::npos) {
      inline_value = flag.substr(flag.find('=') + 1);
      flag = flag.substr(0, flag.find('='));
    }
    auto value = [&]() -> std::string {
      if (inline_value) return *inline_value;
      if (i + 1 >= args.size()) usage(flag + " needs a value");
      return args[++i];
    };
    if (flag == "--devices" || flag == "-g") {
      c.devices = parse_int(flag, value(), 1, kMaxDevices);
    } else if (flag == "-b" || flag == "--minbytes") {
      c.min_bytes = parse_size(flag, value());
    } else if (flag == "-e" || flag == "--maxbytes") {
      c.max_bytes = parse_size(flag, value());
    } else if (flag == "-f" || flag == "--stepfactor") {
      c.factor = parse_int(flag, value(), 2, 1 << 20);
    } else if (flag == "--algo") {
      const std::string name = value();
      try {
        c.algorithm = algorithm_from_name(name);
      } catch (const Error&) {
        usage("--algo: unknown algorithm '" + name +
              "' (expected auto, direct, ring, tree, halving_doubling or reduce_to_one)");
      }
      if (c.algorithm == Algorithm::kHierarchical) {
        usage("--algo: hierarchical needs several hosts; in one process it is direct");
      }
    } else if (flag == "--dtype" || flag == "-d") {
      const std::string name = value();
      try {
        c.dtype = dtype_from_name(name);
      } catch (const Error&) {
        usage("--dtype: unknown dtype '" + name + "' (expected f32, f64, bf16, f16, i32, i64, u8 or bool)");
      }
    } else if (flag == "--op" || flag == "-o") {
      const std::string name = value();
      try {
        c.op = reduce_op_from_name(name);
      } catch (const Error&) {
        usage("--op: unknown reduce op '" + name + "' (expected sum, mean, max, min or prod)");
      }
      c.op_given = true;
    } else if (flag == "--root" || flag == "-r") {
      c.root = parse_int(flag, value(), 0, kMaxDevices - 1);
    } else if (flag == "--iters" || flag == "-n") {
      c.iters = parse_int(flag, value(), 1, 1000000);
    } else if (flag == "--warmup" || flag == "-w") {
      c.warmup = parse_int(flag, value(), 0, 1000000);
    } else if (flag == "--memcpy-threads") {
      c.memcpy_threads = parse_int(flag, value(), 1, kMaxDevices);
    } else if (flag == "--json") {
      if (inline_value) usage("--json takes no value");
      c.json = true;
    } else if (!flag.empty() && flag[0] == '-') {
      usage("unknown option '" + flag + "'");
    } else if (c.collective.empty()) {
      c.collective = flag;
    } else {
      usage("unexpected argument '" + flag + "' (the collective is '" + c.collective + "')");
    }
  }
  if (c.collective.empty()) usage("name a collective: all_reduce, all_gather, reduce_scatter, broadcast or all_to_all");
  const std::vector<std::string> known = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"};
  if (std::find(known.begin(), known.end(), c.collective) == known.end()) {
    usage("unknown collective '" + c.collective +
          "' (expected all_reduce, all_gather, reduce_scatter, broadcast or all_to_all)");
  }
  if (c.min_bytes > c.max_bytes) {
    usage("-b " + std::to_string(c.min_bytes) + " is larger than -e " + std::to_string(c.max_bytes));
  }
  if (c.collective != "all_reduce" && c.algorithm != Algorithm::kAuto && c.algorithm != Algorithm::kDirect) {
    usage("--algo " + std::string(algorithm_name(c.algorithm)) + " applies to all_reduce only; " + c.collective +
          " has one in-process algorithm (direct)");
  }
  const bool reduces = c.collective == "all_reduce" || c.collective == "reduce_scatter";
  if (c.op_given && !reduces) usage("--op applies to all_reduce and reduce_scatter, not " + c.collective);
  if (reduces && c.dtype == DType::kBool && c.op == ReduceOp::kMean) usage("--op mean is not defined for bool");
  if (c.root >= c.devices) {
    usage("--root " + std::to_string(c.root) + " is not a rank of " + std::to_string(c.devices) + " devices");
  }
  if (c.collective != "broadcast" && c.root != 0) usage("--root applies to broadcast only");
  // The reference stays exact only while sums and products of the small inputs fit the dtype.
  // u8: a mean's inputs sum to at most 8*N*N, a product is at most 2^ceil(N/4), a sum 8*N.
  int exact_limit = 32;
  if (c.dtype == DType::kU8) exact_limit = c.op == ReduceOp::kMean ? 5 : c.op == ReduceOp::kProd ? 28 : 31;
  if (reduces && c.dtype != DType::kBool && c.devices > exact_limit) {
    usage("--devices " + std::to_string(c.devices) + ": the exact reference for " + std::string(dtype_name(c.dtype)) +
          " " + std::string(reduce_op_name(c.op)) + " allows at most " + std::to_string(exact_limit) + " devices");
  }
  return c;
}

// ---- the collectives -------------------------------------------------------------------------

// One collective's buffers, calls and reference, for one size at a time. setup/call/check run on
// rank r's worker; the bench separates phases that touch other ranks' buffers with syncs.
class Collective {
 public:
  Collective(const Config& c, std::vector<std::unique_ptr<Communicator>>& comms)
      : c_(c), comms_(comms), n_(c.devices), item_(dtype_size(c.dtype)) {
    options_.algorithm = c.algorithm;
  }
  virtual ~Collective() = default;

  // The per-call count (nccl-tests' count column) that fits in `bytes`.
  virtual int64_t count_for(int64_t bytes) const { return bytes / static_cast<int64_t>(item_); }
  // The size column: max(send, recv) bytes per rank.
  virtual int64_t size_of(int64_t count) const { return count * static_cast<int64_t>(item_); }
  // busbw = algbw * bus_factor().
  virtual double bus_factor() const = 0;
  // Fewest bytes read + written through memory by one call (see the top of this file).
  virtual double min_traffic(int64_t count) const = 0;
  // Bytes of buffers the bench holds at once for `count`, to refuse sizes that cannot fit.
  virtual double footprint(int64_t count) const = 0;
  virtual std::string redop() const { return "none"; }
  virtual int root() const { return -1; }
  // Whether the mode has a form in the API (`tensor` in place, or separate output).
  virtual bool has_mode(bool in_place) const = 0;

  virtual void setup(int r, int64_t count) = 0;
  // Restores inputs and poisons outputs before the checked call.
  virtual void prepare_check(int r, bool in_place) = 0;
  // One call; a collective that returns a new tensor returns it (freed by the caller after timing).
  virtual Tensor call(int r, bool in_place) = 0;
  // Wrong elements of rank r's result (`result`: what call returned).
  virtual int64_t check(int r, bool in_place, const Tensor& result) = 0;
  virtual void teardown(int r) = 0;

 protected:
  Pattern input_pattern(int rank) const {
    return Pattern(c_.dtype, [&](int64_t j) { return bench::input_value(c_.dtype, c_.op, n_, rank, j); });
  }
  Pattern reduced_pattern() const {
    return Pattern(c_.dtype, [&](int64_t j) { return bench::reduced_value(c_.dtype, c_.op, n_, j); });
  }
  static void poison(Tensor& t) {
    if (t.nbytes() > 0) std::memset(t.data(), 0xA5, t.nbytes());
  }

  const Config& c_;
  std::vector<std::unique_ptr<Communicator>>& comms_;
  const int n_;
  const size_t item_;
  CollectiveOptions options_;
};

// all_reduce: out-of-place (input -> output) and in place (output -> output).
class AllReduce : public Collective {
 public:
  AllReduce(const Config& c, std::vector<std::unique_ptr<Communicator>>& comms)
      : Collective(c, comms), in_(n_), out_(n_), reduced_(reduced_pattern()) {
    for (int r = 0; r < n_; ++r) inputs_.push_back(input_pattern(r));
  }
  double bus_factor() const override { return 2.0 * (n_ - 1) / n_; }
  double min_traffic(int64_t count) const override { return 2.0 * n_ * size_of(count); }
  double footprint(int64_t count) const override { return 2.0 * n_ * size_of(count); }
  std::string redop() const override { return std::string(reduce_op_name(c_.op)); }
  bool has_mode(bool) const override { return true; }

  void setup(int r, int64_t count) override {
    in_[r] = Tensor::zeros(Shape{count}, c_.dtype);
    out_[r] = Tensor::zeros(Shape{count}, c_.dtype);
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
    comms_[r]->all_reduce(in_place ? out_[r] : in_[r], out_[r], c_.op, options_);
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
  Broadcast(const Config& c, std::vector<std::unique_ptr<Communicator>>& comms)
      : Collective(c, comms), buf_(n_), source_(input_pattern(c.root)) {}
  double bus_factor() const override { return 1.0; }
  double min_traffic(int64_t count) const override { return 1.0 * n_ * size_of(count); }
  double footprint(int64_t count) const override { return 1.0 * n_ * size_of(count); }
  int root() const override { return c_.root; }
  bool has_mode(bool in_place) const override { return in_place; }

  void setup(int r, int64_t count) override {
    buf_[r] = Tensor::zeros(Shape{count}, c_.dtype);
    if (r == c_.root) source_.fill(buf_[r].data(), 0, count);
  }
  void prepare_check(int r, bool) override {
    if (r == c_.root) {
      source_.fill(buf_[r].data(), 0, buf_[r].num_elements());
    } else {
      poison(buf_[r]);
    }
  }
  Tensor call(int r, bool) override {
    comms_[r]->broadcast(buf_[r], c_.root, options_);
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
  PerPeerCollective(const Config& c, std::vector<std::unique_ptr<Communicator>>& comms)
      : Collective(c, comms), in_(n_) {
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
    in_[r] = Tensor::zeros(Shape{count}, c_.dtype);
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
  ReduceScatter(const Config& c, std::vector<std::unique_ptr<Communicator>>& comms)
      : PerPeerCollective(c, comms), reduced_(reduced_pattern()) {}
  double min_traffic(int64_t count) const override { return (n_ + 1.0) * size_of(count); }
  double footprint(int64_t count) const override { return (n_ + 1.0) * size_of(count) + size_of(count); }
  std::string redop() const override { return std::string(reduce_op_name(c_.op)); }

  void setup(int r, int64_t count) override {
    count_ = count;
    in_[r] = Tensor::zeros(Shape{count * n_}, c_.dtype);
    inputs_[r].fill(in_[r].data(), 0, count * n_);
  }
  void prepare_check(int r, bool) override { inputs_[r].fill(in_[r].data(), 0, count_ * n_); }
  Tensor call(int r, bool) override { return comms_[r]->reduce_scatter(in_[r], c_.op, {}, options_); }
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
    in_[r] = Tensor::zeros(Shape{count * n_}, c_.dtype);
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

std::unique_ptr<Collective> make_collective(const Config& c, std::vector<std::unique_ptr<Communicator>>& comms) {
  if (c.collective == "all_reduce") return std::make_unique<AllReduce>(c, comms);
  if (c.collective == "broadcast") return std::make_unique<Broadcast>(c, comms);
  if (c.collective == "all_gather") return std::make_unique<AllGather>(c, comms);
  if (c.collective == "reduce_scatter") return std::make_unique<ReduceScatter>(c, comms);
  return std::make_unique<AllToAll>(c, comms);
}

// ---- measurement -----------------------------------------------------------------------------

struct Mode {
  bool measured = false;
  double time_us = 0;
  double algbw = 0;
  double busbw = 0;
  double efficiency = 0;
  int64_t wrong = 0;
};

struct Row {
  int64_t bytes = 0;
  int64_t count = 0;
  Mode mode[2];  // [0] out-of-place, [1] in-place
};

// Runs one size in both modes on the team.
Row measure(const Config& c, Collective& coll, Team& team, std::vector<std::unique_ptr<Communicator>>& comms,
            int64_t count, double memcpy_gbps) {
  const int n = c.devices;
  const int calls = c.warmup + c.iters;
  Row row;
  row.count = count;
  row.bytes = coll.size_of(count);
  // seconds[mode][rank][call]
  std::vector<std::vector<std::vector<double>>> seconds(
      2, std::vector<std::vector<double>>(n, std::vector<double>(static_cast<size_t>(calls))));
  std::vector<std::vector<int64_t>> wrong(2, std::vector<int64_t>(n, 0));
  team.run([&](int r) {
    try {
      coll.setup(r, count);
      for (int m = 0; m < 2; ++m) {
        const bool in_place = m == 1;
        if (!coll.has_mode(in_place)) continue;
        Tensor held;
        for (int i = 0; i < calls; ++i) {
          team.sync();
          const double t0 = bench::now_seconds();
          Tensor result = coll.call(r, in_place);
          seconds[m][r][i] = bench::now_seconds() - t0;
          held = std::move(result);  // the previous result is freed outside the timed region
        }
        held = Tensor();
        team.sync();  // every rank is done reading the others' buffers
        coll.prepare_check(r, in_place);
        team.sync();  // every rank's inputs are restored
        const Tensor result = coll.call(r, in_place);
        wrong[m][r] = coll.check(r, in_place, result);
        team.sync();  // every rank has checked before anyone writes again
      }
      coll.teardown(r);
    } catch (const std::exception& e) {
      comms[r]->abort("tessel bench: rank " + std::to_string(r) + " failed: " + e.what());
      throw;
    }
  });
  for (int m = 0; m < 2; ++m) {
    if (!coll.has_mode(m == 1)) continue;
    std::vector<double> slowest;
    for (int i = c.warmup; i < calls; ++i) {
      double t = 0;
      for (int r = 0; r < n; ++r) t = std::max(t, seconds[m][r][i]);
      slowest.push_back(t);
    }
    Mode& mode = row.mode[m];
    mode.measured = true;
    const double t = bench::median(slowest);
    mode.time_us = t * 1e6;
    mode.algbw = static_cast<double>(row.bytes) / t / 1e9;
    mode.busbw = mode.algbw * coll.bus_factor();
    mode.efficiency = coll.min_traffic(count) / t / 1e9 / memcpy_gbps;
    for (int r = 0; r < n; ++r) mode.wrong += wrong[m][r];
  }
  return row;
}

// ---- output ----------------------------------------------------------------------------------

std::string time_text(double us) {
  char buf[32];
  if (us >= 10000) std::snprintf(buf, sizeof buf, "%7.0f", us);
  else if (us >= 100) std::snprintf(buf, sizeof buf, "%7.1f", us);
  else std::snprintf(buf, sizeof buf, "%7.2f", us);
  return buf;
}

// CPU time counters of the whole machine and of this process (clock ticks), to tell how much of
// the machine other processes (or the hypervisor, as steal time) took during a run.
struct CpuSample {
  double total = 0;  // all CPUs, every state
  double busy = 0;   // all CPUs, not idle or waiting for I/O (steal counts as busy)
  double self = 0;   // this process, user + system
  bool valid = false;
};

CpuSample sample_cpu() {
  CpuSample s;
  std::ifstream stat("/proc/stat");
  std::string cpu;
  double v[10] = {};
  if (!(stat >> cpu) || cpu != "cpu") return s;
  for (double& x : v) stat >> x;  // user nice system idle iowait irq softirq steal guest guest_nice
  s.total = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
  s.busy = s.total - v[3] - v[4];
  std::ifstream self("/proc/self/stat");
  std::string line;
  std::getline(self, line);
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos) return s;
  std::istringstream fields(line.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14 || i == 15) s.self += std::stod(field);  // utime, stime
  }
  s.valid = true;
  return s;
}

// The fraction of all CPUs' time between `a` and `b` that went to other processes or steal.
double other_cpu_fraction(const CpuSample& a, const CpuSample& b) {
  if (!a.valid || !b.valid || b.total <= a.total) return 0;
  const double other = (b.busy - a.busy) - (b.self - a.self);
  return std::clamp(other / (b.total - a.total), 0.0, 1.0);
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one;
  if (!(in >> one)) return "unknown";
  return one;
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

const char* traffic_text(const std::string& collective) {
  if (collective == "all_reduce") return "N*S read + N*S written";
  if (collective == "reduce_scatter") return "N*S read + S written";
  if (collective == "all_gather") return "S read + N*S written";
  if (collective == "broadcast") return "S read + (N-1)*S written";
  return "N*S read + N*S written";
}

const char* bus_text(const std::string& collective) {
  if (collective == "all_reduce") return "2(N-1)/N";
  if (collective == "broadcast") return "1";
  return "(N-1)/N";
}

void print_header(const Config& c, int memcpy_threads, double memcpy_gbps, double memcpy_1t_gbps) {
  const unsigned hw = std::thread::hardware_concurrency();
  std::printf("# memcpy: %.2f GB/s (read+write: 2 x bytes copied / time; %d thread%s each copying 1/%d of a "
              "64 MiB buffer with memcpy, median of %d)%s\n",
              memcpy_gbps, memcpy_threads, memcpy_threads == 1 ? "" : "s", memcpy_threads, kMemcpyRepetitions,
              memcpy_threads == 1 ? "" : "; efficiency uses this figure");
  if (memcpy_threads != 1) std::printf("# memcpy, 1 thread, 64 MiB: %.2f GB/s (read+write, for reference)\n", memcpy_1t_gbps);
  std::printf("# tessel bench %s: devices %d (one thread and one in-process Communicator each), "
              "hardware threads %u, load average %s\n",
              c.collective.c_str(), c.devices, hw, load_average().c_str());
  std::printf("# minBytes %lld maxBytes %lld step: %lld(factor) warmup iters: %d iters: %d validation: 1 "
              "algo: %s dtype: %s\n",
              static_cast<long long>(c.min_bytes), static_cast<long long>(c.max_bytes),
              static_cast<long long>(c.factor), c.warmup, c.iters, std::string(algorithm_name(c.algorithm)).c_str(),
              std::string(dtype_name(c.dtype)).c_str());
  std::printf("# time: median over iters of one call's time on its slowest rank; algbw = size/time; busbw = "
              "algbw * %s\n",
              bus_text(c.collective));
  std::printf("# effic: fewest bytes through memory (%s, S = size) / time / memcpy bandwidth\n",
              traffic_text(c.collective));
  if (c.collective == "broadcast") std::printf("# broadcast is in place by API (out-of-place: N/A)\n");
  if (c.collective == "all_gather" || c.collective == "reduce_scatter" || c.collective == "all_to_all") {
    std::printf("# %s returns a new tensor (allocated inside the timed call); in-place: N/A\n", c.collective.c_str());
  }
  std::printf("#\n");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %38s  %38s\n", "", "", "", "", "", "out-of-place", "in-place");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %5s  %7s  %6s  %6s  %6s  %5s\n", "size", "count",
              "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "effic", "time", "algbw", "busbw",
              "#wrong", "effic");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %5s  %7s  %6s  %6s  %6s  %5s\n", "(B)",
              "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "", "(us)", "(GB/s)", "(GB/s)", "", "");
}

void print_row(const Config& c, const Collective& coll, const Row& row) {
  std::printf("%12lld  %12lld  %8s  %6s  %6d", static_cast<long long>(row.bytes), static_cast<long long>(row.count),
              std::string(dtype_name(c.dtype)).c_str(), coll.redop().c_str(), coll.root());
  for (const Mode& m : row.mode) {
    if (!m.measured) {
      std::printf("  %7s  %6s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A", "N/A");
    } else {
      std::printf("  %7s  %6.2f  %6.2f  %6lld  %5.2f", time_text(m.time_us).c_str(), m.algbw, m.busbw,
                  static_cast<long long>(m.wrong), m.efficiency);
    }
  }
  std::printf("\n");
  std::fflush(stdout);
}

// The reduce op of a reducing collective, else "none".
std::string reduces_text(const Config& c) {
  const bool reduces = c.collective == "all_reduce" || c.collective == "reduce_scatter";
  return reduces ? std::string(reduce_op_name(c.op)) : "none";
}

void print_json(const Config& c, int memcpy_threads, double memcpy_gbps, double other_cpu,
                const std::vector<Row>& rows) {
  const int primary = c.collective == "broadcast" ? 1 : 0;
  std::ostringstream o;
  o << "{\"collective\": \"" << c.collective << "\", \"devices\": " << c.devices << ", \"dtype\": \""
    << dtype_name(c.dtype) << "\", \"op\": \"" << reduces_text(c) << "\", \"algo\": \""
    << algorithm_name(c.algorithm) << "\", \"iters\": " << c.iters << ", \"warmup\": " << c.warmup
    << ", \"memcpy_gbps\": " << json_number(memcpy_gbps) << ", \"memcpy_threads\": " << memcpy_threads
    << ", \"other_cpu_fraction\": " << json_number(other_cpu)
    << ", \"mode\": \"" << (primary == 1 ? "in_place" : "out_of_place") << "\", \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Mode& m = rows[i].mode[primary];
    o << (i ? ", " : "") << "{\"bytes\": " << rows[i].bytes << ", \"count\": " << rows[i].count
      << ", \"time_us\": " << json_number(m.time_us) << ", \"algbw_gbps\": " << json_number(m.algbw)
      << ", \"busbw_gbps\": " << json_number(m.busbw) << ", \"efficiency\": " << json_number(m.efficiency)
      << ", \"wrong\": " << m.wrong << "}";
  }
  o << "]}\n";
  std::cout << o.str();
}

int run(const Config& c) {
  // Refuse sizes whose buffers cannot fit in memory (rather than being killed halfway).
  const double physical = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  std::vector<std::unique_ptr<Communicator>> comms = make_in_process_communicators(c.devices);
  std::unique_ptr<Collective> coll = make_collective(c, comms);
  std::vector<int64_t> counts;
  for (int64_t bytes = c.min_bytes; bytes <= c.max_bytes; bytes *= c.factor) {
    const int64_t count = coll->count_for(bytes);
    if (counts.empty() || counts.back() != count) counts.push_back(count);
    if (bytes > c.max_bytes / c.factor) break;
  }
  const double needed = coll->footprint(counts.back());
  if (physical > 0 && needed > 0.75 * physical) {
    usage("-e " + std::to_string(c.max_bytes) + " needs about " + std::to_string(static_cast<int64_t>(needed / (1 << 20))) +
          " MiB of buffers for " + std::to_string(c.devices) + " devices; this machine has " +
          std::to_string(static_cast<int64_t>(physical / (1 << 20))) + " MiB");
  }

  const CpuSample start = sample_cpu();
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const int memcpy_threads = c.memcpy_threads > 0 ? c.memcpy_threads : std::min<int>(c.devices, static_cast<int>(hw));
  const double memcpy_gbps = bench::measure_memcpy_gbps(memcpy_threads, kMemcpyBytes, kMemcpyRepetitions);
  const double memcpy_1t_gbps =
      memcpy_threads == 1 ? memcpy_gbps : bench::measure_memcpy_gbps(1, kMemcpyBytes, kMemcpyRepetitions);

  if (!c.json) print_header(c, memcpy_threads, memcpy_gbps, memcpy_1t_gbps);
  Team team(c.devices);
  std::vector<Row> rows;
  for (int64_t count : counts) {
    rows.push_back(measure(c, *coll, team, comms, count, memcpy_gbps));
    if (!c.json) print_row(c, *coll, rows.back());
  }
  int64_t wrong = 0;
  double busbw_sum = 0;
  int measured = 0;
  for (const Row& row : rows) {
    for (const Mode& m : row.mode) {
      if (!m.measured) continue;
      wrong += m.wrong;
      busbw_sum += m.busbw;
      ++measured;
    }
  }
  const double other_cpu = other_cpu_fraction(start, sample_cpu());
  if (c.json) {
    print_json(c, memcpy_threads, memcpy_gbps, other_cpu, rows);
  } else {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong), wrong == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %g\n", measured ? busbw_sum / measured : 0.0);
    std::printf("# Other processes and steal took %.1f%% of the machine's CPU time during this run "
                "(/proc/stat); figures from a busy machine are not comparable\n",
                100 * other_cpu);
    std::printf("#\n");
  }
  if (wrong != 0) {
    std::cerr << "tessel: error: bench: " << wrong << " wrong result elements\n";
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

int run_bench(const Args& args) {
  if (!args.empty() && args[0] == "fusion") return run_bench_fusion(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "relayout") return run_bench_relayout(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "matmul") return run_bench_matmul(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "dispatch") return run_bench_dispatch(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "replicate") return run_bench_replicate(Args(args.begin() + 1, args.end()));
  if (wants_help(args)) {
    std::cout << kHelp;
    return kExitOk;
  }
  try {
    return run(parse_args(args));
  } catch (const UsageError& e) {
    std::cerr << "tessel: error: bench: " << e.message << "\nRun 'tessel bench --help' for usage.\n";
    return kExitUsage;
  } catch (const Error& e) {
    // The arguments were accepted, so a failing collective is tessel's fault, not the user's.
    std::cerr << "tessel: error: bench failed: " << e.what() << "\n";
    return kExitFailure;
  }
}

}  // namespace tessel::cli
