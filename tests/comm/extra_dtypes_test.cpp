// uint32, int8 and complex128 (the dtypes TF's scoped allocator and cross-device ops take) in
// tessel's collectives: where they reduce, their results against values worked out by hand, and
// the one rule complex adds (no order: MAX and MIN are InvalidArgument).
#include <gtest/gtest.h>

#include <complex>
#include <vector>

#include "tessel/comm/communicator.h"
#include "testing/expect_error.h"
#include "testing/run_ranks.h"

namespace tessel {
namespace {

using C = std::complex<double>;

// all_reduce of one tensor per rank over an in-process group; returns rank 0's result.
Tensor all_reduce(const std::vector<Tensor>& inputs, ReduceOp op, Algorithm algorithm) {
  const int n = static_cast<int>(inputs.size());
  auto comms = make_in_process_communicators(n);
  CollectiveOptions options;
  options.algorithm = algorithm;
  options.timeout = std::chrono::seconds(20);
  std::vector<Tensor> outs;
  for (const Tensor& in : inputs) outs.push_back(Tensor::zeros(in.shape(), in.dtype()));
  const auto errors = testing::run_ranks(n, [&](int r) {
    comms[r]->all_reduce(inputs[r], outs[r], op, options);
  });
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return outs[0];
}

const Algorithm kAlgorithms[] = {Algorithm::kAuto, Algorithm::kRing, Algorithm::kHalvingDoubling};

TEST(ExtraDTypes, Uint32AndInt8ReduceWithEveryOp) {
  for (Algorithm algorithm : kAlgorithms) {
    const std::vector<Tensor> big = {Tensor::from_vector<uint32_t>({4200000000u}, Shape{1}),
                                     Tensor::from_vector<uint32_t>({100000000u}, Shape{1})};
    // Sums wrap modulo 2^32 as numpy's uint32 does: 4300000000 - 4294967296 = 5032704.
    EXPECT_EQ(all_reduce(big, ReduceOp::kSum, algorithm).to_vector<uint32_t>(),
              std::vector<uint32_t>{5032704u});
    const std::vector<Tensor> u32 = {Tensor::from_vector<uint32_t>({4000000000u, 1, 7}, Shape{3}),
                                     Tensor::from_vector<uint32_t>({100000000u, 2, 3}, Shape{3})};
    EXPECT_EQ(all_reduce(u32, ReduceOp::kMax, algorithm).to_vector<uint32_t>(),
              (std::vector<uint32_t>{4000000000u, 2, 7}));
    EXPECT_EQ(all_reduce(u32, ReduceOp::kMean, algorithm).to_vector<uint32_t>(),
              (std::vector<uint32_t>{2050000000u, 1, 5}));  // integer means truncate
    const std::vector<Tensor> i8 = {Tensor::from_vector<int8_t>({-100, 5, 3}, Shape{3}),
                                    Tensor::from_vector<int8_t>({-50, -7, 4}, Shape{3})};
    // -150 wraps to 106 in int8 (numpy: np.int8(-100) + np.int8(-50) == 106).
    EXPECT_EQ(all_reduce(i8, ReduceOp::kSum, algorithm).to_vector<int8_t>(),
              (std::vector<int8_t>{106, -2, 7}));
    EXPECT_EQ(all_reduce(i8, ReduceOp::kMin, algorithm).to_vector<int8_t>(),
              (std::vector<int8_t>{-100, -7, 3}));
    EXPECT_EQ(all_reduce(i8, ReduceOp::kProd, algorithm).to_vector<int8_t>(),
              (std::vector<int8_t>{static_cast<int8_t>(5000 % 256 - 256), -35, 12}));
  }
}

TEST(ExtraDTypes, Complex128SumsMeansAndMultiplies) {
  for (Algorithm algorithm : kAlgorithms) {
    const std::vector<Tensor> c = {Tensor::from_vector<C>({C(1, 2), C(0, 1)}, Shape{2}),
                                   Tensor::from_vector<C>({C(3, -1), C(0, 1)}, Shape{2})};
    EXPECT_EQ(all_reduce(c, ReduceOp::kSum, algorithm).to_vector<C>(),
              (std::vector<C>{C(4, 1), C(0, 2)}));
    EXPECT_EQ(all_reduce(c, ReduceOp::kMean, algorithm).to_vector<C>(),
              (std::vector<C>{C(2, 0.5), C(0, 1)}));
    // (1+2i)(3-i) = 5+5i; i*i = -1.
    EXPECT_EQ(all_reduce(c, ReduceOp::kProd, algorithm).to_vector<C>(),
              (std::vector<C>{C(5, 5), C(-1, 0)}));
  }
}

TEST(ExtraDTypes, Complex128HasNoMaxOrMin) {
  const std::vector<Tensor> c = {Tensor::from_vector<C>({C(1, 2)}, Shape{1}),
                                 Tensor::from_vector<C>({C(3, -1)}, Shape{1})};
  EXPECT_TESSEL_ERROR(all_reduce(c, ReduceOp::kMax, Algorithm::kAuto), ErrorCode::kInvalidArgument,
                      "max is not defined for c128 tensors");
  EXPECT_TESSEL_ERROR(all_reduce(c, ReduceOp::kMin, Algorithm::kRing), ErrorCode::kInvalidArgument,
                      "min is not defined for c128 tensors");
}

TEST(ExtraDTypes, TensorsConvertAndPrint) {
  const Tensor c = Tensor::from_vector<C>({C(1.5, -2)}, Shape{1});
  EXPECT_EQ(c.nbytes(), 16u);
  EXPECT_NE(c.to_string().find("1.5-2j"), std::string::npos) << c.to_string();
  EXPECT_EQ(c.astype(DType::kF64).to_vector<double>(), std::vector<double>{1.5});  // numpy: real
  EXPECT_EQ(Tensor::from_vector<int8_t>({-3}, Shape{1}).astype(DType::kC128).to_vector<C>(),
            std::vector<C>{C(-3, 0)});
  EXPECT_EQ(Tensor::from_vector<double>({300.0}, Shape{1}).astype(DType::kU32).to_vector<uint32_t>(),
            std::vector<uint32_t>{300u});
}

}  // namespace
}  // namespace tessel
