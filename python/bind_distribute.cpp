// Bindings of the distribute layer with TF's tf.distribute names: PerReplica, Mirrored,
// IndexedSlices, CrossDeviceOps and its implementations, CommunicationOptions.
//
// Conversions only. Python arguments are converted as TF's Python layer accepts them (tensors as
// tessel.Tensor or anything numpy accepts; destinations as a device string, a list of them or a
// DistributedValues; reduce_op as ReduceOp or its name); results come back as TF returns them
// (regroup: the plain tensor for one destination, else a Mirrored). Calls release the GIL while
// the devices work.
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <pybind11/functional.h>

#include "casters.h"
#include "tessel/alloc/fusion_rules.h"
#include "tessel/core/error.h"
#include "tessel/distribute/collective_keys.h"
#include "tessel/distribute/cross_device_ops.h"
#include "tessel/distribute/tf_helpers.h"
#include "tessel/runtime/runtime.h"

namespace tessel::python {
namespace {

constexpr std::string_view kOps = "CrossDeviceOps";

[[noreturn]] void value_error(std::string message) {
  throw Error(ErrorCode::kInvalidArgument, kOps, message);
}

bool is_list_or_tuple(py::handle h) {
  return py::isinstance<py::list>(h) || py::isinstance<py::tuple>(h);
}

Value to_value(py::handle obj) {
  if (py::isinstance<IndexedSlices>(obj)) return obj.cast<IndexedSlices>();
  return to_tensor(obj);
}

py::object from_value(const Value& v) {
  if (const auto* t = std::get_if<Tensor>(&v)) return py::cast(*t);
  return py::cast(std::get<IndexedSlices>(v));
}

// TF's return value: regroup of the Mirrored.
py::object from_result(const Mirrored& m) {
  return std::visit([](const auto& r) { return py::cast(r); }, regroup(m));
}

std::vector<Value> to_values(const py::sequence& values) {
  std::vector<Value> out;
  for (py::handle v : values) out.push_back(to_value(v));
  return out;
}

std::vector<std::string> devices_or_default(const std::optional<std::vector<std::string>>& devices,
                                            size_t count) {
  if (devices) return *devices;
  return first_devices(static_cast<int>(count));
}

// TF's validate_destinations type rule, then the forms tessel accepts.
Destinations to_destinations(py::handle d) {
  if (py::isinstance<DistributedValues>(d)) return Destinations(d.cast<const DistributedValues&>());
  if (py::isinstance<py::str>(d)) return Destinations(d.cast<std::string>());
  if (py::isinstance<Tensor>(d)) return Destinations(d.cast<const Tensor&>());
  if (is_list_or_tuple(d)) {
    std::vector<std::string> names;
    bool all_strings = true;
    for (py::handle item : d) {
      all_strings = all_strings && py::isinstance<py::str>(item);
      if (all_strings) names.push_back(item.cast<std::string>());
    }
    if (all_strings) return Destinations(std::move(names));
  }
  value_error(std::string(kDestinationsTypeMessage));
}

// TF's _make_tensor_into_per_replica.
DistributedValues to_distributed(py::handle v) {
  if (py::isinstance<DistributedValues>(v)) return v.cast<const DistributedValues&>();
  if (is_list_or_tuple(v)) {
    value_error("Cannot convert `input_tensor` to a `PerReplica` object, got " +
                py::repr(v).cast<std::string>() +
                " but expected a object that is not a tuple or list.");
  }
  return make_tensor_into_per_replica(to_value(v), "");  // tessel tensors have no device
}

ReduceOp to_reduce_op(py::handle op) {
  if (py::isinstance<py::str>(op)) return reduce_op_from_name(op.cast<std::string>());
  return op.cast<ReduceOp>();
}

CommunicationOptions to_options(const std::optional<CommunicationOptions>& options) {
  return options.value_or(CommunicationOptions());
}

CommunicationImplementation to_implementation(py::handle impl) {
  if (py::isinstance<CommunicationImplementation>(impl))
    return impl.cast<CommunicationImplementation>();
  if (py::isinstance<py::str>(impl)) {
    return communication_implementation_from_name(impl.cast<std::string>());
  }
  return communication_implementation_from_name(py::repr(impl).cast<std::string>());
}

// TF's _normalize_value_destination_pairs (its texts), then the conversions above.
std::vector<ValueDestinationPair> to_pairs(py::handle pairs) {
  if (!is_list_or_tuple(pairs)) value_error("`value_destination_pairs` should be a list or tuple");
  std::vector<ValueDestinationPair> out;
  for (py::handle pair : pairs) {
    if (!py::isinstance<py::tuple>(pair)) {
      value_error("Each element of `value_destination_pairs` should be a tuple.");
    }
    auto t = pair.cast<py::tuple>();
    if (t.size() != 2) {
      value_error("Each element of `value_destination_pairs` should be a tuple of size 2.");
    }
    out.emplace_back(to_distributed(t[0]), to_destinations(t[1]));
  }
  return out;
}

py::dict plan_dict(const CrossDevicePlan& plan) {
  py::list steps;
  for (const PlanStep& s : plan.steps) {
    py::dict d;
    d["kind"] = s.kind;
    d["algorithm"] = s.algorithm;
    d["num_tensors"] = s.num_tensors;
    d["num_elements"] = s.num_elements;
    d["dtype"] = std::string(dtype_name(s.dtype));
    d["devices"] = s.devices;
    steps.append(d);
  }
  py::dict out;
  out["method"] = plan.method;
  out["path"] = plan.path;
  out["steps"] = steps;
  out["mean_divisors"] = plan.mean_divisors;
  out["num_collectives"] = plan.num_collectives();
  return out;
}

Runtime& runtime_or_global(Runtime* runtime) { return runtime ? *runtime : Runtime::global(); }

void bind_values(py::module_& m) {
  py::class_<IndexedSlices>(m, "IndexedSlices", R"doc(
Sparse rows of a dense tensor (TF's tf.IndexedSlices): values [k, ...], indices [k] (i64),
dense_shape. Rows may repeat; to_dense() adds them.)doc")
      .def(py::init([](py::handle values, py::handle indices, Shape dense_shape) {
             return IndexedSlices(to_tensor(values), to_tensor(indices), std::move(dense_shape));
           }),
           py::arg("values"), py::arg("indices"), py::arg("dense_shape"))
      .def_property_readonly("values", &IndexedSlices::values)
      .def_property_readonly("indices", &IndexedSlices::indices)
      .def_property_readonly("dense_shape", &IndexedSlices::dense_shape)
      .def_property_readonly("dtype", &IndexedSlices::dtype)
      .def("to_dense", &IndexedSlices::to_dense)
      .def("__repr__", &IndexedSlices::to_string);

  py::class_<DistributedValues>(m, "DistributedValues", R"doc(
One value per device (TF's tf.distribute.DistributedValues). .values and .devices are tuples in
component order.)doc")
      .def_property_readonly("values",
                             [](const DistributedValues& v) {
                               py::list out;
                               for (const Value& x : v.values()) out.append(from_value(x));
                               return py::tuple(out);
                             })
      .def_property_readonly(
          "devices", [](const DistributedValues& v) { return py::tuple(py::cast(v.devices())); })
      .def("__len__", &DistributedValues::size)
      .def("__repr__", &DistributedValues::to_string);

  const char* init_doc =
      "values: tensors (tessel.Tensor, numpy arrays, array-likes) or IndexedSlices; devices: "
      "their device names, default devices 0..n-1 of the global runtime.";
  py::class_<PerReplica, DistributedValues>(m, "PerReplica", "Each device holds its own value.")
      .def(py::init([](const py::sequence& values,
                       const std::optional<std::vector<std::string>>& devices) {
             std::vector<Value> v = to_values(values);
             std::vector<std::string> names = devices_or_default(devices, v.size());
             return PerReplica(std::move(names), std::move(v));
           }),
           py::arg("values"), py::arg("devices") = py::none(), init_doc);
  py::class_<Mirrored, DistributedValues>(m, "Mirrored", "Every device holds the same value.")
      .def(py::init([](const py::sequence& values,
                       const std::optional<std::vector<std::string>>& devices) {
             std::vector<Value> v = to_values(values);
             std::vector<std::string> names = devices_or_default(devices, v.size());
             return Mirrored(std::move(names), std::move(v));
           }),
           py::arg("values"), py::arg("devices") = py::none(), init_doc);
}

void bind_options(py::module_& m) {
  py::enum_<CommunicationImplementation>(m, "CommunicationImplementation")
      .value("AUTO", CommunicationImplementation::kAuto)
      .value("RING", CommunicationImplementation::kRing)
      .value("NCCL", CommunicationImplementation::kNccl);

  py::class_<CommunicationOptions>(m, "CommunicationOptions", R"doc(
TF's tf.distribute.experimental.CommunicationOptions: bytes_per_pack (0: one pack),
timeout_seconds (None or 0: the process default deadline), implementation (AUTO, RING, NCCL or
their names, case-insensitive).)doc")
      .def(py::init([](int64_t bytes_per_pack, std::optional<double> timeout_seconds,
                       py::handle implementation) {
             return CommunicationOptions(bytes_per_pack, timeout_seconds,
                                         to_implementation(implementation));
           }),
           py::arg("bytes_per_pack") = 0, py::arg("timeout_seconds") = py::none(),
           py::arg("implementation") = CommunicationImplementation::kAuto)
      .def_property_readonly("bytes_per_pack", &CommunicationOptions::bytes_per_pack)
      .def_property_readonly("timeout_seconds", &CommunicationOptions::timeout_seconds)
      .def_property_readonly("implementation", &CommunicationOptions::implementation)
      .def("merge", &CommunicationOptions::merge, py::arg("options"))
      .def(py::self == py::self)
      .def("__repr__", &CommunicationOptions::to_string);

  m.def("split_into_packs", &split_into_packs, py::arg("total_elements"), py::arg("num_packs"));
  m.def(
      "group_by_size",
      [](const std::vector<std::optional<int64_t>>& tensor_bytes, int64_t bytes_per_pack) {
        std::vector<int64_t> bytes;
        for (const auto& b : tensor_bytes) bytes.push_back(b.value_or(kUnknownTensorBytes));
        return group_by_size(bytes, bytes_per_pack);
      },
      py::arg("tensor_bytes"), py::arg("bytes_per_pack"),
      "A None size is a tensor of unknown shape (TF then puts every tensor in one pack).");
}

// TF's helpers around cross-device ops (tf_helpers.h) and CollectiveKeys.
void bind_tf_helpers(py::module_& m) {
  py::enum_<VariableAggregation>(m, "VariableAggregation")
      .value("NONE", VariableAggregation::kNone)
      .value("SUM", VariableAggregation::kSum)
      .value("MEAN", VariableAggregation::kMean)
      .value("ONLY_FIRST_REPLICA", VariableAggregation::kOnlyFirstReplica);
  m.def("reduce_op_from_variable_aggregation", &reduce_op_from_variable_aggregation,
        py::arg("aggregation"));
  m.attr("ReduceOp").attr("from_variable_aggregation") = py::staticmethod(
      py::cpp_function(&reduce_op_from_variable_aggregation, py::arg("aggregation")));
  m.def("collective_hints", &collective_hints, py::arg("bytes_per_pack") = 0,
        py::arg("timeout_seconds") = py::none(),
        "TF's deprecated CollectiveHints: the CommunicationOptions with these fields.");
  m.attr("CollectiveHints") = m.attr("collective_hints");
  m.attr("Hints") = m.attr("collective_hints");
  m.def(
      "select_cross_device_ops",
      [](const std::vector<std::string>& devices, const py::object& session_config,
         Runtime* runtime) {
        (void)session_config;  // TF's session_config only chooses which devices are visible
        return select_cross_device_ops(devices, runtime_or_global(runtime));
      },
      py::arg("devices"), py::arg("session_config") = py::none(), py::arg("runtime") = nullptr,
      py::keep_alive<0, 3>());
  py::class_<HierarchicalCopyStep>(m, "HierarchicalCopyStep")
      .def_readonly("group_0_main", &HierarchicalCopyStep::group_0_main)
      .def_readonly("group_1_main", &HierarchicalCopyStep::group_1_main)
      .def_readonly("group_0", &HierarchicalCopyStep::group_0)
      .def_readonly("group_1", &HierarchicalCopyStep::group_1)
      .def_readonly("copy_from", &HierarchicalCopyStep::copy_from);
  m.def("hierarchical_copy_plan", &hierarchical_copy_plan, py::arg("num_devices"),
        py::arg("num_tensors"));
  py::class_<CollectiveKeys>(m, "CollectiveKeys", "TF's group and instance key sequences.")
      .def(py::init<int64_t>(), py::arg("group_key_start") = 1)
      .def("get_group_key", &CollectiveKeys::get_group_key, py::arg("devices"))
      .def("get_instance_key", &CollectiveKeys::get_instance_key, py::arg("group_key"),
           py::arg("device"))
      .def("__deepcopy__",
           [](const CollectiveKeys& k, const py::dict&) { return std::make_unique<CollectiveKeys>(k); });
}

void bind_ops(py::module_& m) {
  using Options = std::optional<CommunicationOptions>;
  py::class_<CrossDeviceOps>(m, "CrossDeviceOps", R"doc(
TF's tf.distribute.CrossDeviceOps over the devices of a Runtime (default: the global one).
The base class implements only broadcast; use ReductionToOneDevice, NcclAllReduce,
HierarchicalCopyAllReduce or CollectiveAllReduce.)doc")
      .def(py::init([](Runtime* runtime) {
             return std::make_unique<CrossDeviceOps>(runtime_or_global(runtime));
           }),
           py::arg("runtime") = nullptr, py::keep_alive<1, 2>())
      .def(
          "reduce",
          [](CrossDeviceOps& ops, py::handle reduce_op, py::handle per_replica_value,
             py::handle destinations, const Options& options) {
            const ReduceOp op = to_reduce_op(reduce_op);
            const DistributedValues value = to_distributed(per_replica_value);
            const Destinations dest = to_destinations(destinations);
            std::optional<Mirrored> out;
            {
              py::gil_scoped_release release;
              out.emplace(ops.reduce(op, value, dest, to_options(options)));
            }
            return from_result(*out);
          },
          py::arg("reduce_op"), py::arg("per_replica_value"), py::arg("destinations"),
          py::arg("options") = py::none())
      .def(
          "batch_reduce",
          [](CrossDeviceOps& ops, py::handle reduce_op, py::handle value_destination_pairs,
             const Options& options) {
            const ReduceOp op = to_reduce_op(reduce_op);
            const std::vector<ValueDestinationPair> pairs = to_pairs(value_destination_pairs);
            std::vector<Mirrored> out;
            {
              py::gil_scoped_release release;
              out = ops.batch_reduce(op, pairs, to_options(options));
            }
            py::list results;
            for (const Mirrored& r : out) results.append(from_result(r));
            return results;
          },
          py::arg("reduce_op"), py::arg("value_destination_pairs"), py::arg("options") = py::none())
      .def(
          "broadcast",
          [](CrossDeviceOps& ops, py::handle tensor, py::handle destinations) {
            const Tensor t = to_tensor(tensor);
            const Destinations dest = to_destinations(destinations);
            std::optional<Mirrored> out;
            {
              py::gil_scoped_release release;
              out.emplace(ops.broadcast(t, dest));
            }
            return from_result(*out);
          },
          py::arg("tensor"), py::arg("destinations"))
      .def(
          "gather",
          [](CrossDeviceOps& ops, py::handle per_replica_value, py::handle destinations, int axis,
             const Options& options) {
            if (py::isinstance<IndexedSlices>(per_replica_value)) {
              throw Error(ErrorCode::kUnimplemented, kOps,
                          "gather/all_gather does not support IndexedSlices");
            }
            const DistributedValues value = to_distributed(per_replica_value);
            const Destinations dest = to_destinations(destinations);
            std::optional<Mirrored> out;
            {
              py::gil_scoped_release release;
              out.emplace(ops.gather(value, dest, axis, to_options(options)));
            }
            return from_result(*out);
          },
          py::arg("per_replica_value"), py::arg("destinations"), py::arg("axis"),
          py::arg("options") = py::none())
      .def(
          "last_plan", [](const CrossDeviceOps& ops) { return plan_dict(ops.last_plan()); },
          "What the last call ran: method, path, steps (kind, algorithm, num_tensors, "
          "num_elements, dtype, devices), mean_divisors, num_collectives.")
      .def_property_readonly("num_collectives", &CrossDeviceOps::num_collectives)
      .def_property_readonly("num_between_graph_workers",
                             &CrossDeviceOps::num_between_graph_workers);

  py::class_<ReductionToOneDevice, CrossDeviceOps>(m, "ReductionToOneDevice")
      .def(py::init([](std::optional<std::string> reduce_to_device,
                       ReductionToOneDevice::AccumulationFn accumulation_fn, Runtime* runtime) {
             return std::make_unique<ReductionToOneDevice>(reduce_to_device.value_or(""),
                                                           std::move(accumulation_fn),
                                                           runtime_or_global(runtime));
           }),
           py::arg("reduce_to_device") = py::none(), py::arg("accumulation_fn") = nullptr,
           py::arg("runtime") = nullptr, py::keep_alive<1, 4>(),
           "accumulation_fn(list of Tensors) -> Tensor replaces the sum (TF's add_n).")
      .def_property_readonly("reduce_to_device", &ReductionToOneDevice::reduce_to_device);

  py::class_<AllReduceCrossDeviceOps, CrossDeviceOps>(m, "AllReduceCrossDeviceOps")
      .def(py::init([](std::string all_reduce_alg, int num_packs, Runtime* runtime) {
             return std::make_unique<AllReduceCrossDeviceOps>(std::move(all_reduce_alg), num_packs,
                                                              runtime_or_global(runtime));
           }),
           py::arg("all_reduce_alg") = "nccl", py::arg("num_packs") = 1,
           py::arg("runtime") = nullptr, py::keep_alive<1, 4>())
      .def_property_readonly("all_reduce_alg", &AllReduceCrossDeviceOps::all_reduce_alg)
      .def_property_readonly("num_packs", &AllReduceCrossDeviceOps::num_packs);

  py::class_<NcclAllReduce, AllReduceCrossDeviceOps>(m, "NcclAllReduce")
      .def(py::init([](int num_packs, Runtime* runtime) {
             return std::make_unique<NcclAllReduce>(num_packs, runtime_or_global(runtime));
           }),
           py::arg("num_packs") = 1, py::arg("runtime") = nullptr, py::keep_alive<1, 3>());

  py::class_<HierarchicalCopyAllReduce, AllReduceCrossDeviceOps>(m, "HierarchicalCopyAllReduce")
      .def(py::init([](int num_packs, Runtime* runtime) {
             return std::make_unique<HierarchicalCopyAllReduce>(num_packs,
                                                                runtime_or_global(runtime));
           }),
           py::arg("num_packs") = 1, py::arg("runtime") = nullptr, py::keep_alive<1, 3>());

  py::class_<CollectiveAllReduce, CrossDeviceOps>(m, "CollectiveAllReduce")
      .def(py::init([](std::vector<std::string> devices, int group_size, const Options& options,
                       Runtime* runtime) {
             return std::make_unique<CollectiveAllReduce>(
                 std::move(devices), group_size, to_options(options), runtime_or_global(runtime));
           }),
           py::arg("devices"), py::arg("group_size"), py::arg("options") = py::none(),
           py::arg("runtime") = nullptr, py::keep_alive<1, 5>())
      .def_property_readonly("devices", &CollectiveAllReduce::devices)
      .def_property_readonly("group_size", &CollectiveAllReduce::group_size)
      .def_property_readonly("options", &CollectiveAllReduce::options);

  m.def(
      "reduce_non_distributed_value",
      [](py::handle reduce_op, py::handle value, py::handle destinations, int num_replicas_in_graph,
         Runtime* runtime) -> py::object {
        if (py::isinstance<DistributedValues>(value)) {
          value_error(
              "You are passing a `DistributedValues` to `reduce_non_distributed_value`, "
              "which is not allowed.");
        }
        const bool python_number =
            py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value);
        if (python_number && value.cast<double>() == 0.0) {
          return py::reinterpret_borrow<py::object>(value);  // TF: a Python 0 stays 0
        }
        const ReduceOp op = to_reduce_op(reduce_op);
        const Tensor t = to_tensor(value);
        const Destinations dest = to_destinations(destinations);
        std::optional<std::variant<Tensor, Mirrored>> out;
        {
          py::gil_scoped_release release;
          out.emplace(reduce_non_distributed_value(op, t, dest, num_replicas_in_graph,
                                                   runtime_or_global(runtime)));
        }
        if (auto* m = std::get_if<Mirrored>(&*out)) return from_result(*m);
        return py::cast(std::get<Tensor>(*out));
      },
      py::arg("reduce_op"), py::arg("value"), py::arg("destinations"),
      py::arg("num_replicas_in_graph"), py::arg("runtime") = nullptr,
      "TF's reduce_non_distributed_value: a value that is the same on every replica.");
}

}  // namespace

void bind_distribute(py::module_& m) {
  bind_values(m);
  bind_options(m);
  bind_ops(m);
  bind_tf_helpers(m);
}

}  // namespace tessel::python
