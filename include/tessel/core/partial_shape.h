// PartialShape: a shape that may be only partly known (TF's PartialTensorShape / the shapes of
// shape inference): either an unknown rank, or a known rank whose dimensions are each a
// non-negative extent or unknown (kUnknownDim, -1).
//
// replicate() uses it for TF's TPUReplicatedInput shape function (replicated_io.h): the shapes
// of N replicas' inputs are merged into the most refined shape compatible with all of them.
// Layout::local_shape_from_global_shape takes one to keep unknown (dynamic) dimensions, as TF's
// PartialTensorShape overload does.
//
//   PartialShape a({2, kUnknownDim});            // [2,?]
//   PartialShape b({kUnknownDim, 3});            // [?,3]
//   a.merge(b) == PartialShape({2, 3})           // unknown dims unify with known ones
//   PartialShape().merge(a) == a                 // the unknown rank unifies with anything
//   a.merge(PartialShape({3, 3}))                // kInvalidArgument: "Dimension 0 in both
//                                                //   shapes must be equal, but are 2 and 3. ..."
//   a.to_string() == "[2,?]";  PartialShape().to_string() == "<unknown>"
//
// Merge is TF's InferenceContext::Merge: an unknown rank unifies with anything; otherwise the
// ranks must be equal ("Shapes must be equal rank, but are R0 and R1"), and per dimension an
// unknown extent takes the other's, two known extents must be equal ("Dimension d in both shapes
// must be equal, but are A and B. Shapes are [..] and [..]."). Errors are Error kInvalidArgument
// from component "PartialShape".
//
// Thread safety: a value type.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "tessel/core/shape.h"

namespace tessel {

// An unknown extent of a known-rank PartialShape.
inline constexpr int64_t kUnknownDim = -1;

class PartialShape {
 public:
  // The unknown rank.
  PartialShape() = default;
  // A known rank; each entry an extent >= 0 or kUnknownDim. Anything below -1: kInvalidArgument
  // naming the dimension and value.
  PartialShape(std::initializer_list<int64_t> dims);
  explicit PartialShape(std::vector<int64_t> dims);
  // The fully known shape.
  PartialShape(const Shape& shape);  // NOLINT: implicit, a Shape is a fully known PartialShape

  static PartialShape unknown_rank() { return PartialShape(); }
  // Rank `rank` (>= 0), every dimension unknown.
  static PartialShape unknown_dims(int rank);

  bool rank_known() const { return rank_known_; }
  // -1 for the unknown rank.
  int rank() const { return rank_known_ ? static_cast<int>(dims_.size()) : -1; }
  // Empty for the unknown rank.
  const std::vector<int64_t>& dims() const { return dims_; }
  // Dimension `axis` (negative counts from the end); the unknown rank or out of range:
  // kOutOfRange.
  int64_t dim(int axis) const;
  // Known rank and every extent known.
  bool is_fully_defined() const;
  // The Shape of a fully defined PartialShape; otherwise kFailedPrecondition naming it.
  Shape to_shape() const;

  // True when merge() would succeed.
  bool is_compatible_with(const PartialShape& other) const;
  // TF's Merge (see the header comment): the most refined shape compatible with both.
  PartialShape merge(const PartialShape& other) const;
  // As merge, without throwing: nullopt on a mismatch, with TF's text in *why when given.
  std::optional<PartialShape> try_merge(const PartialShape& other,
                                        std::string* why = nullptr) const;

  // "<unknown>" or "[2,?,3]" ("[]" for a scalar), TF's DebugString.
  std::string to_string() const;

  friend bool operator==(const PartialShape&, const PartialShape&) = default;

 private:
  bool rank_known_ = false;
  std::vector<int64_t> dims_;  // kUnknownDim for unknown extents
};

std::ostream& operator<<(std::ostream& os, const PartialShape& shape);

}  // namespace tessel
