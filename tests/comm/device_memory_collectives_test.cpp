// The collectives on tensors in device memory: every rank's tensors live on its own GPU device
// (testing/gpu_devices.h: on the visible GPUs where there are any, several devices sharing a GPU,
// else simulated GPUs: host memory tagged as that GPU's, which host code may not touch). Their
// groups are not NCCL groups, so each Communicator call stages the tensors through the host
// (src/comm/device_path.cpp) and must copy its results back into that GPU's memory. The cases
// and references are testing/collective_checks.h's (those of the MPI suites: every dtype and
// reduce op, every root, uneven and zero counts, axes 0, 1 and -1), run with the rank's device
// allocator; every result is also checked to be in the rank's device memory (scatter's on a rank
// that passes a null input: host memory).
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tessel/comm/communicator.h"
#include "tessel/runtime/device.h"
#include "tessel/runtime/runtime.h"
#include "testing/collective_checks.h"
#include "testing/gpu_devices.h"
#include "testing/message_passing_transport.h"
#include "testing/run_ranks.h"

namespace tessel {
namespace {

// The group: in process (shared memory: the direct versions) or behind a transport that hides
// its shared memory (the point-to-point versions MPI runs).
struct GroupKind {
  int world = 1;
  bool message_passing = false;
};

void PrintTo(const GroupKind& kind, std::ostream* os) {
  *os << "world " << kind.world << (kind.message_passing ? ", message passing" : ", in process");
}

using Param = std::tuple<testing::NamedCheck, GroupKind>;

std::vector<testing::NamedCheck> every_check() {
  std::vector<testing::NamedCheck> checks = {{"all_reduce", testing::check_all_reduce},
                                             {"send_recv", testing::check_send_recv}};
  for (const testing::NamedCheck& c : testing::collective_checks()) checks.push_back(c);
  return checks;
}

class CollectivesOnGpuDevices : public ::testing::TestWithParam<Param> {};

TEST_P(CollectivesOnGpuDevices, MatchTheReferencesAndStayInDeviceMemory) {
  const auto& [check, kind] = GetParam();
  const int n = kind.world;
  Runtime runtime(testing::options_with_gpu_devices(n));
  ASSERT_EQ(runtime.gpu_devices().size(), static_cast<size_t>(n));
  auto comms = kind.message_passing ? testing::make_message_passing_communicators(n)
                                    : make_in_process_communicators(n);
  CollectiveOptions options;
  options.timeout = std::chrono::seconds(20);
  auto errors = testing::run_ranks(n, [&](int r) {
    Device& gpu = *runtime.gpu_devices()[static_cast<size_t>(r)];
    ASSERT_FALSE(gpu.memory_space().is_host()) << gpu.name();
    try {
      check.check(*comms[r], options, gpu.allocator());
    } catch (const std::exception& e) {
      // The others stop at once instead of waiting out their deadline.
      comms[r]->abort("rank " + std::to_string(r) + " failed a check: " + e.what());
      throw;
    }
  });
  EXPECT_EQ(testing::first_error(errors), "");
  // Staging allocates on the device and frees again: nothing is left behind.
  for (Device* gpu : runtime.gpu_devices()) EXPECT_EQ(gpu->memory_stats().live_bytes, 0) << gpu->name();
}

// A strided view in device memory is refused as on the host: kInvalidArgument naming it on its
// rank, and the others released at once with kAborted (not a host copy that hides the stride,
// nor an error on one rank only that leaves the others to their deadline).
TEST(CollectiveErrorsOnGpuDevices, AStridedDeviceViewIsInvalidArgumentAndAbortsTheOthers) {
  constexpr int kN = 3;
  constexpr int kBad = 1;
  using Call = std::function<void(Communicator&, Device&, bool bad, const CollectiveOptions&)>;
  auto f32 = [](Device& d, const Shape& shape) { return d.allocate(shape, DType::kF32); };
  auto view_or_whole = [&](Device& d, bool bad) { return bad ? f32(d, {4, 4}).slice(1, 0, 2) : f32(d, {4, 2}); };
  const std::vector<std::pair<std::string, Call>> calls = {
      {"all_reduce: input", [&](Communicator& c, Device& d, bool bad, const CollectiveOptions& o) {
         Tensor out = f32(d, {4, 2});
         c.all_reduce(view_or_whole(d, bad), out, ReduceOp::kSum, o);
       }},
      {"all_reduce: output", [&](Communicator& c, Device& d, bool bad, const CollectiveOptions& o) {
         Tensor out = view_or_whole(d, bad);
         c.all_reduce(f32(d, {4, 2}), out, ReduceOp::kSum, o);
       }},
      {"reduce: output", [&](Communicator& c, Device& d, bool bad, const CollectiveOptions& o) {
         Tensor out = view_or_whole(d, bad);
         c.reduce(f32(d, {4, 2}), out, ReduceOp::kSum, kBad, o);
       }},
      {"broadcast: tensor", [&](Communicator& c, Device& d, bool bad, const CollectiveOptions& o) {
         Tensor t = view_or_whole(d, bad);
         c.broadcast(t, 0, o);
       }},
      {"all_gather: input", [&](Communicator& c, Device& d, bool bad, const CollectiveOptions& o) {
         (void)c.all_gather(view_or_whole(d, bad), 0, o);
       }},
      {"gather(root 0): input", [&](Communicator& c, Device& d, bool bad, const CollectiveOptions& o) {
         (void)c.gather(view_or_whole(d, bad), 0, 0, o);
       }},
      {"reduce_scatter: input", [&](Communicator& c, Device& d, bool bad, const CollectiveOptions& o) {
         (void)c.reduce_scatter(view_or_whole(d, bad), ReduceOp::kSum, {}, o);
       }},
      {"all_to_all: input", [&](Communicator& c, Device& d, bool bad, const CollectiveOptions& o) {
         (void)c.all_to_all(view_or_whole(d, bad), {2, 1, 1}, o);
       }},
      {"scatter: input", [&](Communicator& c, Device& d, bool bad, const CollectiveOptions& o) {
         (void)c.scatter(bad ? view_or_whole(d, true) : Tensor(), kBad, {}, o);
       }},
  };
  for (const auto& [message, call] : calls) {
    Runtime runtime(testing::options_with_gpu_devices(kN));
    auto comms = make_in_process_communicators(kN);
    CollectiveOptions options;
    options.timeout = std::chrono::seconds(30);
    std::vector<double> seconds(kN);
    auto errors = testing::run_ranks(kN, [&](int r) {
      const auto start = std::chrono::steady_clock::now();
      struct Timer {
        std::chrono::steady_clock::time_point start;
        double& out;
        ~Timer() { out = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
      } timer{start, seconds[static_cast<size_t>(r)]};
      call(*comms[r], *runtime.gpu_devices()[static_cast<size_t>(r)], r == kBad, options);
    });
    for (int r = 0; r < kN; ++r) {
      const testing::RankError e = testing::error_of(errors[static_cast<size_t>(r)]);
      const std::string who = message + ", rank " + std::to_string(r);
      ASSERT_TRUE(e.thrown) << who << " did not throw";
      EXPECT_EQ(error_code_name(e.code), error_code_name(r == kBad ? ErrorCode::kInvalidArgument : ErrorCode::kAborted))
          << who << ": " << e.what;
      EXPECT_NE(e.what.find(message + " of shape [4,2] is a strided view"), std::string::npos) << who << ": " << e.what;
      EXPECT_LT(seconds[static_cast<size_t>(r)], 5.0) << who;
    }
  }
}

// In place (the output is the input, or the one tensor of broadcast and recv): the staged call
// runs on one host copy and its result comes back into the same device tensor.
TEST(CollectivesOnGpuDevicesInPlace, TheResultComesBackIntoTheDeviceTensor) {
  constexpr int kN = 3;
  constexpr int kRoot = 1;
  Runtime runtime(testing::options_with_gpu_devices(kN));
  auto comms = make_in_process_communicators(kN);
  CollectiveOptions options;
  options.timeout = std::chrono::seconds(20);
  auto errors = testing::run_ranks(kN, [&](int r) {
    Device& gpu = *runtime.gpu_devices()[static_cast<size_t>(r)];
    Tensor x = gpu.allocate({4}, DType::kF32);
    x.copy_from(Tensor::full({4}, DType::kF32, r + 1));
    const auto values = [&] {
      EXPECT_TRUE(x.memory_space() == gpu.memory_space()) << gpu.name();
      return x.to_host().to_vector<float>();
    };
    comms[r]->reduce(x, x, ReduceOp::kSum, kRoot, options);  // 1 + 2 + 3 at the root only
    EXPECT_EQ(values(), std::vector<float>(4, r == kRoot ? 6.0f : r + 1.0f)) << "reduce, rank " << r;
    comms[r]->all_reduce(x, x, ReduceOp::kSum, options);  // 1 + 6 + 3
    EXPECT_EQ(values(), std::vector<float>(4, 10.0f)) << "all_reduce, rank " << r;
    if (r == kRoot) x.copy_from(Tensor::full({4}, DType::kF32, 7.0));
    comms[r]->broadcast(x, kRoot, options);
    EXPECT_EQ(values(), std::vector<float>(4, 7.0f)) << "broadcast, rank " << r;
  });
  EXPECT_EQ(testing::first_error(errors), "");
}

std::vector<GroupKind> kinds() { return {{1, false}, {2, false}, {3, false}, {4, false}, {3, true}}; }

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const auto& [check, kind] = info.param;
  return std::string(check.name) + "_world" + std::to_string(kind.world) +
         (kind.message_passing ? "_message_passing" : "");
}

INSTANTIATE_TEST_SUITE_P(Groups, CollectivesOnGpuDevices,
                         ::testing::Combine(::testing::ValuesIn(every_check()), ::testing::ValuesIn(kinds())),
                         param_name);

}  // namespace
}  // namespace tessel
