// Bindings of the DTensor layer with TensorFlow's tf.experimental.dtensor names: DTensor, pack,
// unpack, fetch_layout, check_layout, is_dtensor, copy_to_mesh, to_host / full_tensor,
// default_mesh, get_default_mesh, call_with_layout, device_name, visualize, relayout,
// relayout_like, execute_relayout, plan_relayout (RelayoutPlan, RelayoutStep) and Box.
//
// Conversions only. Tensors are accepted as tessel.Tensor or anything numpy can make an array of;
// unpack returns read-only numpy views of the components' storage (the DTensor is an immutable
// value; each view's base is the component's tessel.Tensor, which keeps the storage alive), to_host
// a fresh numpy array. Calls that wait for the devices release the GIL. A DTensor keeps the Runtime
// its devices belong to alive.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "casters.h"
#include "tessel/core/box.h"
#include "tessel/core/error.h"
#include "tessel/dtensor/dtensor.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_profile.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/dtensor/relayout_plan.h"
#include "tessel/runtime/clients.h"
#include "tessel/runtime/runtime.h"

namespace tessel::python {
namespace {

Runtime& runtime_or_global(Runtime* runtime) {
  return runtime != nullptr ? *runtime : Runtime::global();
}

std::vector<Tensor> to_tensors(py::handle objs) {
  if (!py::detail::is_plain_sequence(objs)) {
    throw py::type_error("expected a list of tessel.Tensor or array-likes");
  }
  std::vector<Tensor> out;
  for (py::handle obj : objs) out.push_back(to_tensor(obj));
  return out;
}

// A DTensor as a Python object that keeps its Runtime alive (a Runtime made in Python may
// otherwise go before the DTensor that points at its devices).
py::object wrap(DTensor tensor) {
  Runtime* runtime = tensor.defined() ? &tensor.runtime() : nullptr;
  py::object obj = py::cast(std::move(tensor));
  if (runtime != nullptr) {
    py::detail::keep_alive_impl(obj, py::cast(runtime, py::return_value_policy::reference));
  }
  return obj;
}

// Python seconds -> the timeout of the whole relayout (seconds_arg, as every binding converts
// timeouts).
RelayoutOptions to_options(std::optional<double> timeout_seconds) {
  RelayoutOptions options;
  if (timeout_seconds) {
    options.timeout = seconds_arg(*timeout_seconds, "timeout_seconds", "relayout");
  }
  return options;
}

// A read-only numpy view of `t`'s storage whose base is the tessel.Tensor `t` (which keeps the
// storage alive); bf16 has no numpy dtype, so it comes back as a float32 copy (Tensor.numpy()).
py::object numpy_view(const Tensor& t) {
  py::object base = py::cast(t);
  const char* name = numpy_dtype_name(t.dtype());
  if (name == nullptr) return base.attr("numpy")();
  const auto item = static_cast<py::ssize_t>(dtype_size(t.dtype()));
  std::vector<py::ssize_t> shape(t.shape().dims().begin(), t.shape().dims().end());
  std::vector<py::ssize_t> strides;
  for (int64_t s : t.strides()) strides.push_back(static_cast<py::ssize_t>(s) * item);
  py::array view(py::dtype(name), std::move(shape), std::move(strides), t.data(), base);
  view.attr("setflags")(py::arg("write") = false);
  return view;
}

// ---- DTensor ------------------------------------------------------------------------------

void bind_dtensor_class(py::module_& m) {
  py::class_<DTensor>(m, "DTensor", R"doc(
One global tensor laid out over a mesh: one component per local device of its layout's mesh,
in mesh.local_devices() order (component i is device i's block, chunk semantics for uneven
shards). Made by pack, copy_to_mesh, relayout; an immutable value.)doc")
      .def_property_readonly("shape", &DTensor::shape)
      .def_property_readonly("dtype", &DTensor::dtype)
      .def_property_readonly("layout", &DTensor::layout)
      .def_property_readonly("rank", &DTensor::rank)
      .def_property_readonly("nbytes", &DTensor::nbytes)
      .def_property_readonly("num_components", &DTensor::num_components)
      .def_property_readonly("components", &DTensor::components,
                             "The components (tessel.Tensor, sharing the DTensor's storage).")
      .def("component", &DTensor::component, py::arg("local_index"))
      .def("device", &DTensor::device, py::arg("local_index"),
           py::return_value_policy::reference_internal)
      // reference: the DTensor keeps its Runtime alive already (see wrap()).
      .def_property_readonly("runtime", &DTensor::runtime, py::return_value_policy::reference)
      .def("to_string", &DTensor::to_string)
      .def("__str__", &DTensor::to_string)
      .def("__repr__", &DTensor::to_string);
}

// ---- the DTensor API ----------------------------------------------------------------------

// TF's `with dtensor.default_mesh(mesh):` and `@dtensor.default_mesh(mesh)`: each __enter__
// (each call of a decorated function) opens a DefaultMeshScope, the matching __exit__ closes it.
class DefaultMesh {
 public:
  explicit DefaultMesh(Mesh mesh) : mesh_(std::move(mesh)) {}
  DefaultMesh(const DefaultMesh&) = delete;  // the open scopes belong to this object
  DefaultMesh(DefaultMesh&&) = default;
  const Mesh& mesh() const { return mesh_; }
  void enter() { scopes_.push_back(std::make_unique<DefaultMeshScope>(mesh_)); }
  void exit() {
    if (!scopes_.empty()) scopes_.pop_back();
  }

 private:
  Mesh mesh_;
  std::vector<std::unique_ptr<DefaultMeshScope>> scopes_;  // innermost last
};

// TF's argument check of default_mesh (a conversion: anything but a Mesh is refused).
DefaultMesh make_default_mesh(py::handle mesh) {
  if (!py::isinstance<Mesh>(mesh)) {
    throw Error(
        ErrorCode::kInvalidArgument, "default_mesh",
        "Expect `mesh` to be `Mesh`, got " + py::str(py::type::of(mesh)).cast<std::string>());
  }
  return DefaultMesh(mesh.cast<Mesh>());
}

void bind_default_mesh(py::module_& m) {
  py::class_<DefaultMesh>(m, "DefaultMeshScope", R"doc(
What default_mesh(mesh) returns: a context manager (each `with` pushes the mesh on this thread's
default-mesh stack and pops it on exit; nesting restores the outer one) and a decorator (the
decorated function runs with the mesh as the default mesh).)doc")
      .def(py::init(&make_default_mesh), py::arg("mesh"))
      .def_property_readonly("mesh", &DefaultMesh::mesh)
      .def("__enter__",
           [](DefaultMesh& self) {
             self.enter();
             return self.mesh();
           })
      .def(
          "__exit__",
          [](DefaultMesh& self, py::handle, py::handle, py::handle) {
            self.exit();
            return false;  // exceptions propagate
          },
          py::arg("exc_type"), py::arg("exc_value"), py::arg("traceback"))
      .def(
          "__call__",
          [](py::object self, py::function fn) {
            py::cpp_function wrapper(
                [self, fn](py::args args, py::kwargs kwargs) {
                  DefaultMesh& scope = self.cast<DefaultMesh&>();
                  scope.enter();
                  struct Exit {
                    DefaultMesh& scope;
                    ~Exit() { scope.exit(); }
                  } exit{scope};
                  return fn(*args, **kwargs);
                },
                py::name(py::str(py::getattr(fn, "__name__", py::str("wrapper")))
                             .cast<std::string>()
                             .c_str()));
            return wrapper;
          },
          py::arg("fn"));

  m.def("default_mesh", &make_default_mesh, py::arg("mesh"),
        "TF's dtensor.default_mesh: `with default_mesh(mesh):` or `@default_mesh(mesh)`. A "
        "non-Mesh argument: ValueError.");
  m.def("get_default_mesh", &get_default_mesh,
        "The innermost default mesh of this thread, or None.");
}

void bind_api(py::module_& m) {
  m.def(
      "pack",
      [](py::handle tensors, const Layout& layout, Runtime* runtime) {
        const std::vector<Tensor> inputs = to_tensors(tensors);
        Runtime& rt = runtime_or_global(runtime);
        DTensor out;
        {
          py::gil_scoped_release release;
          out = pack(inputs, layout, rt);
        }
        return wrap(std::move(out));
      },
      py::arg("tensors"), py::arg("layout"), py::arg("runtime") = nullptr,
      "A DTensor from one component per local device of layout's mesh (copied onto the "
      "devices); each a tessel.Tensor or an array-like.");
  m.def(
      "unpack",
      [](const DTensor& tensor) {
        std::vector<Tensor> parts;
        {
          py::gil_scoped_release release;
          parts = unpack(tensor);
        }
        py::list out;
        for (const Tensor& t : parts) {
          out.append(numpy_view(t.memory_space().is_host() ? t : t.to_host()));
        }
        return out;
      },
      py::arg("tensor"),
      "The components as read-only numpy views of the DTensor's storage (bf16: float32 copies; "
      "components in a GPU's memory: host copies; DTensor.components keeps them as Tensors).");
  m.def("fetch_layout", &fetch_layout, py::arg("tensor"));
  m.def("check_layout", &check_layout, py::arg("tensor"), py::arg("layout"));
  m.def(
      "is_dtensor",
      [](py::handle obj) {
        return py::isinstance<DTensor>(obj) && is_dtensor(obj.cast<const DTensor&>());
      },
      py::arg("tensor"));
  m.def(
      "copy_to_mesh",
      [](py::handle tensor, const Layout& layout, Runtime* runtime) {
        const Tensor input = to_tensor(tensor);
        Runtime& rt = runtime_or_global(runtime);
        DTensor out;
        {
          py::gil_scoped_release release;
          out = copy_to_mesh(input, layout, rt);
        }
        return wrap(std::move(out));
      },
      py::arg("tensor"), py::arg("layout"), py::arg("runtime") = nullptr);
  const auto host = [](Tensor (*fetch)(const DTensor&)) {
    return [fetch](const DTensor& tensor) {
      Tensor out;
      {
        py::gil_scoped_release release;
        out = fetch(tensor);
      }
      return py::cast(std::move(out)).attr("numpy")();
    };
  };
  m.def("to_host", host(&to_host), py::arg("tensor"), "The global tensor as a numpy array.");
  m.def("full_tensor", host(&full_tensor), py::arg("tensor"),
        "The global tensor as a numpy array; on a mesh spanning clients, a collective.");
  m.def(
      "call_with_layout",
      [](py::function fn, std::optional<Layout> layout, py::args args,
         py::kwargs kwargs) -> py::object {
        if (!layout) return fn(*args, **kwargs);
        // A result that is not a DTensor is a host value: it converts to the layout.
        return wrap(call_with_layout(
            [&]() {
              py::object result = fn(*args, **kwargs);
              if (py::isinstance<DTensor>(result)) return result.cast<DTensor>();
              return copy_to_mesh(to_tensor(result), *layout);
            },
            *layout));
      },
      py::arg("fn"), py::arg("layout"),
      "fn(*args, **kwargs) with layout.mesh as the default mesh, relaid out to `layout` "
      "(layout None: fn's result as is).");
  m.def("device_name", &device_name);
  // Multi-client configuration (clients.h), TF's config.py names.
  m.def("num_clients", &num_clients);
  m.def("client_id", &client_id);
  m.def("job_name", &job_name);
  m.def("full_job_name", &full_job_name, py::arg("task_id") = py::none());
  m.def("jobs", &jobs);
  m.def("_create_distributed_mesh",
        py::overload_cast<const std::vector<MeshDimension>&, const std::vector<std::string>&,
                          const std::string&, bool>(&create_distributed_mesh),
        py::arg("mesh_dims"), py::arg("local_devices"), py::arg("mesh_name") = "",
        py::arg("use_xla_spmd") = false);
  m.def("visualize", py::overload_cast<const DTensor&>(&visualize), py::arg("tensor"));
}

// ---- relayout -----------------------------------------------------------------------------

// `with RelayoutTimeoutScope(seconds):`: each __enter__ opens a C++ RelayoutTimeoutScope on the
// calling thread, the matching __exit__ closes it.
class RelayoutTimeout {
 public:
  explicit RelayoutTimeout(double seconds)
      : timeout_(seconds_arg(seconds, "timeout_seconds", "relayout")) {}
  RelayoutTimeout(const RelayoutTimeout&) = delete;  // the open scopes belong to this object
  RelayoutTimeout(RelayoutTimeout&&) = default;
  double seconds() const { return std::chrono::duration<double>(timeout_).count(); }
  void enter() { scopes_.push_back(std::make_unique<RelayoutTimeoutScope>(timeout_)); }
  void exit() {
    if (!scopes_.empty()) scopes_.pop_back();
  }

 private:
  std::chrono::milliseconds timeout_;
  std::vector<std::unique_ptr<RelayoutTimeoutScope>> scopes_;  // innermost last
};

void bind_relayout_timeout(py::module_& m) {
  py::class_<RelayoutTimeout>(m, "RelayoutTimeoutScope", R"doc(
`with RelayoutTimeoutScope(seconds):` sets default_relayout_timeout() on this thread for the block:
the timeout of the relayouts that run without one of their own (those inside ops, gradient tapes
and relayout_batch); the block's end restores the previous value. seconds <= 0: ValueError as
the block starts.)doc")
      .def(py::init<double>(), py::arg("timeout_seconds"))
      .def_property_readonly("timeout_seconds", &RelayoutTimeout::seconds)
      .def(
          "__enter__",
          [](RelayoutTimeout& self) -> RelayoutTimeout& {
            self.enter();
            return self;
          },
          py::return_value_policy::reference)
      .def(
          "__exit__",
          [](RelayoutTimeout& self, py::handle, py::handle, py::handle) {
            self.exit();
            return false;  // exceptions propagate
          },
          py::arg("exc_type"), py::arg("exc_value"), py::arg("traceback"));
  m.def(
      "default_relayout_timeout",
      [] { return std::chrono::duration<double>(default_relayout_timeout()).count(); },
      "Seconds: the timeout of this thread's relayouts that have none of their own (60, or the "
      "innermost RelayoutTimeoutScope's).");
  m.def(
      "scoped_relayout_timeout",
      []() -> std::optional<double> {
        const std::optional<std::chrono::milliseconds> t = scoped_relayout_timeout();
        if (!t) return std::nullopt;
        return std::chrono::duration<double>(*t).count();
      },
      "Seconds: the innermost RelayoutTimeoutScope's timeout on this thread, None outside any "
      "(inside a scope a launch also waits for room on a stalled device's stream no longer).");
}

void bind_relayout(py::module_& m) {
  m.def(
      "relayout",
      [](const DTensor& tensor, const Layout& layout, std::optional<double> timeout_seconds) {
        DTensor out;
        {
          py::gil_scoped_release release;
          out = relayout(tensor, layout, to_options(timeout_seconds));
        }
        return wrap(std::move(out));
      },
      py::arg("tensor"), py::arg("layout"), py::arg("timeout_seconds") = py::none());
  m.def(
      "relayout",
      [](py::handle tensor, const Layout& layout, Runtime* runtime) {
        const Tensor input = to_tensor(tensor);
        Runtime& rt = runtime_or_global(runtime);
        DTensor out;
        {
          py::gil_scoped_release release;
          out = relayout(input, layout, rt);
        }
        return wrap(std::move(out));
      },
      py::arg("tensor"), py::arg("layout"), py::arg("runtime") = nullptr,
      "A host value (tessel.Tensor or array-like): copy_to_mesh.");
  m.def(
      "relayout_like",
      [](const DTensor& tensor, const DTensor& like, std::optional<double> timeout_seconds) {
        DTensor out;
        {
          py::gil_scoped_release release;
          out = relayout_like(tensor, like, to_options(timeout_seconds));
        }
        return wrap(std::move(out));
      },
      py::arg("tensor"), py::arg("like"), py::arg("timeout_seconds") = py::none());
  m.def(
      "execute_relayout",
      [](const DTensor& tensor, const RelayoutPlan& plan, std::optional<double> timeout_seconds) {
        DTensor out;
        {
          py::gil_scoped_release release;
          out = execute_relayout(tensor, plan, to_options(timeout_seconds));
        }
        return wrap(std::move(out));
      },
      py::arg("tensor"), py::arg("plan"), py::arg("timeout_seconds") = py::none());
}

// ---- Box, RelayoutStep, RelayoutPlan ------------------------------------------------------

void bind_box(py::module_& m) {
  py::class_<Box>(m, "Box", "A rectangular block of a global array: offsets and extents.")
      .def(py::init([](std::vector<int64_t> offsets, std::vector<int64_t> extents) {
             return Box{std::move(offsets), std::move(extents)};
           }),
           py::arg("offsets"), py::arg("extents"))
      .def_readwrite("offsets", &Box::offsets)
      .def_readwrite("extents", &Box::extents)
      .def_property_readonly("rank", &Box::rank)
      .def_property_readonly("num_elements", &Box::num_elements)
      .def("empty", &Box::empty)
      .def("contains", &Box::contains, py::arg("other"))
      .def("to_string", &Box::to_string)
      .def(py::self == py::self)
      .def(py::self != py::self)
      .def("__str__", &Box::to_string)
      .def("__repr__", [](const Box& b) { return "Box(" + b.to_string() + ")"; });
  m.def("intersect", &intersect, py::arg("a"), py::arg("b"));
  m.def(
      "copy_box",
      [](const Tensor& src, const std::vector<int64_t>& src_origin, Tensor& dst,
         const std::vector<int64_t>& dst_origin, const Box& region) {
        py::gil_scoped_release release;
        copy_box(src, src_origin, dst, dst_origin, region);
      },
      py::arg("src"), py::arg("src_origin"), py::arg("dst").noconvert(), py::arg("dst_origin"),
      py::arg("region"),
      "Copies `region` (global coordinates) from src, the block starting at src_origin, into dst "
      "(a tessel.Tensor, written in place), the block starting at dst_origin. Within one device's "
      "memory the copy stays on the device.");
}

void bind_plan(py::module_& m) {
  py::class_<RelayoutStep>(m, "RelayoutStep", R"doc(
One step of a RelayoutPlan. kind: 'local_slice', 'local_partial', 'all_gather', 'all_to_all',
'all_reduce', 'reduce_scatter' or 'send_recv'. transfers: (from, to, Box) tuples, participant
indices into `participants` and global regions (block-moving steps only).)doc")
      .def_property_readonly("kind", &RelayoutStep::kind_name)
      .def_readonly("mesh_dims", &RelayoutStep::mesh_dims)
      .def_readonly("tensor_dims", &RelayoutStep::tensor_dims)
      .def_readonly("from_layout", &RelayoutStep::from)
      .def_readonly("to_layout", &RelayoutStep::to)
      .def_readonly("bytes_per_device", &RelayoutStep::bytes_per_device)
      .def_readonly("bytes_total", &RelayoutStep::bytes_total)
      .def_readonly("peak_bytes", &RelayoutStep::peak_bytes)
      .def_readonly("participants", &RelayoutStep::participants)
      .def_property_readonly("transfers",
                             [](const RelayoutStep& s) {
                               py::list out;
                               for (const RelayoutTransfer& t : s.transfers) {
                                 out.append(py::make_tuple(t.from, t.to, t.box));
                               }
                               return out;
                             })
      .def("to_string", &RelayoutStep::to_string)
      .def("__str__", &RelayoutStep::to_string)
      .def("__repr__",
           [](const RelayoutStep& s) { return "<RelayoutStep " + s.to_string() + ">"; });

  py::class_<RelayoutPlan>(m, "RelayoutPlan", R"doc(
How a tensor gets from one layout to another (plan_relayout): steps, bytes, peak memory.
str(plan): a header line, then one line per step.)doc")
      .def_readonly("shape", &RelayoutPlan::shape)
      .def_readonly("dtype", &RelayoutPlan::dtype)
      .def_readonly("from_layout", &RelayoutPlan::from)
      .def_readonly("to_layout", &RelayoutPlan::to)
      .def_readonly("steps", &RelayoutPlan::steps)
      .def_property_readonly("bytes_per_device", &RelayoutPlan::bytes_per_device)
      .def_property_readonly("bytes_total", &RelayoutPlan::bytes_total)
      .def_property_readonly("peak_bytes", &RelayoutPlan::peak_bytes)
      .def("to_string", &RelayoutPlan::to_string)
      .def("__str__", &RelayoutPlan::to_string)
      .def("__repr__",
           [](const RelayoutPlan& p) { return "<RelayoutPlan " + p.to_string() + ">"; });

  m.def("plan_relayout", &plan_relayout, py::arg("shape"), py::arg("from_layout"),
        py::arg("to_layout"), py::arg("dtype") = DType::kF32);
  m.def("resolve_match", &resolve_match, py::arg("from_layout"), py::arg("to_layout"));
}

// The op profile (op_profile.h); ProfilePhase is a context manager holding the C++ phase.
void bind_op_profile(py::module_& m) {
  py::class_<OpProfileRow>(m, "OpProfileRow")
      .def_readonly("phase", &OpProfileRow::phase)
      .def_readonly("op", &OpProfileRow::op)
      .def_readonly("calls", &OpProfileRow::calls)
      .def_readonly("seconds", &OpProfileRow::seconds);
  py::class_<OpProfile>(m, "OpProfile")
      .def_readonly("rows", &OpProfile::rows)
      .def_readonly("collective_rows", &OpProfile::collective_rows)
      .def_readonly("wall_seconds", &OpProfile::wall_seconds)
      .def_readonly("collective_seconds", &OpProfile::collective_seconds)
      .def_readonly("collectives", &OpProfile::collectives)
      .def("phase_seconds", &OpProfile::phase_seconds, py::arg("phase"))
      .def("phase_collective_seconds", &OpProfile::phase_collective_seconds, py::arg("phase"))
      .def("table", &OpProfile::table, py::arg("steps") = 1, py::arg("top") = 12);
  m.def("start_op_profile", &start_op_profile);
  m.def("stop_op_profile", &stop_op_profile);
  m.def("op_profile_enabled", &op_profile_enabled);
  struct PyProfilePhase {
    std::string name;
    std::unique_ptr<ProfilePhase> phase;
  };
  py::class_<PyProfilePhase>(m, "ProfilePhase")
      .def(py::init([](const std::string& name) {
             ProfilePhase check(name);  // an empty name raises here, not at __enter__
             return PyProfilePhase{name, nullptr};
           }),
           py::arg("name"))
      .def("__enter__",
           [](PyProfilePhase& p) -> PyProfilePhase& {
             p.phase = std::make_unique<ProfilePhase>(p.name);
             return p;
           })
      .def("__exit__", [](PyProfilePhase& p, const py::args&) { p.phase.reset(); });
}

}  // namespace

void bind_dtensor(py::module_& m) {
  bind_op_profile(m);
  bind_box(m);
  bind_dtensor_class(m);
  bind_default_mesh(m);
  bind_api(m);
  bind_plan(m);
  bind_relayout(m);
  bind_relayout_timeout(m);
}

}  // namespace tessel::python
