// Bindings of PartialShape (core: TF's partially known shapes) and its Python conversions, which
// the mesh and replicate bindings share (casters.h).
#include <string>
#include <vector>

#include "casters.h"
#include "tessel/core/error.h"
#include "tessel/core/partial_shape.h"

namespace tessel::python {

// None (the unknown rank), a PartialShape, or a sequence of ints and Nones (-1 also unknown).
PartialShape to_partial_shape(py::handle obj) {
  if (obj.is_none()) return PartialShape();
  if (py::isinstance<PartialShape>(obj)) return obj.cast<PartialShape>();
  if (!py::detail::is_plain_sequence(obj)) {
    throw Error(
        ErrorCode::kInvalidArgument, "PartialShape",
        "expected None, a PartialShape or a sequence of ints and Nones; got " +
            py::str(py::type::of(obj).attr("__name__")).cast<std::string>());
  }
  std::vector<int64_t> dims;
  for (py::handle d : py::reinterpret_borrow<py::sequence>(obj)) {
    dims.push_back(d.is_none() ? kUnknownDim : d.cast<int64_t>());
  }
  return PartialShape(std::move(dims));
}

// TF's as_list(): ints with None for unknown extents; None for the unknown rank.
py::object partial_shape_list(const PartialShape& s) {
  if (!s.rank_known()) return py::none();
  py::list out;
  for (int64_t d : s.dims()) out.append(d == kUnknownDim ? py::object(py::none()) : py::int_(d));
  return out;
}

void bind_partial_shape(py::module_& m) {
  py::class_<PartialShape>(m, "PartialShape", R"doc(
A shape that may be partly known (TF's PartialTensorShape): PartialShape(None) has an unknown
rank, PartialShape([2, None]) a known rank with an unknown extent. merge (TF: merge_with) is
TF's Merge; a mismatch raises InvalidArgumentError with TF's text.)doc")
      .def(py::init([](py::handle dims) { return to_partial_shape(dims); }),
           py::arg("dims") = py::none())
      .def_property_readonly("rank",
                             [](const PartialShape& s) -> py::object {
                               if (!s.rank_known()) return py::none();
                               return py::int_(s.rank());
                             })
      .def_property_readonly("dims", &partial_shape_list)
      .def("as_list", &partial_shape_list)
      .def("is_fully_defined", &PartialShape::is_fully_defined)
      .def(
          "is_compatible_with",
          [](const PartialShape& s, py::handle other) {
            return s.is_compatible_with(to_partial_shape(other));
          },
          py::arg("other"))
      .def(
          "merge",
          [](const PartialShape& s, py::handle other) { return s.merge(to_partial_shape(other)); },
          py::arg("other"))
      .def(
          "merge_with",
          [](const PartialShape& s, py::handle other) { return s.merge(to_partial_shape(other)); },
          py::arg("other"), "TF's name for merge.")
      .def("to_shape", &PartialShape::to_shape)
      .def("__eq__",
           [](const PartialShape& s, py::handle other) {
             return py::isinstance<PartialShape>(other) && s == other.cast<PartialShape>();
           })
      .def("__str__", &PartialShape::to_string)
      .def("__repr__", [](const PartialShape& s) { return "PartialShape(" + s.to_string() + ")"; });
}


}  // namespace tessel::python
