// DLPack in Python (core/dlpack.h): Tensor.__dlpack__ / __dlpack_device__ (the protocol numpy's
// from_dlpack, torch.from_dlpack and jax.dlpack use) and tessel.from_dlpack. The only work here
// is the capsule protocol: a capsule named "dltensor" owns its DLManagedTensor until a consumer
// renames it "used_dltensor" and takes it over.
#include <dlpack/dlpack.h>

#include "casters.h"
#include "tessel/core/dlpack.h"

namespace tessel::python {
namespace {

constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kUsedCapsuleName = "used_dltensor";

// Runs when the capsule dies: deletes the tensor unless a consumer took it.
void delete_unconsumed(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, kCapsuleName) == 0) return;  // consumed (renamed)
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
}

py::capsule tensor_dlpack(const Tensor& t, const py::object& stream) {
  if (!stream.is_none()) {  // the array API: host arrays take stream=None only
    throw py::buffer_error("Tensor.__dlpack__: host tensors take stream=None, got " +
                           py::repr(stream).cast<std::string>());
  }
  DLManagedTensor* managed = to_dlpack(t);
  PyObject* capsule = PyCapsule_New(managed, kCapsuleName, &delete_unconsumed);
  if (capsule == nullptr) {
    managed->deleter(managed);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(capsule);
}

// An object with __dlpack__ (numpy array, torch tensor, ...) or a "dltensor" capsule.
Tensor tensor_from_dlpack(const py::object& source) {
  py::object capsule = source;
  if (py::hasattr(source, "__dlpack__")) capsule = source.attr("__dlpack__")();
  if (PyCapsule_IsValid(capsule.ptr(), kCapsuleName) == 0) {
    throw py::type_error("from_dlpack: expected an object with __dlpack__ or an unconsumed "
                         "'dltensor' capsule, got " + py::repr(source).cast<std::string>());
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kCapsuleName));
  // Ownership moves to from_dlpack (which releases it on failure too): rename first, so that
  // the capsule's destructor does not delete it a second time.
  if (PyCapsule_SetName(capsule.ptr(), kUsedCapsuleName) != 0) throw py::error_already_set();
  return from_dlpack(managed);
}

}  // namespace

void bind_dlpack(py::module_& m) {
  auto cls = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  cls.def("__dlpack__", &tensor_dlpack, py::arg("stream") = py::none(),
          "A 'dltensor' capsule viewing this tensor's memory (no copy).")
      .def("__dlpack_device__",
           [](const Tensor&) { return py::make_tuple(static_cast<int>(kDLCPU), 0); });
  m.def("from_dlpack", &tensor_from_dlpack, py::arg("x"),
        "A Tensor viewing the memory of x (anything with __dlpack__, or a capsule); no copy.");
}

}  // namespace tessel::python
