#include "tessel/core/shape.h"

#include <limits>
#include <optional>
#include <string_view>

#include "core/errors.h"
#include "core/text.h"

namespace tessel {
namespace {

// Rejects negative extents and element counts that do not fit in int64.
void validate(const std::vector<int64_t>& dims) {
  bool has_zero = false;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0) {
      detail::throw_invalid("Shape", "dimension {} has negative extent {} in [{}]", i, dims[i],
                            fmt::join(dims, ","));
    }
    has_zero = has_zero || dims[i] == 0;
  }
  if (has_zero) return;  // the product is 0 whatever the other extents are
  int64_t count = 1;
  for (int64_t d : dims) {
    if (count > std::numeric_limits<int64_t>::max() / d) {
      detail::throw_invalid("Shape", "element count of [{}] overflows int64", fmt::join(dims, ","));
    }
    count *= d;
  }
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

Shape::Shape(std::initializer_list<int64_t> dims) : dims_(dims) { validate(dims_); }

Shape::Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) { validate(dims_); }

int64_t Shape::dim(int axis) const {
  const int r = rank();
  const int resolved = axis < 0 ? axis + r : axis;
  if (resolved < 0 || resolved >= r) {
    detail::throw_error(ErrorCode::kOutOfRange, "Shape",
                        "axis {} is out of range for rank-{} shape {}", axis, r, to_string());
  }
  return dims_[static_cast<size_t>(resolved)];
}

int64_t Shape::num_elements() const {
  for (int64_t d : dims_) {
    if (d == 0) return 0;  // before multiplying: the other extents' product may overflow
  }
  int64_t count = 1;
  for (int64_t d : dims_) count *= d;  // validated not to overflow when no extent is 0
  return count;
}

std::vector<int64_t> Shape::strides() const {
  std::vector<int64_t> strides(dims_.size(), 1);
  for (size_t i = dims_.size(); i > 1; --i) strides[i - 2] = strides[i - 1] * dims_[i - 1];
  return strides;
}

std::string Shape::to_string() const { return fmt::format("[{}]", fmt::join(dims_, ",")); }

Shape Shape::parse(const std::string& text) {
  std::string_view body = trim(text);
  if (!body.empty() && body.front() == '[') {
    if (body.size() < 2 || body.back() != ']') {
      detail::throw_invalid("Shape", "cannot parse '{}': unbalanced '['", text);
    }
    body = trim(body.substr(1, body.size() - 2));
  }
  std::vector<int64_t> dims;
  if (body.empty()) return Shape(dims);  // scalar
  for (const std::string& piece : detail::split(body, ',')) {
    const std::string_view item = trim(piece);
    const std::optional<int64_t> value = detail::parse_integer(item);
    if (!value) {
      detail::throw_invalid("Shape", "cannot parse '{}': '{}' is not an integer extent", text,
                            item);
    }
    dims.push_back(*value);
  }
  return Shape(std::move(dims));
}

std::ostream& operator<<(std::ostream& os, const Shape& shape) { return os << shape.to_string(); }

}  // namespace tessel
