// Shape: the extents of a tensor, one non-negative int64 per dimension (rank 0 = scalar).
//
//   Shape s{8, 6};  s.rank() == 2;  s[1] == 6;  s.num_elements() == 48;  s.to_string() == "[8,6]"
//
// s[axis] is for axes the caller has checked (an assert in debug builds, unchecked in release);
// an axis that comes from input goes through dim(axis), which throws.
//
// Thread safety: value type.
#pragma once

#include <cassert>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace tessel {

class Shape {
 public:
  Shape() = default;  // rank 0
  // A negative extent: Error kInvalidArgument naming the dimension and value.
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::vector<int64_t> dims);

  int rank() const { return static_cast<int>(dims_.size()); }
  // 0 <= axis < rank() (asserted in debug builds); an axis from input: dim().
  int64_t operator[](int axis) const {
    assert(axis >= 0 && axis < rank() && "Shape::operator[]: axis out of range");
    return dims_[static_cast<size_t>(axis)];
  }
  // Bounds-checked; negative axes count from the end. Out of range: Error kOutOfRange.
  int64_t dim(int axis) const;
  // Product of the extents (1 for rank 0).
  int64_t num_elements() const;
  const std::vector<int64_t>& dims() const { return dims_; }
  // Row-major strides in elements: [6, 1] for [8, 6].
  std::vector<int64_t> strides() const;

  // "[8,6]"; "[]" for a scalar.
  std::string to_string() const;
  // Parses "8,6", "[8,6]" or "" (scalar). Malformed: Error kInvalidArgument.
  static Shape parse(const std::string& text);

  friend bool operator==(const Shape& a, const Shape& b) { return a.dims_ == b.dims_; }

 private:
  std::vector<int64_t> dims_;  // extents, outermost first
};

std::ostream& operator<<(std::ostream& os, const Shape& shape);

}  // namespace tessel
