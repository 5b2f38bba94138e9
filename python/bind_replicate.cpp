// Bindings of the replicate layer's metadata: ReplicateMetadata (TF's TPUReplicateMetadata
// attributes), StepMarkerLocation and DeviceAssignment (tf.tpu.experimental.DeviceAssignment).
// Needs Topology, bound by bind_system.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "casters.h"
#include "tessel/device_assignment.h"
#include "tessel/error.h"
#include "tessel/replicate_metadata.h"
#include "tessel/topology.h"

namespace tessel::python {
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
             const py::object& computation_stride, int num_replicas) {
            return DeviceAssignment::build(topology_arg(topology, /*accept_bytes=*/true),
                                           optional_ints(computation_shape),
                                           optional_ints(computation_stride), num_replicas);
          },
          py::arg("topology"), py::arg("computation_shape") = py::none(),
          py::arg("computation_stride") = py::none(), py::arg("num_replicas") = 1,
          "TF's device_assignment() helper.")
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
      .def("device", &DeviceAssignment::device, py::arg("replica") = 0,
           py::arg("logical_core") = 0, py::arg("job") = "localhost")
      .def("tpu_device", &DeviceAssignment::device, py::arg("replica") = 0,
           py::arg("logical_core") = 0, py::arg("job") = "localhost",
           "TF's name for device().")
      .def(
          "host_device",
          [](const DeviceAssignment& da, int replica, int logical_core,
             const std::optional<std::string>& job) {
            return da.host_device(replica, logical_core, job.value_or(""));
          },
          py::arg("replica") = 0, py::arg("logical_core") = 0, py::arg("job") = "localhost",
          "job=None gives TF's job-less '/task:<t>/device:CPU:0'.")
      .def(py::self == py::self)
      .def(py::self != py::self)
      .def("__repr__", &DeviceAssignment::to_string);
  m.attr("SINGLE_CORE_ASSIGNMENT") = py::cast(DeviceAssignment::CoreAssignment{{{0, 0, 0, 0}}});
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

}  // namespace

void bind_replicate(py::module_& m) {
  bind_device_assignment(m);
  bind_metadata(m);
}

}  // namespace tessel::python
