#include "tessel/alloc/scoped_allocator.h"

#include <set>

#include <utility>

#include "core/errors.h"

namespace tessel {
namespace {

constexpr const char* kComponent = "ScopedAllocator";

[[noreturn]] void fail_internal(const std::string& message) {
  throw Error(ErrorCode::kInternal, kComponent, message);
}

int64_t round_up(int64_t bytes, int64_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

}  // namespace

std::vector<ScopedField> scoped_layout(const std::vector<Shape>& shapes, DType dtype,
                                       int64_t scope_id, int64_t* total_bytes) {
  const auto size = static_cast<int64_t>(dtype_size(dtype));
  const auto alignment = static_cast<int64_t>(kAllocatorAlignment);
  if (alignment % size != 0) {
    detail::throw_invalid(kComponent, "dtype {} (size {}) does not divide the alignment {}",
                          dtype_name(dtype), size, alignment);
  }
  std::vector<ScopedField> fields;
  fields.reserve(shapes.size());
  int64_t offset = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    for (int64_t d : shapes[i].dims()) {
      if (d < 0) {
        detail::throw_invalid(kComponent, "field {} has a negative dimension: {}", i,
                              shapes[i].to_string());
      }
    }
    ScopedField field;
    field.shape = shapes[i];
    field.offset = offset;
    field.bytes_requested = shapes[i].num_elements() * size;
    field.bytes_allocated = round_up(field.bytes_requested, alignment);
    field.scope_id = scope_id + 1 + static_cast<int64_t>(i);
    offset += field.bytes_allocated;
    fields.push_back(std::move(field));
  }
  if (total_bytes != nullptr) *total_bytes = offset;
  return fields;
}

ScopedAllocator::ScopedAllocator(std::vector<Shape> shapes, DType dtype, std::string name,
                                 int64_t scope_id, int expected_call_count, Allocator* allocator,
                                 const std::vector<int64_t>& field_scope_ids)
    : name_(std::move(name)), scope_id_(scope_id), dtype_(dtype) {
  if (scope_id < 0) {
    detail::throw_invalid(kComponent, "scope {}: scope_id must be >= 0, got {}", name_, scope_id);
  }
  fields_ = scoped_layout(shapes, dtype, scope_id, &total_bytes_);
  if (!field_scope_ids.empty()) set_field_scope_ids(field_scope_ids);
  if (expected_call_count < 0 || expected_call_count > num_fields()) {
    detail::throw_invalid(kComponent, "{}: expected_call_count {} is outside [0, {}] (fields)",
                          where(), expected_call_count, num_fields());
  }
  const int64_t elements = total_bytes_ / static_cast<int64_t>(dtype_size(dtype));
  backing_ = Tensor::empty(Shape{elements}, dtype, allocator);
  expected_ = expected_call_count;
  allocated_.assign(fields_.size(), false);
  views_.reserve(fields_.size());
  for (int i = 0; i < num_fields(); ++i) views_.push_back(make_view(i));
}

void ScopedAllocator::set_field_scope_ids(const std::vector<int64_t>& ids) {
  if (ids.size() != fields_.size()) {
    detail::throw_invalid(kComponent, "{}: {} field scope_ids for {} fields", where(), ids.size(),
                          fields_.size());
  }
  std::set<int64_t> seen{scope_id_};
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || !seen.insert(ids[i]).second) {
      detail::throw_invalid(kComponent,
                            "{}: field {} scope_id {} must be >= 0 and differ from the scope's id "
                            "and every other field's",
                            where(), i, ids[i]);
    }
    fields_[i].scope_id = ids[i];
  }
}

std::string ScopedAllocator::where() const {
  return fmt::format("scope {} (id {})", name_, scope_id_);
}

std::string ScopedAllocator::field_where(int field_index) const {
  return fmt::format("{} field {}", where(), field_index);
}

Tensor ScopedAllocator::field_view(int field_index) const {
  if (field_index < 0 || field_index >= num_fields()) {
    fail_internal(fmt::format("{}: received unexpected field number {} (the scope has {} fields)",
                              where(), field_index, num_fields()));
  }
  return views_[static_cast<size_t>(field_index)];
}

const std::vector<Tensor>& ScopedAllocator::allocate_all() {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) {
    fail_internal(fmt::format("{}: allocate_all after close() (call reopen() first)", where()));
  }
  if (calls_ != 0 || expected_ != num_fields()) {
    fail_internal(
        fmt::format("{}: allocate_all needs a fresh round expecting all {} fields "
                    "({} of {} expected calls made)",
                    where(), num_fields(), calls_, expected_));
  }
  allocated_.assign(fields_.size(), true);
  calls_ = expected_;
  return views_;
}

Tensor ScopedAllocator::make_view(int field_index) const {
  const ScopedField& f = fields_[static_cast<size_t>(field_index)];
  const auto size = static_cast<int64_t>(dtype_size(dtype_));
  const int64_t start = f.offset / size;
  const int64_t stop = start + f.bytes_requested / size;
  if (stop * size > total_bytes_) {
    fail_internal(
        fmt::format("{}: alias [{}, {}) bytes lies outside the backing buffer of {} bytes",
                    field_where(field_index), f.offset, stop * size, total_bytes_));
  }
  return backing_.slice(0, start, stop).reshape(f.shape);
}

Tensor ScopedAllocator::allocate(int field_index, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) {
    fail_internal(fmt::format("{}: allocate after close() (call reopen() first)", where()));
  }
  if (calls_ >= expected_) {
    fail_internal(fmt::format(
        "{}: could not satisfy request for {} bytes from field {}, expected uses exhausted ({} "
        "expected)",
        where(), bytes, field_index, expected_));
  }
  if (field_index < 0 || field_index >= num_fields()) {
    fail_internal(fmt::format("{}: received unexpected field number {} (the scope has {} fields)",
                              where(), field_index, num_fields()));
  }
  const ScopedField& f = fields_[static_cast<size_t>(field_index)];
  if (static_cast<int64_t>(bytes) != f.bytes_requested) {
    fail_internal(
        fmt::format("{}: got request for {} bytes, which has precalculated size {} and "
                    "offset {}",
                    field_where(field_index), bytes, f.bytes_requested, f.offset));
  }
  if (allocated_[static_cast<size_t>(field_index)]) {
    fail_internal(fmt::format("{}: already allocated in this round", field_where(field_index)));
  }
  Tensor view = field_view(field_index);
  allocated_[static_cast<size_t>(field_index)] = true;
  ++calls_;
  return view;
}

Tensor ScopedAllocator::allocate(int field_index, const Shape& shape) {
  if (field_index >= 0 && field_index < num_fields() &&
      !(shape == fields_[static_cast<size_t>(field_index)].shape)) {
    fail_internal(fmt::format("{}: got request for shape {}, which has shape {}",
                              field_where(field_index), shape.to_string(),
                              fields_[static_cast<size_t>(field_index)].shape.to_string()));
  }
  return allocate(field_index, static_cast<size_t>(shape.num_elements()) * dtype_size(dtype_));
}

int ScopedAllocator::calls_made() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_;
}

int ScopedAllocator::calls_remaining() const {
  std::lock_guard<std::mutex> lock(mu_);
  return expected_ - calls_;
}

void ScopedAllocator::check_backing(const Tensor& backing, const char* call) const {
  if (!backing.defined() || !backing.shares_storage_with(backing_) ||
      backing.storage_offset() != 0 || !(backing.shape() == backing_.shape()) ||
      backing.dtype() != dtype_) {
    fail_internal(
        fmt::format("{}: {} was given a tensor that is not the scope's backing buffer "
                    "({} {} elements)",
                    where(), call, dtype_name(dtype_), backing_.num_elements()));
  }
}

void ScopedAllocator::check_aliases(const std::vector<Tensor>& aliases, const char* call) const {
  if (aliases.size() != fields_.size()) {
    fail_internal(fmt::format("{}: {} got {} aliases for {} fields", where(), call, aliases.size(),
                              fields_.size()));
  }
  // The views allocate_all handed out are the fields by construction (and const to callers).
  if (&aliases == &views_) return;
  const auto size = static_cast<int64_t>(dtype_size(dtype_));
  for (size_t i = 0; i < aliases.size(); ++i) {
    const Tensor& a = aliases[i];
    const ScopedField& f = fields_[i];
    // Messages are built only on failure: this runs once per field per collective.
    if (!a.defined() || !a.shares_storage_with(backing_)) {
      fail_internal(
          fmt::format("{}: {}: alias {} lies outside the backing buffer (it is not a "
                      "view of it)",
                      field_where(static_cast<int>(i)), call, i));
    }
    const int64_t begin = a.storage_offset() * size;
    const int64_t end = begin + static_cast<int64_t>(a.nbytes());
    if (begin < 0 || end > total_bytes_) {
      fail_internal(
          fmt::format("{}: {}: alias {} bytes [{}, {}) lie outside the backing buffer "
                      "of {} bytes",
                      field_where(static_cast<int>(i)), call, i, begin, end, total_bytes_));
    }
    if (a.dtype() != dtype_ || begin != f.offset || !(a.shape() == f.shape) || !a.is_contiguous()) {
      fail_internal(
          fmt::format("{}: {}: alias {} ({} {} at byte {}{}) is not the field ({} {} at "
                      "byte {})",
                      field_where(static_cast<int>(i)), call, i, dtype_name(a.dtype()),
                      a.shape().to_string(), begin, a.is_contiguous() ? "" : ", strided",
                      dtype_name(dtype_), f.shape.to_string(), f.offset));
    }
  }
}

Tensor ScopedAllocator::concat(const Tensor& backing, const std::vector<Tensor>& aliases) const {
  check_backing(backing, "concat");
  check_aliases(aliases, "concat");
  return backing;
}

Tensor ScopedAllocator::concat(const Tensor& backing, const std::vector<Tensor>& aliases,
                               const Shape& shape, bool reshape) const {
  // TF's _ScopedAllocatorConcat kernel: the type, then the size, then the aliases.
  if (backing.defined() && backing.dtype() != dtype_) {
    detail::throw_invalid(kComponent, "{}: concat: Backing tensor type {} does not match expected "
                          "type {}",
                          where(), dtype_name(backing.dtype()), dtype_name(dtype_));
  }
  if (backing.defined() && backing.num_elements() < shape.num_elements()) {
    detail::throw_invalid(kComponent,
                          "{}: concat: Backing tensor num elements {} is not >= to expected {}",
                          where(), backing.num_elements(), shape.num_elements());
  }
  const Tensor all = concat(backing, aliases);
  if (!reshape) return all;
  if (shape.num_elements() != all.num_elements()) {
    // TF's CopyFrom CHECK-fails here (the process aborts); tessel reports it.
    detail::throw_invalid(kComponent,
                          "{}: concat: reshape to {} ({} elements) needs the backing's {} elements",
                          where(), shape.to_string(), shape.num_elements(), all.num_elements());
  }
  return all.reshape(shape);
}

std::vector<Tensor> ScopedAllocator::split(const Tensor& concat,
                                           const std::vector<Tensor>& aliases) const {
  if (aliases.size() < 2) {
    // TF's op definition: attr N >= 2.
    detail::throw_invalid(kComponent,
                          "{}: split: Value for attr 'N' of {} must be at least minimum 2",
                          where(), aliases.size());
  }
  check_backing(concat, "split");
  check_aliases(aliases, "split");
  return aliases;
}

void ScopedAllocator::close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  closed_ = true;
  if (calls_ < expected_) {
    std::vector<int> missing;
    for (size_t i = 0; i < allocated_.size(); ++i) {
      if (!allocated_[i]) missing.push_back(static_cast<int>(i));
    }
    fail_internal(
        fmt::format("{}: closed after {} of {} expected calls (fields never allocated: "
                    "{})",
                    where(), calls_, expected_, fmt::join(missing, ", ")));
  }
}

bool ScopedAllocator::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

void ScopedAllocator::reopen(int expected_call_count) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!closed_) fail_internal(fmt::format("{}: reopen before close()", where()));
  if (expected_call_count < 0 || expected_call_count > num_fields()) {
    detail::throw_invalid(kComponent, "{}: expected_call_count {} is outside [0, {}] (fields)",
                          where(), expected_call_count, num_fields());
  }
  closed_ = false;
  expected_ = expected_call_count;
  calls_ = 0;
  allocated_.assign(fields_.size(), false);
}

}  // namespace tessel
