// Python entry points that skip pybind11's overload dispatcher for the calls made most often
// (see fast_calls.cpp).
//
//   bind_binary(m, "add", &tessel::add);        // the pybind11 overloads first, as usual
//   use_fast_binary_call(m, "add", &tessel::add);  // then m.add calls the op directly on two
//                                                  // DTensors, the overloads otherwise
#pragma once

#include "casters.h"
#include "tessel/dtensor/dtensor.h"

namespace tessel::python {

// Replaces m.<name> (pybind11 overloads already defined) by a function that calls `op` directly
// when given exactly two DTensors as positional arguments, and the replaced function otherwise.
void use_fast_binary_call(py::module_& m, const char* name,
                          DTensor (*op)(const DTensor&, const DTensor&));

py::object wrap_dtensor(DTensor tensor);  // bind_ops.cpp
// pybind11's record of the DTensor class, looked up once (bind_ops.cpp).
const py::detail::type_info* dtensor_type_info();

}  // namespace tessel::python
