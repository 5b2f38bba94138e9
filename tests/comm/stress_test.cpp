// Stress: random sequences of every collective over random, overlapping sub-groups of 8 threads.
//
// One global schedule of (group, collective, argument seed) entries is drawn from a seed; every
// thread runs, in schedule order, the entries whose group contains it. That order cannot
// deadlock: the earliest unfinished entry has all its members past every earlier entry, so they
// all reach it. Each member derives the call's arguments from the entry's seed (so the members
// agree), its own data from its rank, and checks its result against a reference computed here.
// A failing thread aborts all its groups, so that the others stop at once.
//
// CollectiveStress.RandomCollectivesOverOverlappingSubGroups runs in the normal suite (a few
// hundred calls, well under 5 s). The long version is DISABLED_ here (so ctest's default run
// skips it) and registered separately with the `stress` label (tests/CMakeLists.txt), run for
// TESSEL_STRESS_SECONDS (default 120) seconds.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tessel/comm/communicator.h"
#include "testing/run_ranks.h"

namespace tessel {
namespace {

constexpr int kThreads = 8;

enum class Kind {
  kAllReduce,
  kReduce,
  kBroadcast,
  kAllGather,
  kGather,
  kReduceScatter,
  kAllToAll,
  kScatter,
  kSendRecv,
  kBarrier,
  kNumKinds
};

const char* kind_name(Kind k) {
  static const char* names[] = {"all_reduce", "reduce",  "broadcast", "all_gather", "gather",
                                "reduce_scatter", "all_to_all", "scatter", "send_recv", "barrier"};
  return names[static_cast<int>(k)];
}

const DType kDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                         DType::kI32, DType::kI64, DType::kU8,   DType::kBool};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin,
                         ReduceOp::kProd};
const Algorithm kAlgorithms[] = {Algorithm::kAuto,           Algorithm::kDirect,
                                 Algorithm::kRing,           Algorithm::kHalvingDoubling,
                                 Algorithm::kReduceToOne,    Algorithm::kHierarchical};

struct Group {
  std::vector<int> threads;  // member threads, rank order
  std::vector<std::unique_ptr<Communicator>> comms;
  int rank_of(int thread) const {
    auto it = std::find(threads.begin(), threads.end(), thread);
    return it == threads.end() ? -1 : static_cast<int>(it - threads.begin());
  }
};

struct Entry {
  int group = 0;
  Kind kind = Kind::kBarrier;
  uint64_t seed = 0;
};

struct Plan {
  std::vector<Group> groups;
  std::vector<Entry> schedule;
};

// Thread t is device t % 2 of task t / 2, so groups spanning tasks exercise the hierarchical
// all-reduce across "hosts".
std::string device_of(int thread) {
  return "/job:worker/replica:0/task:" + std::to_string(thread / 2) + "/device:CPU:" +
         std::to_string(thread % 2);
}

Plan make_plan(uint64_t seed, int num_groups, int num_entries) {
  std::mt19937_64 rng(seed);
  Plan plan;
  for (int g = 0; g < num_groups; ++g) {
    std::vector<int> threads(kThreads);
    for (int t = 0; t < kThreads; ++t) threads[t] = t;
    std::shuffle(threads.begin(), threads.end(), rng);
    // Sizes 1..8, biased towards several members; the first group is everyone.
    const int size = g == 0 ? kThreads : 1 + static_cast<int>(rng() % kThreads);
    threads.resize(size);
    if (rng() % 2) std::sort(threads.begin(), threads.end());  // rank order need not be thread order
    Group group;
    group.threads = threads;
    std::vector<std::string> names;
    for (int t : threads) names.push_back(device_of(t));
    group.comms = make_in_process_communicators(size, names);
    plan.groups.push_back(std::move(group));
  }
  for (int i = 0; i < num_entries; ++i) {
    Entry e;
    e.group = static_cast<int>(rng() % plan.groups.size());
    e.kind = static_cast<Kind>(rng() % static_cast<int>(Kind::kNumKinds));
    e.seed = rng();
    plan.schedule.push_back(e);
  }
  return plan;
}

// ---- arguments, data and references -----------------------------------------------------------

// Everything a call needs, derived from the entry's seed and the group size: equal on every member.
struct Args {
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  Algorithm algorithm = Algorithm::kAuto;
  size_t segment_bytes = 0;
  int root = 0;
  int64_t count = 0;
  int64_t cols = 1;
  int axis = 0;
  std::vector<int64_t> sizes;                // per rank: gather sizes along the axis
  std::vector<int64_t> counts;               // reduce_scatter / scatter counts (empty: chunks)
  int64_t rows = 0;                          // reduce_scatter / scatter rows
  std::vector<std::vector<int64_t>> sends;   // all_to_all [from][to] (empty rows: equal splits)
  int64_t equal_split = 0;
  int shift = 1;                             // send/recv: rank r sends to r + shift
  int tag = 0;
  int salt = 0;
};

Args make_args(const Entry& e, int n) {
  std::mt19937_64 rng(e.seed);
  auto uniform = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % (hi - lo + 1)); };
  Args a;
  a.dtype = kDTypes[uniform(0, 7)];
  a.op = kOps[uniform(0, 4)];
  if (a.dtype == DType::kBool && a.op == ReduceOp::kMean) a.op = ReduceOp::kMax;
  a.algorithm = kAlgorithms[uniform(0, 5)];
  const size_t segments[] = {0, 64, 256};
  a.segment_bytes = segments[uniform(0, 2)];
  a.root = static_cast<int>(uniform(0, n - 1));
  a.count = uniform(0, 4) == 0 ? uniform(0, 1) : uniform(2, 300);
  a.cols = uniform(1, 3);
  a.axis = static_cast<int>(uniform(-1, 1));
  for (int r = 0; r < n; ++r) a.sizes.push_back(uniform(0, 4));
  a.rows = uniform(0, 3 * n);
  if (uniform(0, 1)) {
    int64_t left = a.rows;
    for (int r = 0; r < n; ++r) {
      const int64_t c = r == n - 1 ? left : uniform(0, left);
      a.counts.push_back(c);
      left -= c;
    }
    std::shuffle(a.counts.begin(), a.counts.end(), rng);
  }
  if (uniform(0, 1)) {
    a.sends.assign(n, std::vector<int64_t>(n));
    for (auto& row : a.sends) {
      for (auto& c : row) c = uniform(0, 3);
    }
  } else {
    a.equal_split = uniform(0, 3);
  }
  a.shift = n > 1 ? static_cast<int>(uniform(1, n - 1)) : 0;
  a.tag = static_cast<int>(uniform(0, 3));
  a.salt = static_cast<int>(uniform(0, 1000));
  return a;
}

// Identifies (rank, element); exact in every dtype.
double pattern(const Args& a, int rank, int64_t i) {
  if (a.dtype == DType::kBool) return static_cast<double>((rank + i + a.salt) % 2);
  return static_cast<double>((rank * 37 + i * 11 + a.salt) % 97);
}

// Reduction inputs whose reductions are exact in every dtype (up to 8 ranks).
double reduce_input(const Args& a, int rank, int64_t i) {
  const int64_t k = i + a.salt;
  if (a.dtype == DType::kBool) return (rank + k) % 3 == 0 ? 1 : 0;
  switch (a.op) {
    case ReduceOp::kProd: return (rank + k) % 4 == 0 ? 2 : 1;
    case ReduceOp::kMax:
    case ReduceOp::kMin: return static_cast<double>((rank * 13 + k * 5) % 11);
    default: return static_cast<double>((rank * 31 + k * 7) % 5);
  }
}

double reduced(const Args& a, int n, int64_t i) {
  if (a.dtype == DType::kBool) {
    bool any = false, all = true;
    for (int r = 0; r < n; ++r) {
      any = any || reduce_input(a, r, i) != 0;
      all = all && reduce_input(a, r, i) != 0;
    }
    return (a.op == ReduceOp::kProd || a.op == ReduceOp::kMin) ? all : any;
  }
  double acc = reduce_input(a, 0, i);
  for (int r = 1; r < n; ++r) {
    const double v = reduce_input(a, r, i);
    switch (a.op) {
      case ReduceOp::kSum:
      case ReduceOp::kMean: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
    }
  }
  if (a.op == ReduceOp::kMean) acc = is_floating(a.dtype) ? acc / n : std::trunc(acc / n);
  return acc;
}

double tolerance(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return 1e-2;
    case DType::kF16: return 1e-3;
    case DType::kF32: return 1e-6;
    case DType::kF64: return 1e-12;
    default: return 0;
  }
}

Tensor make(const Shape& shape, DType dtype, const std::function<double(int64_t)>& f) {
  std::vector<double> v(static_cast<size_t>(shape.num_elements()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = f(static_cast<int64_t>(i));
  return Tensor::from_vector<double>(v, shape).astype(dtype);
}

void check(const std::string& what, const Tensor& got, const Shape& shape, DType dtype,
           const std::vector<double>& want, double tol) {
  auto fail = [&](const std::string& why) {
    throw std::runtime_error(what + ": " + why + "; got " + (got.defined() ? got.to_string() : std::string("null")));
  };
  if (!got.defined()) fail("null tensor");
  if (!(got.shape() == shape)) fail("shape " + got.shape().to_string() + ", want " + shape.to_string());
  if (got.dtype() != dtype) fail("dtype");
  const std::vector<double> v = got.to_doubles();
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::abs(v[i] - want[i]) > tol * (1 + std::abs(want[i]))) {
      fail("element " + std::to_string(i) + " is " + std::to_string(v[i]) + ", want " + std::to_string(want[i]));
    }
  }
}

int64_t chunk_begin(int64_t rows, int n, int r) {
  const int64_t chunk = (rows + n - 1) / n;
  return std::min<int64_t>(r * chunk, rows);
}

// Rows of rank r under `counts` (or chunk semantics when empty): [begin, end).
std::pair<int64_t, int64_t> block_of(const std::vector<int64_t>& counts, int64_t rows, int n, int r) {
  if (counts.empty()) return {chunk_begin(rows, n, r), chunk_begin(rows, n, r + 1)};
  int64_t begin = 0;
  for (int k = 0; k < r; ++k) begin += counts[k];
  return {begin, begin + counts[r]};
}

// ---- one entry on one member ------------------------------------------------------------------

void run_entry(const Entry& e, size_t index, Communicator& c) {
  const int n = c.size(), r = c.rank();
  const Args a = make_args(e, n);
  CollectiveOptions o;
  o.timeout = std::chrono::seconds(20);
  o.algorithm = a.algorithm;
  o.segment_bytes = a.segment_bytes;
  const std::string what = "entry " + std::to_string(index) + " " + kind_name(e.kind) + " (" +
                           std::string(dtype_name(a.dtype)) + ", group of " + std::to_string(n) +
                           ", rank " + std::to_string(r) + ")";
  const double tol = tolerance(a.dtype);
  switch (e.kind) {
    case Kind::kAllReduce: {
      Tensor x = make(Shape{a.count}, a.dtype, [&](int64_t i) { return reduce_input(a, r, i); });
      std::vector<double> want;
      for (int64_t i = 0; i < a.count; ++i) want.push_back(reduced(a, n, i));
      if (a.salt % 2) {
        c.all_reduce(x, x, a.op, o);
        check(what + " in place, " + std::string(algorithm_name(a.algorithm)), x, Shape{a.count}, a.dtype, want, tol);
      } else {
        Tensor y = Tensor::zeros(Shape{a.count}, a.dtype);
        c.all_reduce(x, y, a.op, o);
        check(what + " " + std::string(algorithm_name(a.algorithm)), y, Shape{a.count}, a.dtype, want, tol);
      }
      return;
    }
    case Kind::kReduce: {
      Tensor x = make(Shape{a.count}, a.dtype, [&](int64_t i) { return reduce_input(a, r, i); });
      Tensor y = r == a.root ? Tensor::zeros(Shape{a.count}, a.dtype) : Tensor();
      c.reduce(x, y, a.op, a.root, o);
      if (r == a.root) {
        std::vector<double> want;
        for (int64_t i = 0; i < a.count; ++i) want.push_back(reduced(a, n, i));
        check(what, y, Shape{a.count}, a.dtype, want, tol);
      }
      return;
    }
    case Kind::kBroadcast: {
      Tensor x = make(Shape{a.count}, a.dtype, [&](int64_t i) { return pattern(a, r, i); });
      c.broadcast(x, a.root, o);
      std::vector<double> want;
      for (int64_t i = 0; i < a.count; ++i) want.push_back(pattern(a, a.root, i));
      check(what, x, Shape{a.count}, a.dtype, want, 0);
      return;
    }
    case Kind::kAllGather:
    case Kind::kGather: {
      const bool all = e.kind == Kind::kAllGather;
      const int ax = a.axis < 0 ? a.axis + 2 : a.axis;
      auto dims_of = [&](int64_t size) {
        std::vector<int64_t> d = {a.cols, a.cols};
        d[ax] = size;
        return d;
      };
      Tensor x = make(Shape(dims_of(a.sizes[r])), a.dtype, [&](int64_t i) { return pattern(a, r, i); });
      Tensor y = all ? c.all_gather(x, a.axis, o) : c.gather(x, a.root, a.axis, o);
      if (!all && r != a.root) {
        if (y.defined()) throw std::runtime_error(what + ": a non-root got a tensor");
        return;
      }
      int64_t total = 0;
      for (int64_t s : a.sizes) total += s;
      const std::vector<int64_t> out_dims = dims_of(total);
      std::vector<double> want;
      for (int64_t i = 0; i < out_dims[0]; ++i) {
        for (int64_t j = 0; j < out_dims[1]; ++j) {
          int64_t along = ax == 0 ? i : j;
          int owner = 0;
          while (along >= a.sizes[owner]) along -= a.sizes[owner++];
          const std::vector<int64_t> local = dims_of(a.sizes[owner]);
          const int64_t li = ax == 0 ? along : i, lj = ax == 0 ? j : along;
          want.push_back(pattern(a, owner, li * local[1] + lj));
        }
      }
      check(what, y, Shape(out_dims), a.dtype, want, 0);
      return;
    }
    case Kind::kReduceScatter: {
      Tensor x = make(Shape{a.rows, a.cols}, a.dtype, [&](int64_t i) { return reduce_input(a, r, i); });
      Tensor y = c.reduce_scatter(x, a.op, a.counts, o);
      const auto [begin, end] = block_of(a.counts, a.rows, n, r);
      std::vector<double> want;
      for (int64_t i = begin * a.cols; i < end * a.cols; ++i) want.push_back(reduced(a, n, i));
      check(what, y, Shape{end - begin, a.cols}, a.dtype, want, tol);
      return;
    }
    case Kind::kAllToAll: {
      auto sends = [&](int from, int to) { return a.sends.empty() ? a.equal_split : a.sends[from][to]; };
      int64_t rows = 0;
      std::vector<int64_t> counts;
      for (int j = 0; j < n; ++j) {
        rows += sends(r, j);
        counts.push_back(sends(r, j));
      }
      Tensor x = make(Shape{rows, a.cols}, a.dtype, [&](int64_t i) { return pattern(a, r, i); });
      Tensor y = c.all_to_all(x, a.sends.empty() ? std::vector<int64_t>{} : counts, o);
      std::vector<double> want;
      int64_t out_rows = 0;
      for (int j = 0; j < n; ++j) {
        int64_t offset = 0;
        for (int k = 0; k < r; ++k) offset += sends(j, k);
        for (int64_t i = offset * a.cols; i < (offset + sends(j, r)) * a.cols; ++i) want.push_back(pattern(a, j, i));
        out_rows += sends(j, r);
      }
      check(what, y, Shape{out_rows, a.cols}, a.dtype, want, 0);
      return;
    }
    case Kind::kScatter: {
      Tensor x;
      if (r == a.root) x = make(Shape{a.rows, a.cols}, a.dtype, [&](int64_t i) { return pattern(a, a.root, i); });
      Tensor y = c.scatter(x, a.root, a.counts, o);
      const auto [begin, end] = block_of(a.counts, a.rows, n, r);
      std::vector<double> want;
      for (int64_t i = begin * a.cols; i < end * a.cols; ++i) want.push_back(pattern(a, a.root, i));
      check(what, y, Shape{end - begin, a.cols}, a.dtype, want, 0);
      return;
    }
    case Kind::kSendRecv: {
      if (n == 1) return;
      const int to = (r + a.shift) % n, from = (r - a.shift + n) % n;
      c.send(make(Shape{a.count}, a.dtype, [&](int64_t i) { return pattern(a, r, i); }), to, a.tag, o);
      Tensor y = Tensor::zeros(Shape{a.count}, a.dtype);
      c.recv(y, from, a.tag, o);
      std::vector<double> want;
      for (int64_t i = 0; i < a.count; ++i) want.push_back(pattern(a, from, i));
      check(what, y, Shape{a.count}, a.dtype, want, 0);
      return;
    }
    case Kind::kBarrier: c.barrier(o); return;
    case Kind::kNumKinds: break;
  }
}

// Runs the plan on kThreads threads; returns "" or the first real failure (not a kAborted
// that it caused elsewhere).
std::string run_plan(Plan& plan, uint64_t seed) {
  auto errors = testing::run_ranks(kThreads, [&](int t) {
    std::mt19937_64 jitter(seed * 131 + static_cast<uint64_t>(t));
    std::vector<uint64_t> collectives(plan.groups.size(), 0);
    try {
      for (size_t i = 0; i < plan.schedule.size(); ++i) {
        const Entry& e = plan.schedule[i];
        Group& g = plan.groups[static_cast<size_t>(e.group)];
        const int r = g.rank_of(t);
        if (r < 0) continue;
        // Perturb the interleaving a little.
        if (jitter() % 16 == 0) std::this_thread::yield();
        run_entry(e, i, *g.comms[static_cast<size_t>(r)]);
        if (e.kind != Kind::kSendRecv) ++collectives[static_cast<size_t>(e.group)];
      }
      for (size_t g = 0; g < plan.groups.size(); ++g) {
        const int r = plan.groups[g].rank_of(t);
        if (r >= 0 && plan.groups[g].comms[static_cast<size_t>(r)]->sequence_number() != collectives[g]) {
          throw std::runtime_error("group " + std::to_string(g) + ": sequence number " +
                                   std::to_string(plan.groups[g].comms[static_cast<size_t>(r)]->sequence_number()) +
                                   ", want " + std::to_string(collectives[g]));
        }
      }
    } catch (const std::exception& ex) {
      for (Group& g : plan.groups) {
        const int r = g.rank_of(t);
        if (r >= 0) g.comms[static_cast<size_t>(r)]->abort("thread " + std::to_string(t) + " failed: " + ex.what());
      }
      throw;
    }
  });
  std::string aborted;
  for (int t = 0; t < kThreads; ++t) {
    const testing::RankError e = testing::error_of(errors[t]);
    if (!e.thrown) continue;
    const std::string text = "thread " + std::to_string(t) + ": " + e.what;
    if (e.code != ErrorCode::kAborted || e.what.find("group aborted") == std::string::npos) return text;
    if (aborted.empty()) aborted = text;
  }
  return aborted;
}

TEST(CollectiveStress, RandomCollectivesOverOverlappingSubGroups) {
  const auto start = std::chrono::steady_clock::now();
  int calls = 0;
  for (uint64_t seed : {1, 2, 3}) {
    Plan plan = make_plan(seed, /*num_groups=*/6, /*num_entries=*/150);
    for (const Entry& e : plan.schedule) calls += static_cast<int>(plan.groups[e.group].threads.size());
    EXPECT_EQ(run_plan(plan, seed), "") << "seed " << seed;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("rank_calls", calls);
  RecordProperty("ms", static_cast<int>(seconds * 1000));
}

// Long version: fresh groups and schedules until TESSEL_STRESS_SECONDS (default 120) have passed.
TEST(CollectiveStress, DISABLED_LongRandomCollectivesOverOverlappingSubGroups) {
  double budget = 120;
  if (const char* s = std::getenv("TESSEL_STRESS_SECONDS")) budget = std::atof(s);
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  uint64_t seed = 1000;
  int64_t entries = 0;
  while (elapsed() < budget) {
    Plan plan = make_plan(seed, /*num_groups=*/3 + static_cast<int>(seed % 10), /*num_entries=*/2000);
    const std::string error = run_plan(plan, seed);
    ASSERT_EQ(error, "") << "seed " << seed;
    entries += static_cast<int64_t>(plan.schedule.size());
    ++seed;
  }
  std::printf("stress: %lld schedule entries over %llu seeds in %.1f s\n", static_cast<long long>(entries),
              static_cast<unsigned long long>(seed - 1000), elapsed());
}

}  // namespace
}  // namespace tessel
