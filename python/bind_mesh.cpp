// Bindings of the mesh layer: Mesh, MeshDimension, ShardingSpec, Layout, ShardMap, shard_range.
// Names and argument order follow TensorFlow DTensor's Python API. The only checks here are
// TF's Python argument type checks (ndarray / list), which are argument conversion.
#include <string>
#include <vector>

#include "casters.h"
#include "tessel/core/error.h"
#include "tessel/mesh/layout.h"
#include "tessel/mesh/mesh.h"
#include "tessel/mesh/mesh_spec.h"
#include "tessel/mesh/shard_map.h"
#include "tessel/mesh/shard_range.h"
#include "tessel/mesh/sharding_spec.h"

namespace tessel::python {
namespace {

PyObject* g_mesh_dimension_type = nullptr;  // tessel.MeshDimension; lives as long as the module

[[noreturn]] void invalid_argument(std::string_view component, std::string_view message) {
  throw Error(ErrorCode::kInvalidArgument, component, message);
}

py::tuple to_tuple(const std::vector<int64_t>& values) { return py::tuple(py::cast(values)); }

bool is_list(py::handle h) { return PyList_Check(h.ptr()); }

// A list's items as T; items of the wrong type raise TypeError naming the argument.
template <typename T>
std::vector<T> list_items(py::handle list, const char* what) {
  try {
    return list.cast<std::vector<T>>();
  } catch (const py::cast_error&) {
    throw py::type_error(std::string("Mesh: unexpected item type in ") + what);
  }
}

// Device names from str items or DeviceSpec-like items (anything with to_string()).
std::vector<std::string> device_names(py::handle list, const char* what) {
  std::vector<std::string> names;
  for (py::handle item : list) {
    if (py::isinstance<py::str>(item)) {
      names.push_back(item.cast<std::string>());
    } else if (py::hasattr(item, "to_string")) {
      names.push_back(item.attr("to_string")().cast<std::string>());
    } else {
      throw py::type_error(std::string("Mesh: ") + what + " must hold str or DeviceSpec items");
    }
  }
  return names;
}

// TF's Mesh(dim_names, global_device_ids, local_device_ids, local_devices, mesh_name,
// global_devices, use_xla_spmd). TF's Python type checks 1, 5, 6, 7 are done here while
// converting; every other check is the C++ constructor's.
Mesh make_mesh(const std::vector<std::string>& dim_names, py::handle global_device_ids,
               py::handle local_device_ids, py::handle local_devices, const std::string& mesh_name,
               py::handle global_devices, bool use_xla_spmd) {
  if (!py::isinstance<py::array>(global_device_ids)) {
    invalid_argument("Mesh", "Variable global_device_ids must be an ndarray.");
  }
  // Integers only: forcecast would truncate float ids (1.5 -> 1) without a word.
  const py::dtype id_type = py::reinterpret_borrow<py::array>(global_device_ids).dtype();
  if (id_type.kind() != 'i' && id_type.kind() != 'u') {
    invalid_argument("Mesh", "global_device_ids must hold integers, got dtype " +
                                 id_type.attr("name").cast<std::string>());
  }
  auto ids =
      py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(global_device_ids);
  if (!ids) throw py::type_error("Mesh: global_device_ids must hold integers");
  if (!is_list(local_device_ids)) {
    invalid_argument("Mesh", "Variable local_device_ids must be a list of integers.");
  }
  if (!is_list(local_devices)) {
    invalid_argument("Mesh", "Variable local_devices must be a list of DeviceSpecs.");
  }
  int truthy = PyObject_IsTrue(global_devices.ptr());
  if (truthy < 0) throw py::error_already_set();
  bool has_global = truthy == 1;
  if (has_global && !is_list(global_devices)) {
    invalid_argument("Mesh", "Variable global_devices must be a list of DeviceSpecs.");
  }
  return Mesh(
      dim_names, std::vector<int64_t>(ids.shape(), ids.shape() + ids.ndim()),
      std::vector<int64_t>(ids.data(), ids.data() + ids.size()),
      list_items<int64_t>(local_device_ids, "local_device_ids"),
      device_names(local_devices, "local_devices"), mesh_name,
      has_global ? device_names(global_devices, "global_devices") : std::vector<std::string>{},
      use_xla_spmd);
}

// Mesh dimensions from a list of (name, size) pairs or a {name: size} dict.
std::vector<MeshDimension> mesh_dims_arg(py::handle dims) {
  if (dims.is_none()) return {};
  if (py::isinstance<py::dict>(dims)) dims = py::list(dims.attr("items")()).release();
  return py::cast<std::vector<MeshDimension>>(dims);
}

py::array_t<int64_t> int64_array(const std::vector<int64_t>& values) {
  return py::array_t<int64_t>(static_cast<py::ssize_t>(values.size()), values.data());
}

void bind_mesh_class(py::module_& m) {
  py::object namedtuple = py::module_::import("collections").attr("namedtuple");
  py::object dim_type = namedtuple("MeshDimension", py::make_tuple("name", "size"));
  dim_type.attr("__module__") = "tessel";
  g_mesh_dimension_type = dim_type.inc_ref().ptr();
  m.attr("MeshDimension") = dim_type;

  py::class_<Mesh>(m, "Mesh", "A named n-dimensional grid of devices (TF DTensor's Mesh).")
      .def(py::init(&make_mesh), py::arg("dim_names"), py::arg("global_device_ids"),
           py::arg("local_device_ids"), py::arg("local_devices"), py::arg("mesh_name") = "",
           py::arg("global_devices") = py::none(), py::arg("use_xla_spmd") = false)
      .def_static(
          "create",
          [](py::handle dims, const std::string& device_type, const std::string& mesh_name,
             int64_t num_devices, bool use_xla_spmd) {
            return Mesh::create(mesh_dims_arg(dims), device_type, mesh_name, num_devices,
                                use_xla_spmd);
          },
          py::arg("mesh_dims") = py::none(), py::arg("device_type") = "CPU",
          py::arg("mesh_name") = "", py::arg("num_devices") = -1, py::arg("use_xla_spmd") = false)
      .def_static(
          "create_on_devices",
          [](py::handle dims, py::handle devices, const std::string& mesh_name,
             bool use_xla_spmd) {
            return Mesh::create_on_devices(mesh_dims_arg(dims), device_names(devices, "devices"),
                                           mesh_name, use_xla_spmd);
          },
          py::arg("mesh_dims"), py::arg("devices"), py::arg("mesh_name") = "",
          py::arg("use_xla_spmd") = false)
      .def_static("from_string", &Mesh::from_string, py::arg("mesh_str"))
      .def_static(
          "from_proto", [](const py::bytes& proto) { return Mesh::from_proto(proto); },
          py::arg("proto"))
      .def_static("from_device", &Mesh::from_device, py::arg("device"))
      // Dimensions.
      .def_property_readonly("dim_names", &Mesh::dim_names)
      .def_property_readonly("name", &Mesh::name)
      .def_property_readonly("size", &Mesh::size)
      .def_property_readonly("strides", &Mesh::strides)
      .def("shape", &Mesh::shape)
      .def("rank", &Mesh::rank)
      .def("dims", &Mesh::dims)
      .def("dim_size", &Mesh::dim_size, py::arg("dim_name"))
      .def("dim_index", &Mesh::dim_index, py::arg("dim_name"))
      .def("contains_dim", &Mesh::contains_dim, py::arg("dim_name"))
      .def("__contains__", &Mesh::contains_dim, py::arg("dim_name"))
      .def(
          "__getitem__",
          [](const Mesh& mesh, const std::string& name) {
            return MeshDimension{name, mesh.dim_size(name)};
          },
          py::arg("dim_name"))
      // Coordinates.
      .def(
          "coords", [](const Mesh& mesh, int64_t index) { return int64_array(mesh.coords(index)); },
          py::arg("device_idx"))
      .def("device_location", &Mesh::device_location, py::arg("offset"))
      .def("offset_of", &Mesh::offset_of, py::arg("location"))
      .def("offset_of_device_id", &Mesh::offset_of_device_id, py::arg("device_id"))
      .def("unravel_index", &Mesh::unravel_index)
      .def("local_device_locations",
           [](const Mesh& mesh) {  // TF's form: one {dim name: coordinate} dict per device
             std::vector<std::string> names = mesh.dim_names();
             py::list out;
             for (const std::vector<int64_t>& location : mesh.local_device_locations()) {
               py::dict entry;
               for (size_t i = 0; i < names.size() && i < location.size(); ++i) {
                 entry[py::str(names[i])] = location[i];
               }
               out.append(entry);
             }
             return out;
           })
      // Devices.
      .def("local_device_ids", &Mesh::local_device_ids)
      .def("local_devices", &Mesh::local_devices)
      .def("global_device_ids",
           [](const Mesh& mesh) {  // int64 ndarray of shape shape(), as TF
             return int64_array(mesh.global_device_ids()).attr("reshape")(py::cast(mesh.shape()));
           })
      .def("global_devices", &Mesh::global_devices)
      .def("num_local_devices", &Mesh::num_local_devices)
      .def("min_global_device_id", &Mesh::min_global_device_id)
      .def("is_remote", &Mesh::is_remote)
      .def("is_empty", &Mesh::is_empty)
      .def("is_single_device", &Mesh::is_single_device)
      .def_property_readonly("single_device", &Mesh::single_device)
      .def("device_type", &Mesh::device_type)
      .def("use_xla_spmd", &Mesh::use_xla_spmd)
      .def("host_mesh", &Mesh::host_mesh)
      // Text and wire forms, identity.
      .def("to_string", &Mesh::to_string)
      .def("as_proto", [](const Mesh& mesh) { return py::bytes(mesh.as_proto()); })
      .def("global_fingerprint", &Mesh::global_fingerprint)
      .def(py::self == py::self)
      .def(py::self != py::self)
      .def("__hash__", &Mesh::hash)
      .def("__repr__",
           [](const Mesh& mesh) { return "Mesh.from_string(" + mesh.to_string() + ")"; })
      .def(py::pickle(
          [](const Mesh& mesh) { return py::make_tuple(mesh.to_string()); },
          [](const py::tuple& t) { return Mesh::from_string(t[0].cast<std::string>()); }));
}

// ---- ShardingSpec, Layout -----------------------------------------------------------------

void bind_sharding_spec(py::module_& m) {
  m.attr("UNSHARDED") = std::string(kUnsharded);
  m.attr("MATCH") = std::string(kMatch);

  py::class_<ShardingSpec> cls(m, "ShardingSpec");
  py::enum_<ShardingSpec::Kind>(cls, "Kind")
      .value("UNSHARDED", ShardingSpec::Kind::kUnsharded)
      .value("SHARDED", ShardingSpec::Kind::kSharded)
      .value("MATCH", ShardingSpec::Kind::kMatch)
      .value("ANY", ShardingSpec::Kind::kAny);
  cls.def(py::init(&ShardingSpec::parse), py::arg("text"))
      .def_static("parse", &ShardingSpec::parse, py::arg("text"))
      .def_static("unsharded", &ShardingSpec::unsharded)
      .def_static("match", &ShardingSpec::match)
      .def_static("any", &ShardingSpec::any)
      .def_static("sharded", &ShardingSpec::sharded, py::arg("mesh_dims"))
      .def_property_readonly("kind", &ShardingSpec::kind)
      .def_property_readonly("mesh_dims", &ShardingSpec::mesh_dims)
      .def("is_unsharded", &ShardingSpec::is_unsharded)
      .def("is_sharded", &ShardingSpec::is_sharded)
      .def("is_match", &ShardingSpec::is_match)
      .def("is_any", &ShardingSpec::is_any)
      .def("uses", &ShardingSpec::uses, py::arg("mesh_dim"))
      .def("to_string", &ShardingSpec::to_string)
      .def(py::self == py::self)
      .def(py::self != py::self)
      .def("__str__", &ShardingSpec::to_string)
      .def("__repr__",
           [](const ShardingSpec& s) { return "ShardingSpec('" + s.to_string() + "')"; });
  implicitly_convertible_per_thread<py::str, ShardingSpec>();
}

void bind_layout_class(py::module_& m) {
  py::enum_<LayoutType>(m, "LayoutType")
      .value("EMPTY", LayoutType::kEmpty)
      .value("STATIC", LayoutType::kStatic)
      .value("PARTED", LayoutType::kParted)
      .value("SINGLE_DEVICE", LayoutType::kSingleDevice);

  py::class_<Layout>(m, "Layout", "One sharding spec per tensor dimension over a Mesh.")
      .def(py::init([](const std::vector<std::string>& sharding_specs, py::handle mesh) {
             if (!py::isinstance<Mesh>(mesh)) {
               invalid_argument("Layout", "mesh is not a valid Mesh object.");
             }
             return Layout(sharding_specs, mesh.cast<const Mesh&>());
           }),
           py::arg("sharding_specs"), py::arg("mesh"))
      .def_static("create", &Layout::create, py::arg("type"), py::arg("sharding_specs"),
                  py::arg("mesh"), py::arg("partial") = std::vector<PartialDim>{})
      .def_static("replicated", &Layout::replicated, py::arg("mesh"), py::arg("rank"))
      .def_static("batch_sharded", &Layout::batch_sharded, py::arg("mesh"), py::arg("batch_dim"),
                  py::arg("rank"), py::arg("axis") = 0)
      .def_static("inner_sharded", &Layout::inner_sharded, py::arg("mesh"), py::arg("inner_dim"),
                  py::arg("rank"))
      .def_static("single_device", &Layout::single_device, py::arg("mesh"))
      .def_static("from_single_device_mesh", &Layout::single_device, py::arg("mesh"))
      .def_static(
          "from_device",
          [](const std::string& device) {
            return Layout::single_device(Mesh::from_device(device));
          },
          py::arg("device"))
      .def_static("from_string", &Layout::from_string, py::arg("layout_str"))
      .def_static(
          "from_proto", [](const py::bytes& proto) { return Layout::from_proto(proto); },
          py::arg("layout_proto"))
      // Fields.
      .def_property_readonly("sharding_specs", &Layout::sharding_spec_strings)
      .def_property_readonly("rank", &Layout::rank)
      .def_property_readonly("mesh", &Layout::mesh)
      .def_property_readonly("type", &Layout::type)
      .def_property_readonly(  // TF >= 2.13: the mesh's shape
          "shape", [](const Layout& l) { return l.mesh().shape(); })
      .def_property_readonly("partial", &Layout::partial)
      .def("specs", &Layout::sharding_specs)
      .def("is_partial", &Layout::is_partial)
      // Shards.
      .def("num_shards", &Layout::num_shards, py::arg("idx"))
      .def("num_shards_per_dim", &Layout::num_shards_per_dim)
      .def("is_empty", &Layout::is_empty)
      .def("is_single_device", &Layout::is_single_device)
      .def("is_fully_replicated", &Layout::is_fully_replicated)
      .def("is_batch_parallel", &Layout::is_batch_parallel)
      .def("sharded_mesh_dims", &Layout::sharded_mesh_dims)
      .def("local_shape", &Layout::local_shape, py::arg("global_shape"), py::arg("offset"))
      .def(
          "local_shape_from_global_shape",
          [](const Layout& l, py::handle global_shape) -> py::object {
            // TF's list form: -1 for an unknown extent (None is also taken), None for the
            // unknown rank.
            const PartialShape local =
                l.local_shape_from_global_shape(to_partial_shape(global_shape));
            if (!local.rank_known()) return py::none();
            return py::tuple(py::cast(local.dims()));
          },
          py::arg("global_shape"))
      .def("global_shape_from_local_shape", &Layout::global_shape_from_local_shape,
           py::arg("local_shape"))
      .def("offset_to_shard",
           [](const Layout& l) {
             py::list out;
             for (const std::vector<int64_t>& shard : l.offset_to_shard())
               out.append(to_tuple(shard));
             return out;
           })
      .def("offset_tuple_to_global_index", &Layout::offset_tuple_to_global_index,
           py::arg("offset_tuple"))
      .def("shard_vector_string", &Layout::shard_vector_string)
      // Derived layouts.
      .def("to_parted", &Layout::to_parted)
      .def(
          "delete", [](const Layout& l, int dim) { return l.delete_dims({dim}); }, py::arg("dims"))
      .def("delete", &Layout::delete_dims, py::arg("dims"))
      .def("transposed_2d", &Layout::transposed_2d)
      .def("left_pad", &Layout::left_pad, py::arg("rank"))
      .def("without_partial", &Layout::without_partial)
      .def("with_partial", &Layout::with_partial, py::arg("partial"))
      .def("is_equivalent", &Layout::is_equivalent, py::arg("other"))
      .def("is_equivalent_ignoring_type", &Layout::is_equivalent_ignoring_type, py::arg("other"))
      // Text and wire forms, identity.
      .def("to_string", &Layout::to_string)
      .def("as_proto", [](const Layout& l) { return py::bytes(l.as_proto()); })
      .def(py::self == py::self)
      .def(py::self != py::self)
      .def("__hash__", &Layout::hash)
      .def("__repr__", [](const Layout& l) { return "Layout.from_string(" + l.to_string() + ")"; })
      .def(py::pickle(
          [](const Layout& l) { return py::make_tuple(l.to_string()); },
          [](const py::tuple& t) { return Layout::from_string(t[0].cast<std::string>()); }));
}

// ---- ShardMap, shard ranges ---------------------------------------------------------------

void bind_shard_map(py::module_& m) {
  py::class_<ShardMap>(m, "ShardMap", "Which device holds which block of a tensor.")
      .def(py::init<const Layout&, const Shape&>(), py::arg("layout"), py::arg("shape"))
      .def_property_readonly("layout", &ShardMap::layout)
      .def_property_readonly("global_shape", &ShardMap::global_shape)
      .def("num_devices", &ShardMap::num_devices)
      .def(
          "block",
          [](const ShardMap& map, int64_t offset) {  // (offsets, extents)
            const ShardBlock& b = map.block(offset);
            return py::make_tuple(to_tuple(b.offsets), to_tuple(b.extents));
          },
          py::arg("offset"))
      .def("distinct_blocks",
           [](const ShardMap& map) {  // [(offsets, extents, device offsets)]
             py::list out;
             for (const ShardMap::Replicas& r : map.distinct_blocks()) {
               out.append(py::make_tuple(to_tuple(r.block.offsets), to_tuple(r.block.extents),
                                         r.device_offsets));
             }
             return out;
           })
      .def("visualize", &ShardMap::visualize)
      .def("__str__", &ShardMap::visualize);

  m.def("visualize", py::overload_cast<const Layout&, const Shape&>(&visualize), py::arg("layout"),
        py::arg("shape"));
  m.def("shard_chunk_size", &shard_chunk_size, py::arg("n"), py::arg("shards"));
  m.def("parse_mesh", &parse_mesh, py::arg("text"), py::arg("default_names") = std::vector<std::string>{},
        py::arg("max_devices") = kMaxParsedMeshDevices,
        "A mesh from the CLI's grammar: 'x=2,y=2', TF's '|x=2,y=2|*CPU' or '2x2' with default_names.");
  m.def(
      "shard_range",
      [](int64_t n, int64_t shards, int64_t index) {  // (offset, extent)
        ShardRange r = shard_range(n, shards, index);
        return py::make_tuple(r.offset, r.extent);
      },
      py::arg("n"), py::arg("shards"), py::arg("index"));
}

}  // namespace

py::handle mesh_dimension_type() { return g_mesh_dimension_type; }

void bind_mesh(py::module_& m) {
  bind_mesh_class(m);
  bind_sharding_spec(m);
  bind_layout_class(m);
  bind_shard_map(m);
}

}  // namespace tessel::python
