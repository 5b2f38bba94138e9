// tessel._tessel: the pybind11 extension behind the `tessel` package.
// One file per layer binds that layer's public headers; this file only assembles them.
#include "casters.h"
#include "tessel/config.h"

namespace tessel::python {
void bind_dlpack(py::module_& m);   // bind_dlpack.cpp (after bind_core: adds Tensor methods)
void bind_partial_shape(py::module_& m);  // bind_partial_shape.cpp (before bind_mesh)
void bind_runtime(py::module_& m);  // bind_runtime.cpp
void bind_comm(py::module_& m);     // bind_comm.cpp
void bind_mpi(py::module_& m);      // bind_mpi.cpp (after bind_comm: returns Communicators)

void bind_distribute(py::module_& m);  // bind_distribute.cpp
void bind_alloc(py::module_& m);       // bind_alloc.cpp
void bind_dtensor(py::module_& m);     // bind_dtensor.cpp
void bind_system(py::module_& m);      // bind_system.cpp
void bind_ops(py::module_& m);         // bind_ops.cpp (after bind_dtensor: adds DTensor operators)
void bind_autodiff(py::module_& m);    // bind_autodiff.cpp
void bind_sharding_fallback(py::module_& m);  // bind_sharding_fallback.cpp
void bind_replicate(py::module_& m);   // bind_replicate.cpp (after bind_system: uses Topology)
void bind_compile(py::module_& m);     // bind_compile.cpp (after bind_replicate)
void bind_checkpoint(py::module_& m);  // bind_checkpoint.cpp (tessel.checkpoint)
void bind_embedding(py::module_& m);   // bind_embedding.cpp (after bind_system: uses Host)
}  // namespace tessel::python

PYBIND11_MODULE(_tessel, m) {
  m.doc() = "tessel: distributed tensors on a device mesh (C++ extension; import tessel).";
  m.attr("__version__") = TESSEL_VERSION_STRING;
  tessel::python::bind_core(m);
  tessel::python::bind_dlpack(m);
  tessel::python::bind_partial_shape(m);
  tessel::python::bind_mesh(m);
  tessel::python::bind_runtime(m);
  tessel::python::bind_distribute(m);
  tessel::python::bind_comm(m);
  tessel::python::bind_mpi(m);
  tessel::python::bind_alloc(m);
  tessel::python::bind_dtensor(m);
  tessel::python::bind_system(m);
  tessel::python::bind_ops(m);
  tessel::python::bind_autodiff(m);
  tessel::python::bind_sharding_fallback(m);
  tessel::python::bind_replicate(m);
  tessel::python::bind_compile(m);  // after bind_replicate: ReplicaContext, ReplicateOptions
  tessel::python::bind_checkpoint(m);
  tessel::python::bind_embedding(m);
}
