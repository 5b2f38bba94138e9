#include "tessel/alloc/scoped_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tessel/core/allocator.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

TEST(ScopedLayout, MatchesTensorFlowExample) {
  int64_t total = 0;
  auto fields = scoped_layout({Shape{3}, Shape{5}}, DType::kF32, 7, &total);
  ASSERT_EQ(fields.size(), 2u);
  EXPECT_EQ(fields[0].offset, 0);
  EXPECT_EQ(fields[0].bytes_requested, 12);
  EXPECT_EQ(fields[0].bytes_allocated, 64);
  EXPECT_EQ(fields[0].scope_id, 8);
  EXPECT_EQ(fields[1].offset, 64);
  EXPECT_EQ(fields[1].bytes_requested, 20);
  EXPECT_EQ(fields[1].bytes_allocated, 64);
  EXPECT_EQ(fields[1].scope_id, 9);
  EXPECT_EQ(total, 128);
}

TEST(ScopedLayout, EveryFieldAligned) {
  std::vector<Shape> shapes;
  for (int64_t n = 0; n < 40; ++n) shapes.push_back(Shape{n, 3});
  for (DType dtype : {DType::kF32, DType::kF64, DType::kU8, DType::kBF16}) {
    ScopedAllocator scope(shapes, dtype, "s", 0, static_cast<int>(shapes.size()));
    int64_t end = 0;
    for (int i = 0; i < scope.num_fields(); ++i) {
      const ScopedField& f = scope.fields()[static_cast<size_t>(i)];
      EXPECT_EQ(f.offset % 64, 0) << "field " << i;
      EXPECT_EQ(f.offset, end);
      EXPECT_EQ(f.bytes_allocated % 64, 0);
      EXPECT_GE(f.bytes_allocated, f.bytes_requested);
      EXPECT_LT(f.bytes_allocated - f.bytes_requested, 64);
      end = f.offset + f.bytes_allocated;
      Tensor t = scope.allocate(i, f.shape);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u) << "field " << i;
      EXPECT_EQ(static_cast<const uint8_t*>(t.data()) -
                    static_cast<const uint8_t*>(scope.backing().data()),
                f.offset);
    }
    EXPECT_EQ(end, scope.total_bytes());
    EXPECT_EQ(scope.backing().nbytes(), static_cast<size_t>(end));
    scope.close();
  }
}

// TF's scoped allocator takes every dtype; the new ones keep the 64-byte field alignment.
TEST(ScopedLayout, Uint32Int8AndComplex128Fields) {
  int64_t total = 0;
  const auto c = scoped_layout({Shape{3}, Shape{1}}, DType::kC128, 0, &total);
  EXPECT_EQ(c[0].bytes_requested, 48);
  EXPECT_EQ(c[1].offset, 64);
  EXPECT_EQ(total, 128);
  const auto i8 = scoped_layout({Shape{5}, Shape{70}}, DType::kI8, 0, &total);
  EXPECT_EQ(i8[1].offset, 64);
  EXPECT_EQ(total, 64 + 128);
  const auto u32 = scoped_layout({Shape{17}, Shape{2}}, DType::kU32, 0, &total);
  EXPECT_EQ(u32[1].offset, 128);
  ScopedAllocator scope({Shape{2}, Shape{2}}, DType::kC128, "c", 0, 2);
  EXPECT_EQ(scope.allocate(1, Shape{2}).dtype(), DType::kC128);
}

TEST(ScopedLayout, ZeroElementFieldSharesNextOffset) {
  ScopedAllocator scope({Shape{3}, Shape{0}, Shape{2, 2}}, DType::kF32, "z", 1, 3);
  EXPECT_EQ(scope.fields()[1].offset, 64);
  EXPECT_EQ(scope.fields()[1].bytes_requested, 0);
  EXPECT_EQ(scope.fields()[1].bytes_allocated, 0);
  EXPECT_EQ(scope.fields()[2].offset, 64);
  Tensor z = scope.allocate(1, size_t{0});
  EXPECT_EQ(z.num_elements(), 0);
  EXPECT_TRUE(z.shares_storage_with(scope.backing()));
  Tensor a = scope.allocate(0, Shape{3});
  Tensor c = scope.allocate(2, Shape{2, 2});
  EXPECT_EQ(scope.concat(scope.backing(), {a, z, c}).nbytes(), 128u);
  scope.close();
}

TEST(ScopedAllocator, AliasesAreZeroCopy) {
  TrackingAllocator tracked(host_allocator(), "dev");
  ScopedAllocator scope({Shape{3}, Shape{5}}, DType::kF32, "grads", 7, 2, &tracked);
  EXPECT_EQ(tracked.stats().num_allocations, 1);
  EXPECT_EQ(tracked.stats().live_bytes, 128);
  Tensor a = scope.allocate(0, 12);
  Tensor b = scope.allocate(1, Shape{5});
  EXPECT_EQ(tracked.stats().num_allocations, 1);  // no new storage
  EXPECT_TRUE(a.shares_storage_with(scope.backing()));
  EXPECT_TRUE(b.shares_storage_with(scope.backing()));
  EXPECT_EQ(a.data(), scope.backing().data());
  EXPECT_EQ(b.data(), static_cast<const uint8_t*>(scope.backing().data()) + 64);
  a.fill(1);
  b.fill(2);
  Tensor all = scope.concat(scope.backing(), {a, b});
  EXPECT_TRUE(all.shares_storage_with(scope.backing()));
  EXPECT_EQ(all.data(), scope.backing().data());
  EXPECT_EQ(all.num_elements(), 32);
  EXPECT_EQ(all.at({2}), 1.0);
  EXPECT_EQ(all.at({16}), 2.0);
  all.fill(5);  // as a collective writing in place would
  std::vector<Tensor> parts = scope.split(all, {a, b});
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].data(), a.data());
  EXPECT_EQ(parts[1].data(), b.data());
  EXPECT_EQ(parts[1].shape(), Shape{5});
  EXPECT_EQ(a.to_vector<float>(), std::vector<float>(3, 5.0f));
  scope.close();
}

TEST(ScopedAllocator, MoreCallsThanExpected) {
  ScopedAllocator scope({Shape{3}, Shape{5}}, DType::kF32, "grads", 7, 1);
  scope.allocate(0, 12);
  EXPECT_TESSEL_ERROR(scope.allocate(1, 20), ErrorCode::kInternal,
                      "scope grads (id 7): could not satisfy request for 20 bytes from field 1, "
                      "expected uses exhausted");
}

TEST(ScopedAllocator, SizeMismatch) {
  ScopedAllocator scope({Shape{3}, Shape{5}}, DType::kF32, "grads", 7, 2);
  EXPECT_TESSEL_ERROR(scope.allocate(1, 24), ErrorCode::kInternal,
                      "scope grads (id 7) field 1: got request for 24 bytes, which has "
                      "precalculated size 20 and offset 64");
  EXPECT_TESSEL_ERROR(scope.allocate(1, Shape{4}), ErrorCode::kInternal,
                      "scope grads (id 7) field 1: got request for shape [4], which has shape [5]");
  EXPECT_EQ(scope.calls_made(), 0);
}

TEST(ScopedAllocator, BadFieldAndTwice) {
  ScopedAllocator scope({Shape{3}, Shape{5}}, DType::kF32, "grads", 7, 2);
  EXPECT_TESSEL_ERROR(scope.allocate(2, 20), ErrorCode::kInternal,
                      "scope grads (id 7): received unexpected field number 2");
  EXPECT_TESSEL_ERROR(scope.allocate(-1, 20), ErrorCode::kInternal, "unexpected field number -1");
  scope.allocate(0, 12);
  EXPECT_TESSEL_ERROR(scope.allocate(0, 12), ErrorCode::kInternal,
                      "scope grads (id 7) field 0: already allocated in this round");
}

TEST(ScopedAllocator, FewerCallsReportedAtClose) {
  ScopedAllocator scope({Shape{3}, Shape{5}, Shape{1}}, DType::kF32, "grads", 7, 3);
  scope.allocate(1, 20);
  EXPECT_EQ(scope.calls_remaining(), 2);
  EXPECT_TESSEL_ERROR(scope.close(), ErrorCode::kInternal,
                      "scope grads (id 7): closed after 1 of 3 expected calls (fields never "
                      "allocated: 0, 2)");
  EXPECT_TRUE(scope.closed());
  EXPECT_TESSEL_ERROR(scope.allocate(0, 12), ErrorCode::kInternal, "allocate after close()");
}

TEST(ScopedAllocator, ReopenReusesBacking) {
  ScopedAllocator scope({Shape{3}, Shape{5}}, DType::kF32, "grads", 7, 2);
  const void* base = scope.backing().data();
  EXPECT_TESSEL_ERROR(scope.reopen(2), ErrorCode::kInternal, "reopen before close()");
  for (int step = 0; step < 3; ++step) {
    Tensor a = scope.allocate(0, 12);
    Tensor b = scope.allocate(1, 20);
    EXPECT_EQ(a.data(), base);
    scope.close();
    scope.reopen(2);
  }
  EXPECT_EQ(scope.backing().data(), base);
}

TEST(ScopedAllocator, ConcatNamesFirstMismatch) {
  ScopedAllocator scope({Shape{3}, Shape{5}, Shape{2}}, DType::kF32, "grads", 7, 3);
  Tensor a = scope.allocate(0, 12);
  Tensor b = scope.allocate(1, 20);
  Tensor c = scope.allocate(2, 8);
  const Tensor& backing = scope.backing();
  // Out of order: field 1 gets field 2's alias.
  EXPECT_TESSEL_ERROR(scope.concat(backing, {a, c, b}), ErrorCode::kInternal,
                      "scope grads (id 7) field 1: concat: alias 1 (f32 [2] at byte 128) is not "
                      "the field (f32 [5] at byte 64)");
  // A tensor that is not a view of the backing.
  Tensor outside = Tensor::zeros(Shape{5}, DType::kF32);
  EXPECT_TESSEL_ERROR(scope.concat(backing, {a, outside, c}), ErrorCode::kInternal,
                      "scope grads (id 7) field 1: concat: alias 1 lies outside the backing "
                      "buffer");
  // Wrong count.
  EXPECT_TESSEL_ERROR(scope.concat(backing, {a, b}), ErrorCode::kInternal,
                      "scope grads (id 7): concat got 2 aliases for 3 fields");
  // A partial view of a field.
  EXPECT_TESSEL_ERROR(scope.concat(backing, {a, b.slice(0, 0, 4), c}), ErrorCode::kInternal,
                      "field 1: concat: alias 1 (f32 [4] at byte 64)");
  // Not the backing.
  EXPECT_TESSEL_ERROR(scope.concat(backing.slice(0, 0, 16), {a, b, c}), ErrorCode::kInternal,
                      "scope grads (id 7): concat was given a tensor that is not the scope's "
                      "backing buffer");
  EXPECT_TESSEL_ERROR(scope.split(Tensor::zeros(backing.shape(), DType::kF32), {a, b, c}),
                      ErrorCode::kInternal, "split was given a tensor that is not the scope's");
  EXPECT_TESSEL_ERROR(scope.split(backing, {c, b, a}), ErrorCode::kInternal,
                      "field 0: split: alias 0");
  EXPECT_NO_THROW(scope.split(scope.concat(backing, {a, b, c}), {a, b, c}));
  scope.close();
}

// TF's _ScopedAllocatorConcat attributes: shape and reshape (the output is the backing, or the
// backing viewed as `shape`), with the kernel's checks in its order.
TEST(ScopedAllocator, ConcatReshapeAttribute) {
  ScopedAllocator scope({Shape{16}, Shape{16}}, DType::kF32, "grads", 7, 2);
  Tensor a = scope.allocate(0, Shape{16});
  Tensor b = scope.allocate(1, Shape{16});
  const Tensor& backing = scope.backing();
  const Tensor flat = scope.concat(backing, {a, b}, Shape{32}, /*reshape=*/false);
  EXPECT_EQ(flat.shape(), Shape{32});
  const Tensor square = scope.concat(backing, {a, b}, Shape{4, 8}, /*reshape=*/true);
  EXPECT_EQ(square.shape(), (Shape{4, 8}));
  EXPECT_EQ(square.data(), backing.data());  // a view, no copy
  b.fill(2.0);
  EXPECT_EQ(square.to_vector<float>()[31], 2.0f);
  // Without reshape a smaller shape is accepted (TF checks only "at least"); with it, not.
  EXPECT_EQ(scope.concat(backing, {a, b}, Shape{8}, false).shape(), Shape{32});
  EXPECT_TESSEL_ERROR(scope.concat(backing, {a, b}, Shape{8}, true), ErrorCode::kInvalidArgument,
                      "reshape to [8] (8 elements) needs the backing's 32 elements");
  EXPECT_TESSEL_ERROR(scope.concat(backing, {a, b}, Shape{64}, false),
                      ErrorCode::kInvalidArgument,
                      "Backing tensor num elements 32 is not >= to expected 64");
  EXPECT_TESSEL_ERROR(scope.concat(Tensor::zeros(Shape{32}, DType::kI32), {a, b}, Shape{32}, false),
                      ErrorCode::kInvalidArgument,
                      "Backing tensor type i32 does not match expected type f32");
}

TEST(ScopedAllocator, SplitNeedsAtLeastTwoFields) {
  ScopedAllocator one({Shape{4}}, DType::kF32, "one", 3, 1);
  Tensor a = one.allocate(0, Shape{4});
  EXPECT_TESSEL_ERROR(one.split(one.backing(), {a}), ErrorCode::kInvalidArgument,
                      "Value for attr 'N' of 1 must be at least minimum 2");
  EXPECT_NO_THROW(one.concat(one.backing(), {a}));  // tessel's one-tensor buckets concat
}

TEST(ScopedAllocator, ConstructionErrors) {
  EXPECT_TESSEL_ERROR(ScopedAllocator({Shape{3}}, DType::kF32, "s", -1, 1),
                      ErrorCode::kInvalidArgument, "scope_id must be >= 0");
  EXPECT_TESSEL_ERROR(ScopedAllocator({Shape{3}}, DType::kF32, "s", 0, 2),
                      ErrorCode::kInvalidArgument,
                      "scope s (id 0): expected_call_count 2 is outside [0, 1]");
}

}  // namespace
}  // namespace tessel

namespace tessel {
namespace {

TEST(ScopedAllocator, AllocateAllReturnsEveryFieldOnce) {
  ScopedAllocator scope({Shape{3}, Shape{5}}, DType::kF32, "grads", 7, 2);
  const std::vector<Tensor>& all = scope.allocate_all();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].data(), static_cast<const uint8_t*>(scope.backing().data()) + 64);
  EXPECT_EQ(scope.calls_remaining(), 0);
  EXPECT_TESSEL_ERROR(scope.allocate(0, 12), ErrorCode::kInternal, "expected uses exhausted");
  EXPECT_NO_THROW(scope.concat(scope.backing(), all));
  scope.close();
  scope.reopen(1);
  EXPECT_TESSEL_ERROR(scope.allocate_all(), ErrorCode::kInternal,
                      "scope grads (id 7): allocate_all needs a fresh round expecting all 2 "
                      "fields (0 of 1 expected calls made)");
}

}  // namespace
}  // namespace tessel
