// Conversions shared by the binding files. Include this (not pybind11 directly) in every
// bind_*.cpp so that all translation units see the same type casters.
//
//   tessel::Shape        <-> tuple of ints (loads any sequence of ints, e.g. a numpy shape)
//   tessel::DType        <-> str name ("f32"); loads names, numpy dtypes and numpy scalar types
//   tessel::MeshDimension <-> tessel.MeshDimension namedtuple (loads any (name, size) pair)
//   tessel::PartialDim   <-> (mesh_dim, op name) tuple (loads the op as a str or ReduceOp)
// (PartialShape converts explicitly, by to_partial_shape / partial_shape_list below: a caster
// would make every sequence argument ambiguous between Shape and PartialShape.)
//   std::string          <-  str, as pybind11's own, except that a str UTF-8 cannot encode (a
//                            lone surrogate such as '\ud800') is tessel's InvalidArgumentError
//                            naming the text and where the surrogate is, instead of pybind's
//                            "incompatible function arguments" or "Unable to cast" TypeError.
//                            (A caster is not told which parameter it loads: the message names
//                            the value.)
// and plain conversions: seconds_arg (a timeout in seconds), monotonic_arg (a deadline on
// time.monotonic()'s clock), numpy_dtype_name and
// memory_stats_dict (a MemoryStats as a dict).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "tessel/core/allocator.h"
#include "tessel/core/dtype.h"
#include "tessel/core/error.h"
#include "tessel/core/partial_shape.h"
#include "tessel/core/reduce_op.h"
#include "tessel/core/shape.h"
#include "tessel/core/tensor.h"
#include "tessel/mesh/layout.h"
#include "tessel/mesh/mesh.h"

namespace tessel::python {

namespace py = pybind11;

void bind_core(py::module_& m);
void bind_mesh(py::module_& m);

// PartialShape arguments and results (bind_partial_shape.cpp): None (the unknown rank), a
// PartialShape, or a sequence of ints and Nones (-1 also unknown) in; TF's as_list() out (ints,
// None for unknown extents; None for the unknown rank).
PartialShape to_partial_shape(py::handle obj);
py::object partial_shape_list(const PartialShape& shape);

// MemoryStats as a dict of its fields (bind_core.cpp): Device.memory_stats(), host_memory_stats().
py::dict memory_stats_dict(const MemoryStats& s);

// The tessel.MeshDimension namedtuple class, created by bind_mesh.
py::handle mesh_dimension_type();

// A timeout argument given in seconds, as the C++ milliseconds: rounded up (a positive
// fraction of a millisecond stays positive, not 0, which means "the default"), capped at 1e9 s;
// NaN is kInvalidArgument naming `name` and `component`.
inline std::chrono::milliseconds seconds_arg(double seconds, const char* name,
                                             const char* component) {
  if (std::isnan(seconds)) throw Error(ErrorCode::kInvalidArgument, component, std::string(name) + " is NaN");
  constexpr double kMaxSeconds = 1e9;
  return std::chrono::milliseconds(
      static_cast<int64_t>(std::ceil(std::min(seconds, kMaxSeconds) * 1000.0)));
}

// An absolute deadline given in seconds of Python's time.monotonic() (CLOCK_MONOTONIC, the clock
// of std::chrono::steady_clock on Linux), as a time point; None: unset (the epoch). NaN is
// kInvalidArgument naming `name` and `component`.
inline std::chrono::steady_clock::time_point monotonic_arg(std::optional<double> seconds,
                                                          const char* name,
                                                          const char* component) {
  if (!seconds) return {};
  if (std::isnan(*seconds)) throw Error(ErrorCode::kInvalidArgument, component, std::string(name) + " is NaN");
  constexpr double kMaxSeconds = 1e12;
  return std::chrono::steady_clock::time_point(std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(std::clamp(*seconds, 1e-9, kMaxSeconds))));
}
// The time point as time.monotonic() seconds; None when unset.
inline std::optional<double> monotonic_seconds(std::chrono::steady_clock::time_point t) {
  if (t == std::chrono::steady_clock::time_point{}) return std::nullopt;
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

// A copy of any array-like as a Tensor (Tensor(array, dtype) in Python; bind_core.cpp).
Tensor tensor_from_numpy(py::handle data, std::optional<DType> dtype);
// A tessel.Tensor as it is, or tensor_from_numpy(obj): what every binding taking a host value
// uses, so that a conversion error (e.g. a tensor too large to allocate) reaches the caller as
// tessel's error, never as pybind's "incompatible function arguments".
Tensor to_tensor(py::handle obj);

// The numpy dtype name that holds `dtype`'s values as they are ("float32", "int64", ...);
// nullptr for bf16, which numpy lacks (callers convert bf16 to f32 first or copy).
inline const char* numpy_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "float32";
    case DType::kF64:
      return "float64";
    case DType::kF16:
      return "float16";
    case DType::kI32:
      return "int32";
    case DType::kI64:
      return "int64";
    case DType::kU8:
      return "uint8";
    case DType::kBool:
      return "bool";
    case DType::kU32:
      return "uint32";
    case DType::kI8:
      return "int8";
    case DType::kC128:
      return "complex128";
    case DType::kBF16:
      break;
  }
  return nullptr;
}

// pybind11::implicitly_convertible<Input, Output>() with a per-thread recursion guard. pybind11
// 2.10 guards with one static flag, so while one thread's conversion runs Python code (and may
// let the GIL go, as a numpy copy does) another thread's conversion is refused: a valid call
// failed at random with "incompatible function arguments" when four threads called replicate()
// with numpy inputs. The guard's purpose, no conversion inside a conversion, is per thread.
template <typename Input, typename Output>
void implicitly_convertible_per_thread() {
  auto implicit_caster = [](PyObject* obj, PyTypeObject* type) -> PyObject* {
    thread_local bool converting = false;
    if (converting) return nullptr;
    converting = true;
    struct Reset {
      ~Reset() { converting = false; }
    } reset;
    if (!py::detail::make_caster<Input>().load(obj, false)) return nullptr;
    py::tuple args(1);
    args[0] = obj;
    PyObject* result = PyObject_Call(reinterpret_cast<PyObject*>(type), args.ptr(), nullptr);
    if (result == nullptr) PyErr_Clear();  // as pybind11's: the call then reports the mismatch
    return result;
  };
  py::detail::type_info* info = py::detail::get_type_info(typeid(Output));
  if (info == nullptr) py::pybind11_fail("implicitly_convertible_per_thread: type not bound yet");
  info->implicit_conversions.emplace_back(implicit_caster);
}

}  // namespace tessel::python

namespace pybind11::detail {

// Every std::string parameter and every cast<std::string>() of the module: pybind11's string
// caster, with text UTF-8 cannot encode refused by a tessel::Error (thrown, not `return false`,
// so that the message reaches the caller). Declared here, before any binding uses the caster,
// in the one header every bind_*.cpp includes first.
template <>
struct type_caster<std::string> : string_caster<std::string> {
  bool load(handle src, bool convert) {
    if (src && PyUnicode_Check(src.ptr())) {
      if (PyUnicode_AsUTF8AndSize(src.ptr(), nullptr) == nullptr) {
        PyErr_Clear();
        throw_invalid_text(src);
      }
    }
    return string_caster<std::string>::load(src, convert);
  }

 private:
  [[noreturn]] static void throw_invalid_text(handle src) {
    const Py_ssize_t length = PyUnicode_GetLength(src.ptr());
    Py_ssize_t at = 0;
    Py_UCS4 unit = 0;
    for (; at < length; ++at) {
      unit = PyUnicode_ReadChar(src.ptr(), at);
      if (unit >= 0xD800 && unit <= 0xDFFF) break;
    }
    char where[64];
    std::snprintf(where, sizeof where, "a lone surrogate U+%04X at index %zd",
                  static_cast<unsigned>(unit), static_cast<ssize_t>(at));
    throw tessel::Error(tessel::ErrorCode::kInvalidArgument, "tessel",
                        "str " + static_cast<std::string>(pybind11::str(pybind11::repr(src))) +
                            " is not valid Unicode text (" + where +
                            "); tessel takes text as UTF-8");
  }
};

// True for a sequence that is not a str or bytes.
inline bool is_plain_sequence(handle src) {
  return src && !isinstance<str>(src) && !isinstance<bytes>(src) && isinstance<sequence>(src);
}

template <>
struct type_caster<tessel::Shape> {
  PYBIND11_TYPE_CASTER(tessel::Shape, const_name("tuple[int, ...]"));

  bool load(handle src, bool convert) {
    if (!is_plain_sequence(src)) return false;
    std::vector<int64_t> dims;
    for (handle item : reinterpret_borrow<sequence>(src)) {
      make_caster<int64_t> dim;
      if (!dim.load(item, convert)) return false;
      dims.push_back(cast_op<int64_t>(dim));
    }
    value = tessel::Shape(std::move(dims));  // a negative extent throws tessel::Error
    return true;
  }

  static handle cast(const tessel::Shape& shape, return_value_policy, handle) {
    tuple out(shape.rank());
    for (int i = 0; i < shape.rank(); ++i) out[static_cast<size_t>(i)] = pybind11::int_(shape[i]);
    return out.release();
  }
};

template <>
struct type_caster<tessel::DType> {
  PYBIND11_TYPE_CASTER(tessel::DType, const_name("str"));

  bool load(handle src, bool) {
    if (!src || src.is_none()) return false;
    std::string name;
    if (isinstance<str>(src)) {
      name = src.cast<std::string>();
    } else {
      try {  // numpy.dtype accepts np.float32, np.dtype('int64'), float, bool, ...
        name = str(module_::import("numpy").attr("dtype")(src).attr("name"));
      } catch (const error_already_set&) {
        return false;
      }
    }
    value = tessel::dtype_from_name(name);  // unknown name throws tessel::Error
    return true;
  }

  static handle cast(tessel::DType dtype, return_value_policy, handle) {
    return str(std::string(tessel::dtype_name(dtype))).release();
  }
};

template <>
struct type_caster<tessel::MeshDimension> {
  PYBIND11_TYPE_CASTER(tessel::MeshDimension, const_name("MeshDimension"));

  bool load(handle src, bool convert) {
    if (!is_plain_sequence(src) || len(src) != 2) return false;
    auto pair = reinterpret_borrow<sequence>(src);
    make_caster<std::string> name;
    make_caster<int64_t> size;
    if (!name.load(pair[0], convert) || !size.load(pair[1], convert)) return false;
    value = tessel::MeshDimension{cast_op<std::string>(name), cast_op<int64_t>(size)};
    return true;
  }

  static handle cast(const tessel::MeshDimension& dim, return_value_policy, handle) {
    return tessel::python::mesh_dimension_type()(dim.name, dim.size).release();
  }
};

template <>
struct type_caster<tessel::PartialDim> {
  PYBIND11_TYPE_CASTER(tessel::PartialDim, const_name("tuple[str, str]"));

  bool load(handle src, bool convert) {
    if (!is_plain_sequence(src) || len(src) != 2) return false;
    auto pair = reinterpret_borrow<sequence>(src);
    make_caster<std::string> dim;
    if (!dim.load(pair[0], convert)) return false;
    value.mesh_dim = cast_op<std::string>(dim);
    object op = pair[1];
    if (isinstance<str>(op)) {
      value.op = tessel::reduce_op_from_name(op.cast<std::string>());
      return true;
    }
    make_caster<tessel::ReduceOp> op_caster;
    if (!op_caster.load(op, convert)) return false;
    value.op = cast_op<tessel::ReduceOp>(op_caster);
    return true;
  }

  static handle cast(const tessel::PartialDim& p, return_value_policy, handle) {
    return pybind11::make_tuple(p.mesh_dim, std::string(tessel::reduce_op_name(p.op))).release();
  }
};

}  // namespace pybind11::detail
