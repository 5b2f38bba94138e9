// Internal: local computations of cross-device ops (see kernels.h).
#include "distribute/kernels.h"

#include "comm/reduce_kernels.h"
#include "core/errors.h"

namespace tessel::detail {

Tensor copy_to(Device& device, const Tensor& t) {
  Tensor out = device.allocate(t.shape(), t.dtype(), /*zero_fill=*/false);
  out.copy_from(t);
  return out;
}

Value copy_value(Device& device, const Value& v) {
  if (const auto* t = std::get_if<Tensor>(&v)) return copy_to(device, *t);
  const auto& s = std::get<IndexedSlices>(v);
  return IndexedSlices(copy_to(device, s.values()), copy_to(device, s.indices()), s.dense_shape());
}

Tensor reduce_tensors(Device& device, const std::vector<Tensor>& inputs, ReduceOp op,
                      int64_t divisor) {
  const Tensor& first = inputs.front();
  check_reducible(first.dtype(), op);
  // A GPU device's values are reduced on host copies (this is the reduce-to-one-device path, not
  // the collective one) and the result copied to the device.
  const bool on_host = device.memory_space().is_host();
  std::vector<Tensor> contiguous;
  std::vector<const void*> pointers;
  for (const Tensor& t : inputs) {
    contiguous.push_back(t.to_host().contiguous());
    pointers.push_back(contiguous.back().data());
  }
  Tensor out = on_host ? device.allocate(first.shape(), first.dtype(), /*zero_fill=*/false)
                       : Tensor::empty(first.shape(), first.dtype(), nullptr, /*zero_fill=*/false);
  void* outputs[] = {out.data()};
  reduce_buffers(first.dtype(), op, pointers.data(), static_cast<int>(pointers.size()), outputs, 1,
                 0, first.num_elements(), divisor);
  return on_host ? out : copy_to(device, out);
}

void divide_in_place(Tensor& t, int64_t divisor) {
  if (!t.memory_space().is_host()) {  // device memory: on a host copy
    Tensor staged = t.to_host();
    divide_in_place(staged, divisor);
    t.copy_from(staged);
    return;
  }
  finish_mean(t.dtype(), ReduceOp::kMean, t.data(), t.num_elements(), divisor);
}

Tensor concat(Device& device, const std::vector<Tensor>& inputs, int axis) {
  std::vector<int64_t> dims = inputs.front().shape().dims();
  int64_t total = 0;
  for (const Tensor& t : inputs) total += t.shape()[axis];
  dims[static_cast<size_t>(axis)] = total;
  Tensor out = device.allocate(Shape(dims), inputs.front().dtype(), /*zero_fill=*/false);
  int64_t offset = 0;
  for (const Tensor& t : inputs) {
    const int64_t n = t.shape()[axis];
    out.slice(axis, offset, offset + n).copy_from(t);
    offset += n;
  }
  return out;
}

IndexedSlices reduce_indexed_slices(Device& device, const std::vector<IndexedSlices>& inputs,
                                    ReduceOp op, int64_t divisor) {
  const IndexedSlices cat = concat_indexed_slices(inputs);
  Tensor values = copy_to(device, cat.values());
  if (op == ReduceOp::kMean) divide_in_place(values, divisor);
  return IndexedSlices(values, copy_to(device, cat.indices()), cat.dense_shape());
}

std::vector<Tensor> split_flat(const Tensor& flat, const std::vector<int64_t>& sizes) {
  std::vector<Tensor> out;
  int64_t offset = 0;
  for (int64_t n : sizes) {
    out.push_back(flat.slice(0, offset, offset + n));
    offset += n;
  }
  return out;
}

}  // namespace tessel::detail
