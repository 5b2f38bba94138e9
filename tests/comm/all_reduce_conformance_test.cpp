// Conformance of every all-reduce algorithm on the in-process transport: world sizes 1..8,
// counts {0, 1, 7, 1023, multi-segment}, every dtype and reduce op, against a reference
// computed in double. One group per (algorithm, world size) runs all cases in sequence, which
// also exercises many back-to-back collectives on one group.
#include <gtest/gtest.h>

#include <cmath>

#include "tessel/comm/communicator.h"
#include "testing/reduction_reference.h"
#include "testing/run_ranks.h"

namespace tessel {
namespace {

const DType kDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                         DType::kI32, DType::kI64, DType::kU8,   DType::kBool};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin,
                         ReduceOp::kProd};
// 5000 f32 elements with 256-byte segments: many segments per chunk.
const int64_t kCounts[] = {0, 1, 7, 1023, 5000};
constexpr size_t kSmallSegment = 256;

using testing::reduction_expected;
using testing::reduction_input;

Tensor make(int64_t count, DType dtype, const std::function<double(int64_t)>& f) {
  std::vector<double> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[i] = f(i);
  return Tensor::from_vector<double>(v, Shape{count}).astype(dtype);
}

std::string fmt_case(const char* mode, DType dtype, ReduceOp op, int64_t count, const Tensor& got,
                     const Tensor& want) {
  return std::string(mode) + " " + std::string(dtype_name(dtype)) + " " +
         std::string(reduce_op_name(op)) + " count " + std::to_string(count) + ": got " +
         got.to_string() + " want " + want.to_string();
}

// Runs every case on one group of `n` ranks named `names` (empty: default names).
std::string run_all_cases(Algorithm algorithm, int n, std::vector<std::string> names) {
  auto comms = make_in_process_communicators(n, std::move(names));
  CollectiveOptions options;
  options.algorithm = algorithm;
  options.segment_bytes = kSmallSegment;
  options.timeout = std::chrono::seconds(20);
  auto errors = testing::run_ranks(n, [&](int r) {
    for (DType dtype : kDTypes) {
      for (ReduceOp op : kOps) {
        if (dtype == DType::kBool && op == ReduceOp::kMean) continue;
        for (int64_t count : kCounts) {
          Tensor in = make(count, dtype, [&](int64_t i) { return reduction_input(op, dtype, r, i); });
          Tensor expected = make(count, dtype, [&](int64_t i) { return reduction_expected(op, dtype, n, i); });
          const double tol = dtype == DType::kBF16 ? 1e-2 : (dtype == DType::kF16 ? 1e-3 : 1e-6);
          Tensor out = Tensor::zeros(in.shape(), dtype);
          comms[r]->all_reduce(in, out, op, options);  // out of place
          if (!allclose(out, expected, tol, tol)) {
            throw std::runtime_error(fmt_case("out-of-place", dtype, op, count, out, expected));
          }
          comms[r]->all_reduce(in, in, op, options);  // in place
          if (!allclose(in, expected, tol, tol)) {
            throw std::runtime_error(fmt_case("in-place", dtype, op, count, in, expected));
          }
        }
      }
    }
  });
  return testing::first_error(errors);
}

class AllReduceConformance : public ::testing::TestWithParam<std::tuple<Algorithm, int>> {};

TEST_P(AllReduceConformance, EveryDTypeOpAndCount) {
  const auto [algorithm, n] = GetParam();
  EXPECT_EQ(run_all_cases(algorithm, n, {}), "");
}

// Hierarchical over simulated hosts of two devices each (/task:<r/2>/device:CPU:<r%2>); odd
// world sizes leave one host with a single device.
class HierarchicalConformance : public ::testing::TestWithParam<int> {};

TEST_P(HierarchicalConformance, HostsOfTwoDevices) {
  const int n = GetParam();
  std::vector<std::string> names;
  for (int r = 0; r < n; ++r) {
    names.push_back("/job:worker/replica:0/task:" + std::to_string(r / 2) + "/device:CPU:" +
                    std::to_string(r % 2));
  }
  EXPECT_EQ(run_all_cases(Algorithm::kHierarchical, n, names), "");
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, HierarchicalConformance, ::testing::Range(1, 9));

INSTANTIATE_TEST_SUITE_P(
    Algorithms, AllReduceConformance,
    ::testing::Combine(::testing::Values(Algorithm::kDirect, Algorithm::kRing,
                                         Algorithm::kHalvingDoubling, Algorithm::kReduceToOne),
                       ::testing::Range(1, 9)),
    [](const auto& info) {
      return std::string(algorithm_name(std::get<0>(info.param))) + "_world" +
             std::to_string(std::get<1>(info.param));
    });

}  // namespace
}  // namespace tessel
