// Multi-process bindings: the MPI transport (mpi.h), clusters (cluster.h), which cluster a
// runtime's DTensors use (multi_client.h) and the client configuration (clients.h). Same names
// as C++; no logic.
#include "casters.h"
#include "tessel/comm/cluster.h"
#include "tessel/comm/mpi.h"
#include "tessel/comm/multi_client.h"
#include "tessel/runtime/clients.h"

namespace tessel::python {
namespace {

py::list communicator_list(std::vector<std::unique_ptr<Communicator>> comms) {
  py::list out;
  for (auto& c : comms) {
    if (c) {
      out.append(py::cast(std::move(c)));
    } else {
      out.append(py::none());
    }
  }
  return out;
}

MpiCommunicatorOptions mpi_options(const std::string& name, double timeout_seconds,
                                   bool watch_local_peers, double stuck_exit_after_seconds) {
  MpiCommunicatorOptions o;
  o.name = name;
  o.timeout = seconds_arg(timeout_seconds, "timeout_seconds", "MPI");
  o.watch_local_peers = watch_local_peers;
  o.stuck_exit_after = seconds_arg(stuck_exit_after_seconds, "stuck_exit_after_seconds", "MPI");
  return o;
}

// MpiCommunicatorOptions::stuck_exit_after's default, in seconds.
const double kStuckExitAfterSeconds =
    std::chrono::duration<double>(MpiCommunicatorOptions{}.stuck_exit_after).count();

}  // namespace

void bind_mpi(py::module_& m) {
  m.def("mpi_available", &mpi_available);
  m.def("mpi_library_version", &mpi_library_version);
  m.def("mpi_rank", &mpi_rank);
  m.def("mpi_size", &mpi_size);
  py::class_<MpiEnvironment>(m, "MpiEnvironment",
                             "MPI for the object's lifetime (MPI_Init_thread ... MPI_Finalize).")
      .def(py::init<>())
      .def_property_readonly("thread_level", [](const MpiEnvironment& e) {
        return std::string(mpi_thread_level_name(e.thread_level()));
      })
      .def_property_readonly("owns_mpi", &MpiEnvironment::owns_mpi);
  m.def(
      "make_mpi_communicator",
      [](const std::string& name, double timeout_seconds, bool watch_local_peers, double stuck) {
        std::unique_ptr<Communicator> comm;
        {
          py::gil_scoped_release release;
          comm = make_mpi_communicator(mpi_options(name, timeout_seconds, watch_local_peers, stuck));
        }
        return comm;
      },
      py::arg("name") = "", py::arg("timeout_seconds") = 0.0, py::arg("watch_local_peers") = true,
      py::arg("stuck_exit_after_seconds") = kStuckExitAfterSeconds);
  m.def(
      "make_hierarchical_communicators",
      [](int local_devices, const std::string& name, double timeout_seconds, bool watch,
         double stuck) {
        std::vector<std::unique_ptr<Communicator>> comms;
        {
          py::gil_scoped_release release;
          comms = make_hierarchical_communicators(local_devices,
                                                  mpi_options(name, timeout_seconds, watch, stuck));
        }
        return communicator_list(std::move(comms));
      },
      py::arg("local_devices"), py::arg("name") = "", py::arg("timeout_seconds") = 0.0,
      py::arg("watch_local_peers") = true, py::arg("stuck_exit_after_seconds") = kStuckExitAfterSeconds);

  py::class_<Cluster, std::shared_ptr<Cluster>>(m, "Cluster",
                                                "How this client's devices reach other clients'.")
      .def_property_readonly("num_clients", &Cluster::num_clients)
      .def_property_readonly("client_id", &Cluster::client_id)
      .def(
          "join",
          [](Cluster& c, const std::vector<std::string>& members, const std::vector<int>& owners,
             double timeout_seconds) {
            std::vector<std::unique_ptr<Communicator>> comms;
            {
              py::gil_scoped_release release;
              comms = c.join(members, owners, seconds_arg(timeout_seconds, "timeout_seconds", "Cluster"));
            }
            return communicator_list(std::move(comms));
          },
          py::arg("members"), py::arg("owners"), py::arg("timeout_seconds") = 0.0);
  m.def("make_in_process_cluster", &make_in_process_cluster, py::arg("num_clients"));
  m.def(
      "make_mpi_cluster",
      [](const std::string& name, double timeout_seconds, double stuck) {
        return make_mpi_cluster(mpi_options(name, timeout_seconds, true, stuck));
      },
      py::arg("name") = "", py::arg("timeout_seconds") = 0.0,
      py::arg("stuck_exit_after_seconds") = kStuckExitAfterSeconds);
  m.def("set_cluster", &set_cluster, py::arg("runtime"), py::arg("cluster"));
  m.def("cluster_of", &cluster_of, py::arg("runtime"));

  py::class_<ClientConfig>(m, "ClientConfig", "Who a client is: num_clients, client_id, job.")
      .def(py::init([](int num_clients, int client_id, std::string job) {
             return ClientConfig{num_clients, client_id, std::move(job)};
           }),
           py::arg("num_clients") = 1, py::arg("client_id") = 0, py::arg("job") = "localhost")
      .def_readwrite("num_clients", &ClientConfig::num_clients)
      .def_readwrite("client_id", &ClientConfig::client_id)
      .def_readwrite("job", &ClientConfig::job);
  m.def("client_config", &client_config);
  m.def("_create_distributed_mesh_for_client",
        py::overload_cast<const std::vector<MeshDimension>&, const std::vector<std::string>&,
                          const ClientConfig&, const std::string&, bool>(&create_distributed_mesh),
        py::arg("mesh_dims"), py::arg("local_devices"), py::arg("client"), py::arg("mesh_name") = "",
        py::arg("use_xla_spmd") = false);
}

}  // namespace tessel::python
