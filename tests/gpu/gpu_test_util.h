// What the GPU tests share: the skip when no GPU is visible (ctest reports these tests as
// skipped through the "skipped: no GPU" text, tests/gpu/CMakeLists.txt), a runtime with every
// visible GPU, and strict f32 matmuls (MatmulPrecision::kHighest, restored after the test), so
// that f32 results compare with the CPU's at f32's tolerance; a test of the TF32 GEMMs sets kHigh
// itself.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "tessel/core/matmul_precision.h"
#include "tessel/runtime/gpu.h"
#include "tessel/runtime/runtime.h"

namespace tessel::testing {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (visible_gpu_count() == 0) GTEST_SKIP() << "skipped: no GPU";
    runtime_ = std::make_unique<Runtime>(RuntimeOptions{.num_cpu_devices = 2});
    set_matmul_precision(MatmulPrecision::kHighest);
  }
  void TearDown() override { set_matmul_precision(saved_precision_); }
  Runtime& runtime() { return *runtime_; }
  Device& gpu(int i = 0) { return *runtime_->gpu_devices().at(static_cast<size_t>(i)); }
  int num_gpus() const { return static_cast<int>(runtime_->gpu_devices().size()); }

 private:
  std::unique_ptr<Runtime> runtime_;
  MatmulPrecision saved_precision_ = matmul_precision();
};

}  // namespace tessel::testing
