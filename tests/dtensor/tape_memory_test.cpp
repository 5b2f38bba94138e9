// What gradient tapes keep for the backward pass (white box: tape_memory.h's counters and the
// device's accounting): only what each VJP reads (OpDef::saves, OpDef::save), each record let go
// right after its VJP, each gradient after its last use; the stand-ins of what is not kept.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/ops.h"
#include "testing/expect_error.h"
#include "testing/op_check.h"
#include "testing/tape_memory_checks.h"

namespace tessel {
namespace {

using testing::identity_op;
using testing::kept_bytes;
using testing::values;

// What "test_probe" saw at each of its VJP calls, in the order they ran.
struct ProbeLog {
  std::vector<int64_t> kept;         // kept_bytes()
  std::vector<int64_t> device_live;  // the probed tensor's first device's live bytes
};
ProbeLog& probe_log() {
  static ProbeLog log;
  return log;
}

// "test_probe"(x) -> x, whose VJP writes down what tapes keep and what the device holds at that
// moment of the backward pass, and passes the gradient on.
DTensor probe(const DTensor& x) {
  static const bool registered = [] {
    OpDef def = identity_op("test_probe");
    def.saves = VjpSaves::nothing();
    def.vjp = [](const VjpArgs& a) {
      probe_log().kept.push_back(kept_bytes());
      Device& device = a.grad.device(0);
      device.stream().synchronize();  // tasks still queued hold their tensors
      probe_log().device_live.push_back(device.memory_stats().live_bytes);
      return std::vector<DTensor>{a.grad};
    };
    OpRegistry::global().add(std::move(def));
    return true;
  }();
  (void)registered;
  return call_op("test_probe", {x});
}

class TapeMemory : public testing::OneDeviceTest {
 protected:
  TapeMemory() { probe_log() = {}; }
};

TEST_F(TapeMemory, EachOpKeepsOnlyWhatItsVjpReads) {
  const DTensor x = random(Shape{16, 8}, 1), w = random(Shape{8, 8}, 2), c = random(Shape{8}, 3);
  const int64_t before = kept_bytes();
  GradientTape tape;
  tape.watch(x);
  tape.watch(w);
  const DTensor h = matmul(x, w);                // keeps x and w: sources, not activations
  const DTensor e = exp(h);                      // keeps its output e, not h
  const DTensor s = add(e, c);                   // keeps nothing (shapes only)
  const DTensor r = reshape(s, Shape{128});      // keeps nothing
  const DTensor y = reduce_sum(multiply(r, r));  // multiply keeps r; reduce_sum nothing
  // e and r (a reshape of s, its own storage) each once.
  EXPECT_EQ(kept_bytes() - before, e.nbytes() + r.nbytes());
  const std::vector<DTensor> g = tape.gradient(y, {x, w});
  EXPECT_EQ(kept_bytes(), before);  // everything let go
  // d/dx sum((exp(xw) + c)^2) = 2 (e + c) e w^T.
  const std::vector<double> want =
      values(matmul(multiply(multiply(add(e, c), e), 2.0), w, false, true));
  const std::vector<double> got = values(g[0]);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-9 * std::abs(want[i]));
}

// A slice of a leading range is a view at an offset into its input's storage: kept, it keeps
// the storage before it alive too, and is counted so.
TEST_F(TapeMemory, AKeptSliceViewCountsTheStorageUpToItsEnd) {
  const DTensor x = random(Shape{4, 8}, 4);
  const int64_t before = kept_bytes();
  GradientTape tape;
  tape.watch(x);
  const DTensor h = exp(x);                            // keeps h (its output): 128 bytes
  const DTensor tail = slice(h, {2, 0}, {2, -1});      // a view of h's last 64 bytes
  const DTensor y = reduce_sum(multiply(tail, tail));  // multiply keeps tail: h's storage
  EXPECT_TRUE(tail.component(0).shares_storage_with(h.component(0)));
  EXPECT_EQ(kept_bytes() - before, h.nbytes());
  // add keeps nothing: only the view is kept, the second half of a storage of h's size.
  const DTensor second = slice(add(x, x), {2, 0}, {2, -1});
  const DTensor z = reduce_sum(multiply(second, second));
  EXPECT_EQ(second.nbytes(), h.nbytes() / 2);
  EXPECT_EQ(kept_bytes() - before, 2 * h.nbytes());
  tape.gradient(add(y, z), {x});
  EXPECT_EQ(kept_bytes(), before);
}

TEST_F(TapeMemory, EachRecordIsLetGoRightAfterItsVjp) {
  // Four layers of tanh, each keeping its output (n bytes); a probe after each. In the backward
  // pass the probes see the kept bytes and the device's live bytes fall by one layer each time.
  const int layers = 4;
  DTensor h = random(Shape{64, 64}, 4);
  const DTensor x = h;
  const int64_t n = h.nbytes();
  const int64_t before = kept_bytes();
  {
    GradientTape tape;
    tape.watch(x);
    for (int l = 0; l < layers; ++l) h = probe(tanh(h));
    const DTensor y = reduce_sum(h);
    h = DTensor();  // only the tape holds the layers now
    (void)tape.gradient(y, {x});
  }
  const ProbeLog& log = probe_log();
  ASSERT_EQ(log.kept.size(), static_cast<size_t>(layers));
  for (int k = 0; k < layers; ++k) {
    EXPECT_EQ(log.kept[static_cast<size_t>(k)] - before, (layers - k) * n) << k;
    if (k > 0) {
      EXPECT_EQ(
          log.device_live[static_cast<size_t>(k - 1)] - log.device_live[static_cast<size_t>(k)], n)
          << "the device freed one layer's output and nothing else between probes " << k - 1
          << " and " << k;
    }
  }
}

TEST_F(TapeMemory, APersistentTapeKeepsEverythingUntilItDies) {
  DTensor h = random(Shape{32, 32}, 5);
  const DTensor x = h;
  const int64_t before = kept_bytes();
  {
    GradientTape tape(/*persistent=*/true);
    tape.watch(x);
    for (int l = 0; l < 3; ++l) h = probe(tanh(h));
    const DTensor y = reduce_sum(h);
    const std::vector<double> first = values(tape.gradient(y, {x})[0]);
    EXPECT_EQ(values(tape.gradient(y, {x})[0]), first);
    EXPECT_EQ(kept_bytes() - before, 3 * x.nbytes());
  }
  EXPECT_EQ(kept_bytes(), before);
  for (int64_t kept : probe_log().kept) EXPECT_EQ(kept - before, 3 * x.nbytes());
}

TEST_F(TapeMemory, LayerNormKeepsItsStatisticsFromTheForwardPass) {
  const DTensor x = random(Shape{6, 5, 16}, 6), w = random(Shape{16}, 7), b = random(Shape{16}, 8);
  GradientTape tape;
  tape.watch(x);
  tape.watch(w);
  tape.watch(b);
  const DTensor h = add(x, 1.0);  // not a source: its bytes count
  const int64_t before = kept_bytes();
  const DTensor y = layer_norm(h, w, b, 1e-5);
  // h (x) and its statistics, f64 (mean, rstd) per row; weight and bias are sources.
  EXPECT_EQ(kept_bytes() - before, h.nbytes() + 6 * 5 * 2 * 8);
  const std::vector<DTensor> g = tape.gradient(reduce_sum(multiply(y, y)), {x, w, b});
  // The bias's gradient: sum over rows of 2 y.
  const std::vector<double> yv = values(y), gb = values(g[2]);
  for (int c = 0; c < 16; ++c) {
    double want = 0;
    for (int r = 0; r < 30; ++r) want += 2 * yv[static_cast<size_t>(r * 16 + c)];
    EXPECT_NEAR(gb[static_cast<size_t>(c)], want, 1e-9);
  }
}

TEST_F(TapeMemory, AVjpReadingWhatItDidNotDeclareGetsAClearError) {
  static const bool registered = [] {
    OpDef def = identity_op("test_undeclared_read");
    def.saves = VjpSaves::nothing();  // wrong: the VJP reads its input
    def.vjp = [](const VjpArgs& a) { return std::vector<DTensor>{multiply(a.grad, a.inputs[0])}; };
    OpRegistry::global().add(std::move(def));
    return true;
  }();
  (void)registered;
  const DTensor x = random(Shape{4}, 9);
  GradientTape tape;
  tape.watch(x);
  const DTensor y = reduce_sum(call_op("test_undeclared_read", {x}));
  EXPECT_TESSEL_ERROR(tape.gradient(y, {x}), ErrorCode::kFailedPrecondition,
                      "stand-in for a tensor it did not keep");
}

TEST_F(TapeMemory, DispatchRunsAtMostFourKernelsAheadOfADevice) {
  // Queued kernels hold their tensors: dispatch waits for room instead of running further ahead.
  const DTensor x = random(Shape{256, 256}, 13);  // not tiny: its kernels are enqueued
  Stream& stream = x.device(0).stream();
  std::promise<void> release;
  std::shared_future<void> opened = release.get_future().share();
  stream.enqueue("test_gate", [opened] { opened.wait(); });
  std::atomic<int> launched{0};
  std::thread caller([&] {
    DTensor y = x;
    for (int i = 0; i < 6; ++i) {
      y = exp(y);
      ++launched;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(launched.load(), 3);  // the gate and three kernels fill the stream
  EXPECT_EQ(stream.pending(), 4u);
  release.set_value();
  caller.join();
  EXPECT_EQ(launched.load(), 6);
  stream.synchronize();
}

TEST_F(TapeMemory, TheOutputGradientWeightsTheTarget) {
  const DTensor x = random(Shape{3, 4}, 10), g = random(Shape{3, 4}, 11);
  GradientTape tape;
  tape.watch(x);
  const DTensor y = multiply(x, x);
  EXPECT_EQ(values(tape.gradient(y, {x}, g)[0]), values(multiply(multiply(g, x), 2.0)));
  GradientTape other;
  other.watch(x);
  EXPECT_TESSEL_ERROR(other.gradient(exp(x), {x}, random(Shape{4, 3}, 12)),
                      ErrorCode::kInvalidArgument, "the output gradient is f64 [4,3], the target");
}

}  // namespace
}  // namespace tessel
