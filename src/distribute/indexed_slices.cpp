// IndexedSlices: checks, densification, concatenation.
#include "tessel/distribute/indexed_slices.h"

#include <cstring>

#include "comm/reduce_kernels.h"
#include "core/errors.h"

namespace tessel {
namespace {

constexpr std::string_view kComponent = "IndexedSlices";

std::vector<int64_t> tail(const Shape& s) {
  return std::vector<int64_t>(s.dims().begin() + (s.rank() > 0 ? 1 : 0), s.dims().end());
}

}  // namespace

IndexedSlices::IndexedSlices(Tensor values, Tensor indices, Shape dense_shape)
    : dense_shape_(std::move(dense_shape)) {
  if (!values.defined() || !indices.defined()) {
    detail::throw_invalid(kComponent, "values and indices must be defined tensors");
  }
  if (values.rank() < 1) {
    detail::throw_invalid(kComponent, "values must have rank >= 1, got shape {}",
                          values.shape().to_string());
  }
  if (indices.rank() != 1) {
    detail::throw_invalid(kComponent, "indices must have rank 1, got shape {}",
                          indices.shape().to_string());
  }
  if (indices.dtype() != DType::kI64 && indices.dtype() != DType::kI32) {
    detail::throw_invalid(kComponent, "indices must be i64 or i32, got {}",
                          dtype_name(indices.dtype()));
  }
  if (indices.shape()[0] != values.shape()[0]) {
    detail::throw_invalid(kComponent, "{} indices for {} rows of values (shape {})",
                          indices.shape()[0], values.shape()[0], values.shape().to_string());
  }
  if (dense_shape_.rank() != values.rank() || tail(dense_shape_) != tail(values.shape())) {
    detail::throw_invalid(kComponent,
                          "dense_shape {} does not fit values of shape {}: the dimensions after "
                          "the first must be equal",
                          dense_shape_.to_string(), values.shape().to_string());
  }
  indices_ = indices.dtype() == DType::kI64 ? indices.contiguous() : indices.astype(DType::kI64);
  const int64_t rows = dense_shape_[0];
  const auto* idx = indices_.data<int64_t>();
  for (int64_t i = 0; i < indices_.num_elements(); ++i) {
    if (idx[i] < 0 || idx[i] >= rows) {
      detail::throw_invalid(kComponent, "index {} (entry {}) is outside [0, {}) of dense_shape {}",
                            idx[i], i, rows, dense_shape_.to_string());
    }
  }
  values_ = std::move(values);
}

Tensor IndexedSlices::to_dense() const {
  Tensor dense = Tensor::zeros(dense_shape_, dtype());
  const Tensor values = values_.contiguous();
  const int64_t row = dense_shape_[0] == 0 ? 0 : dense_shape_.num_elements() / dense_shape_[0];
  const size_t row_bytes = static_cast<size_t>(row) * dtype_size(dtype());
  const auto* idx = indices_.data<int64_t>();
  auto* out = static_cast<uint8_t*>(dense.data());
  const auto* in = static_cast<const uint8_t*>(values.data());
  for (int64_t i = 0; i < num_slices(); ++i) {
    detail::accumulate(dtype(), ReduceOp::kSum, out + static_cast<size_t>(idx[i]) * row_bytes,
                       in + static_cast<size_t>(i) * row_bytes, row);
  }
  return dense;
}

std::string IndexedSlices::to_string() const {
  return fmt::format("IndexedSlices(indices=[{}], values shape={}, dense_shape={}, dtype={})",
                     fmt::join(indices_.to_vector<int64_t>(), ","), values_.shape().to_string(),
                     dense_shape_.to_string(), dtype_name(dtype()));
}

IndexedSlices concat_indexed_slices(const std::vector<IndexedSlices>& slices) {
  if (slices.empty()) detail::throw_invalid(kComponent, "nothing to concatenate");
  const IndexedSlices& first = slices.front();
  int64_t rows = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    const IndexedSlices& s = slices[i];
    if (s.dtype() != first.dtype() || !(s.dense_shape() == first.dense_shape())) {
      detail::throw_invalid(kComponent,
                            "element {} ({}, dense_shape {}) does not match element 0 ({}, "
                            "dense_shape {})",
                            i, dtype_name(s.dtype()), s.dense_shape().to_string(),
                            dtype_name(first.dtype()), first.dense_shape().to_string());
    }
    rows += s.num_slices();
  }
  std::vector<int64_t> dims = first.values().shape().dims();
  dims[0] = rows;
  Tensor values = Tensor::empty(Shape(dims), first.dtype(), nullptr, /*zero_fill=*/false);
  Tensor indices = Tensor::empty(Shape{rows}, DType::kI64, nullptr, /*zero_fill=*/false);
  int64_t offset = 0;
  for (const IndexedSlices& s : slices) {
    const int64_t n = s.num_slices();
    values.slice(0, offset, offset + n).copy_from(s.values());
    indices.slice(0, offset, offset + n).copy_from(s.indices());
    offset += n;
  }
  return IndexedSlices(values, indices, first.dense_shape());
}

}  // namespace tessel
