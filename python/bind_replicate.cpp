// Bindings of the replicate layer: ReplicateMetadata (TF's TPUReplicateMetadata attributes),
// StepMarkerLocation, DeviceAssignment (tf.tpu.experimental.DeviceAssignment),
// the replicated-input merges, ReplicatedVariable, replicated_output, dummy_input,
// ReplicaContext, ReplicateOptions, replicate and replica_device_names. Needs Topology (bound by
// bind_system) and the DTensor classes (bind_dtensor, bind_ops).
//
// replicate(computation, ...) takes a Python callable computation(ctx, inputs) -> list of
// DTensors. replicate() runs with the GIL released; each replica's thread takes the GIL to call
// the callable, and every collective of ReplicaContext (and every op) releases it while it
// waits, so the replicas' Python code interleaves and their device work overlaps. An exception
// the callable raises is re-raised by replicate() as the tessel error class of its code (a
// tessel error keeps its code; ValueError/TypeError -> InvalidArgumentError, IndexError ->
// OutOfRangeError, TimeoutError -> DeadlineExceededError, NotImplementedError ->
// UnimplementedError, anything else -> InternalError), message "replicate: replica <k>: ...",
// with the original exception as __cause__.
//
// A late replica (still in its Python code at the call's deadline) is left running when
// replicate() raises: its thread holds a PythonCall (the callable, the runtime's Python object),
// not the caller's frame. If the interpreter exits while it still runs, CPython ends the thread
// when it next waits for the GIL, by unwinding it; that path touches no Python object.
#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "casters.h"
#include "tessel/core/error.h"
#include "tessel/core/partial_shape.h"
#include "tessel/mesh/topology.h"
#include "tessel/replicate/device_assignment.h"
#include "tessel/replicate/execution_devices.h"
#include "tessel/replicate/parameter_info.h"
#include "tessel/replicate/replica_context.h"
#include "tessel/replicate/replicate.h"
#include "tessel/replicate/replicate_metadata.h"
#include "tessel/replicate/replicated_io.h"

namespace tessel::python {

py::list wrap_dtensors(std::vector<DTensor> tensors);  // bind_ops.cpp

namespace {

std::string type_name(const py::handle& obj) {
  return py::str(py::type::of(obj).attr("__name__")).cast<std::string>();
}

// TF: "topology must be a Topology object, got <type>" (DeviceAssignment) and
// "`topology` is not a Topology object; got <type>" (build, which also takes bytes).
Topology topology_arg(const py::object& obj, bool accept_bytes) {
  if (py::isinstance<Topology>(obj)) return obj.cast<Topology>();
  if (accept_bytes && py::isinstance<py::bytes>(obj)) {
    return Topology::from_serialized(obj.cast<std::string>());
  }
  if (accept_bytes) {
    throw Error(ErrorCode::kInvalidArgument, "DeviceAssignment",
                "`topology` is not a Topology object; got " + type_name(obj));
  }
  throw Error(ErrorCode::kInvalidArgument, "DeviceAssignment",
              "topology must be a Topology object, got " + type_name(obj));
}

// Any array-like -> (shape, int32 values), as TF's np.asarray(core_assignment, dtype=np.int32).
DeviceAssignment make_assignment(const py::object& topology, const py::object& core_assignment) {
  Topology t = topology_arg(topology, /*accept_bytes=*/false);
  py::array_t<int32_t, py::array::c_style> array;
  try {
    array = py::module_::import("numpy").attr("asarray")(core_assignment, "int32");
  } catch (py::error_already_set&) {
    throw Error(ErrorCode::kInvalidArgument, "DeviceAssignment",
                "core_assignment must be a rank 3 numpy array, got a ragged nested list "
                "(replicas with different numbers of cores or coordinates of different lengths)");
  }
  array = py::array_t<int32_t, py::array::c_style | py::array::forcecast>::ensure(array);
  std::vector<int64_t> shape(array.shape(), array.shape() + array.ndim());
  std::vector<int> values(array.data(), array.data() + array.size());
  return DeviceAssignment::from_array(std::move(t), shape, values);
}

py::array_t<int32_t> assignment_array(const DeviceAssignment& da) {
  py::array_t<int32_t> out({static_cast<py::ssize_t>(da.num_replicas()),
                            static_cast<py::ssize_t>(da.num_cores_per_replica()),
                            static_cast<py::ssize_t>(da.topology().mesh_rank())});
  std::copy(da.core_assignment().begin(), da.core_assignment().end(), out.mutable_data());
  return out;
}

std::vector<int> optional_ints(const py::object& obj) {
  if (obj.is_none()) return {};
  py::array_t<int32_t, py::array::c_style | py::array::forcecast> a =
      py::module_::import("numpy").attr("asarray")(obj, "int32");
  if (a.ndim() != 1) {
    throw Error(ErrorCode::kInvalidArgument, "DeviceAssignment",
                "computation_shape / computation_stride must be rank 1, got rank " +
                    std::to_string(a.ndim()));
  }
  return {a.data(), a.data() + a.size()};
}

std::string bytes_or_topology(const py::object& obj) {
  if (py::isinstance<Topology>(obj)) return obj.cast<Topology>().serialized();
  return obj.cast<std::string>();
}

void bind_device_assignment(py::module_& m) {
  py::enum_<DeviceOrderMode>(m, "DeviceOrderMode",
                             "TF's tf.tpu.experimental.DeviceOrderMode (AUTO=0, RING=1, MESH=2).")
      .value("AUTO", DeviceOrderMode::kAuto)
      .value("RING", DeviceOrderMode::kRing)
      .value("MESH", DeviceOrderMode::kMesh);
  py::class_<DeviceAssignment>(m, "DeviceAssignment", R"doc(
Which device runs logical core c of replica r (TF's tf.tpu.experimental.DeviceAssignment):
DeviceAssignment(topology, core_assignment) with core_assignment an int array
[num_replicas, num_cores_per_replica, topology.mesh_rank] of mesh coordinates. Validated
(BR-105-03): rank 3, minor dimension = topology rank, coordinates inside the mesh, each an
existing device, no device twice; failures raise InvalidArgumentError (a ValueError).)doc")
      .def(py::init(&make_assignment), py::arg("topology"), py::arg("core_assignment"))
      .def_static(
          "build",
          [](const py::object& topology, const py::object& computation_shape,
             const py::object& computation_stride, int num_replicas, DeviceOrderMode mode) {
            return DeviceAssignment::build(topology_arg(topology, /*accept_bytes=*/true),
                                           optional_ints(computation_shape),
                                           optional_ints(computation_stride), num_replicas, mode);
          },
          py::arg("topology"), py::arg("computation_shape") = py::none(),
          py::arg("computation_stride") = py::none(), py::arg("num_replicas") = 1,
          py::arg("device_order_mode") = DeviceOrderMode::kAuto,
          "TF's DeviceAssignment.build (device_assignment() helper), with TF's order modes.")
      .def_static("from_flat", &DeviceAssignment::from_flat, py::arg("topology"),
                  py::arg("num_replicas"), py::arg("num_cores_per_replica"), py::arg("flat"))
      .def_property_readonly("topology", &DeviceAssignment::topology)
      .def_property_readonly("num_replicas", &DeviceAssignment::num_replicas)
      .def_property_readonly("num_cores_per_replica", &DeviceAssignment::num_cores_per_replica)
      .def_property_readonly("core_assignment", &assignment_array,
                             "int32 array [num_replicas, num_cores_per_replica, mesh_rank].")
      .def(
          "coordinates",
          [](const DeviceAssignment& da, int replica, int logical_core) {
            return py::tuple(py::cast(da.coordinates(replica, logical_core)));
          },
          py::arg("replica"), py::arg("logical_core"))
      .def("lookup_replicas", &DeviceAssignment::lookup_replicas, py::arg("task_id"),
           py::arg("logical_core"))
      .def("task", &DeviceAssignment::task, py::arg("replica") = 0, py::arg("logical_core") = 0)
      .def("tpu_ordinal", &DeviceAssignment::tpu_ordinal, py::arg("replica") = 0,
           py::arg("logical_core") = 0)
      .def("device", &DeviceAssignment::device, py::arg("replica") = 0, py::arg("logical_core") = 0,
           py::arg("job") = "localhost")
      .def("tpu_device", &DeviceAssignment::tpu_device, py::arg("replica") = 0,
           py::arg("logical_core") = 0, py::arg("job") = py::none(),
           "TF's tpu_device: '/job:<job>/task:<t>/device:<type>:<d>', job-less for job=None.")
      .def("host_device", &DeviceAssignment::host_device, py::arg("replica") = 0,
           py::arg("logical_core") = 0, py::arg("job") = py::none(),
           "TF's host_device: '/job:<job>/task:<t>/device:CPU:0', job-less for job=None.")
      .def(py::self == py::self)
      .def(py::self != py::self)
      .def("__repr__", &DeviceAssignment::to_string);
  m.attr("SINGLE_CORE_ASSIGNMENT") = py::cast(DeviceAssignment::CoreAssignment{{{0, 0, 0, 0}}});
}

void bind_execution_devices(py::module_& m) {
  py::class_<ExecutionDevice>(m, "ExecutionDevice", "One logical core: its device and host CPU.")
      .def_readonly("device", &ExecutionDevice::device)
      .def_readonly("host", &ExecutionDevice::host)
      .def("__repr__", [](const ExecutionDevice& d) {
        return "ExecutionDevice(device='" + d.device + "', host='" + d.host + "')";
      });
  py::class_<ExecutionDevices>(
      m, "ExecutionDevices",
      "compilation_and_execution_devices' result (TF's TPUDeviceAssignment).")
      .def_readonly("compilation_device", &ExecutionDevices::compilation_device)
      .def_readonly("execution_devices", &ExecutionDevices::execution_devices,
                    "[replica][logical core] ExecutionDevice.")
      .def_readonly("xla_device_assignment", &ExecutionDevices::xla_device_assignment,
                    "[replica][logical core] XLA device id; empty without a topology.");
  m.def(
      "compilation_and_execution_devices",
      [](const std::vector<std::string>& devices, int num_replicas, int num_cores_per_replica,
         const py::object& topology, const std::vector<int64_t>& device_assignment,
         const std::string& system_device_type, const std::string& core_device_type) {
        return compilation_and_execution_devices(
            devices, num_replicas, num_cores_per_replica,
            topology.is_none() ? std::string() : bytes_or_topology(topology), device_assignment,
            {system_device_type, core_device_type});
      },
      py::arg("devices"), py::arg("num_replicas"), py::arg("num_cores_per_replica") = 1,
      py::arg("topology") = py::none(), py::arg("device_assignment") = std::vector<int64_t>{},
      py::arg("system_device_type") = "TPU_SYSTEM", py::arg("core_device_type") = "TPU",
      "TF's GetTPUCompilationAndExecutionDevices: the compilation device and each (replica, "
      "core)'s device and host, from a job's devices (topology: TopologyProto bytes or a "
      "Topology; device_assignment: the flattened attribute).");
}

void bind_metadata(py::module_& m) {
  py::enum_<StepMarkerLocation>(m, "StepMarkerLocation")
      .value("STEP_MARK_AT_ENTRY", StepMarkerLocation::kStepMarkAtEntry)
      .value("STEP_MARK_AT_TOP_LEVEL_WHILE_LOOP", StepMarkerLocation::kStepMarkAtTopLevelWhileLoop)
      .value("STEP_MARK_NONE", StepMarkerLocation::kStepMarkNone)
      .value("STEP_MARK_AT_SECOND_LEVEL_WHILE_LOOP",
             StepMarkerLocation::kStepMarkAtSecondLevelWhileLoop);
  m.def("step_marker_location_name",
        [](StepMarkerLocation l) { return std::string(step_marker_location_name(l)); });
  m.def("step_marker_location_from_name", &step_marker_location_from_name, py::arg("name"));

  py::class_<ReplicateMetadata>(m, "ReplicateMetadata", R"doc(
TF's TPUReplicateMetadata attributes with TF's defaults (num_replicas is required, as in TF).
topology is serialized TopologyProto bytes (a Topology is accepted and serialized).
validate() checks every attribute (InvalidArgumentError naming it); validate_for_run() also
needs num_replicas >= 1. computation_shape and padding_map are deprecated and rejected.)doc")
      .def(py::init([](int num_replicas, int num_cores_per_replica, const py::object& topology,
                       bool use_tpu, std::vector<int> device_assignment,
                       std::vector<int> computation_shape,
                       std::vector<std::string> host_compute_core,
                       std::vector<std::string> padding_map, std::string step_marker_location,
                       bool allow_soft_placement, bool use_spmd_for_xla_partitioning,
                       bool use_shardy_partitioner, const py::bytes& tpu_compile_options_proto) {
             ReplicateMetadata md;
             md.num_replicas = num_replicas;
             md.num_cores_per_replica = num_cores_per_replica;
             md.topology = bytes_or_topology(topology);
             md.use_tpu = use_tpu;
             md.device_assignment = std::move(device_assignment);
             md.computation_shape = std::move(computation_shape);
             md.host_compute_core = std::move(host_compute_core);
             md.padding_map = std::move(padding_map);
             md.step_marker_location = std::move(step_marker_location);
             md.allow_soft_placement = allow_soft_placement;
             md.use_spmd_for_xla_partitioning = use_spmd_for_xla_partitioning;
             md.use_shardy_partitioner = use_shardy_partitioner;
             md.tpu_compile_options_proto = tpu_compile_options_proto.cast<std::string>();
             return md;
           }),
           py::arg("num_replicas"), py::kw_only(), py::arg("num_cores_per_replica") = 1,
           py::arg("topology") = py::bytes(""), py::arg("use_tpu") = true,
           py::arg("device_assignment") = std::vector<int>{},
           py::arg("computation_shape") = std::vector<int>{},
           py::arg("host_compute_core") = std::vector<std::string>{},
           py::arg("padding_map") = std::vector<std::string>{},
           py::arg("step_marker_location") = ReplicateMetadata::kDefaultStepMarkerLocation,
           py::arg("allow_soft_placement") = false,
           py::arg("use_spmd_for_xla_partitioning") = false,
           py::arg("use_shardy_partitioner") = false,
           py::arg("tpu_compile_options_proto") = py::bytes(""))
      .def_readwrite("num_replicas", &ReplicateMetadata::num_replicas)
      .def_readwrite("num_cores_per_replica", &ReplicateMetadata::num_cores_per_replica)
      .def_property(
          "topology", [](const ReplicateMetadata& md) { return py::bytes(md.topology); },
          [](ReplicateMetadata& md, const py::object& t) { md.topology = bytes_or_topology(t); })
      .def_readwrite("use_tpu", &ReplicateMetadata::use_tpu)
      .def_readwrite("device_assignment", &ReplicateMetadata::device_assignment)
      .def_readwrite("computation_shape", &ReplicateMetadata::computation_shape)
      .def_readwrite("host_compute_core", &ReplicateMetadata::host_compute_core)
      .def_readwrite("padding_map", &ReplicateMetadata::padding_map)
      .def_readwrite("step_marker_location", &ReplicateMetadata::step_marker_location)
      .def_readwrite("allow_soft_placement", &ReplicateMetadata::allow_soft_placement)
      .def_readwrite("use_spmd_for_xla_partitioning",
                     &ReplicateMetadata::use_spmd_for_xla_partitioning)
      .def_readwrite("use_shardy_partitioner", &ReplicateMetadata::use_shardy_partitioner)
      .def_property(
          "tpu_compile_options_proto",
          [](const ReplicateMetadata& md) { return py::bytes(md.tpu_compile_options_proto); },
          [](ReplicateMetadata& md, const py::bytes& b) {
            md.tpu_compile_options_proto = b.cast<std::string>();
          })
      .def("validate", &ReplicateMetadata::validate)
      .def("validate_for_run", &ReplicateMetadata::validate_for_run)
      .def("step_marker", &ReplicateMetadata::step_marker)
      .def("parsed_topology", &ReplicateMetadata::parsed_topology)
      .def("parsed_device_assignment", &ReplicateMetadata::parsed_device_assignment)
      .def("parsed_host_compute_core", &ReplicateMetadata::parsed_host_compute_core)
      .def(py::self == py::self)
      .def(py::self != py::self)
      .def("__repr__", &ReplicateMetadata::to_string);
}

// ---- The replicated inputs and outputs ---------------------------------------------------

std::vector<PartialShape> to_partial_shapes(const py::iterable& shapes) {
  std::vector<PartialShape> out;
  for (py::handle s : shapes) out.push_back(to_partial_shape(s));
  return out;
}

void bind_replicated_io(py::module_& m) {
  m.def(
      "merge_replicated_input_shapes",
      [](const py::iterable& shapes) {
        return merge_replicated_input_shapes(to_partial_shapes(shapes));
      },
      py::arg("shapes"),
      "TPUReplicatedInput's shape function (BR-105-01): the replicas' shapes merged from the last "
      "to the first; a mismatch names both replicas and both shapes.");
  py::class_<HandleShapeAndType>(m, "HandleShapeAndType",
                                 "A resource handle's data: the variable's shape and dtype.")
      .def(py::init([](py::handle shape, DType dtype) {
             return HandleShapeAndType{to_partial_shape(shape), dtype};
           }),
           py::arg("shape"), py::arg("dtype"))
      .def_readwrite("shape", &HandleShapeAndType::shape)
      .def_readwrite("dtype", &HandleShapeAndType::dtype)
      .def(py::self == py::self)
      .def("__repr__", [](const HandleShapeAndType& h) {
        return "HandleShapeAndType(" + h.shape.to_string() + ", " +
               std::string(dtype_name(h.dtype)) + ")";
      });
  py::class_<ReplicatedHandleData>(m, "ReplicatedHandleData", R"doc(
TPUReplicatedInput's handle data for resources, as TF computes it: output (the last input's
handle data that exists, a list of HandleShapeAndType, or None), source (its index, -1 when
none) and inputs (each input's handle data after TF's in-place merge).)doc")
      .def_readonly("output", &ReplicatedHandleData::output)
      .def_readonly("source", &ReplicatedHandleData::source)
      .def_readonly("inputs", &ReplicatedHandleData::inputs)
      .def(py::self == py::self);
  m.def("merge_replicated_handle_shapes_and_types", &merge_replicated_handle_shapes_and_types,
        py::arg("inputs"),
        "TPUReplicatedInput's handle merging for resources (BR-105-02), as TF's code does it: "
        "each input is None (no handle data) or a list of HandleShapeAndType; conflicts are "
        "ignored.");
  py::class_<ReplicatedVariable>(m, "ReplicatedVariable", R"doc(
A variable of a replicated computation: one value per replica (per_replica) or one value mirrored
on every replica (mirrored, TF's is_mirrored_variable), a dtype and a declared handle shape.)doc")
      .def(
          py::init([](std::string name, DType dtype, py::handle handle_shape,
                      std::vector<Tensor> values, bool is_mirrored_variable,
                      VariableAggregation aggregation) {
            ReplicatedVariable v{std::move(name), dtype, to_partial_shape(handle_shape),
                                 std::move(values), is_mirrored_variable};
            v.aggregation = aggregation;
            return v;
          }),
          py::arg("name"), py::arg("dtype"), py::arg("handle_shape") = py::none(),
          py::arg("values") = std::vector<Tensor>{}, py::arg("is_mirrored_variable") = false,
          py::arg("aggregation") = VariableAggregation::kNone)
      .def_static(
          "per_replica",
          [](std::string name, std::vector<Tensor> values, py::handle handle_shape) {
            return ReplicatedVariable::per_replica(std::move(name), std::move(values),
                                                   to_partial_shape(handle_shape));
          },
          py::arg("name"), py::arg("values"), py::arg("handle_shape") = py::none())
      .def_static(
          "mirrored",
          [](std::string name, Tensor value, py::handle handle_shape,
             VariableAggregation aggregation) {
            return ReplicatedVariable::mirrored(std::move(name), std::move(value),
                                                to_partial_shape(handle_shape), aggregation);
          },
          py::arg("name"), py::arg("value"), py::arg("handle_shape") = py::none(),
          py::arg("aggregation") = VariableAggregation::kNone)
      .def_readwrite("name", &ReplicatedVariable::name)
      .def_readwrite("dtype", &ReplicatedVariable::dtype)
      .def_property(
          "handle_shape", [](const ReplicatedVariable& v) { return v.handle_shape; },
          [](ReplicatedVariable& v, py::handle s) { v.handle_shape = to_partial_shape(s); })
      .def_readwrite("values", &ReplicatedVariable::values)
      .def_readwrite("is_mirrored_variable", &ReplicatedVariable::is_mirrored_variable)
      .def_readwrite("aggregation", &ReplicatedVariable::aggregation)
      .def("value", &ReplicatedVariable::value, py::arg("replica"))
      .def("__repr__", [](const ReplicatedVariable& v) {
        return "ReplicatedVariable('" + v.name + "', " + std::string(dtype_name(v.dtype)) + ", " +
               v.handle_shape.to_string() + ", " + std::to_string(v.values.size()) + " values" +
               (v.is_mirrored_variable ? ", mirrored)" : ")");
      });
  m.def("merge_variable_handles", &merge_variable_handles, py::arg("variable"),
        py::arg("num_replicas"));
  m.def(
      "replicated_output",
      [](const DTensor& value, int num_replicas) {
        return wrap_dtensors(replicated_output(value, num_replicas));
      },
      py::arg("value"), py::arg("num_replicas"));
  m.def("replicated_output", py::overload_cast<const Tensor&, int>(&replicated_output),
        py::arg("value"), py::arg("num_replicas"),
        "TPUReplicatedOutput: num_replicas handles of value (the same storage).");
  m.def("dummy_input", &dummy_input, py::arg("dtype"), py::arg("shape"),
        "TPUDummyInput: zeros of f32 or bf16.");
}

// ---- ReplicaContext, replicate -----------------------------------------------------------

void bind_replica_context(py::module_& m) {
  // Shared holder: a context kept past its computation stays a valid object that raises
  // FailedPreconditionError (replica_context.h, "Lifetime").
  py::class_<ReplicaContext, std::shared_ptr<ReplicaContext>>(m, "ReplicaContext", R"doc(
What one replica of replicate() sees: replica_id, num_replicas, mesh (a 1-D mesh "core" of its
devices), runtime, and the cross-replica collectives (every replica calls the same ones in the
same order with a DTensor of the same shape, dtype and layout on its own mesh). Valid during the
computation call only: kept afterwards, replica_id, num_replicas and mesh still read, runtime and
the collectives raise FailedPreconditionError "ReplicaContext: <call> used after replicate()
returned (replica <r> of <n>)".)doc")
      .def_property_readonly("replica_id", &ReplicaContext::replica_id)
      .def_property_readonly("num_replicas", &ReplicaContext::num_replicas)
      .def_property_readonly("mesh", &ReplicaContext::mesh)
      .def_property_readonly("runtime", &ReplicaContext::runtime,
                             py::return_value_policy::reference)
      // The GIL is released while a collective waits; each result keeps its input alive (and
      // with it the input's Runtime, which every DTensor the bindings hand out holds).
      .def("all_reduce", &ReplicaContext::all_reduce, py::arg("x"), py::arg("op") = ReduceOp::kSum,
           py::call_guard<py::gil_scoped_release>(), py::keep_alive<0, 2>())
      .def("all_gather", &ReplicaContext::all_gather, py::arg("x"), py::arg("axis"),
           py::call_guard<py::gil_scoped_release>(), py::keep_alive<0, 2>())
      .def("broadcast", &ReplicaContext::broadcast, py::arg("x"), py::arg("root_replica"),
           py::call_guard<py::gil_scoped_release>(), py::keep_alive<0, 2>())
      .def("barrier", &ReplicaContext::barrier, py::call_guard<py::gil_scoped_release>())
      .def("read_variable", &ReplicaContext::read_variable, py::arg("index"))
      .def("assign_variable", &ReplicaContext::assign_variable, py::arg("index"), py::arg("value"));
}

ReplicateOptions make_options(std::optional<ReplicateMetadata> metadata, Runtime* runtime,
                              double timeout, std::vector<int> packed_inputs) {
  ReplicateOptions o;
  if (metadata) o.metadata = std::move(*metadata);
  o.runtime = runtime;
  o.timeout = seconds_arg(timeout, "timeout", "replicate");
  o.packed_inputs = std::move(packed_inputs);
  return o;
}

// A Python exception -> the tessel::Error replicate() reports: a tessel error keeps its code,
// component and message; builtins map to the codes whose Python classes derive from them.
Error to_error(const py::error_already_set& e, py::handle tessel_error) {
  py::object value = e.value();
  if (py::isinstance(value, tessel_error)) {
    const std::string code = py::str(value.attr("code"));
    for (int c = 0; c < kNumErrorCodes; ++c) {
      if (error_code_name(static_cast<ErrorCode>(c)) != code) continue;
      if (py::hasattr(value, "component") && py::hasattr(value, "message")) {
        return Error(static_cast<ErrorCode>(c),
                     py::str(value.attr("component")).cast<std::string>(),
                     py::str(value.attr("message")).cast<std::string>());
      }
      return Error(static_cast<ErrorCode>(c), type_name(value), py::str(value).cast<std::string>());
    }
  }
  const std::pair<PyObject*, ErrorCode> builtins[] = {
      {PyExc_ValueError, ErrorCode::kInvalidArgument},
      {PyExc_TypeError, ErrorCode::kInvalidArgument},
      {PyExc_IndexError, ErrorCode::kOutOfRange},
      {PyExc_TimeoutError, ErrorCode::kDeadlineExceeded},
      {PyExc_NotImplementedError, ErrorCode::kUnimplemented},
  };
  ErrorCode code = ErrorCode::kInternal;
  for (const auto& [type, c] : builtins) {
    if (PyErr_GivenExceptionMatches(value.ptr(), type)) {
      code = c;
      break;
    }
  }
  return Error(code, type_name(value), py::str(value).cast<std::string>());
}

// The outputs a Python computation returned: a list or tuple of DTensors, one DTensor, or None.
std::vector<DTensor> to_outputs(const py::object& result) {
  if (result.is_none()) return {};
  if (py::isinstance<DTensor>(result)) return {result.cast<DTensor>()};
  if (py::isinstance<py::list>(result) || py::isinstance<py::tuple>(result)) {
    std::vector<DTensor> out;
    for (py::handle item : result) {
      if (!py::isinstance<DTensor>(item)) {
        throw Error(ErrorCode::kInvalidArgument, "replicate",
                    "the computation returned a list holding a " + type_name(item) +
                        "; outputs must be DTensors");
      }
      out.push_back(item.cast<DTensor>());
    }
    return out;
  }
  throw Error(ErrorCode::kInvalidArgument, "replicate",
              "the computation must return a list of DTensors, a DTensor or None; got " +
                  type_name(result));
}

// The Python side of one replicate() call, shared by the replica threads and the caller: a late
// replica (detached when replicate() returns at its deadline) may still use it. It keeps the
// callable and the runtime's Python object alive; its references are dropped with the GIL
// held, or left alone once the interpreter is finalizing (no thread may touch Python then).
struct PythonCall {
  py::object fn;
  py::object tessel_error;         // tessel.Error, to map exceptions to codes
  py::object runtime;              // the options' runtime (None: the global one, never freed)
  std::vector<py::object> raised;  // [replica]: the exception it raised (touched with the GIL)

  PythonCall(py::object f, py::object error, py::object rt, size_t replicas)
      : fn(std::move(f)),
        tessel_error(std::move(error)),
        runtime(std::move(rt)),
        raised(replicas) {}
  PythonCall(const PythonCall&) = delete;
  PythonCall& operator=(const PythonCall&) = delete;
  ~PythonCall() {
    if (!Py_IsInitialized() || interpreter_finalizing()) {
      fn.release();
      tessel_error.release();
      runtime.release();
      for (py::object& e : raised) e.release();
      return;
    }
    py::gil_scoped_acquire gil;
    fn = py::object();
    tessel_error = py::object();
    runtime = py::object();
    raised.clear();
  }

  static bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing() != 0;
#else
    return _Py_IsFinalizing() != 0;
#endif
  }
};

// What a call into Python holds on the replica's thread: the GIL and the arguments. When an
// exiting interpreter ends the thread (CPython ends a thread that waits for the GIL while it
// finalizes, by unwinding it), this is left alone: releasing either would touch Python.
struct PythonFrame {
  py::gil_scoped_acquire gil;
  py::object args;
};

// call->fn(ctx, inputs) on each replica's thread, with the GIL taken.
ReplicaComputation python_computation(std::shared_ptr<PythonCall> call) {
  return [call](ReplicaContext& ctx, const std::vector<DTensor>& inputs) {
    auto frame = std::make_unique<PythonFrame>();
    try {
      frame->args = py::make_tuple(py::cast(ctx.shared_from_this()), wrap_dtensors(inputs));
      // Called directly, so that no temporary of pybind11's call holds Python objects on this
      // stack if the thread is ended inside.
      PyObject* result = PyObject_Call(call->fn.ptr(), frame->args.ptr(), nullptr);
      if (result == nullptr) throw py::error_already_set();
      std::vector<DTensor> outputs = to_outputs(py::reinterpret_steal<py::object>(result));
      frame->args = py::object();
      return outputs;
    } catch (const abi::__forced_unwind&) {
      (void)frame.release();  // the interpreter is ending this thread: leave Python alone
      throw;
    } catch (py::error_already_set& e) {
      call->raised[static_cast<size_t>(ctx.replica_id())] = e.value();
      throw to_error(e, call->tessel_error);
    }
  };
}

// Raises `e` as its tessel error class, with `cause` (if any) as __cause__.
[[noreturn]] void raise_with_cause(py::module_& m, const Error& e, const py::object& cause) {
  py::object cls = m.attr((std::string(error_code_name(e.code())) + "Error").c_str());
  py::object exc = cls(e.what());
  exc.attr("component") = e.component();
  exc.attr("message") = e.message();
  if (cause) exc.attr("__cause__") = cause;
  PyErr_SetObject(cls.ptr(), exc.ptr());
  throw py::error_already_set();
}

void bind_replicate_function(py::module_& m) {
  py::class_<ReplicateOptions>(m, "ReplicateOptions", R"doc(
replicate()'s options: metadata (a ReplicateMetadata: num_replicas, num_cores_per_replica,
device_assignment, topology, use_spmd_for_xla_partitioning, ...), runtime (None: the global
runtime), timeout in seconds: the whole call's deadline (0: the default collective timeout;
replicate() returns by it + 5 % even if a replica's own code overruns: that replica is named in
a DeadlineExceededError and left running, its next collective raising AbortedError),
packed_inputs (indexes of per-replica inputs given as one value for all replicas).)doc")
      .def(py::init(&make_options), py::arg("metadata") = py::none(), py::arg("runtime") = nullptr,
           py::arg("timeout") = 0.0, py::arg("packed_inputs") = std::vector<int>{},
           py::keep_alive<1, 3>())
      .def_readwrite("metadata", &ReplicateOptions::metadata)
      .def_property(
          "runtime", [](const ReplicateOptions& o) { return o.runtime; },
          // keep_alive works only as an attribute of the setter's own cpp_function.
          py::cpp_function([](ReplicateOptions& o, Runtime* runtime) { o.runtime = runtime; },
                           py::keep_alive<1, 2>()),
          py::return_value_policy::reference)
      .def_property(
          "timeout",
          [](const ReplicateOptions& o) {
            return std::chrono::duration<double>(o.timeout).count();
          },
          [](ReplicateOptions& o, double seconds) {
            o.timeout = seconds_arg(seconds, "timeout", "replicate");
          })
      .def_readwrite("packed_inputs", &ReplicateOptions::packed_inputs);

  m.def(
      "replicate",
      [m](const py::function& computation,
          const std::vector<std::vector<Tensor>>& per_replica_inputs,
          const std::vector<Tensor>& broadcast_inputs,
          const std::vector<ReplicatedVariable>& variables,
          const std::vector<Tensor>& guaranteed_constants,
          const ReplicateOptions& options) mutable {
        const size_t replicas = static_cast<size_t>(std::max(options.metadata.num_replicas, 0));
        auto call = std::make_shared<PythonCall>(
            computation, m.attr("Error"),
            options.runtime ? py::cast(options.runtime, py::return_value_policy::reference)
                            : py::none(),
            replicas);
        const ReplicaComputation fn = python_computation(call);
        std::vector<std::vector<DTensor>> outs;
        try {
          py::gil_scoped_release release;
          outs = replicate(fn, per_replica_inputs, broadcast_inputs, variables,
                           guaranteed_constants, options);
        } catch (const Error& e) {
          int replica = -1;
          py::object cause;
          if (std::sscanf(e.message().c_str(), "replica %d:", &replica) == 1 && replica >= 0 &&
              replica < static_cast<int>(replicas)) {
            cause = call->raised[static_cast<size_t>(replica)];
          }
          raise_with_cause(m, e, cause);
        }
        py::list result;
        for (auto& replica : outs) result.append(wrap_dtensors(std::move(replica)));
        return result;
      },
      py::arg("computation"), py::arg("per_replica_inputs") = std::vector<std::vector<Tensor>>{},
      py::arg("broadcast_inputs") = std::vector<Tensor>{},
      py::arg("variables") = std::vector<ReplicatedVariable>{},
      py::arg("guaranteed_constants") = std::vector<Tensor>{},
      py::arg("options") = ReplicateOptions{},
      R"doc(
Runs computation(ctx, inputs) once per replica, concurrently, each on its own devices (TF's
_TPUReplicate). per_replica_inputs is [input][replica]; each replica receives, in order, its
per-replica inputs, the broadcast inputs, the variables and the guaranteed constants as DTensors
replicated on ctx.mesh. Returns [replica][output] DTensors. Safe to call from several threads at
once, over the same devices: the calls interleave on the devices, each within its own timeout.
When the program runs as several clients (processes under mpirun, or set_cluster), the replicas
are placed over every client's devices, each client runs its own and the collectives cross
them; every client makes the same call, and a replica of another client has an empty list.)doc");
  m.def(
      "replica_device_names",
      [](const ReplicateMetadata& metadata, Runtime* runtime) {
        return replica_device_names(metadata, runtime ? *runtime : Runtime::global());
      },
      py::arg("metadata"), py::arg("runtime") = nullptr,
      "[replica][logical core] -> the device replicate() runs it on.");
}

void bind_parameter_info(py::module_& m) {
  py::class_<ParameterInfo> cls(m, "ParameterInfo", R"doc(
_TPUReplicate's host-side argument layout (TF's DistributedTPURewritePass::ParameterInfo):
per-replica inputs replica-major, then distributed, broadcast, variables, guaranteed constants.)doc");
  py::enum_<ParameterInfo::Kind>(cls, "Kind")
      .value("PER_REPLICA", ParameterInfo::Kind::kPerReplica)
      .value("DISTRIBUTED", ParameterInfo::Kind::kDistributed)
      .value("BROADCAST", ParameterInfo::Kind::kBroadcast)
      .value("VARIABLE", ParameterInfo::Kind::kVariable)
      .value("GUARANTEED_CONSTANT", ParameterInfo::Kind::kGuaranteedConstant);
  cls.def(py::init<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>(),
          py::arg("num_replicas"), py::arg("num_per_replica_args"),
          py::arg("num_distributed_args") = 0, py::arg("num_broadcast_args") = 0,
          py::arg("num_variables") = 0, py::arg("num_guaranteed_constants") = 0,
          py::arg("num_retvals_per_replica") = 0)
      .def_property_readonly("num_replicas", &ParameterInfo::num_replicas)
      .def_property_readonly("num_per_replica_args", &ParameterInfo::num_per_replica_args)
      .def_property_readonly("num_distributed_args", &ParameterInfo::num_distributed_args)
      .def_property_readonly("num_broadcast_args", &ParameterInfo::num_broadcast_args)
      .def_property_readonly("num_variables", &ParameterInfo::num_variables)
      .def_property_readonly("num_guaranteed_constants", &ParameterInfo::num_guaranteed_constants)
      .def_property_readonly("num_retvals_per_replica", &ParameterInfo::num_retvals_per_replica)
      .def("num_inputs_from_host", &ParameterInfo::num_inputs_from_host)
      .def("num_inputs_to_each_replica", &ParameterInfo::num_inputs_to_each_replica)
      .def("num_outputs_to_host", &ParameterInfo::num_outputs_to_host)
      .def("first_broadcast_arg_from_host", &ParameterInfo::first_broadcast_arg_from_host)
      .def("kind", &ParameterInfo::kind, py::arg("arg"))
      .def("host_input_index", &ParameterInfo::host_input_index, py::arg("replica"), py::arg("arg"))
      .def("host_output_index", &ParameterInfo::host_output_index, py::arg("replica"),
           py::arg("retval"))
      .def(py::self == py::self)
      .def("__repr__", &ParameterInfo::to_string);
}

}  // namespace

void bind_replicate(py::module_& m) {
  bind_device_assignment(m);
  bind_execution_devices(m);
  bind_metadata(m);
  bind_replicated_io(m);
  bind_parameter_info(m);
  bind_replica_context(m);
  bind_replicate_function(m);
}

}  // namespace tessel::python
