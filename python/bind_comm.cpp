// Bindings of the comm layer: Algorithm, CollectiveOptions, Communicator,
// make_in_process_communicators, collective_groups, group_position, CommunicatorPool.
// Collective calls release the GIL: each rank calls from its own Python thread.
#include <chrono>
#include <optional>

#include "casters.h"
#include "tessel/comm/collective_options.h"
#include "tessel/comm/communicator.h"
#include "tessel/comm/mesh_groups.h"
#include "tessel/comm/nccl.h"
#include "tessel/core/tensor.h"
#include "tessel/runtime/device.h"

namespace tessel::python {
namespace {

using Release = py::call_guard<py::gil_scoped_release>;

CollectiveOptions make_options(const std::string& algorithm, std::optional<double> timeout_seconds,
                               size_t segment_bytes, std::optional<double> deadline) {
  CollectiveOptions o;
  o.deadline = monotonic_arg(deadline, "deadline", "Communicator");
  o.algorithm = algorithm_from_name(algorithm);
  if (timeout_seconds) {
    o.timeout = seconds_arg(*timeout_seconds, "timeout_seconds", "Communicator");
  }
  o.segment_bytes = segment_bytes;
  return o;
}

}  // namespace

void bind_comm(py::module_& m) {
  py::enum_<Algorithm>(m, "Algorithm")
      .value("AUTO", Algorithm::kAuto)
      .value("DIRECT", Algorithm::kDirect)
      .value("RING", Algorithm::kRing)
      .value("HALVING_DOUBLING", Algorithm::kHalvingDoubling)
      .value("REDUCE_TO_ONE", Algorithm::kReduceToOne)
      .value("HIERARCHICAL", Algorithm::kHierarchical)
      .value("MPI", Algorithm::kMpi);
  m.def("algorithm_name", &algorithm_name);
  m.def("algorithm_from_name", &algorithm_from_name);
  m.def("default_collective_timeout",
        [] { return std::chrono::duration<double>(default_collective_timeout()).count(); });

  py::class_<CollectiveOptions>(m, "CollectiveOptions",
                                "How one collective runs: algorithm, deadline, ring segment.")
      .def(py::init(&make_options), py::arg("algorithm") = "auto",
           py::arg("timeout_seconds") = py::none(), py::arg("segment_bytes") = 0,
           py::arg("deadline") = py::none())
      .def_readwrite("algorithm", &CollectiveOptions::algorithm)
      .def_property(
          "timeout_seconds",
          [](const CollectiveOptions& o) { return o.timeout.count() / 1000.0; },
          [](CollectiveOptions& o, double s) {
            o.timeout = seconds_arg(s, "timeout_seconds", "Communicator");
          })
      .def_readwrite("segment_bytes", &CollectiveOptions::segment_bytes)
      .def_property(
          "deadline", [](const CollectiveOptions& o) { return monotonic_seconds(o.deadline); },
          [](CollectiveOptions& o, std::optional<double> s) {
            o.deadline = monotonic_arg(s, "deadline", "Communicator");
          });

  const CollectiveOptions defaults;
  py::class_<Communicator>(m, "Communicator",
                           "One rank's handle on a group; every rank calls the same collectives.")
      .def_property_readonly("rank", &Communicator::rank)
      .def_property_readonly("size", &Communicator::size)
      .def_property_readonly("members", &Communicator::members)
      .def_property_readonly("sequence_number", &Communicator::sequence_number)
      .def("all_reduce", &Communicator::all_reduce, py::arg("input"), py::arg("output"),
           py::arg("op") = ReduceOp::kSum, py::arg("options") = defaults, Release())
      .def("reduce", &Communicator::reduce, py::arg("input"), py::arg("output"), py::arg("op"),
           py::arg("root"), py::arg("options") = defaults, Release())
      .def("broadcast", &Communicator::broadcast, py::arg("tensor"), py::arg("root"),
           py::arg("options") = defaults, Release())
      .def("all_gather", &Communicator::all_gather, py::arg("input"), py::arg("axis") = 0,
           py::arg("options") = defaults, Release())
      .def("reduce_scatter", &Communicator::reduce_scatter, py::arg("input"),
           py::arg("op") = ReduceOp::kSum, py::arg("counts") = std::vector<int64_t>{},
           py::arg("options") = defaults, Release())
      .def("all_to_all", &Communicator::all_to_all, py::arg("input"),
           py::arg("send_counts") = std::vector<int64_t>{}, py::arg("options") = defaults,
           Release())
      .def("gather", &Communicator::gather, py::arg("input"), py::arg("root"),
           py::arg("axis") = 0, py::arg("options") = defaults, Release())
      .def("scatter", &Communicator::scatter, py::arg("input"), py::arg("root"),
           py::arg("counts") = std::vector<int64_t>{}, py::arg("options") = defaults, Release())
      .def("send", &Communicator::send, py::arg("tensor"), py::arg("peer"), py::arg("tag") = 0,
           py::arg("options") = defaults, Release())
      .def("recv", &Communicator::recv, py::arg("tensor"), py::arg("peer"), py::arg("tag") = 0,
           py::arg("options") = defaults, Release())
      .def("barrier", &Communicator::barrier, py::arg("options") = defaults, Release())
      .def("abort", &Communicator::abort, py::arg("reason"));

  m.def(
      "make_in_process_communicators",
      [](int size, std::vector<std::string> names) {
        std::vector<std::unique_ptr<Communicator>> comms =
            make_in_process_communicators(size, std::move(names));
        py::list out;
        for (auto& c : comms) out.append(py::cast(std::move(c)));
        return out;
      },
      py::arg("size"), py::arg("names") = std::vector<std::string>{});
  m.def("nccl_available", &nccl_available);
  m.def("nccl_version", &nccl_version);
  m.def(
      "make_nccl_communicators",
      [](py::list gpus) {
        std::vector<Device*> devices;
        for (py::handle g : gpus) devices.push_back(g.cast<Device*>());
        std::vector<std::unique_ptr<Communicator>> comms = make_nccl_communicators(devices);
        py::list out;
        for (size_t i = 0; i < comms.size(); ++i) {
          py::object comm = py::cast(std::move(comms[i]));
          py::detail::keep_alive_impl(comm, gpus[i]);  // the device (and its Runtime) outlive it
          out.append(comm);
        }
        return out;
      },
      py::arg("gpus"),
      "One NCCL group over GPU devices of this process, rank r on gpus[r] (one per GPU).");
  m.def("collective_groups", &collective_groups, py::arg("mesh"), py::arg("dims"));
  py::class_<GroupPosition>(m, "GroupPosition")
      .def_readonly("group", &GroupPosition::group)
      .def_readonly("rank", &GroupPosition::rank)
      .def_readonly("members", &GroupPosition::members);
  m.def("group_position", &group_position, py::arg("mesh"), py::arg("dims"), py::arg("offset"));
  py::class_<CommunicatorPool>(m, "CommunicatorPool")
      .def(py::init<>())
      .def(py::init<std::shared_ptr<Cluster>>(), py::arg("cluster"))
      .def(
          "get",
          [](CommunicatorPool& pool, const Mesh& mesh, const std::vector<std::string>& dims,
             int64_t offset, double join_timeout_seconds) -> Communicator& {
            py::gil_scoped_release release;
            return pool.get(mesh, dims, offset,
                            seconds_arg(join_timeout_seconds, "join_timeout_seconds", "CommunicatorPool"));
          },
          py::arg("mesh"), py::arg("dims"), py::arg("offset"), py::arg("join_timeout_seconds") = 0.0,
          py::return_value_policy::reference_internal)
      .def("num_groups", &CommunicatorPool::num_groups);
}

}  // namespace tessel::python
