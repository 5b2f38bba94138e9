// Python entry points that skip pybind11's overload dispatcher for the calls made most often:
// a binary elementwise op (tessel.add, ...) on two DTensors. pybind11 2.10 spends about as long
// choosing and converting the overload as tessel spends dispatching a tiny op (`tessel bench
// dispatch` against bench/peers/tessel_peer.py), so these calls convert their two arguments
// themselves. Anything else — a scalar, a keyword, a subclass the casters must see — goes to
// the pybind11 function, unchanged. Conversion only, as every binding: the op is the C++ one.
#include "fast_calls.h"

#include <exception>
#include <memory>
#include <string>
#include <utility>

namespace tessel::python {
namespace {

using Binary = DTensor (*)(const DTensor&, const DTensor&);

// What a fast entry point calls: the C++ op, and the pybind11 function for every other call;
// and the method definition CPython reads its name and docstring from.
struct FastBinary {
  Binary op;
  py::object fallback;
  std::string name;
  std::string doc;
  PyMethodDef method{};
};

// The DTensor a Python object of exactly the bound type holds, else null.
const DTensor* exact_dtensor(PyObject* obj) {
  const py::detail::type_info* info = dtensor_type_info();
  if (Py_TYPE(obj) != info->type) return nullptr;
  auto* inst = reinterpret_cast<py::detail::instance*>(obj);
  return static_cast<const DTensor*>(inst->get_value_and_holder(info).value_ptr());
}

// pybind11's own translation of the exception being handled (module-local translators first,
// as its dispatcher does), so that errors read the same on either path.
PyObject* translate_current_exception() {
  if (py::detail::apply_exception_translators(
          py::detail::get_local_internals().registered_exception_translators)) {
    return nullptr;
  }
  if (py::detail::apply_exception_translators(
          py::detail::get_internals().registered_exception_translators)) {
    return nullptr;
  }
  PyErr_SetString(PyExc_SystemError, "an exception escaped tessel's exception translators");
  return nullptr;
}

// METH_FASTCALL | METH_KEYWORDS: `self` is the entry's capsule.
PyObject* call_binary(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  auto* entry = static_cast<FastBinary*>(PyCapsule_GetPointer(self, nullptr));
  const DTensor* x = nargs == 2 && kwnames == nullptr ? exact_dtensor(args[0]) : nullptr;
  const DTensor* y = x != nullptr ? exact_dtensor(args[1]) : nullptr;
  if (y == nullptr) {
    return PyObject_Vectorcall(entry->fallback.ptr(), args, static_cast<size_t>(nargs), kwnames);
  }
  try {
    DTensor out;
    {
      py::gil_scoped_release release;
      out = entry->op(*x, *y);
    }
    return wrap_dtensor(std::move(out)).release().ptr();
  } catch (...) {
    return translate_current_exception();
  }
}

}  // namespace

void use_fast_binary_call(py::module_& m, const char* name,
                          DTensor (*op)(const DTensor&, const DTensor&)) {
  auto entry = std::make_unique<FastBinary>();
  entry->op = op;
  entry->fallback = m.attr(name);
  entry->name = name;
  entry->doc = py::str(entry->fallback.attr("__doc__"));
  entry->method.ml_name = entry->name.c_str();
  entry->method.ml_meth = reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&call_binary));
  entry->method.ml_flags = METH_FASTCALL | METH_KEYWORDS;
  entry->method.ml_doc = entry->doc.c_str();
  PyMethodDef* method = &entry->method;
  // The capsule owns the entry, and with it the fallback, for as long as the function lives.
  const py::capsule self(entry.release(), [](void* p) { delete static_cast<FastBinary*>(p); });
  auto fn = py::reinterpret_steal<py::object>(
      PyCFunction_NewEx(method, self.ptr(), m.attr("__name__").ptr()));
  if (!fn) throw py::error_already_set();
  m.attr(name) = fn;
}

}  // namespace tessel::python
