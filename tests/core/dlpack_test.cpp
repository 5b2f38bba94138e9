// DLPack exchange (core/dlpack.h): zero-copy both ways, ownership kept or released on failure.
#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include "tessel/core/dlpack.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

TEST(Dlpack, ExportThenImportSharesTheStorage) {
  Tensor t = Tensor::random_uniform({6, 4}, DType::kF32, 1);
  const Tensor view = t.slice(1, 1, 3);  // strided: exported with its strides
  DLManagedTensor* m = to_dlpack(view);
  EXPECT_EQ(m->dl_tensor.ndim, 2);
  EXPECT_EQ(m->dl_tensor.strides[0], 4);
  EXPECT_EQ(m->dl_tensor.data, view.data());
  m->deleter(m);

  DLManagedTensor* whole = to_dlpack(t);
  const Tensor back = from_dlpack(whole);  // contiguous: imported without a copy
  EXPECT_EQ(back.data(), t.data());
  EXPECT_TRUE(allclose(back, t));
}

// A producer that records whether its deleter ran.
struct Producer {
  std::vector<float> values = std::vector<float>(8, 1.5f);
  std::vector<int64_t> shape = {2, 4};
  std::vector<int64_t> strides = {4, 1};
  bool deleted = false;
  DLManagedTensor managed{};
  DLManagedTensor* make() {
    managed.dl_tensor = {values.data(), {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape.data(),
                         strides.data(), 0};
    managed.manager_ctx = this;
    managed.deleter = [](DLManagedTensor* m) { static_cast<Producer*>(m->manager_ctx)->deleted = true; };
    return &managed;
  }
};

TEST(Dlpack, ImportRunsTheDeleterWhenTheLastViewGoes) {
  Producer p;
  {
    const Tensor t = from_dlpack(p.make());
    const Tensor row = t.slice(0, 1, 2);
    EXPECT_EQ(row.data(), p.values.data() + 4);
    EXPECT_FALSE(p.deleted);
  }
  EXPECT_TRUE(p.deleted);
}

TEST(Dlpack, RejectedImportsStillRunTheDeleter) {
  Producer gpu;
  gpu.make()->dl_tensor.device = {kDLCUDA, 0};
  EXPECT_TESSEL_ERROR(from_dlpack(&gpu.managed), ErrorCode::kInvalidArgument,
                      "only host memory (kDLCPU = 1) can be imported, got device type 2");
  EXPECT_TRUE(gpu.deleted);

  Producer transposed;
  transposed.strides = {1, 2};
  EXPECT_TESSEL_ERROR(from_dlpack(transposed.make()), ErrorCode::kInvalidArgument,
                      "strides [1,2] of shape [2,4] are not row-major [4,1]");
  EXPECT_TRUE(transposed.deleted);

  Producer lanes;
  lanes.make()->dl_tensor.dtype.lanes = 4;
  EXPECT_TESSEL_ERROR(from_dlpack(&lanes.managed), ErrorCode::kInvalidArgument, "lanes 4");
  EXPECT_TRUE(lanes.deleted);
}

TEST(Dlpack, ExportErrors) {
  EXPECT_TESSEL_ERROR(to_dlpack(Tensor()), ErrorCode::kFailedPrecondition, "null tensor");
  EXPECT_TESSEL_ERROR(to_dlpack(Tensor::zeros({2}, DType::kBool)), ErrorCode::kUnimplemented,
                      "DLPack 0.6 has no type for bool");
}

}  // namespace
}  // namespace tessel
