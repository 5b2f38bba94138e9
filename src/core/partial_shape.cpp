// PartialShape: TF's partially known shapes and their Merge (see partial_shape.h).
#include "tessel/core/partial_shape.h"

#include <fmt/format.h>

#include <utility>

#include "core/errors.h"

namespace tessel {
namespace {

constexpr const char* kComponent = "PartialShape";

}  // namespace

PartialShape::PartialShape(std::initializer_list<int64_t> dims)
    : PartialShape(std::vector<int64_t>(dims)) {}

PartialShape::PartialShape(std::vector<int64_t> dims) : rank_known_(true), dims_(std::move(dims)) {
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (dims_[i] < kUnknownDim) {
      detail::throw_invalid(
          kComponent, "dimension {} is {}: an extent must be >= 0, or -1 for unknown", i, dims_[i]);
    }
  }
}

PartialShape::PartialShape(const Shape& shape) : rank_known_(true), dims_(shape.dims()) {}

PartialShape PartialShape::unknown_dims(int rank) {
  if (rank < 0) detail::throw_invalid(kComponent, "rank must be >= 0; got {}", rank);
  return PartialShape(std::vector<int64_t>(static_cast<size_t>(rank), kUnknownDim));
}

int64_t PartialShape::dim(int axis) const {
  const int r = rank();
  if (!rank_known_ || axis < -r || axis >= r) {
    detail::throw_error(ErrorCode::kOutOfRange, kComponent, "dimension {} of shape {}", axis,
                        to_string());
  }
  return dims_[static_cast<size_t>(axis < 0 ? axis + r : axis)];
}

bool PartialShape::is_fully_defined() const {
  if (!rank_known_) return false;
  for (int64_t d : dims_) {
    if (d == kUnknownDim) return false;
  }
  return true;
}

Shape PartialShape::to_shape() const {
  if (!is_fully_defined()) {
    detail::throw_error(ErrorCode::kFailedPrecondition, kComponent, "shape {} is not fully defined",
                        to_string());
  }
  return Shape(dims_);
}

std::optional<PartialShape> PartialShape::try_merge(const PartialShape& other,
                                                    std::string* why) const {
  if (!rank_known_) return other;
  if (!other.rank_known_) return *this;
  if (dims_.size() != other.dims_.size()) {
    if (why)
      *why = fmt::format("Shapes must be equal rank, but are {} and {}", rank(), other.rank());
    return std::nullopt;
  }
  PartialShape merged = *this;
  for (size_t i = 0; i < dims_.size(); ++i) {
    const int64_t a = dims_[i];
    const int64_t b = other.dims_[i];
    if (a == kUnknownDim) {
      merged.dims_[i] = b;
    } else if (b != kUnknownDim && a != b) {
      if (why) {
        *why = fmt::format(
            "Dimension {} in both shapes must be equal, but are {} and {}. Shapes "
            "are {} and {}.",
            i, a, b, to_string(), other.to_string());
      }
      return std::nullopt;
    }
  }
  return merged;
}

bool PartialShape::is_compatible_with(const PartialShape& other) const {
  return try_merge(other).has_value();
}

PartialShape PartialShape::merge(const PartialShape& other) const {
  std::string why;
  std::optional<PartialShape> merged = try_merge(other, &why);
  if (!merged) detail::throw_invalid(kComponent, "{}", why);
  return *merged;
}

std::string PartialShape::to_string() const {
  if (!rank_known_) return "<unknown>";
  std::string text = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i != 0) text += ",";
    text += dims_[i] == kUnknownDim ? std::string("?") : std::to_string(dims_[i]);
  }
  return text + "]";
}

std::ostream& operator<<(std::ostream& os, const PartialShape& shape) {
  return os << shape.to_string();
}

}  // namespace tessel
