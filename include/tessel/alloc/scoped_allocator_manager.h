// ScopedAllocatorManager: one device's live scoped allocators, keyed by (step, scope id), as
// TensorFlow's ScopedAllocatorMgr / ScopedAllocatorContainer.
//
// add() creates a scope (see scoped_allocator.h) whose backing comes from the manager's
// allocator (a device's, so that its memory statistics include the backing). In a step the scope
// registers its id and its fields' ids id+1+i; any of them already registered in that step:
// Error kInternal "ScopedAllocatorManager: device <d> step <s>: Cannot create ScopedAllocator
// because scope_id <id> for name <n> already exists" ("... field scope_id <fid> ..." when a
// field id collides). Lookups by an id that is not live: kNotFound naming device, step and id.
//
//   ScopedAllocatorManager mgr("/device:CPU:0", device_allocator);
//   auto s = mgr.add(/*step=*/1, /*scope_id=*/10, "grads", shapes, DType::kF32, 2);  // shared
//   Tensor a = mgr.allocate(1, /*field scope id=*/11, bytes);   // field 0 of scope 10
//   mgr.allocate(1, 12, bytes);   // the last expected call: the scope retires, ids 10-12 free
//   mgr.release(1, 10);           // (before that) closes, reports missing calls, forgets it
//   mgr.cleanup_step(1);          // drops whatever the step left (aborted steps), no checks
//
// Lifetime (TF's ScopedAllocatorContainer): add() and get() hand out shared ownership of the
// scope. The manager forgets a scope when its last expected allocation is made through allocate()
// (its ids may then be used again), at release() or at cleanup_step(), but a holder's scope lives on and keeps working (allocate,
// close, reopen: a round of its own, no longer reachable through the manager's ids), also after
// the manager is destroyed. Tensors handed out stay valid after release (they share the
// backing's storage).
//
// Thread safety: every call locks.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tessel/alloc/scoped_allocator.h"
#include "tessel/core/allocator.h"

namespace tessel {

class ScopedAllocatorManager {
 public:
  // `allocator` (null: host_allocator()) must outlive the scopes' backing buffers (held
  // scopes' included; an allocator owned by a std::shared_ptr is kept alive by them).
  explicit ScopedAllocatorManager(std::string device_name, Allocator* allocator = nullptr);
  ScopedAllocatorManager(const ScopedAllocatorManager&) = delete;
  ScopedAllocatorManager& operator=(const ScopedAllocatorManager&) = delete;

  const std::string& device_name() const { return device_; }

  // field_scope_ids: TF's explicit Field scope_ids (empty: scope_id + 1 + i); see
  // ScopedAllocator's constructor.
  std::shared_ptr<ScopedAllocator> add(int64_t step_id, int64_t scope_id, const std::string& name,
                                       const std::vector<Shape>& shapes, DType dtype,
                                       int expected_call_count,
                                       const std::vector<int64_t>& field_scope_ids = {});
  // The scope registered under `scope_id` in the step (kNotFound if none).
  std::shared_ptr<ScopedAllocator> get(int64_t step_id, int64_t scope_id);
  // Allocates the field registered under `field_scope_id`. The call that uses up the scope's
  // expected_call_count retires it, as TF's ScopedAllocator drops itself from its container:
  // its ids are free for a new scope of the step at once (the backing and the tensors handed
  // out live on while anything holds them).
  Tensor allocate(int64_t step_id, int64_t field_scope_id, size_t bytes);
  // Closes the scope (its kInternal error for missing calls propagates, after the scope has been
  // forgotten) and forgets it and its field ids.
  void release(int64_t step_id, int64_t scope_id);
  // Forgets every scope of the step without checking call counts.
  void cleanup_step(int64_t step_id);
  // Scopes alive over all steps.
  int num_live_scopes() const;

 private:
  struct Step {
    std::map<int64_t, std::shared_ptr<ScopedAllocator>> scopes;                  // by scope id
    std::map<int64_t, std::pair<std::shared_ptr<ScopedAllocator>, int>> fields;  // by field id
  };

  // Removes `scope` and its field ids from the step, if it is still registered there.
  void forget(int64_t step_id, const ScopedAllocator& scope);

  std::string device_;
  Allocator* allocator_;
  mutable std::mutex mu_;
  std::map<int64_t, Step> steps_;
};

}  // namespace tessel
