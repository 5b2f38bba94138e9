// The point-to-point collectives (src/comm/p2p_collectives.h), run in process behind a transport
// that hides its shared memory (testing/message_passing_transport.h), against the direct ones:
// - the same program of every collective (uneven and zero counts, every reduce op, the floating
//   dtypes whose means and sums round) gives the same bytes on both paths, with whole-block
//   messages, with 40-byte segments and on buffers of several default (1 MiB) segments;
// - faults: a rank that never arrives is named in every other rank's kDeadlineExceeded (or the
//   kAborted that quotes it); a rank that stops after the rendezvous, or whose messages are
//   lost, ends every call by the deadline; a failing or aborting peer releases the others with
//   kAborted at once; ranks calling different collectives all get kFailedPrecondition.
// The values of every collective on every dtype are checked by collectives_conformance_test.cpp
// (suite MessagePassing/CollectivesConformance).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "tessel/comm/communicator.h"
#include "testing/fault_transport.h"
#include "testing/message_passing_transport.h"
#include "testing/run_ranks.h"

namespace tessel {
namespace {

using testing::error_of;
using testing::Faults;
using testing::first_error;
using testing::run_ranks;
using Seconds = std::chrono::duration<double>;


bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Values with fractions and signs, different per rank, so that sums and means round.
Tensor values(const Shape& shape, DType dtype, int rank) {
  std::vector<double> v(static_cast<size_t>(shape.num_elements()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((rank * 7919 + i * 104729) % 1000) / 7.0 - 50;
  return Tensor::from_vector<double>(v, shape).astype(dtype);
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  if (!t.defined()) return {0xEE};  // a null result is distinct from an empty one
  const auto* p = static_cast<const uint8_t*>(t.data());
  std::vector<uint8_t> out(p, p + t.nbytes());
  out.push_back(static_cast<uint8_t>(t.rank()));
  for (int64_t d : t.shape().dims()) out.push_back(static_cast<uint8_t>(d));
  return out;
}

// Every collective once per dtype and op, on rank r of an n-group; returns each result's bytes.
// `large`: buffers of several default segments (broadcast down the chain, reductions over
// several segments per slice), on fewer dtypes and ops.
std::vector<std::vector<uint8_t>> program(Communicator& c, const CollectiveOptions& o, bool large) {
  const int n = c.size(), r = c.rank();
  const int64_t scale = large ? 100000 : 1;
  const std::vector<DType> dtypes = large ? std::vector<DType>{DType::kF32, DType::kBF16}
                                          : std::vector<DType>{DType::kF32, DType::kF64, DType::kBF16, DType::kF16};
  const std::vector<ReduceOp> ops =
      large ? std::vector<ReduceOp>{ReduceOp::kSum, ReduceOp::kMean}
            : std::vector<ReduceOp>{ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd};
  std::vector<std::vector<uint8_t>> out;
  std::vector<int64_t> counts(n);
  for (int k = 0; k < n; ++k) counts[k] = (k % 3 == 1 ? 0 : k + 2) * scale;
  const int64_t rows = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  for (DType dtype : dtypes) {
    for (ReduceOp op : ops) {
      const Tensor in = values(Shape{37 * scale}, dtype, r);
      Tensor reduced = r == n - 1 ? Tensor::zeros(in.shape(), dtype) : Tensor();
      c.reduce(in, reduced, op, n - 1, o);
      out.push_back(bytes_of(reduced));
      out.push_back(bytes_of(c.reduce_scatter(values(Shape{rows, 3}, dtype, r), op, counts, o)));
      out.push_back(bytes_of(c.reduce_scatter(values(Shape{5 * scale}, dtype, r), op, {}, o)));
    }
    out.push_back(bytes_of(c.all_gather(values(Shape{3, counts[r] / scale, 2}, dtype, r), 1, o)));
    out.push_back(bytes_of(c.gather(values(Shape{counts[r], 2}, dtype, r), 0, 0, o)));
    Tensor b = values(Shape{53 * scale}, dtype, r);
    c.broadcast(b, 1 % n, o);
    out.push_back(bytes_of(b));
    std::vector<int64_t> send(n);
    for (int k = 0; k < n; ++k) send[k] = (r + 2 * k) % 3 * scale;
    const int64_t send_rows = std::accumulate(send.begin(), send.end(), int64_t{0});
    out.push_back(bytes_of(c.all_to_all(values(Shape{send_rows, 2}, dtype, r), send, o)));
    const Tensor root_input = r == n - 1 ? values(Shape{rows, 2}, dtype, r) : Tensor();
    out.push_back(bytes_of(c.scatter(root_input, n - 1, counts, o)));
  }
  return out;
}

// program() on every rank of an n-group; results per rank.
std::vector<std::vector<std::vector<uint8_t>>> run_program(bool message_passing, int n, size_t segment_bytes,
                                                           bool large) {
  auto comms = message_passing ? testing::make_message_passing_communicators(n) : make_in_process_communicators(n);
  CollectiveOptions o;
  o.timeout = std::chrono::seconds(60);
  o.segment_bytes = segment_bytes;
  std::vector<std::vector<std::vector<uint8_t>>> results(n);
  const auto errors = run_ranks(n, [&](int r) { results[r] = program(*comms[r], o, large); });
  EXPECT_EQ(first_error(errors), "") << (message_passing ? "message passing" : "in process");
  return results;
}

TEST(MessagePassingCollectives, EqualTheDirectVersionsBitForBit) {
  for (int n : {1, 2, 3, 5}) {
    for (size_t segment : {size_t{0}, size_t{40}}) {
      SCOPED_TRACE("world " + std::to_string(n) + " segment " + std::to_string(segment));
      const auto direct = run_program(false, n, segment, false);
      const auto p2p = run_program(true, n, segment, false);
      for (int r = 0; r < n; ++r) {
        ASSERT_EQ(direct[r].size(), p2p[r].size());
        for (size_t i = 0; i < direct[r].size(); ++i) EXPECT_EQ(direct[r][i], p2p[r][i]) << "rank " << r << " result " << i;
      }
    }
  }
}

TEST(MessagePassingCollectives, EqualTheDirectVersionsOnBuffersOfSeveralSegments) {
  const int n = 3;
  const auto direct = run_program(false, n, 0, true);
  const auto p2p = run_program(true, n, 0, true);
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(direct[r].size(), p2p[r].size());
    for (size_t i = 0; i < direct[r].size(); ++i) EXPECT_TRUE(direct[r][i] == p2p[r][i]) << "rank " << r << " result " << i;
  }
}

// ---- faults ----------------------------------------------------------------------------------

constexpr int kN = 4;

struct Outcome {
  testing::RankError error;
  double seconds = 0;
};

// One collective call per rank of a message-passing group of kN with `faults`; once every rank
// other than `stalled` has ended, stalls are released (so that the stalled thread ends too).
std::vector<Outcome> run_faulty(const std::map<int, Faults>& faults, int stalled,
                                const std::function<void(int, Communicator&)>& call) {
  auto group = testing::make_message_passing_faulty_group(kN, faults);
  std::vector<Outcome> out(kN);
  std::atomic<int> finished{0};
  const auto errors = run_ranks(kN, [&](int r) {
    const auto start = std::chrono::steady_clock::now();
    auto done = [&] {
      out[r].seconds = Seconds(std::chrono::steady_clock::now() - start).count();
      if (r != stalled && finished.fetch_add(1) + 1 == kN - (stalled >= 0 ? 1 : 0)) group.release_all();
    };
    try {
      call(r, *group.comms[r]);
    } catch (...) {
      done();
      throw;
    }
    done();
  });
  for (int r = 0; r < kN; ++r) out[r].error = error_of(errors[r]);
  return out;
}

CollectiveOptions timeout(std::chrono::milliseconds t) {
  CollectiveOptions o;
  o.timeout = t;
  return o;
}

// Each collective of a group of kN, with rank-appropriate arguments.
struct Case {
  std::string name;
  std::function<void(int, Communicator&, const CollectiveOptions&)> call;
};

std::vector<Case> every_collective() {
  return {
      {"broadcast", [](int, Communicator& c, const CollectiveOptions& o) {
         Tensor x = Tensor::zeros({6}, DType::kI32);
         c.broadcast(x, 1, o);
       }},
      {"reduce", [](int, Communicator& c, const CollectiveOptions& o) {
         Tensor x = Tensor::zeros({6}, DType::kF64);
         c.reduce(x, x, ReduceOp::kMax, 0, o);
       }},
      {"all_gather", [](int, Communicator& c, const CollectiveOptions& o) { c.all_gather(Tensor::zeros({2, 3}, DType::kBF16), 1, o); }},
      {"gather", [](int, Communicator& c, const CollectiveOptions& o) { c.gather(Tensor::zeros({2}, DType::kU8), 3, 0, o); }},
      {"reduce_scatter", [](int, Communicator& c, const CollectiveOptions& o) {
         c.reduce_scatter(Tensor::zeros({8}, DType::kF32), ReduceOp::kSum, {}, o);
       }},
      {"all_to_all", [](int, Communicator& c, const CollectiveOptions& o) { c.all_to_all(Tensor::zeros({8, 2}, DType::kI64), {}, o); }},
      {"scatter", [](int r, Communicator& c, const CollectiveOptions& o) {
         c.scatter(r == 0 ? Tensor::zeros({8, 2}, DType::kF16) : Tensor(), 0, {}, o);
       }},
  };
}

constexpr int kStalled = 2;
// The 300 ms deadline plus 10% and a little for an oversubscribed machine.
constexpr double kStallBound = 0.3 * 1.1 + 0.1;

// `c` on a group whose rank kStalled stalls at its transport call `stall_call` of the first
// collective (0: the rendezvous), with a 300 ms deadline.
std::vector<Outcome> run_stalled(const Case& c, int stall_call) {
  Faults stall;
  stall.stall_at = 1;
  stall.stall_call = stall_call;
  return run_faulty({{kStalled, stall}}, kStalled, [&](int r, Communicator& comm) {
    c.call(r, comm, timeout(std::chrono::milliseconds(300)));
  });
}

// Rank 2 never arrives: every other rank ends by the deadline, at least one with
// kDeadlineExceeded, all naming rank 2 as missing.
TEST(MessagePassingCollectiveFaults, ARankThatNeverArrivesIsNamedInEveryCollective) {
  for (const Case& c : every_collective()) {
    SCOPED_TRACE(c.name);
    const auto out = run_stalled(c, 0);
    int deadline_count = 0;
    for (int r = 0; r < kN; ++r) {
      if (r == kStalled) continue;
      const testing::RankError& e = out[r].error;
      ASSERT_TRUE(e.thrown) << "rank " << r << " returned without rank 2";
      EXPECT_TRUE(e.code == ErrorCode::kDeadlineExceeded || e.code == ErrorCode::kAborted) << e.what;
      deadline_count += e.code == ErrorCode::kDeadlineExceeded;
      EXPECT_TRUE(contains(e.what, "for ranks [2 (rank 2)]")) << e.what;
      EXPECT_TRUE(contains(e.what, c.name + "(")) << e.what;
      EXPECT_LE(out[r].seconds, kStallBound) << "rank " << r;
    }
    EXPECT_GE(deadline_count, 1);
  }
}

// Rank 2 passes the rendezvous, then stops at its first send or receive: whoever waits for it,
// directly or through another rank, ends by the deadline (with the error of whichever wait
// expired first, or kAborted quoting it); ranks that need nothing from it may finish.
TEST(MessagePassingCollectiveFaults, ARankThatStopsAfterTheRendezvousEndsEveryWaitByTheDeadline) {
  for (const Case& c : every_collective()) {
    SCOPED_TRACE(c.name);
    const auto out = run_stalled(c, 1);
    for (int r = 0; r < kN; ++r) {
      if (r == kStalled) continue;
      EXPECT_LE(out[r].seconds, kStallBound) << "rank " << r;
      const testing::RankError& e = out[r].error;
      if (!e.thrown) continue;
      EXPECT_TRUE(e.code == ErrorCode::kDeadlineExceeded || e.code == ErrorCode::kAborted) << e.what;
      EXPECT_TRUE(contains(e.what, "for a message from rank")) << e.what;
    }
  }
}

// Rank 1's messages to rank 0 are lost: rank 0 ends by the deadline naming rank 1.
TEST(MessagePassingCollectiveFaults, ALostMessageIsDeadlineExceededNamingItsSender) {
  Faults lose;
  lose.drop = std::make_pair(0, -1);  // (peer, kAlgorithmTag)
  const auto out = run_faulty({{1, lose}}, -1, [&](int, Communicator& comm) {
    comm.all_to_all(Tensor::zeros({8, 2}, DType::kF32), {}, timeout(std::chrono::milliseconds(300)));
  });
  EXPECT_EQ(error_code_name(out[0].error.code), error_code_name(ErrorCode::kDeadlineExceeded)) << out[0].error.what;
  EXPECT_TRUE(contains(out[0].error.what, "for a message from rank 1 (rank 1) with tag -1 in all_to_all(f32"))
      << out[0].error.what;
  EXPECT_LE(out[0].seconds, kStallBound);
}

// Rank 1 fails on arrival: every other rank gets kAborted naming it within 1 s of a 30 s deadline.
TEST(MessagePassingCollectiveFaults, AFailingPeerReleasesTheOthersWithAborted) {
  for (const Case& c : every_collective()) {
    SCOPED_TRACE(c.name);
    Faults fail;
    fail.fail_at = 1;
    const auto out = run_faulty({{1, fail}}, -1, [&](int r, Communicator& comm) {
      c.call(r, comm, timeout(std::chrono::seconds(30)));
    });
    EXPECT_EQ(out[1].error.code, ErrorCode::kInvalidArgument) << out[1].error.what;
    for (int r : {0, 2, 3}) {
      EXPECT_EQ(error_code_name(out[r].error.code), error_code_name(ErrorCode::kAborted)) << out[r].error.what;
      EXPECT_TRUE(contains(out[r].error.what, "group aborted: rank 1 (rank 1) failed in " + c.name + "("))
          << out[r].error.what;
      EXPECT_LT(out[r].seconds, 1.0) << "rank " << r;
    }
  }
}

// Rank 1 returns from an all_to_all whose messages to rank 0 were lost, then aborts the group:
// rank 0, waiting for those messages, gets kAborted with the reason at once.
TEST(MessagePassingCollectiveFaults, APeerAbortingMidCollectiveReleasesTheWaiters) {
  Faults lose;
  lose.drop = std::make_pair(0, -1);
  const auto out = run_faulty({{1, lose}}, -1, [&](int r, Communicator& comm) {
    comm.all_to_all(Tensor::zeros({8, 2}, DType::kF32), {}, timeout(std::chrono::seconds(30)));
    if (r == 1) comm.abort("rank 1 gave up");
  });
  EXPECT_EQ(error_code_name(out[0].error.code), error_code_name(ErrorCode::kAborted)) << out[0].error.what;
  EXPECT_TRUE(contains(out[0].error.what, "rank 1 gave up")) << out[0].error.what;
  EXPECT_LT(out[0].seconds, 1.0);
}

TEST(MessagePassingCollectiveFaults, DifferentCollectivesAtOneSequenceAreFailedPrecondition) {
  const auto out = run_faulty({}, -1, [&](int r, Communicator& comm) {
    Tensor x = Tensor::zeros({8}, DType::kF32);
    if (r < 2) {
      comm.broadcast(x, 0, timeout(std::chrono::seconds(30)));
    } else {
      comm.all_to_all(x, {}, timeout(std::chrono::seconds(30)));
    }
  });
  for (int r = 0; r < kN; ++r) {
    EXPECT_EQ(error_code_name(out[r].error.code), error_code_name(ErrorCode::kFailedPrecondition)) << out[r].error.what;
    EXPECT_TRUE(contains(out[r].error.what, "collectives differ: rank 0 (rank 0) called broadcast(f32, 8 elements, root 0)"))
        << out[r].error.what;
    EXPECT_TRUE(contains(out[r].error.what, "rank 2 (rank 2) called all_to_all(f32, [8], send [])")) << out[r].error.what;
    EXPECT_LT(out[r].seconds, 1.0);
  }
}

}  // namespace
}  // namespace tessel
