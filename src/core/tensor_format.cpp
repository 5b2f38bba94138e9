// Tensor::to_string and operator<<: numpy-like nested brackets, summarised when large.
#include <ostream>

#include "core/tensor_impl.h"

namespace tessel {
namespace {

// numpy's default print threshold: larger tensors are summarised with "...".
constexpr int64_t kSummaryThreshold = 1000;

struct Formatter {
  const uint8_t* base;                  // storage base
  DType dtype;                          // element type
  const std::vector<int64_t>& dims;     // view extents
  const std::vector<int64_t>& strides;  // view element strides
  int64_t edge_items;                   // entries kept per edge when summarising
  bool summarise;                       // whether long dimensions are elided
  std::string& out;                     // destination

  void element(int64_t offset) const {
    detail::visit_dtype(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T v = reinterpret_cast<const T*>(base)[offset];
      if constexpr (std::is_same_v<T, bool>) {
        out += v ? "true" : "false";
      } else if constexpr (detail::is_complex_v<T>) {
        out += fmt::format("{:g}{:+g}j", v.real(), v.imag());  // numpy's form: 1+2j
      } else if constexpr (std::is_integral_v<T>) {
        out += fmt::format("{}", static_cast<int64_t>(v));
      } else {
        out += fmt::format("{:g}", detail::convert<double>(v));
      }
    });
  }

  // Between entries of a sub-array of rank r at depth d: ", " for rows, otherwise a comma,
  // r - 1 newlines and an indent of d + 1 (numpy's layout).
  std::string separator(size_t depth) const {
    const size_t r = dims.size() - depth;
    if (r == 1) return ", ";
    std::string sep(1, ',');  // built by append: gcc 12 warns falsely on "," + string
    sep.append(r - 1, '\n');
    sep.append(depth + 1, ' ');
    return sep;
  }

  void array(size_t depth, int64_t offset) const {
    if (depth == dims.size()) {
      element(offset);
      return;
    }
    const int64_t n = dims[depth];
    const bool elide = summarise && n > 2 * edge_items;
    const std::string sep = separator(depth);
    out += '[';
    for (int64_t i = 0; i < n; ++i) {
      if (i > 0) out += sep;
      if (elide && i == edge_items) {
        out += "...";
        out += sep;
        i = n - edge_items;
      }
      array(depth + 1, offset + i * strides[depth]);
    }
    out += ']';
  }
};

}  // namespace

std::string Tensor::to_string(int edge_items) const {
  if (!defined()) return "Tensor(null)";
  if (!storage_->space.is_host()) return to_host().to_string(edge_items);
  if (edge_items < 1) {
    detail::throw_invalid("Tensor", "to_string needs edge_items >= 1, got {}", edge_items);
  }
  std::string out =
      fmt::format("Tensor(shape={}, dtype={},\n", shape().to_string(), dtype_name(dtype_));
  const Formatter formatter{
      base(), dtype_, shape().dims(), strides(), edge_items, num_elements() > kSummaryThreshold, out};
  formatter.array(0, offset_);
  out += ')';
  return out;
}

std::ostream& operator<<(std::ostream& os, const Tensor& tensor) {
  return os << tensor.to_string();
}

}  // namespace tessel
