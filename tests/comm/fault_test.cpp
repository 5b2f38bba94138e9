// Fault behaviour of the communicator, driven by the fault-injecting transport
// (testing/fault_transport.h): a stalled participant, a failing one, ranks that disagree on the
// collective, an aborted group, a lost message, and the default deadline from the environment.
// Every bound is measured on each rank's own call.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tessel/comm/communicator.h"
#include "testing/expect_error.h"
#include "testing/fault_transport.h"
#include "testing/run_ranks.h"
#include "testing/scoped_env.h"

namespace tessel {
namespace {

using testing::error_of;
using testing::Faults;
using testing::make_faulty_group;
using testing::RankError;
using testing::run_ranks;
using Seconds = std::chrono::duration<double>;

double since(std::chrono::steady_clock::time_point start) {
  return Seconds(std::chrono::steady_clock::now() - start).count();
}

struct Outcome {
  RankError error;
  double seconds = 0;  // duration of the call that threw (or of the last call)
};

// Runs `warmup` successful all-reduces on every rank, then times `call` on each rank. With a
// `group` and a `stalled` rank: once every other rank's call has ended, the stall is released
// (so that the stalled thread ends too, long before its own bound).
std::vector<Outcome> run_timed(int n, std::vector<std::unique_ptr<Communicator>>& comms, int warmup,
                               const std::function<void(int, Communicator&)>& call,
                               testing::FaultyGroup* group = nullptr, int stalled = -1) {
  std::vector<Outcome> out(n);
  std::atomic<int> finished{0};
  auto errors = run_ranks(n, [&](int r) {
    auto done = [&] {
      if (group != nullptr && r != stalled && finished.fetch_add(1) + 1 == n - 1) group->release_all();
    };
    CollectiveOptions o;
    o.timeout = std::chrono::seconds(20);
    for (int i = 0; i < warmup; ++i) {
      Tensor x = Tensor::full({16}, DType::kF32, 1);
      comms[r]->all_reduce(x, x, ReduceOp::kSum, o);
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      call(r, *comms[r]);
    } catch (...) {
      out[r].seconds = since(start);
      done();
      throw;
    }
    out[r].seconds = since(start);
    done();
  });
  for (int r = 0; r < n; ++r) out[r].error = error_of(errors[r]);
  return out;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// ---- (1) a stalled participant -------------------------------------------------------------

// Rank 2 of 4 stalls at its 4th collective (after 3 good all-reduces). Every other rank's call
// must end within the timeout plus 10%, at least one with kDeadlineExceeded naming rank 2, the
// sequence number and the whole signature; the rest with kDeadlineExceeded or kAborted naming it.
void stalled_participant_case(const std::string& collective,
                              const std::function<void(int, Communicator&, const CollectiveOptions&)>& call,
                              const std::string& signature) {
  constexpr int kN = 4, kStalled = 2, kWarmup = 3;
  // 1 s: the 10% margin (100 ms) must also absorb the wake-up of a rank's thread on a loaded
  // 2-core machine, where ctest runs another suite beside this one.
  const auto timeout = std::chrono::seconds(1);
  const double bound = 1.0 * 1.1;
  Faults stall;
  stall.stall_at = kWarmup + 1;
  stall.stall_limit = std::chrono::seconds(10);
  auto group = make_faulty_group(kN, {{kStalled, stall}});
  auto out = run_timed(
      kN, group.comms, kWarmup,
      [&](int r, Communicator& c) {
        CollectiveOptions o;
        o.timeout = timeout;
        call(r, c, o);
      },
      &group, kStalled);

  SCOPED_TRACE(collective);
  int deadline_count = 0;
  for (int r = 0; r < kN; ++r) {
    if (r == kStalled) continue;
    const std::string who = "rank " + std::to_string(r);
    ASSERT_TRUE(out[r].error.thrown) << who << " returned although rank 2 never arrived";
    const ErrorCode code = out[r].error.code;
    EXPECT_TRUE(code == ErrorCode::kDeadlineExceeded || code == ErrorCode::kAborted)
        << who << ": " << error_code_name(code) << ": " << out[r].error.what;
    const std::string& what = out[r].error.what;
    EXPECT_TRUE(contains(what, "for ranks [2 (rank 2)]")) << who << ": " << what;
    EXPECT_TRUE(contains(what, "(sequence 4)")) << who << ": " << what;
    EXPECT_TRUE(contains(what, signature + " over group [rank 0, rank 1, rank 2, rank 3]")) << who << ": " << what;
    EXPECT_LE(out[r].seconds, bound) << who << " took " << out[r].seconds << " s (timeout 1 s)";
    if (code == ErrorCode::kDeadlineExceeded) {
      // Its own deadline ended the wait. (A rank released with kAborted may end a little
      // earlier: a peer that started the collective first reached its deadline first.)
      EXPECT_GE(out[r].seconds, 1.0 - 0.01) << who << " gave up before the deadline";
      ++deadline_count;
      EXPECT_TRUE(contains(what, "did not arrive")) << what;
    } else {
      EXPECT_TRUE(contains(what, "group aborted")) << what;
    }
    ::testing::Test::RecordProperty(collective + "_rank" + std::to_string(r) + "_us", static_cast<int>(out[r].seconds * 1e6));
  }
  EXPECT_GE(deadline_count, 1);
  // The stalled rank, once released, finds the group aborted.
  EXPECT_TRUE(group.faults[kStalled]->stalling());
  EXPECT_EQ(error_code_name(out[kStalled].error.code), error_code_name(ErrorCode::kAborted))
      << out[kStalled].error.what;
}

TEST(CollectiveFaults, StalledParticipantGivesDeadlineExceededWithinTimeoutPlus10PercentNamingIt) {
  stalled_participant_case(
      "all_reduce",
      [](int, Communicator& c, const CollectiveOptions& o) {
        Tensor x = Tensor::full({1000}, DType::kF32, 1);
        c.all_reduce(x, x, ReduceOp::kSum, o);
      },
      "all_reduce(f32, 1000 elements, sum)");
}

TEST(CollectiveFaults, StalledParticipantInEveryCollectiveIsNamed) {
  stalled_participant_case(
      "broadcast",
      [](int, Communicator& c, const CollectiveOptions& o) {
        Tensor x = Tensor::zeros({6}, DType::kI32);
        c.broadcast(x, 1, o);
      },
      "broadcast(i32, 6 elements, root 1)");
  stalled_participant_case(
      "reduce",
      [](int, Communicator& c, const CollectiveOptions& o) {
        Tensor x = Tensor::zeros({6}, DType::kF64);
        c.reduce(x, x, ReduceOp::kMax, 0, o);
      },
      "reduce(f64, 6 elements, max, root 0)");
  stalled_participant_case(
      "all_gather",
      [](int, Communicator& c, const CollectiveOptions& o) { c.all_gather(Tensor::zeros({2, 3}, DType::kBF16), 1, o); },
      "all_gather(bf16, [2,3], axis 1)");
  stalled_participant_case(
      "reduce_scatter",
      [](int, Communicator& c, const CollectiveOptions& o) {
        c.reduce_scatter(Tensor::zeros({8}, DType::kF32), ReduceOp::kSum, {}, o);
      },
      "reduce_scatter(f32, [8], sum, counts [])");
  stalled_participant_case(
      "barrier", [](int, Communicator& c, const CollectiveOptions& o) { c.barrier(o); }, "barrier()");
}

// The ring, halving-doubling and reduce-to-one all-reduces move data with send/recv only, after
// one signature rendezvous. A rank that never arrives is named by that rendezvous; a rank that
// stalls in the middle leaves every other rank waiting on a neighbour, and the bound must hold
// all the same.
TEST(CollectiveFaults, StalledParticipantInPointToPointAllReducesEndsWithinTimeoutPlus10Percent) {
  constexpr int kN = 4, kStalled = 2;
  for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kHalvingDoubling, Algorithm::kReduceToOne}) {
    for (int stall_call : {0, 1}) {
      SCOPED_TRACE(std::string(algorithm_name(algorithm)) + (stall_call == 0 ? ", never arrives" : ", stalls midway"));
      Faults stall;
      stall.stall_at = 1;
      stall.stall_call = stall_call;
      auto group = make_faulty_group(kN, {{kStalled, stall}});
      auto out = run_timed(
          kN, group.comms, 0,
          [&](int, Communicator& c) {
            CollectiveOptions o;
            o.algorithm = algorithm;
            o.timeout = std::chrono::seconds(1);  // see stalled_participant_case on the margin
            Tensor x = Tensor::full({1000}, DType::kF32, 1);
            c.all_reduce(x, x, ReduceOp::kSum, o);
          },
          &group, kStalled);
      int deadline_count = 0;
      for (int r = 0; r < kN; ++r) {
        if (r == kStalled) continue;
        const RankError& e = out[r].error;
        ASSERT_TRUE(e.thrown) << "rank " << r;
        EXPECT_TRUE(e.code == ErrorCode::kDeadlineExceeded || e.code == ErrorCode::kAborted) << e.what;
        deadline_count += e.code == ErrorCode::kDeadlineExceeded;
        EXPECT_LE(out[r].seconds, 1.0 * 1.1) << "rank " << r << " took " << out[r].seconds << " s: " << e.what;
        EXPECT_TRUE(contains(e.what, "all_reduce(f32, 1000 elements, sum, " + std::string(algorithm_name(algorithm)) +
                                         ") over group [rank 0, rank 1, rank 2, rank 3] (sequence 1)"))
            << e.what;
        if (stall_call == 0) {
          EXPECT_TRUE(contains(e.what, "for ranks [2 (rank 2)]")) << e.what;
        }
      }
      EXPECT_GE(deadline_count, 1);
    }
  }
}

// ---- (2) a failing participant ---------------------------------------------------------------

TEST(CollectiveFaults, FailingParticipantReleasesTheOthersWithin1sDespite30sTimeout) {
  constexpr int kN = 4, kFailing = 1;
  for (int fail_call : {0, 1}) {
    SCOPED_TRACE(fail_call == 0 ? "fails on arrival" : "fails at the closing barrier");
    Faults fail;
    fail.fail_at = 3;  // after two good all-reduces
    fail.fail_call = fail_call;
    auto group = make_faulty_group(kN, {{kFailing, fail}});
    auto out = run_timed(kN, group.comms, 2, [&](int r, Communicator& c) {
      CollectiveOptions o;
      o.timeout = std::chrono::seconds(30);
      Tensor x = Tensor::full({64}, DType::kF32, r);
      c.broadcast(x, 0, o);
    });
    for (int r = 0; r < kN; ++r) {
      const std::string who = "rank " + std::to_string(r);
      ASSERT_TRUE(out[r].error.thrown) << who;
      if (r == kFailing) {
        EXPECT_EQ(out[r].error.code, ErrorCode::kInvalidArgument) << out[r].error.what;
        EXPECT_TRUE(contains(out[r].error.what, "FaultTransport: injected fault in broadcast(f32, 64 elements, root 0)"))
            << out[r].error.what;
        continue;
      }
      EXPECT_EQ(error_code_name(out[r].error.code), error_code_name(ErrorCode::kAborted)) << out[r].error.what;
      EXPECT_TRUE(contains(out[r].error.what,
                           "group aborted: rank 1 (rank 1) failed in broadcast(f32, 64 elements, root 0) over "
                           "group [rank 0, rank 1, rank 2, rank 3] (sequence 3): FaultTransport: injected fault"))
          << out[r].error.what;
      EXPECT_LT(out[r].seconds, 1.0) << who << " waited " << out[r].seconds << " s for a failed rank";
      RecordProperty("release_us_rank" + std::to_string(r), static_cast<int>(out[r].seconds * 1e6));
    }
  }
}

// A rank that fails after the others started waiting for it (it is slow, then fails) still
// releases them at once.
TEST(CollectiveFaults, LateFailureReleasesWaitingRanksWithin1s) {
  constexpr int kN = 5;
  Faults f;
  f.delay = std::chrono::milliseconds(200);
  f.fail_at = 1;
  auto group = make_faulty_group(kN, {{4, f}});
  auto out = run_timed(kN, group.comms, 0, [&](int, Communicator& c) {
    CollectiveOptions o;
    o.timeout = std::chrono::seconds(30);
    c.all_gather(Tensor::zeros({3}, DType::kI64), 0, o);
  });
  EXPECT_EQ(out[4].error.code, ErrorCode::kInvalidArgument) << out[4].error.what;
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(error_code_name(out[r].error.code), error_code_name(ErrorCode::kAborted)) << out[r].error.what;
    EXPECT_TRUE(contains(out[r].error.what, "rank 4 (rank 4) failed in all_gather")) << out[r].error.what;
    EXPECT_GE(out[r].seconds, 0.15) << "rank " << r << " cannot know of the failure before it happens";
    EXPECT_LT(out[r].seconds, 1.0) << "rank " << r;
  }
}

// ---- (3) different collectives at the same sequence number ------------------------------------

TEST(CollectiveFaults, DifferentCollectivesAtOneSequenceGiveFailedPreconditionNamingBoth) {
  constexpr int kN = 4;
  auto comms = make_in_process_communicators(kN);
  auto out = run_timed(kN, comms, 2, [&](int r, Communicator& c) {
    CollectiveOptions o;
    o.timeout = std::chrono::seconds(30);
    Tensor x = Tensor::zeros({10}, DType::kF32);
    if (r < 2) {
      c.all_reduce(x, x, ReduceOp::kSum, o);
    } else {
      c.broadcast(x, 0, o);
    }
  });
  const std::string first = "rank 0 (rank 0) called all_reduce(f32, 10 elements, sum) over group [rank 0, rank 1, rank 2, rank 3] (sequence 3)";
  const std::string second = "rank 2 (rank 2) called broadcast(f32, 10 elements, root 0) over group [rank 0, rank 1, rank 2, rank 3] (sequence 3)";
  for (int r = 0; r < kN; ++r) {
    EXPECT_EQ(error_code_name(out[r].error.code), error_code_name(ErrorCode::kFailedPrecondition)) << out[r].error.what;
    EXPECT_TRUE(contains(out[r].error.what, "collectives differ: " + first + " but " + second)) << out[r].error.what;
    EXPECT_LT(out[r].seconds, 1.0);
  }
}

TEST(CollectiveFaults, SameCollectiveWithDifferentDTypeOrCountGivesFailedPrecondition) {
  constexpr int kN = 3;
  auto comms = make_in_process_communicators(kN);
  auto out = run_timed(kN, comms, 0, [&](int r, Communicator& c) {
    CollectiveOptions o;
    o.timeout = std::chrono::seconds(30);
    Tensor x = r == 1 ? Tensor::zeros({10}, DType::kF64) : Tensor::zeros({10}, DType::kF32);
    c.all_reduce(x, x, ReduceOp::kSum, o);
  });
  for (int r = 0; r < kN; ++r) {
    EXPECT_EQ(out[r].error.code, ErrorCode::kFailedPrecondition) << out[r].error.what;
    EXPECT_TRUE(contains(out[r].error.what, "all_reduce(f32, 10 elements, sum)")) << out[r].error.what;
    EXPECT_TRUE(contains(out[r].error.what, "rank 1 (rank 1) called all_reduce(f64, 10 elements, sum)")) << out[r].error.what;
  }
  comms = make_in_process_communicators(kN);
  out = run_timed(kN, comms, 1, [&](int r, Communicator& c) {
    CollectiveOptions o;
    o.timeout = std::chrono::seconds(30);
    Tensor x = Tensor::zeros({r == 2 ? 11 : 10}, DType::kF32);
    c.all_reduce(x, x, ReduceOp::kSum, o);
  });
  for (int r = 0; r < kN; ++r) {
    EXPECT_EQ(out[r].error.code, ErrorCode::kFailedPrecondition) << out[r].error.what;
    EXPECT_TRUE(contains(out[r].error.what, "rank 2 (rank 2) called all_reduce(f32, 11 elements, sum)")) << out[r].error.what;
    EXPECT_TRUE(contains(out[r].error.what, "(sequence 2)")) << out[r].error.what;
  }
}

// The send/recv-based all-reduces exchange no posts, yet ranks that disagree on the reduce op
// (same byte counts: the messages would fit) or on the dtype must still all fail with
// kFailedPrecondition instead of combining mismatched data; so must ranks that pick different
// algorithms (different protocols).
TEST(CollectiveFaults, PointToPointAllReducesCheckSignaturesToo) {
  constexpr int kN = 3;
  for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kHalvingDoubling, Algorithm::kReduceToOne}) {
    SCOPED_TRACE(algorithm_name(algorithm));
    auto comms = make_in_process_communicators(kN);
    auto out = run_timed(kN, comms, 1, [&](int r, Communicator& c) {
      CollectiveOptions o;
      o.algorithm = algorithm;
      o.timeout = std::chrono::seconds(30);
      Tensor x = Tensor::full({10}, DType::kF32, r + 1);
      c.all_reduce(x, x, r == 1 ? ReduceOp::kMax : ReduceOp::kSum, o);
    });
    for (int r = 0; r < kN; ++r) {
      EXPECT_EQ(error_code_name(out[r].error.code), error_code_name(ErrorCode::kFailedPrecondition))
          << "rank " << r << ": " << (out[r].error.thrown ? out[r].error.what : "no error");
      EXPECT_TRUE(contains(out[r].error.what, "rank 1 (rank 1) called all_reduce(f32, 10 elements, max, " +
                                                  std::string(algorithm_name(algorithm)) + ")"))
          << out[r].error.what;
      EXPECT_LT(out[r].seconds, 1.0);
    }
    comms = make_in_process_communicators(kN);
    out = run_timed(kN, comms, 0, [&](int r, Communicator& c) {
      CollectiveOptions o;
      o.algorithm = algorithm;
      o.timeout = std::chrono::seconds(30);
      Tensor x = Tensor::full({10}, r == 2 ? DType::kI32 : DType::kF32, 1);
      c.all_reduce(x, x, ReduceOp::kSum, o);
    });
    for (int r = 0; r < kN; ++r) {
      EXPECT_EQ(error_code_name(out[r].error.code), error_code_name(ErrorCode::kFailedPrecondition))
          << "rank " << r << ": " << (out[r].error.thrown ? out[r].error.what : "no error");
      EXPECT_LT(out[r].seconds, 1.0);
    }
  }
  // Different algorithms on different ranks.
  auto comms = make_in_process_communicators(2);
  auto out = run_timed(2, comms, 0, [&](int r, Communicator& c) {
    CollectiveOptions o;
    o.algorithm = r == 0 ? Algorithm::kRing : Algorithm::kDirect;
    o.timeout = std::chrono::seconds(30);
    Tensor x = Tensor::full({10}, DType::kF32, 1);
    c.all_reduce(x, x, ReduceOp::kSum, o);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(error_code_name(out[r].error.code), error_code_name(ErrorCode::kFailedPrecondition))
        << "rank " << r << ": " << (out[r].error.thrown ? out[r].error.what : "no error");
    EXPECT_TRUE(contains(out[r].error.what, "called all_reduce(f32, 10 elements, sum, ring)")) << out[r].error.what;
    EXPECT_TRUE(contains(out[r].error.what, "called all_reduce(f32, 10 elements, sum, direct)")) << out[r].error.what;
    EXPECT_LT(out[r].seconds, 1.0);
  }
}

// ---- (4) an aborted group stays aborted --------------------------------------------------------

TEST(CollectiveFaults, EveryCallAfterAnAbortThrowsAborted) {
  constexpr int kN = 3;
  Faults fail;
  fail.fail_at = 2;
  auto group = make_faulty_group(kN, {{0, fail}});
  auto out = run_timed(kN, group.comms, 1, [&](int, Communicator& c) {
    CollectiveOptions o;
    o.timeout = std::chrono::seconds(30);
    c.barrier(o);
  });
  EXPECT_EQ(out[0].error.code, ErrorCode::kInvalidArgument) << out[0].error.what;
  // Every kind of later call, on every rank, throws kAborted carrying the first failure.
  auto errors = run_ranks(kN, [&](int r) {
    CollectiveOptions o;
    o.timeout = std::chrono::seconds(30);
    Communicator& c = *group.comms[r];
    Tensor x = Tensor::zeros({6}, DType::kF32);
    const std::vector<std::function<void()>> calls = {
        [&] { c.all_reduce(x, x, ReduceOp::kSum, o); },
        [&] { c.reduce(x, x, ReduceOp::kSum, 0, o); },
        [&] { c.broadcast(x, 0, o); },
        [&] { c.all_gather(x, 0, o); },
        [&] { c.gather(x, 0, 0, o); },
        [&] { c.reduce_scatter(x, ReduceOp::kSum, {}, o); },
        [&] { c.all_to_all(x, {2, 2, 2}, o); },
        [&] { c.scatter(x, 0, {}, o); },
        [&] { c.send(x, (r + 1) % kN, 0, o); },
        [&] { c.recv(x, (r + 1) % kN, 0, o); },
        [&] { c.barrier(o); },
        [&] {
          CollectiveOptions ring = o;
          ring.algorithm = Algorithm::kRing;
          c.all_reduce(x, x, ReduceOp::kSum, ring);
        },
    };
    for (size_t i = 0; i < calls.size(); ++i) {
      const auto start = std::chrono::steady_clock::now();
      try {
        calls[i]();
        throw std::runtime_error("call " + std::to_string(i) + " succeeded on an aborted group");
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kAborted ||
            !contains(e.what(), "group aborted: rank 0 (rank 0) failed in barrier() over group") ||
            !contains(e.what(), "injected fault")) {
          throw std::runtime_error("call " + std::to_string(i) + ": " + e.what());
        }
      }
      if (since(start) > 0.5) throw std::runtime_error("call " + std::to_string(i) + " was slow");
    }
  });
  EXPECT_EQ(testing::first_error(errors), "");
}

TEST(CollectiveFaults, ExplicitAbortReleasesWaitingRanks) {
  constexpr int kN = 3;
  auto comms = make_in_process_communicators(kN);
  auto out = run_timed(kN, comms, 1, [&](int r, Communicator& c) {
    CollectiveOptions o;
    o.timeout = std::chrono::seconds(30);
    if (r == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      c.abort("operator pressed stop");
      return;
    }
    c.barrier(o);
  });
  EXPECT_FALSE(out[0].error.thrown);
  for (int r = 1; r < kN; ++r) {
    EXPECT_EQ(out[r].error.code, ErrorCode::kAborted) << out[r].error.what;
    EXPECT_TRUE(contains(out[r].error.what, "group aborted: operator pressed stop")) << out[r].error.what;
    EXPECT_LT(out[r].seconds, 1.0);
  }
}

// ---- (5) recv without a matching send ---------------------------------------------------------

TEST(CollectiveFaults, RecvWithoutMatchingSendTimesOutNamingThePeer) {
  constexpr int kN = 3;
  auto comms = make_in_process_communicators(kN, {"alpha", "beta", "gamma"});
  auto out = run_timed(kN, comms, 1, [&](int r, Communicator& c) {
    if (r != 1) return;
    CollectiveOptions o;
    o.timeout = std::chrono::milliseconds(300);
    Tensor t = Tensor::zeros({4}, DType::kF32);
    c.recv(t, 2, 9, o);
  });
  ASSERT_TRUE(out[1].error.thrown);
  EXPECT_EQ(error_code_name(out[1].error.code), error_code_name(ErrorCode::kDeadlineExceeded)) << out[1].error.what;
  EXPECT_TRUE(contains(out[1].error.what, "rank 1 (beta) waited 0.3"));
  EXPECT_TRUE(contains(out[1].error.what, "for a message from rank 2 (gamma) with tag 9 in recv(16 bytes from rank 2, tag 9) "
                                          "over group [alpha, beta, gamma] (sequence 1); it did not arrive"))
      << out[1].error.what;
  EXPECT_LE(out[1].seconds, 0.3 * 1.1);
  EXPECT_GE(out[1].seconds, 0.29);
}

TEST(CollectiveFaults, DroppedMessageTimesOutTheReceiverNamingTheSender) {
  constexpr int kN = 2;
  Faults lossy;
  lossy.drop = std::make_pair(1, 5);  // rank 0's sends to rank 1 under tag 5 vanish
  auto group = make_faulty_group(kN, {{0, lossy}});
  auto out = run_timed(kN, group.comms, 0, [&](int r, Communicator& c) {
    CollectiveOptions o;
    o.timeout = std::chrono::milliseconds(300);
    Tensor t = Tensor::full({2}, DType::kI32, 7);
    if (r == 0) {
      c.send(t, 1, 4, o);  // delivered
      c.send(t, 1, 5, o);  // dropped
    } else {
      Tensor a = Tensor::zeros({2}, DType::kI32);
      c.recv(a, 0, 4, o);
      if (a.to_vector<int32_t>() != std::vector<int32_t>{7, 7}) throw std::runtime_error("tag 4 payload");
      c.recv(a, 0, 5, o);
    }
  });
  EXPECT_FALSE(out[0].error.thrown) << out[0].error.what;
  EXPECT_EQ(group.faults[0]->dropped(), 1);
  EXPECT_EQ(out[1].error.code, ErrorCode::kDeadlineExceeded) << out[1].error.what;
  EXPECT_TRUE(contains(out[1].error.what, "for a message from rank 0 (rank 0) with tag 5")) << out[1].error.what;
  EXPECT_LE(out[1].seconds, 0.3 * 1.1 + 0.05);  // two recvs, the second times out
}

// ---- (6) the default deadline from TESSEL_COLLECTIVE_TIMEOUT_S --------------------------------

using testing::ScopedEnv;

TEST(CollectiveFaults, DefaultTimeoutComesFromTesselCollectiveTimeoutS) {
  {
    ScopedEnv env("TESSEL_COLLECTIVE_TIMEOUT_S", std::nullopt);
    EXPECT_EQ(default_collective_timeout(), std::chrono::seconds(300));
  }
  {
    ScopedEnv env("TESSEL_COLLECTIVE_TIMEOUT_S", "");
    EXPECT_EQ(default_collective_timeout(), std::chrono::seconds(300));
  }
  {
    ScopedEnv env("TESSEL_COLLECTIVE_TIMEOUT_S", "2.5");
    EXPECT_EQ(default_collective_timeout(), std::chrono::milliseconds(2500));
  }
  // The default bounds a real call: options.timeout = 0 with a stalled rank.
  ScopedEnv env("TESSEL_COLLECTIVE_TIMEOUT_S", "0.3");
  Faults stall;
  stall.stall_at = 1;
  auto group = make_faulty_group(3, {{1, stall}});
  auto out = run_timed(3, group.comms, 0, [&](int, Communicator& c) { c.barrier(); }, &group, 1);
  int deadline_count = 0;
  for (int r : {0, 2}) {
    ASSERT_TRUE(out[r].error.thrown);
    deadline_count += out[r].error.code == ErrorCode::kDeadlineExceeded;
    EXPECT_TRUE(contains(out[r].error.what, "for ranks [1 (rank 1)] in barrier()")) << out[r].error.what;
    EXPECT_GE(out[r].seconds, 0.29);
    EXPECT_LE(out[r].seconds, 0.3 * 1.1);
  }
  EXPECT_GE(deadline_count, 1);
}

TEST(CollectiveFaults, MalformedTesselCollectiveTimeoutSIsInvalidArgument) {
  for (const char* bad : {"abc", "5s", "-1", "0", "nan", "1e9"}) {
    SCOPED_TRACE(bad);
    ScopedEnv env("TESSEL_COLLECTIVE_TIMEOUT_S", bad);
    EXPECT_TESSEL_ERROR(default_collective_timeout(), ErrorCode::kInvalidArgument,
                        "CollectiveOptions: TESSEL_COLLECTIVE_TIMEOUT_S='" + std::string(bad) +
                            "' is not a positive number of seconds");
  }
  // A call that relies on the default fails the same way on every rank (no rank waits).
  ScopedEnv env("TESSEL_COLLECTIVE_TIMEOUT_S", "soon");
  auto comms = make_in_process_communicators(2);
  auto out = run_timed(2, comms, 0, [&](int, Communicator& c) {
    Tensor x = Tensor::zeros({3}, DType::kF32);
    c.all_reduce(x, x, ReduceOp::kSum);
  });
  for (const Outcome& o : out) {
    EXPECT_EQ(o.error.code, ErrorCode::kInvalidArgument) << o.error.what;
    EXPECT_TRUE(contains(o.error.what, "TESSEL_COLLECTIVE_TIMEOUT_S='soon'")) << o.error.what;
    EXPECT_LT(o.seconds, 1.0);
  }
  // An explicit timeout does not consult the environment.
  comms = make_in_process_communicators(2);
  out = run_timed(2, comms, 0, [&](int, Communicator& c) {
    CollectiveOptions o;
    o.timeout = std::chrono::seconds(5);
    Tensor x = Tensor::full({3}, DType::kF32, 1);
    c.all_reduce(x, x, ReduceOp::kSum, o);
  });
  for (const Outcome& o : out) EXPECT_FALSE(o.error.thrown) << o.error.what;
}

// An absolute deadline wins over the timeout: the operations that run several collectives under
// one budget (a multi-step relayout, a replicate() call) rely on it.
TEST(CollectiveFaults, AnAbsoluteDeadlineWinsOverTheTimeout) {
  auto comms = make_in_process_communicators(2);
  CollectiveOptions o;
  o.timeout = std::chrono::seconds(30);
  o.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  Tensor x = Tensor::full({3}, DType::kF32, 1);
  const auto start = std::chrono::steady_clock::now();
  // Rank 1 never joins: rank 0 gives up at the deadline, naming it, not after 30 s.
  EXPECT_TESSEL_ERROR(comms[0]->all_reduce(x, x, ReduceOp::kSum, o), ErrorCode::kDeadlineExceeded,
                      "rank 1");
  EXPECT_GE(since(start), 0.19);
  EXPECT_LT(since(start), 5.0);
  // A deadline already past fails the first wait at once.
  comms = make_in_process_communicators(2);
  o.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  const auto again = std::chrono::steady_clock::now();
  EXPECT_TESSEL_ERROR(comms[0]->all_reduce(x, x, ReduceOp::kSum, o), ErrorCode::kDeadlineExceeded,
                      "rank 1");
  EXPECT_LT(since(again), 1.0);
}

}  // namespace
}  // namespace tessel
