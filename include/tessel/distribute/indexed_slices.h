// IndexedSlices: a sparse set of rows of a dense tensor (TensorFlow's tf.IndexedSlices).
//
// values[k, ...] holds k rows; indices[k] (i64) says which row of the dense tensor each one is;
// dense_shape is the shape of that dense tensor. Rows may repeat: the dense tensor is the sum of
// the rows at each index (TF's unsorted_segment_sum), which is how gradients of gathers look.
//
//   IndexedSlices s(Tensor::from_vector<float>({1, 2, 3, 4}, Shape{2, 2}),
//                   Tensor::from_vector<int64_t>({3, 0}, Shape{2}), Shape{5, 2});
//   s.num_slices() == 2;  s.to_dense().at({3, 1}) == 2
//
// Cross-device ops reduce IndexedSlices by concatenation (values and indices, duplicates kept,
// dense_shape of the first), and MEAN divides only the values (cross_device_ops.h).
//
// Thread safety: an immutable value holding tensor handles (see tensor.h).
#pragma once

#include <string>
#include <vector>

#include "tessel/core/shape.h"
#include "tessel/core/tensor.h"

namespace tessel {

class IndexedSlices {
 public:
  // Checks, each failing with kInvalidArgument naming the values: `values` and `indices` are
  // defined; values has rank >= 1; indices has rank 1, an integer dtype (i32 is widened to
  // i64, as TF's _as_indexed_slices_list does) and as many entries as values has rows;
  // dense_shape has values' rank and equals values' shape after the first dimension; every index
  // lies in [0, dense_shape[0]) (TF does not check this; tessel does, once, here).
  IndexedSlices(Tensor values, Tensor indices, Shape dense_shape);

  const Tensor& values() const { return values_; }
  const Tensor& indices() const { return indices_; }  // always i64
  const Shape& dense_shape() const { return dense_shape_; }
  DType dtype() const { return values_.dtype(); }
  int64_t num_slices() const { return indices_.num_elements(); }

  // The dense tensor: zeros of dense_shape with every row added at its index (duplicates sum).
  Tensor to_dense() const;

  // "IndexedSlices(indices=[3,0], values shape=[2,2], dense_shape=[5,2], dtype=f32)".
  std::string to_string() const;

 private:
  Tensor values_;
  Tensor indices_;
  Shape dense_shape_;
};

// TF's aggregate_indexed_slices: the values and the indices of every element concatenated in
// order (no deduplication), with the first element's dense_shape. Empty list, or elements whose
// dtypes or dense shapes differ: kInvalidArgument.
IndexedSlices concat_indexed_slices(const std::vector<IndexedSlices>& slices);

}  // namespace tessel
