#include "tessel/core/allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "core/tensor_test_util.h"
#include "tessel/core/tensor.h"

namespace tessel {
namespace {

using testing::expect_error;

bool aligned64(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

// Hands out host memory filled with 0xAB and records what it saw.
class DirtyAllocator : public Allocator {
 public:
  explicit DirtyAllocator(bool* destroyed = nullptr) : destroyed_(destroyed) {}
  ~DirtyAllocator() override {
    if (destroyed_ != nullptr) *destroyed_ = true;
  }
  void* allocate(size_t bytes) override {
    void* p = host_allocator()->allocate(bytes);
    std::memset(p, 0xAB, bytes);
    ++allocations;
    last_bytes = bytes;
    return p;
  }
  void deallocate(void* p, size_t bytes) noexcept override {
    ++deallocations;
    freed_bytes += bytes;
    host_allocator()->deallocate(p, bytes);
  }
  std::string_view name() const override { return "dirty"; }

  int allocations = 0;
  int deallocations = 0;
  size_t last_bytes = 0;
  size_t freed_bytes = 0;

 private:
  bool* destroyed_;
};

// Returns a block offset by 8 bytes from 64-byte alignment.
class MisalignedAllocator : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    return static_cast<char*>(host_allocator()->allocate(bytes + 64)) + 8;
  }
  void deallocate(void* p, size_t bytes) noexcept override {
    ++deallocations;
    host_allocator()->deallocate(static_cast<char*>(p) - 8, bytes + 64);
  }
  std::string_view name() const override { return "misaligned"; }
  int deallocations = 0;
};

// Fails every request, as an allocator out of memory does.
class FullAllocator : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    throw Error(ErrorCode::kResourceExhausted, "Allocator", "full: " + std::to_string(bytes));
  }
  void deallocate(void*, size_t) noexcept override {}
  std::string_view name() const override { return "full"; }
};

TEST(Allocator, HostBlocksAre64ByteAlignedAndWritable) {
  Allocator* host = host_allocator();
  EXPECT_EQ(host->name(), "host");
  EXPECT_EQ(host, host_allocator());
  std::vector<void*> blocks;
  for (size_t bytes : {0, 1, 63, 64, 65, 1000, 4096, 1 << 20}) {
    void* p = host->allocate(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(aligned64(p)) << bytes << " bytes at " << p;
    std::memset(p, 1, bytes);
    blocks.push_back(p);
  }
  // Zero-byte blocks are unique pointers too.
  void* a = host->allocate(0);
  void* b = host->allocate(0);
  EXPECT_NE(a, b);
  host->deallocate(a, 0);
  host->deallocate(b, 0);
  size_t i = 0;
  for (size_t bytes : {0, 1, 63, 64, 65, 1000, 4096, 1 << 20}) host->deallocate(blocks[i++], bytes);
}

TEST(Allocator, HostReusesLargeFreedBlocksOfTheSameSize) {
  // Blocks of 64 KiB and more are cached: the same rounded size comes back without a fresh
  // (page-faulting) block; small blocks and other sizes are not affected.
  Allocator* host = host_allocator();
  for (const size_t big : {(size_t{64} << 10) + 100, (size_t{3} << 20) + 100}) {
    SCOPED_TRACE(big);
    void* a = host->allocate(big);
    host->deallocate(a, big);
    void* b = host->allocate(big);
    EXPECT_EQ(a, b);
    void* c = host->allocate(big);  // the cached block is taken: a new one
    EXPECT_NE(b, c);
    host->deallocate(b, big);
    host->deallocate(c, big);
  }
}

TEST(Allocator, HostThrowsResourceExhaustedNamingTheSize) {
  expect_error([] { host_allocator()->allocate(size_t{1} << 50); }, ErrorCode::kResourceExhausted,
               "Allocator", "1125899906842624 bytes");
  expect_error([] { host_allocator()->allocate(SIZE_MAX); }, ErrorCode::kResourceExhausted,
               "Allocator", std::to_string(SIZE_MAX));
}

TEST(Allocator, TrackingCountsLivePeakTotalAndCount) {
  TrackingAllocator tracked(host_allocator(), "scratch");
  EXPECT_EQ(tracked.name(), "scratch");
  void* a = tracked.allocate(100);
  void* b = tracked.allocate(300);
  EXPECT_TRUE(aligned64(a));
  MemoryStats s = tracked.stats();
  EXPECT_EQ(s.live_bytes, 400);
  EXPECT_EQ(s.peak_bytes, 400);
  EXPECT_EQ(s.total_allocated_bytes, 400);
  EXPECT_EQ(s.num_allocations, 2);
  tracked.deallocate(b, 300);
  s = tracked.stats();
  EXPECT_EQ(s.live_bytes, 100);
  EXPECT_EQ(s.peak_bytes, 400);
  tracked.reset_peak();
  EXPECT_EQ(tracked.stats().peak_bytes, 100);
  void* c = tracked.allocate(50);
  s = tracked.stats();
  EXPECT_EQ(s.live_bytes, 150);
  EXPECT_EQ(s.peak_bytes, 150);
  EXPECT_EQ(s.total_allocated_bytes, 450);
  EXPECT_EQ(s.num_allocations, 3);
  tracked.deallocate(a, 100);
  tracked.deallocate(c, 50);
  EXPECT_EQ(tracked.stats().live_bytes, 0);
}

TEST(Allocator, TrackingFailureCountsNothing) {
  FullAllocator full;
  TrackingAllocator tracked(&full, "t");
  expect_error([&] { tracked.allocate(10); }, ErrorCode::kResourceExhausted, "Allocator",
               "'t': full: 10");
  EXPECT_EQ(tracked.stats().num_allocations, 0);
  EXPECT_EQ(tracked.stats().live_bytes, 0);
}

TEST(Allocator, TrackingIsThreadSafe) {
  TrackingAllocator tracked(host_allocator(), "t");
  constexpr int kThreads = 4;
  constexpr int kRounds = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        void* p = tracked.allocate(128);
        tracked.deallocate(p, 128);
        if (i % 100 == 0) tracked.reset_peak();
      }
    });
  }
  for (auto& t : threads) t.join();
  const MemoryStats s = tracked.stats();
  EXPECT_EQ(s.live_bytes, 0);
  EXPECT_EQ(s.num_allocations, kThreads * kRounds);
  EXPECT_EQ(s.total_allocated_bytes, int64_t{128} * kThreads * kRounds);
  EXPECT_LE(s.peak_bytes, 128 * kThreads);
}

TEST(Allocator, TrackingNeedsABase) {
  expect_error([] { TrackingAllocator t(nullptr, "x"); }, ErrorCode::kInvalidArgument, "Allocator",
               "'x' needs a base");
}

TEST(AllocatorTensor, DefaultTensorsComeFromTheHostAllocator) {
  EXPECT_EQ(Tensor::zeros(Shape{3}, DType::kF32).allocator(), host_allocator());
  EXPECT_EQ(Tensor::empty(Shape{3}, DType::kF32).allocator(), host_allocator());
  EXPECT_EQ(Tensor().allocator(), nullptr);
}

TEST(AllocatorTensor, EmptyFromAnAllocatorIsZeroFilledEvenOnDirtyMemory) {
  DirtyAllocator dirty;
  {
    Tensor t = Tensor::empty(Shape{2, 5}, DType::kF32, &dirty);
    EXPECT_EQ(t.allocator(), &dirty);
    EXPECT_EQ(dirty.allocations, 1);
    EXPECT_EQ(dirty.last_bytes, 40u);  // exact size, not rounded
    EXPECT_EQ(t.to_vector<float>(), std::vector<float>(10, 0.0f));
    EXPECT_TRUE(aligned64(t.data()));
    Tensor e = Tensor::empty(Shape{4}, DType::kI32, &dirty);  // zero_fill defaults to true
    EXPECT_EQ(e.to_vector<int32_t>(), std::vector<int32_t>(4, 0));
  }
  EXPECT_EQ(dirty.deallocations, 2);
  EXPECT_EQ(dirty.freed_bytes, 56u);
}

TEST(AllocatorTensor, EmptyWithoutZeroFillLeavesTheAllocatorsBytes) {
  DirtyAllocator dirty;
  Tensor t = Tensor::empty(Shape{4}, DType::kU8, &dirty, /*zero_fill=*/false);
  EXPECT_EQ(t.to_vector<uint8_t>(), std::vector<uint8_t>(4, 0xAB));
  t.fill(7);
  EXPECT_EQ(t.to_vector<uint8_t>(), std::vector<uint8_t>(4, 7));
}

TEST(AllocatorTensor, BoolIsAlwaysZeroFilled) {
  DirtyAllocator dirty;
  Tensor t = Tensor::empty(Shape{5}, DType::kBool, &dirty, /*zero_fill=*/false);
  EXPECT_EQ(t.to_doubles(), std::vector<double>(5, 0.0));
}

TEST(AllocatorTensor, ViewsAndCopiesKeepTheBlockUntilTheLastDies) {
  DirtyAllocator dirty;
  Tensor view;
  {
    Tensor t = Tensor::empty(Shape{4, 4}, DType::kF64, &dirty);
    view = t.slice(0, 1, 3);
  }
  EXPECT_EQ(dirty.deallocations, 0);
  EXPECT_EQ(view.allocator(), &dirty);
  Tensor copy = view.clone();  // a fresh tensor: host memory
  EXPECT_EQ(copy.allocator(), host_allocator());
  view = Tensor();
  EXPECT_EQ(dirty.deallocations, 1);
  EXPECT_EQ(dirty.freed_bytes, 128u);
}

TEST(AllocatorTensor, ASharedAllocatorLivesUntilItsLastTensorDies) {
  bool destroyed = false;
  auto owned = std::make_shared<DirtyAllocator>(&destroyed);
  Tensor t = Tensor::empty(Shape{8}, DType::kF32, owned.get());
  owned.reset();
  EXPECT_FALSE(destroyed);
  t.fill(3);
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(8, 3.0f));
  t = Tensor();
  EXPECT_TRUE(destroyed);
}

TEST(AllocatorTensor, ThrowsOnMisalignedMemoryAndGivesItBack) {
  MisalignedAllocator bad;
  expect_error([&] { Tensor::empty(Shape{4}, DType::kF32, &bad); }, ErrorCode::kInternal, "Tensor",
               "allocator 'misaligned' returned");
  EXPECT_EQ(bad.deallocations, 1);
}

TEST(AllocatorTensor, AllocatorErrorsKeepTheirCodeAndNameTheTensor) {
  FullAllocator full;
  expect_error(
      [&] {
        Tensor::empty(Shape{3, 4}, DType::kF64, &full);
      },
      ErrorCode::kResourceExhausted, "Tensor",
      "cannot allocate 96 bytes for [3,4] f64: Allocator: full: 96");
  expect_error([] { Tensor::zeros(Shape{int64_t{1} << 48}, DType::kF64); },
               ErrorCode::kResourceExhausted, "Tensor", "cannot allocate 2251799813685248 bytes");
}

}  // namespace
}  // namespace tessel
