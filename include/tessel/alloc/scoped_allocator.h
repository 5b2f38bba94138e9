// ScopedAllocator: many tensors carved out of one backing buffer, so that one collective can
// run over all of them with no copy in and no copy out (TensorFlow's _ScopedAllocator).
//
// A scope is built from the fields' shapes, one dtype, a name, a scope id and an expected call
// count. It allocates one 1-D backing tensor (from `allocator`, host_allocator() when null) and
// lays the fields out as TF's ScopedAllocatorMgr::PopulateFields does:
//   offset = 0; for field i: bytes_requested = elements(shape_i) * dtype size; field.offset =
//   offset; offset += bytes_requested, rounded up to a multiple of kAllocatorAlignment (64);
//   field.scope_id = scope_id + 1 + i. The backing holds offset / dtype size elements.
//       f32 shapes [3], [5]: field 0 at byte 0 (12 B, 64 allocated), field 1 at byte 64
//       (20 B, 64 allocated), backing 128 B = 32 elements.
// A zero-element field takes 0 bytes and sits at the next field's offset (as in TF); its view
// is an empty tensor of its shape sharing the backing's storage. The backing is zero-filled once
// at construction; padding between fields is never written by tessel (a reduction over the
// whole backing also reduces the padding, which is harmless).
//
//   ScopedAllocator scope({Shape{3}, Shape{5}}, DType::kF32, "grads", /*scope_id=*/7,
//                         /*expected_call_count=*/2);
//   Tensor a = scope.allocate(0, 12);            // aliases bytes [0, 12) of the backing
//   Tensor b = scope.allocate(1, Shape{5});      // aliases bytes [64, 84)
//   Tensor all = scope.concat(scope.backing(), {a, b});  // the backing itself, no copy
//   comm.all_reduce(all, all, ReduceOp::kSum);   // a and b now hold the sums
//   std::vector<Tensor> parts = scope.split(all, {a, b});  // views of a and b again
//   scope.close();                               // checks every expected call happened
//
// Misuse is an error, never undefined behaviour: Error kInternal, component "ScopedAllocator",
// naming the scope ("scope <name> (id <id>)") and the field:
// - allocate after expected_call_count calls: "... expected uses exhausted";
// - a field index out of range; a field allocated twice in one round;
// - a request whose size (bytes or shape) does not match the field's;
// - an alias (in concat/split) that is not a view of the backing, lies outside it, or is not
//   exactly field i (the first mismatch is named);
// - close() with fewer calls than expected (names the fields never allocated).
// Construction errors (negative scope id, expected_call_count outside [0, fields], a dtype whose
// size does not divide 64, a negative dimension): kInvalidArgument.
//
// Reuse: after close(), reopen() starts a new round over the same backing (persistent buckets
// reuse one backing across steps). The backing and every alias stay valid as long as any view
// of them lives (tensors share the storage).
//
// Thread safety: allocate, close and reopen lock; concurrent allocations of different fields
// from different threads are fine. concat/split only read the layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "tessel/core/allocator.h"
#include "tessel/core/dtype.h"
#include "tessel/core/shape.h"
#include "tessel/core/tensor.h"

namespace tessel {

// One field of a scope's backing buffer.
struct ScopedField {
  Shape shape;
  int64_t offset = 0;           // bytes from the start of the backing; a multiple of 64
  int64_t bytes_requested = 0;  // elements * dtype size
  int64_t bytes_allocated = 0;  // bytes_requested rounded up to a multiple of 64
  int64_t scope_id = 0;         // the scope's id + 1 + field index
};

// The layout rule above as a pure function; `total_bytes` (optional) receives the backing size.
std::vector<ScopedField> scoped_layout(const std::vector<Shape>& shapes, DType dtype,
                                       int64_t scope_id, int64_t* total_bytes = nullptr);

class ScopedAllocator {
 public:
  // field_scope_ids (TF: each Field's scope_id, set by the caller): empty means scope_id + 1 + i;
  // otherwise one per field, each >= 0, distinct and not scope_id (kInvalidArgument).
  ScopedAllocator(std::vector<Shape> shapes, DType dtype, std::string name, int64_t scope_id,
                  int expected_call_count, Allocator* allocator = nullptr,
                  const std::vector<int64_t>& field_scope_ids = {});
  ScopedAllocator(const ScopedAllocator&) = delete;
  ScopedAllocator& operator=(const ScopedAllocator&) = delete;

  const std::string& name() const { return name_; }
  int64_t scope_id() const { return scope_id_; }
  DType dtype() const { return dtype_; }
  const std::vector<ScopedField>& fields() const { return fields_; }
  int num_fields() const { return static_cast<int>(fields_.size()); }
  int64_t total_bytes() const { return total_bytes_; }
  // The 1-D backing tensor (total_bytes / dtype size elements).
  const Tensor& backing() const { return backing_; }

  // Field `field_index`'s tensor, aliasing its bytes of the backing; `bytes` must equal the
  // field's bytes_requested (by shape: the shape must equal the field's). Counts one call.
  Tensor allocate(int field_index, size_t bytes);
  Tensor allocate(int field_index, const Shape& shape);
  // Every field in one call, counting num_fields() calls: the round must be fresh and expect
  // all fields (kInternal otherwise). Returns the views made at construction (no per-call work;
  // the fast path of a fusion bucket).
  const std::vector<Tensor>& allocate_all();
  // Field i's view without counting a call (for owners such as a fusion bucket).
  Tensor field_view(int field_index) const;

  // Calls made / still expected in this round.
  int calls_made() const;
  int calls_remaining() const;

  // The backing (1-D), after checking that `backing` is this scope's backing and `aliases` are
  // exactly its fields in order (the vector allocate_all returned is, by construction, and is
  // not checked again). Read-only by contract: write through the aliases. No copy.
  Tensor concat(const Tensor& backing, const std::vector<Tensor>& aliases) const;
  // TF's _ScopedAllocatorConcat with its shape and reshape attributes: the backing's dtype must
  // be the scope's ("Backing tensor type .. does not match expected type .."), it must hold at
  // least shape's elements ("Backing tensor num elements .. is not >= to expected .."), then the
  // checks above; reshape: the backing viewed as `shape`, which must have exactly the backing's
  // elements (TF aborts the process otherwise). Errors: kInvalidArgument. No copy.
  Tensor concat(const Tensor& backing, const std::vector<Tensor>& aliases, const Shape& shape,
                bool reshape) const;
  // The field views again, after the same checks on `concat` and `aliases`. No copy. Fewer than
  // two aliases: kInvalidArgument (TF's op definition: N >= 2; concat keeps accepting one, which
  // tessel's one-tensor fusion buckets use).
  std::vector<Tensor> split(const Tensor& concat, const std::vector<Tensor>& aliases) const;

  // Ends the round: kInternal if fewer than expected_call_count calls were made.
  void close();
  bool closed() const;
  // Starts a new round over the same backing (after close(); kInternal otherwise).
  void reopen(int expected_call_count);

 private:
  std::string where() const;
  void set_field_scope_ids(const std::vector<int64_t>& ids);
  Tensor make_view(int field_index) const;
  std::string field_where(int field_index) const;
  void check_backing(const Tensor& backing, const char* call) const;
  void check_aliases(const std::vector<Tensor>& aliases, const char* call) const;

  std::string name_;
  int64_t scope_id_;
  DType dtype_;
  std::vector<ScopedField> fields_;
  int64_t total_bytes_ = 0;
  Tensor backing_;
  std::vector<Tensor> views_;  // field i's view of backing_, made once

  mutable std::mutex mu_;
  int expected_ = 0;             // expected_call_count of this round
  int calls_ = 0;                // calls made this round
  std::vector<bool> allocated_;  // per field, this round
  bool closed_ = false;
};

}  // namespace tessel
