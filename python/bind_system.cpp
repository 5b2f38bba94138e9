// Bindings of the system layer: Topology, the lifecycle (Host, SystemCoordinator, the channel,
// start_system / stop_system) and TF DTensor's initialize_accelerator_system /
// shutdown_accelerator_system. Timeouts are seconds (TF's startup_timeout_sec); blocking calls
// release the GIL, so Python threads can play several hosts.
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <pybind11/functional.h>

#include "casters.h"
#include "tessel/core/error.h"
#include "tessel/mesh/topology.h"
#include "tessel/runtime/runtime.h"
#include "tessel/system/accelerator_system.h"
#include "tessel/system/mpi_system_channel.h"
#include "tessel/system/system.h"
#include "tessel/system/system_channel.h"

namespace tessel::python {
namespace {

using Release = py::call_guard<py::gil_scoped_release>;
using Coordinates = std::vector<std::vector<std::vector<int>>>;

py::bytes to_bytes(const std::string& s) { return py::bytes(s); }

// device_coordinates as TF's rank-3 int32 array [num_tasks, num_devices_per_task, mesh rank].
py::array_t<int32_t> coordinates_array(const Topology& t) {
  py::array_t<int32_t> out({static_cast<py::ssize_t>(t.num_tasks()),
                            static_cast<py::ssize_t>(t.num_devices_per_task()),
                            static_cast<py::ssize_t>(t.mesh_rank())});
  std::copy(t.device_coordinates().begin(), t.device_coordinates().end(), out.mutable_data());
  return out;
}

py::array_t<int32_t> missing_array(const Topology& t) {
  const std::vector<std::vector<int>> missing = t.missing_devices();
  py::array_t<int32_t> out(
      {static_cast<py::ssize_t>(missing.size()), static_cast<py::ssize_t>(t.mesh_rank())});
  int32_t* p = out.mutable_data();
  for (const auto& point : missing) p = std::copy(point.begin(), point.end(), p);
  return out;
}

// TF's Topology(serialized=None, mesh_shape=None, device_coordinates=None).
Topology make_topology(const py::object& serialized, const py::object& mesh_shape,
                       const py::object& device_coordinates, const std::string& device_type) {
  if (!serialized.is_none()) return Topology::from_serialized(serialized.cast<std::string>());
  if (mesh_shape.is_none() || device_coordinates.is_none()) {
    throw Error(ErrorCode::kInvalidArgument, "Topology",
                "give serialized, or mesh_shape and device_coordinates");
  }
  Coordinates coordinates;
  try {
    coordinates = device_coordinates.cast<Coordinates>();
  } catch (const py::cast_error&) {
    throw Error(ErrorCode::kInvalidArgument, "Topology",
                "device_coordinates must be a rank 3 integer array [num_tasks, "
                "num_devices_per_task, mesh rank]");
  }
  return Topology(mesh_shape.cast<std::vector<int>>(), coordinates, device_type);
}

void bind_topology(py::module_& m) {
  py::class_<Topology>(m, "Topology", R"doc(
Where every device of a multi-host system sits (TF's tf.tpu.experimental.Topology): hosts
(tasks), devices per host, and each device's coordinates in a mesh. Built from TF's arguments
(serialized TopologyProto bytes, or mesh_shape and a rank-3 device_coordinates array), or with
Topology.for_hosts(num_tasks, devices_per_task). serialized() is TF's wire form.)doc")
      .def(py::init(&make_topology), py::arg("serialized") = py::none(),
           py::arg("mesh_shape") = py::none(), py::arg("device_coordinates") = py::none(),
           py::arg("device_type") = "CPU")
      .def_static("for_hosts", &Topology::for_hosts, py::arg("num_tasks"),
                  py::arg("devices_per_task"), py::arg("device_type") = "CPU")
      .def("serialized", [](const Topology& t) { return to_bytes(t.serialized()); })
      .def_property_readonly("mesh_shape", [](const Topology& t) {
        return py::tuple(py::cast(t.mesh_shape()));
      })
      .def_property_readonly("mesh_rank", &Topology::mesh_rank)
      .def_property_readonly("num_tasks", &Topology::num_tasks)
      .def_property_readonly("num_devices_per_task", &Topology::num_devices_per_task)
      .def_property_readonly("num_tpus_per_task", &Topology::num_devices_per_task,
                             "TF's name for num_devices_per_task.")
      .def_property_readonly("num_devices", &Topology::num_devices)
      .def_property_readonly("device_type", &Topology::device_type)
      .def_property_readonly("device_coordinates", &coordinates_array,
                             "int32 array [num_tasks, num_devices_per_task, mesh_rank].")
      .def_property_readonly("missing_devices", &missing_array,
                             "int32 array [n, mesh_rank] of the mesh points without a device.")
      .def("task_ordinal_at_coordinates", &Topology::task_ordinal_at_coordinates,
           py::arg("device_coordinates"))
      .def("device_ordinal_at_coordinates", &Topology::device_ordinal_at_coordinates,
           py::arg("device_coordinates"))
      .def("tpu_device_ordinal_at_coordinates", &Topology::device_ordinal_at_coordinates,
           py::arg("device_coordinates"), "TF's name for device_ordinal_at_coordinates.")
      .def("device_name_at_coordinates", &Topology::device_name_at_coordinates,
           py::arg("device_coordinates"), py::arg("job") = "localhost")
      .def("global_device_id", &Topology::global_device_id, py::arg("task"), py::arg("device"))
      .def("global_device_ids", &Topology::global_device_ids, py::arg("task"))
      .def("device_name", &Topology::device_name, py::arg("task"), py::arg("device"),
           py::arg("job") = "localhost")
      .def(py::self == py::self)
      .def(py::self != py::self)
      .def("__repr__", &Topology::to_string);
}

void bind_lifecycle_types(py::module_& m) {
  py::enum_<HostState>(m, "HostState")
      .value("NEW", HostState::kNew)
      .value("DISCONNECTED", HostState::kDisconnected)
      .value("INITIALIZED", HostState::kInitialized)
      .value("RUNNING", HostState::kRunning)
      .value("FAILED", HostState::kFailed);
  py::enum_<SystemState>(m, "SystemState")
      .value("UNCONFIGURED", SystemState::kUnconfigured)
      .value("CONFIGURED", SystemState::kConfigured)
      .value("RUNNING", SystemState::kRunning)
      .value("FAILED", SystemState::kFailed)
      .value("SHUT_DOWN", SystemState::kShutDown);

  py::class_<HostConfiguration>(m, "HostConfiguration", R"doc(
The output of configure_distributed_system (step 2) and the input of initialize_host (step 3);
TF's TPUHostConfiguration.)doc")
      .def_readonly("generation", &HostConfiguration::generation)
      .def_readonly("num_hosts", &HostConfiguration::num_hosts)
      .def_readonly("devices_per_host", &HostConfiguration::devices_per_host)
      .def_readonly("coordinator_task", &HostConfiguration::coordinator_task)
      .def_readonly("enable_whole_mesh_compilations",
                    &HostConfiguration::enable_whole_mesh_compilations)
      .def_readonly("topology", &HostConfiguration::topology)
      .def("serialized", [](const HostConfiguration& c) { return to_bytes(c.serialized()); })
      .def_static("from_serialized",
                  [](const py::bytes& b) { return HostConfiguration::from_serialized(b); },
                  py::arg("serialized"))
      .def(py::self == py::self)
      .def("__repr__", [](const HostConfiguration& c) {
        return "HostConfiguration(generation=" + std::to_string(c.generation) +
               ", num_hosts=" + std::to_string(c.num_hosts) +
               ", devices_per_host=" + std::to_string(c.devices_per_host) + ")";
      });

  py::class_<SystemChannel, std::shared_ptr<SystemChannel>>(m, "SystemChannel", R"doc(
How the hosts talk to the coordinator (task 0). make_in_process_system_channel(n) makes one for
n hosts simulated in this process.)doc")
      .def_property_readonly("num_hosts", &SystemChannel::num_hosts);
  m.def("make_in_process_system_channel", &make_in_process_system_channel, py::arg("num_hosts"));
  m.def(
      "make_mpi_system_channel",
      [](double timeout, double close_timeout) {
        MpiSystemChannelOptions options;
        options.timeout = seconds_arg(timeout, "timeout_sec", "System");
        options.close_timeout = seconds_arg(close_timeout, "close_timeout_sec", "System");
        py::gil_scoped_release release;
        return make_mpi_system_channel(options);
      },
      py::arg("timeout_sec") = 20.0, py::arg("close_timeout_sec") = 1.0, R"doc(
A channel whose hosts are the processes of the MPI job (host = MPI rank, coordinator = rank 0).
Collective over MPI_COMM_WORLD; needs an initialised MPI (tessel.MpiEnvironment): otherwise
FailedPreconditionError (UnavailableError in a build without MPI).)doc");
}

void bind_host(py::module_& m) {
  py::class_<Host>(m, "Host", R"doc(
One host of a system: a Runtime (its task is the host's) and its end of the channel. Steps 1, 3
and 5 of the lifecycle: disconnect_host(), initialize_host(config), set_global_topology(t).)doc")
      .def(py::init<Runtime&, std::shared_ptr<SystemChannel>>(), py::arg("runtime"),
           py::arg("channel"), py::keep_alive<1, 2>())
      .def_property_readonly("task", &Host::task)
      .def_property_readonly("state", &Host::state)
      .def_property_readonly("epoch", &Host::epoch)
      .def_property_readonly("runtime", &Host::runtime, py::return_value_policy::reference_internal)
      .def_property_readonly("channel", &Host::channel)
      .def("disconnect_host", &Host::disconnect_host, Release(),
           "Step 1: leaves any system; returns this host's device count.")
      .def(
          "initialize_host",
          [](Host& h, const HostConfiguration& config,
             std::optional<bool> enable_whole_mesh_compilations, int cancellation) {
            py::gil_scoped_release release;
            return h.initialize_host(config, {enable_whole_mesh_compilations, cancellation});
          },
          py::arg("config"), py::arg("enable_whole_mesh_compilations") = py::none(),
          py::arg("tpu_cancellation_closes_chips") = 0,
          "Step 3: joins the system; returns this host's global device ids.")
      .def("set_global_topology", &Host::set_global_topology, py::arg("topology"), Release(),
           "Step 5: records the global topology.")
      .def_property_readonly("configuration", &Host::configuration)
      .def_property_readonly("global_device_ids", &Host::global_device_ids)
      .def_property_readonly("topology", &Host::topology)
      .def("on_disconnect", &Host::on_disconnect, py::arg("key"), py::arg("listener"),
           "Runs listener() after every later disconnect_host (one per key).");
}

ConfigureOptions configure_options(bool whole_mesh, std::optional<Topology> topology) {
  return ConfigureOptions{whole_mesh, std::move(topology)};
}

// TF's step inputs come as plain ints / int lists, or as arrays (numpy or tessel.Tensor) whose
// rank TF checks: a list of arrays goes to the C++ overload taking Tensors (which checks it).
// Decided here because pybind11's overload resolution would try to read a 0-d array as a list.
bool holds_arrays(const py::sequence& items) {
  if (items.size() == 0) return false;
  for (py::handle item : items) {
    if (!py::isinstance<py::array>(item) && !py::isinstance<Tensor>(item)) return false;
  }
  return true;
}

void bind_coordinator(py::module_& m) {
  py::class_<SystemCoordinator>(m, "SystemCoordinator", R"doc(
The coordinator of a system, on the Host of task 0 (BR-102-02): steps 2 and 4 and the shutdown.
Steps take TF's inputs: a list of ints (or integer scalars) for configure, a list of id lists
(or integer vectors) for wait.)doc")
      .def(py::init<const Host&>(), py::arg("host"), py::keep_alive<1, 2>())
      .def_property_readonly("num_hosts", &SystemCoordinator::num_hosts)
      .def_property_readonly("state", &SystemCoordinator::state)
      .def_property_readonly("configuration", &SystemCoordinator::configuration)
      .def(
          "configure_distributed_system",
          [](SystemCoordinator& c, const py::sequence& counts, bool whole_mesh,
             std::optional<Topology> topology) {
            ConfigureOptions options = configure_options(whole_mesh, std::move(topology));
            if (holds_arrays(counts)) {
              const auto inputs = counts.cast<std::vector<Tensor>>();
              py::gil_scoped_release release;
              return c.configure_distributed_system(inputs, options);
            }
            const auto values = counts.cast<std::vector<int>>();
            py::gil_scoped_release release;
            return c.configure_distributed_system(values, options);
          },
          py::arg("host_device_counts"), py::arg("enable_whole_mesh_compilations") = false,
          py::arg("topology") = py::none(),
          "Step 2: one device count per host (ints, or integer scalars); returns the "
          "HostConfiguration.")
      .def(
          "wait_for_distributed_system",
          [](SystemCoordinator& c, const py::sequence& per_host_ids, double timeout) {
            const auto ms = seconds_arg(timeout, "startup_timeout_sec", "System");
            if (holds_arrays(per_host_ids)) {
              const auto inputs = per_host_ids.cast<std::vector<Tensor>>();
              py::gil_scoped_release release;
              return c.wait_for_distributed_system(inputs, ms);
            }
            const auto ids = per_host_ids.cast<std::vector<std::vector<int64_t>>>();
            py::gil_scoped_release release;
            return c.wait_for_distributed_system(ids, ms);
          },
          py::arg("per_host_ids") = py::list(), py::arg("startup_timeout_sec") = 20.0,
          "Step 4: waits until every host reported step 3; returns the Topology. Raises "
          "DeadlineExceededError (a TimeoutError) naming the hosts that did not.")
      .def(
          "shutdown_distributed_system",
          [](SystemCoordinator& c, double timeout) {
            const auto ms = seconds_arg(timeout, "disconnect_timeout_sec", "System");
            py::gil_scoped_release release;
            c.shutdown_distributed_system(ms);
          },
          py::arg("disconnect_timeout_sec") = 0.0)
      .def(
          "gather_device_counts",
          [](SystemCoordinator& c, double timeout) {
            const auto ms = seconds_arg(timeout, "timeout_sec", "System");
            py::gil_scoped_release release;
            return c.gather_device_counts(ms);
          },
          py::arg("timeout_sec"));

  m.def(
      "start_system",
      [](Host& host, SystemCoordinator* coordinator, double timeout, bool whole_mesh,
         std::optional<Topology> topology) {
        StartOptions options;
        options.configure = configure_options(whole_mesh, std::move(topology));
        options.startup_timeout = seconds_arg(timeout, "startup_timeout_sec", "System");
        py::gil_scoped_release release;
        return start_system(host, coordinator, options);
      },
      py::arg("host"), py::arg("coordinator") = nullptr, py::arg("startup_timeout_sec") = 20.0,
      py::arg("enable_whole_mesh_compilations") = false, py::arg("topology") = py::none(),
      "Runs the five steps for one host (task 0 passes its coordinator); returns the Topology.");
  m.def(
      "stop_system",
      [](Host& host, SystemCoordinator* coordinator, double timeout) {
        const auto ms = seconds_arg(timeout, "timeout_sec", "System");
        py::gil_scoped_release release;
        stop_system(host, coordinator, ms);
      },
      py::arg("host"), py::arg("coordinator") = nullptr, py::arg("timeout_sec") = 20.0,
      "Disconnects the host; on task 0 then shuts the system down.");
}

void bind_accelerator_system(py::module_& m) {
  py::class_<AcceleratorSystemInfo>(m, "AcceleratorSystemInfo", R"doc(
What initialize_accelerator_system brought up (TF returns only the device type:
info.device_type).)doc")
      .def_readonly("device_type", &AcceleratorSystemInfo::device_type)
      .def_readonly("num_devices", &AcceleratorSystemInfo::num_devices)
      .def_readonly("num_local_devices", &AcceleratorSystemInfo::num_local_devices)
      .def_readonly("num_hosts", &AcceleratorSystemInfo::num_hosts)
      .def_readonly("task", &AcceleratorSystemInfo::task)
      .def_readonly("local_device_ids", &AcceleratorSystemInfo::local_device_ids)
      .def_readonly("topology", &AcceleratorSystemInfo::topology)
      .def_readonly("enable_whole_mesh_compilations",
                    &AcceleratorSystemInfo::enable_whole_mesh_compilations)
      .def_readonly("enable_coordination_service",
                    &AcceleratorSystemInfo::enable_coordination_service)
      .def_readonly("experimental_reset_context",
                    &AcceleratorSystemInfo::experimental_reset_context)
      .def_readonly("owns_runtime", &AcceleratorSystemInfo::owns_runtime)
      .def("__repr__", [](const AcceleratorSystemInfo& i) {
        return "AcceleratorSystemInfo(device_type=" + i.device_type +
               ", num_devices=" + std::to_string(i.num_devices) +
               ", num_hosts=" + std::to_string(i.num_hosts) + ", task=" + std::to_string(i.task) +
               ")";
      });

  m.def(
      "initialize_accelerator_system",
      [](std::optional<std::string> device_type, bool enable_coordination_service,
         std::optional<int> num_logical_cpu_devices, bool experimental_reset_context,
         std::optional<std::string> job, bool whole_mesh, double startup_timeout,
         double shutdown_timeout, std::shared_ptr<SystemChannel> channel,
         std::optional<int> task) {
        AcceleratorSystemOptions o;
        o.device_type = device_type.value_or("CPU");
        o.enable_coordination_service = enable_coordination_service;
        o.num_logical_cpu_devices = num_logical_cpu_devices.value_or(-1);
        o.experimental_reset_context = experimental_reset_context;
        o.job = job.value_or("");
        o.enable_whole_mesh_compilations = whole_mesh;
        o.startup_timeout = seconds_arg(startup_timeout, "startup_timeout_sec", "System");
        o.shutdown_timeout = seconds_arg(shutdown_timeout, "shutdown_timeout_sec", "System");
        o.channel = std::move(channel);
        o.task = task;
        py::gil_scoped_release release;
        return initialize_accelerator_system(o);
      },
      py::arg("device_type") = py::none(), py::arg("enable_coordination_service") = true,
      py::arg("num_logical_cpu_devices") = py::none(),
      py::arg("experimental_reset_context") = false, py::kw_only(), py::arg("job") = py::none(),
      py::arg("enable_whole_mesh_compilations") = false, py::arg("startup_timeout_sec") = 20.0,
      py::arg("shutdown_timeout_sec") = 20.0, py::arg("channel") = nullptr,
      py::arg("task") = py::none(),
      R"doc(
TF DTensor's initialize_accelerator_system: brings up this process's host of the system
(by default a one-host system; under mpirun one host per process over MPI, task = client_id(),
which needs a tessel.MpiEnvironment first). job None means job_name(); task None means
client_id(). Returns an AcceleratorSystemInfo. device_type None means "CPU";
num_logical_cpu_devices None means TESSEL_CPU_DEVICES (default 4). Initializing twice without a
shutdown raises FailedPreconditionError with TF's text.)doc");
  m.def("shutdown_accelerator_system", &shutdown_accelerator_system, Release(),
        "Takes the system down (waits for queued work first); re-initialisable afterwards.");
  m.def("is_accelerator_system_initialized", &is_accelerator_system_initialized);
  m.def("accelerator_system_info", &accelerator_system_info);
  m.def(
      "accelerator_system_runtime",
      []() {
        // Runtime is bound with a unique_ptr holder: hand out a reference that keeps a copy of
        // the shared_ptr alive, so the runtime outlives a shutdown while Python holds it.
        std::shared_ptr<Runtime> runtime = accelerator_system_runtime();
        py::object obj = py::cast(runtime.get(), py::return_value_policy::reference);
        py::capsule holder(new std::shared_ptr<Runtime>(runtime), [](void* p) {
          delete static_cast<std::shared_ptr<Runtime>*>(p);
        });
        py::detail::keep_alive_impl(obj, holder);
        return obj;
      },
      "The system's Runtime (Runtime.global_runtime() where it fits, else its own).");
}

}  // namespace

void bind_system(py::module_& m) {
  bind_topology(m);
  bind_lifecycle_types(m);
  bind_host(m);
  bind_coordinator(m);
  bind_accelerator_system(m);
}

}  // namespace tessel::python
