// Tensor element access, copies, conversions and writes; all of them walk strided views.
#include <cmath>
#include <cstring>

#include "core/tensor_impl.h"

namespace tessel {
namespace {

// Copies every element of `src` (any strides, any dtype) into `dst` (same shape), converting.
// Raw pointers and strides are passed so the loops stay free of Tensor's checks.
void convert_elements(const void* src, DType src_dtype, const std::vector<int64_t>& src_strides,
                      void* dst, DType dst_dtype, const std::vector<int64_t>& dst_strides,
                      const std::vector<int64_t>& dims) {
  detail::visit_dtype(src_dtype, [&](auto src_tag) {
    using S = typename decltype(src_tag)::type;
    detail::visit_dtype(dst_dtype, [&](auto dst_tag) {
      using D = typename decltype(dst_tag)::type;
      const S* in = static_cast<const S*>(src);
      D* out = static_cast<D*>(dst);
      detail::for_each_offset2(dims, src_strides, 0, dst_strides, 0,
                               [&](int64_t a, int64_t b) { out[b] = detail::convert<D>(in[a]); });
    });
  });
}

}  // namespace

double Tensor::at(const std::vector<int64_t>& index) const {
  check_defined("at");
  if (!storage_->space.is_host()) return to_host().at(index);
  if (index.size() != static_cast<size_t>(rank())) {
    detail::throw_invalid("Tensor", "at got {} indices [{}] for rank-{} shape {}", index.size(),
                          fmt::join(index, ","), rank(), shape().to_string());
  }
  int64_t offset = offset_;
  for (size_t i = 0; i < index.size(); ++i) {
    if (index[i] < 0 || index[i] >= shape().dims()[i]) {
      detail::throw_error(ErrorCode::kOutOfRange, "Tensor",
                          "index [{}] is out of range for shape {} (dimension {})",
                          fmt::join(index, ","), shape().to_string(), i);
    }
    offset += index[i] * strides()[i];
  }
  return detail::visit_dtype(dtype_, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return detail::convert<double>(reinterpret_cast<const T*>(base())[offset]);
  });
}

std::vector<double> Tensor::to_doubles() const {
  check_defined("to_doubles");
  if (!storage_->space.is_host()) return to_host().to_doubles();
  std::vector<double> out(static_cast<size_t>(num_elements()));
  convert_elements(data(), dtype_, strides(), out.data(), DType::kF64, shape().strides(),
                   shape().dims());
  return out;
}

Tensor Tensor::clone() const {
  check_defined("clone");
  if (!storage_->space.is_host()) {
    Tensor out = allocate(shape(), dtype_, storage_->allocator, /*zero_fill=*/false);
    out.copy_from(*this);
    return out;
  }
  Tensor out = allocate(shape(), dtype_);
  if (is_contiguous()) {
    if (nbytes() > 0) std::memcpy(out.data(), data(), nbytes());
  } else {
    convert_elements(data(), dtype_, strides(), out.data(), dtype_, out.strides(), shape().dims());
  }
  return out;
}

Tensor Tensor::astype(DType dtype) const {
  check_defined("astype");
  if (dtype == dtype_) return clone();
  Tensor out = allocate(shape(), dtype);
  convert_elements(data(), dtype_, strides(), out.data(), dtype, out.strides(), shape().dims());
  return out;
}

void Tensor::fill(double value) {
  check_defined("fill");
  detail::visit_dtype(dtype_, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = detail::convert<T>(value);
    T* p = static_cast<T*>(data());
    detail::for_each_offset(shape().dims(), strides(), 0, [&](int64_t a) { p[a] = v; });
  });
}

void Tensor::copy_from(const Tensor& src) {
  check_defined("copy_from");
  src.check_defined("copy_from (source)");
  if (src.shape() != shape() || src.dtype_ != dtype_) {
    detail::throw_invalid("Tensor", "copy_from a {} {} into a {} {}", src.shape().to_string(),
                          dtype_name(src.dtype_), shape().to_string(), dtype_name(dtype_));
  }
  if (!storage_->space.is_host() || !src.storage_->space.is_host()) {
    copy_across_spaces(src);
    return;
  }
  // A source sharing this storage may overlap the destination: read it from a private copy.
  const Tensor from = shares_storage_with(src) ? src.clone() : src;
  if (is_contiguous() && from.is_contiguous()) {
    if (nbytes() > 0) std::memcpy(data(), from.data(), nbytes());
    return;
  }
  convert_elements(from.data(), dtype_, from.strides(), data(), dtype_, strides(), shape().dims());
}

Tensor Tensor::to_host() const {
  check_defined("to_host");
  if (storage_->space.is_host()) return *this;
  Tensor out = allocate(shape(), dtype_, nullptr, /*zero_fill=*/false);
  out.copy_from(*this);
  return out;
}

void Tensor::copy_across_spaces(const Tensor& src) {
  const MemorySpace to = storage_->space;
  const MemorySpace from = src.storage_->space;
  // A strided view on the host side goes through a contiguous host copy.
  if (from.is_host() && !src.is_contiguous()) return copy_across_spaces(src.contiguous());
  if (to.is_host() && !is_contiguous()) {
    Tensor staged = Tensor::empty(shape(), dtype_, nullptr, /*zero_fill=*/false);
    staged.copy_across_spaces(src);
    copy_from(staged);
    return;
  }
  if (!to.is_host() && !from.is_host() && to.kind != from.kind) {  // two kinds of device memory
    copy_across_spaces(src.to_host());
    return;
  }
  if (!is_contiguous() || !src.is_contiguous()) {
    detail::throw_error(ErrorCode::kUnimplemented, "Tensor",
                        "copy_from {} memory into {} memory needs contiguous views (shape {})",
                        from.to_string(), to.to_string(), shape().to_string());
  }
  if (nbytes() == 0) return;
  // cudaMemcpy's ranges must not overlap: a source in this storage is read from a fresh copy.
  if (shares_storage_with(src)) return copy_across_spaces(src.clone());
  const MemorySpace device = to.is_host() ? from : to;
  device_memory_ops("copy_from", device).copy(data_ptr(), to, src.data_ptr(), from, nbytes());
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  if (!a.defined() || !b.defined()) {
    detail::throw_error(ErrorCode::kFailedPrecondition, "Tensor", "allclose on a null tensor");
  }
  if (a.shape() != b.shape()) {
    detail::throw_invalid("Tensor", "allclose of shapes {} and {}", a.shape().to_string(),
                          b.shape().to_string());
  }
  const std::vector<double> x = a.to_doubles();
  const std::vector<double> y = b.to_doubles();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i])) {
      if (equal_nan && std::isnan(x[i]) && std::isnan(y[i])) continue;
      return false;
    }
    if (std::isinf(x[i]) || std::isinf(y[i])) {
      if (x[i] == y[i]) continue;  // infinities match only with the same sign, as in numpy
      return false;
    }
    if (std::fabs(x[i] - y[i]) > atol + rtol * std::fabs(y[i])) return false;
  }
  return true;
}

}  // namespace tessel
