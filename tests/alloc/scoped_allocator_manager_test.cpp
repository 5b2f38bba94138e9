#include "tessel/alloc/scoped_allocator_manager.h"

#include <gtest/gtest.h>

#include "testing/expect_error.h"

namespace tessel {
namespace {

TEST(ScopedAllocatorManager, FieldIdsAndRelease) {
  TrackingAllocator tracked(host_allocator(), "dev0");
  ScopedAllocatorManager mgr("dev0", &tracked);
  const std::shared_ptr<ScopedAllocator> s =
      mgr.add(1, 10, "grads", {Shape{3}, Shape{5}}, DType::kF32, 2);
  EXPECT_EQ(s->fields()[0].scope_id, 11);
  EXPECT_EQ(s->fields()[1].scope_id, 12);
  Tensor b = mgr.allocate(1, 12, 20);
  Tensor a = mgr.allocate(1, 11, 12);
  EXPECT_EQ(static_cast<const uint8_t*>(b.data()) - static_cast<const uint8_t*>(a.data()), 64);
  // The last expected allocation retired the scope (TF's container drops it at once).
  EXPECT_EQ(mgr.num_live_scopes(), 0);
  EXPECT_EQ(tracked.stats().live_bytes, 128);  // the aliases and `s` keep the backing alive
  a = Tensor();
  b = Tensor();
  EXPECT_EQ(tracked.stats().live_bytes, 128);  // `s` still holds the scope

  EXPECT_TESSEL_ERROR(mgr.allocate(1, 11, 12), ErrorCode::kNotFound,
                      "device dev0 step 1: no live field with scope_id 11");
  EXPECT_TESSEL_ERROR(mgr.get(1, 10), ErrorCode::kNotFound, "no live ScopedAllocator");
  EXPECT_TESSEL_ERROR(mgr.release(1, 10), ErrorCode::kNotFound, "not live");
  // Before its last allocation a scope is live and release() closes it.
  const auto t = mgr.add(1, 10, "again", {Shape{3}, Shape{5}}, DType::kF32, 2);
  mgr.allocate(1, 11, 12);
  EXPECT_EQ(mgr.get(1, 10), t);
  EXPECT_THROW(mgr.release(1, 10), Error);  // 1 of 2 calls made
  EXPECT_EQ(mgr.num_live_scopes(), 0);
}

// TF's ScopedAllocatorContainer: explicit field ids, TF's duplicate-id error, and ids free for
// reuse once the scope retired (its last expected allocation), while its tensors live on.
TEST(ScopedAllocatorManager, ExplicitFieldIdsAndReuseAfterTheScopeRetires) {
  ScopedAllocatorManager mgr("dev0");
  const auto s = mgr.add(1, 10, "grads", {Shape{3}, Shape{5}}, DType::kF32, 2, {40, 30});
  EXPECT_EQ(s->fields()[0].scope_id, 40);
  EXPECT_EQ(s->fields()[1].scope_id, 30);
  EXPECT_TESSEL_ERROR(mgr.add(1, 11, "other", {Shape{1}}, DType::kF32, 1, {30}),
                      ErrorCode::kInternal,
                      "Cannot create ScopedAllocator because field scope_id 30 for name other "
                      "already exists");
  EXPECT_TESSEL_ERROR(mgr.add(1, 40, "other", {Shape{1}}, DType::kF32, 1), ErrorCode::kInternal,
                      "Cannot create ScopedAllocator because scope_id 40 for name other already "
                      "exists");
  EXPECT_NO_THROW(mgr.add(1, 11, "fits", {Shape{1}}, DType::kF32, 0, {12}));  // 11, 12 were free
  Tensor a = mgr.allocate(1, 40, 12);
  EXPECT_TESSEL_ERROR(mgr.add(1, 30, "early", {Shape{1}}, DType::kF32, 1, {31}),
                      ErrorCode::kInternal, "scope_id 30 for name early already exists");
  Tensor b = mgr.allocate(1, 30, 20);  // the last expected call: the scope retires
  EXPECT_NO_THROW(mgr.add(1, 30, "reused", {Shape{2}, Shape{2}}, DType::kF32, 2, {10, 40}));
  a.fill(3.0);
  EXPECT_EQ(s->backing().to_vector<float>()[0], 3.0f);  // the retired scope's tensors still work
  // Bad explicit ids: the wrong count, a repeated id, the scope's own id, a negative id.
  for (const std::vector<int64_t>& ids : std::vector<std::vector<int64_t>>{
           {50}, {50, 50}, {50, 20}, {-1, 50}}) {
    EXPECT_TESSEL_ERROR(mgr.add(2, 20, "bad", {Shape{1}, Shape{1}}, DType::kF32, 2, ids),
                        ErrorCode::kInvalidArgument, "scope bad (id 20)");
  }
  EXPECT_EQ(mgr.num_live_scopes(), 2);
}

// A handle from get() or add() shares the scope: it keeps working after the manager forgot the
// scope (cleanup_step, release) and after the manager itself is gone.
TEST(ScopedAllocatorManager, HandlesOutliveCleanupReleaseAndTheManager) {
  TrackingAllocator tracked(host_allocator(), "dev0");
  std::shared_ptr<ScopedAllocator> from_get;
  std::shared_ptr<ScopedAllocator> from_add;
  {
    ScopedAllocatorManager mgr("dev0", &tracked);
    mgr.add(1, 10, "grads", {Shape{3}, Shape{5}}, DType::kF32, 2);
    from_get = mgr.get(1, 10);
    mgr.cleanup_step(1);
    EXPECT_EQ(mgr.num_live_scopes(), 0);
    EXPECT_TESSEL_ERROR(mgr.get(1, 10), ErrorCode::kNotFound, "no live ScopedAllocator");
    from_add = mgr.add(2, 20, "acts", {Shape{4}}, DType::kF32, 1);
    from_add->allocate(0, 16);
    mgr.release(2, 20);
  }
  Tensor a = from_get->allocate(0, Shape{3});
  Tensor b = from_get->allocate(1, 20);
  a.fill(7.0);
  EXPECT_EQ(from_get->backing().to_vector<float>()[2], 7.0f);
  EXPECT_EQ(from_get->calls_remaining(), 0);
  from_get->close();
  EXPECT_TRUE(from_add->closed());
  from_add->reopen(1);
  EXPECT_EQ(from_add->allocate(0, 16).shape(), Shape{4});
  from_add->close();
  EXPECT_EQ(tracked.stats().live_bytes, 128 + 64);
  a = b = Tensor();
  from_get.reset();
  from_add.reset();
  EXPECT_EQ(tracked.stats().live_bytes, 0);
}

TEST(ScopedAllocatorManager, AlreadyExists) {
  ScopedAllocatorManager mgr("dev0");
  mgr.add(1, 10, "grads", {Shape{3}, Shape{5}}, DType::kF32, 2);
  EXPECT_TESSEL_ERROR(mgr.add(1, 10, "other", {Shape{1}}, DType::kF32, 1), ErrorCode::kInternal,
                      "ScopedAllocatorManager: device dev0 step 1: Cannot create ScopedAllocator "
                      "because scope_id 10 for name other already exists");
  EXPECT_TESSEL_ERROR(mgr.add(1, 12, "other", {Shape{1}}, DType::kF32, 1), ErrorCode::kInternal,
                      "because scope_id 12 for name other already exists");
  EXPECT_TESSEL_ERROR(mgr.add(1, 8, "other", {Shape{1}, Shape{1}, Shape{1}}, DType::kF32, 3),
                      ErrorCode::kInternal,
                      "because field scope_id 10 for name other already exists");
  // Another step has its own ids.
  EXPECT_NO_THROW(mgr.add(2, 10, "grads", {Shape{3}}, DType::kF32, 1));
  EXPECT_NO_THROW(mgr.add(1, 13, "next", {Shape{3}}, DType::kF32, 1));
  EXPECT_EQ(mgr.num_live_scopes(), 3);
}

TEST(ScopedAllocatorManager, ReleaseReportsMissingCallsAndCleanup) {
  ScopedAllocatorManager mgr("dev0");
  mgr.add(1, 10, "grads", {Shape{3}, Shape{5}}, DType::kF32, 2);
  mgr.allocate(1, 11, 12);
  EXPECT_TESSEL_ERROR(mgr.release(1, 10), ErrorCode::kInternal,
                      "scope grads (id 10): closed after 1 of 2 expected calls");
  EXPECT_EQ(mgr.num_live_scopes(), 0);
  EXPECT_TESSEL_ERROR(mgr.add(4, 0, "bad", {Shape{3}}, DType::kF32, 2), ErrorCode::kInvalidArgument,
                      "expected_call_count 2 is outside [0, 1]");
  EXPECT_EQ(mgr.num_live_scopes(), 0);
  EXPECT_NO_THROW(mgr.add(4, 0, "good", {Shape{3}}, DType::kF32, 1));
  mgr.cleanup_step(4);
  mgr.add(3, 0, "a", {Shape{3}}, DType::kF32, 1);
  mgr.add(3, 5, "b", {Shape{3}}, DType::kF32, 1);
  mgr.cleanup_step(3);
  EXPECT_EQ(mgr.num_live_scopes(), 0);
}

}  // namespace
}  // namespace tessel
