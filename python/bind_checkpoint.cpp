// Bindings of the checkpoint layer as the submodule tessel.checkpoint (Orbax's ocp names:
// save, restore, CheckpointManager, AsyncCheckpointer, wait_until_finished, metadata; plus
// verify and RestoreStats), and the safetensors reader. `async` is a Python keyword: the
// manager's save takes async_.
//
// A state is a dict whose values are DTensors, bools, ints, floats, strs or nested dicts; nested
// dicts become '/'-joined names ({"opt": {"m": x}} is "opt/m") and come back nested. A restore
// target is such a dict of Layouts, or of DTensors (a template). Timeouts are seconds. Calls
// release the GIL (on_step takes it back to call Python).
#include <string>
#include <string_view>

#include "casters.h"
#include "tessel/checkpoint/async_checkpointer.h"
#include "tessel/checkpoint/checkpoint.h"
#include "tessel/checkpoint/checkpoint_manager.h"
#include "tessel/checkpoint/safetensors.h"

namespace tessel::python {
namespace {

using checkpoint::Item;
using checkpoint::State;
using Release = py::call_guard<py::gil_scoped_release>;

// {"a": {"b": x}} -> {"a/b": x}, each leaf converted by `leaf`.
template <typename Leaf, typename Out>
void flatten(const py::dict& tree, const std::string& prefix, const Leaf& leaf, Out& out) {
  for (const auto& [key, value] : tree) {
    const std::string name = prefix + py::cast<std::string>(key);
    if (py::isinstance<py::dict>(value)) {
      flatten(py::reinterpret_borrow<py::dict>(value), name + "/", leaf, out);
    } else {
      out[name] = leaf(name, py::reinterpret_borrow<py::object>(value));
    }
  }
}

State to_state(const py::dict& tree) {
  State state;
  flatten(
      tree, "", [](const std::string&, const py::object& v) { return v.cast<Item>(); }, state);
  return state;
}

// {"a/b": x} -> {"a": {"b": x}}.
py::dict to_tree(const State& state) {
  py::dict root;
  for (const auto& [name, item] : state) {
    py::dict node = root;
    size_t start = 0;
    for (size_t slash; (slash = name.find('/', start)) != std::string::npos; start = slash + 1) {
      const py::str part(name.substr(start, slash - start));
      if (!node.contains(part)) node[part] = py::dict();
      node = node[part].cast<py::dict>();
    }
    node[py::str(name.substr(start))] = py::cast(item);
  }
  return root;
}

// A target of Layouts or a template of DTensors: which one, by its first leaf.
bool is_layout_target(const py::dict& tree) {
  for (const auto& [key, value] : tree) {
    if (py::isinstance<py::dict>(value)) return is_layout_target(value.cast<py::dict>());
    return py::isinstance<Layout>(value);
  }
  return true;
}

py::dict restore(const std::string& directory, const py::dict& target, bool verify,
                 Runtime* runtime, checkpoint::RestoreStats* stats,
                 const checkpoint::CheckpointManager* manager, int64_t step) {
  const checkpoint::RestoreOptions options{.verify = verify, .runtime = runtime, .stats = stats};
  State out;
  if (is_layout_target(target)) {
    checkpoint::Target layouts;
    flatten(
        target, "", [](const std::string&, const py::object& v) { return v.cast<Layout>(); },
        layouts);
    py::gil_scoped_release release;
    out = manager ? manager->restore(step, layouts, options)
                  : checkpoint::restore(directory, layouts, options);
  } else {
    const State like = to_state(target);
    py::gil_scoped_release release;
    out = manager ? manager->restore(step, like, options)
                  : checkpoint::restore(directory, like, options);
  }
  return to_tree(out);
}

checkpoint::SaveOptions save_options(double timeout, const py::object& on_step,
                                     checkpoint::SaveStats* stats = nullptr) {
  checkpoint::SaveOptions options{.timeout = seconds_arg(timeout, "timeout", "checkpoint"),
                                  .on_step = {},
                                  .stats = stats};
  if (!on_step.is_none()) {
    // Its last copy may go on a thread without the GIL (a writer thread, a deleter that released
    // it): the deleter takes it.
    std::shared_ptr<py::object> fn(new py::object(on_step), [](py::object* f) {
      py::gil_scoped_acquire gil;
      delete f;
    });
    options.on_step = [fn](std::string_view step) {
      py::gil_scoped_acquire gil;
      (*fn)(std::string(step));
    };
  }
  return options;
}

// Deletes with the GIL released: the destructors of AsyncCheckpointer and CheckpointManager wait
// for the writer thread, which takes the GIL to call a Python on_step.
struct DeleteWithoutGil {
  template <typename T>
  void operator()(T* p) const {
    if (PyGILState_Check() == 0) {
      delete p;
      return;
    }
    py::gil_scoped_release release;
    delete p;
  }
};
template <typename T>
using NoGilHolder = std::unique_ptr<T, DeleteWithoutGil>;

// A wait's deadline in seconds; None: the options' timeout.
template <typename Waiter>
void wait_until_finished(Waiter& waiter, const py::object& timeout) {
  if (timeout.is_none()) {
    py::gil_scoped_release release;
    waiter.wait_until_finished();
    return;
  }
  const auto deadline = seconds_arg(timeout.cast<double>(), "timeout", "checkpoint");
  py::gil_scoped_release release;
  waiter.wait_until_finished(deadline);
}

}  // namespace

void bind_checkpoint(py::module_& parent) {
  py::module_ m = parent.def_submodule(
      "checkpoint", "Sharded checkpoints of DTensors (tessel/checkpoint/checkpoint.h).");
  m.def(
      "save",
      [](const std::string& directory, const py::dict& state, double timeout,
         const py::object& on_step, checkpoint::SaveStats* stats) {
        const State s = to_state(state);
        const checkpoint::SaveOptions options = save_options(timeout, on_step, stats);
        py::gil_scoped_release release;
        checkpoint::save(directory, s, options);
      },
      py::arg("directory"), py::arg("state"), py::arg("timeout") = 120.0,
      py::arg("on_step") = py::none(), py::arg("stats") = nullptr);
  m.def(
      "restore",
      [](const std::string& directory, const py::dict& target, bool verify, Runtime* runtime,
         checkpoint::RestoreStats* stats) {
        return restore(directory, target, verify, runtime, stats, nullptr, 0);
      },
      py::arg("directory"), py::arg("target"), py::arg("verify") = true,
      py::arg("runtime") = nullptr, py::arg("stats") = nullptr);
  m.def("verify", &checkpoint::verify, py::arg("directory"), Release());

  py::class_<checkpoint::SaveStats>(m, "SaveStats")
      .def(py::init<>())
      .def_readonly("bytes_written", &checkpoint::SaveStats::bytes_written)
      .def_readonly("files", &checkpoint::SaveStats::files)
      .def_readonly("plan_seconds", &checkpoint::SaveStats::plan_seconds)
      .def_readonly("stage_seconds", &checkpoint::SaveStats::stage_seconds)
      .def_readonly("header_seconds", &checkpoint::SaveStats::header_seconds)
      .def_readonly("write_seconds", &checkpoint::SaveStats::write_seconds)
      .def_readonly("checksum_seconds", &checkpoint::SaveStats::checksum_seconds)
      .def_readonly("sync_seconds", &checkpoint::SaveStats::sync_seconds)
      .def_readonly("manifest_seconds", &checkpoint::SaveStats::manifest_seconds)
      .def_readonly("rename_seconds", &checkpoint::SaveStats::rename_seconds)
      .def_readonly("total_seconds", &checkpoint::SaveStats::total_seconds);
  py::class_<checkpoint::RestoreStats>(m, "RestoreStats")
      .def(py::init<>())
      .def_readonly("bytes_read", &checkpoint::RestoreStats::bytes_read)
      .def_readonly("bytes_needed", &checkpoint::RestoreStats::bytes_needed)
      .def_readonly("open_seconds", &checkpoint::RestoreStats::open_seconds)
      .def_readonly("read_seconds", &checkpoint::RestoreStats::read_seconds)
      .def_readonly("allocate_seconds", &checkpoint::RestoreStats::allocate_seconds)
      .def_readonly("crc_seconds", &checkpoint::RestoreStats::crc_seconds)
      .def_readonly("copy_seconds", &checkpoint::RestoreStats::copy_seconds)
      .def_readonly("relayout_seconds", &checkpoint::RestoreStats::relayout_seconds)
      .def_readonly("total_seconds", &checkpoint::RestoreStats::total_seconds);
  py::class_<checkpoint::TensorInfo>(m, "TensorInfo")
      .def_readonly("dtype", &checkpoint::TensorInfo::dtype)
      .def_readonly("shape", &checkpoint::TensorInfo::shape)
      .def_readonly("layout", &checkpoint::TensorInfo::layout);
  py::class_<checkpoint::CheckpointInfo>(m, "CheckpointInfo")
      .def_readonly("tensors", &checkpoint::CheckpointInfo::tensors)
      .def_readonly("values", &checkpoint::CheckpointInfo::values)
      .def_readonly("files", &checkpoint::CheckpointInfo::files);
  m.def("metadata", &checkpoint::metadata, py::arg("directory"), Release());

  py::class_<checkpoint::CheckpointManager, NoGilHolder<checkpoint::CheckpointManager>>(
      m, "CheckpointManager")
      .def(py::init([](const std::string& directory, int max_to_keep, double timeout,
                       const py::object& on_step, int64_t staging_bytes) {
             return checkpoint::CheckpointManager(
                 directory, {.max_to_keep = max_to_keep,
                             .save = save_options(timeout, on_step),
                             .staging_bytes = staging_bytes});
           }),
           py::arg("directory"), py::arg("max_to_keep") = 0, py::arg("timeout") = 120.0,
           py::arg("on_step") = py::none(),
           py::arg("staging_bytes") = checkpoint::AsyncCheckpointerOptions{}.staging_bytes)
      .def_property_readonly("directory", &checkpoint::CheckpointManager::directory)
      .def("step_directory", &checkpoint::CheckpointManager::step_directory, py::arg("step"))
      .def(
          "save",
          [](checkpoint::CheckpointManager& self, int64_t step, const py::dict& state,
             bool async) {
            const State s = to_state(state);
            py::gil_scoped_release release;
            self.save(step, s, async);
          },
          py::arg("step"), py::arg("state"), py::arg("async_") = false)
      .def(
          "wait_until_finished",
          [](checkpoint::CheckpointManager& self, const py::object& timeout) {
            wait_until_finished(self, timeout);
          },
          py::arg("timeout") = py::none())
      .def("close", &checkpoint::CheckpointManager::close, Release())
      .def(
          "restore",
          [](const checkpoint::CheckpointManager& self, int64_t step, const py::dict& target,
             bool verify, Runtime* runtime, checkpoint::RestoreStats* stats) {
            return restore("", target, verify, runtime, stats, &self, step);
          },
          py::arg("step"), py::arg("target"), py::arg("verify") = true,
          py::arg("runtime") = nullptr, py::arg("stats") = nullptr)
      .def("all_steps", &checkpoint::CheckpointManager::all_steps, Release())
      .def("latest_step", &checkpoint::CheckpointManager::latest_step, Release());

  py::class_<checkpoint::AsyncCheckpointer, NoGilHolder<checkpoint::AsyncCheckpointer>>(
      m, "AsyncCheckpointer")
      .def(py::init([](int64_t staging_bytes, double timeout, const py::object& on_step) {
             return NoGilHolder<checkpoint::AsyncCheckpointer>(new checkpoint::AsyncCheckpointer(
                 checkpoint::AsyncCheckpointerOptions{.staging_bytes = staging_bytes,
                                                      .save = save_options(timeout, on_step)}));
           }),
           py::arg("staging_bytes") = checkpoint::AsyncCheckpointerOptions{}.staging_bytes,
           py::arg("timeout") = 120.0, py::arg("on_step") = py::none())
      .def(
          "save",
          [](checkpoint::AsyncCheckpointer& self, const std::string& directory,
             const py::dict& state) {
            const State s = to_state(state);
            py::gil_scoped_release release;
            self.save(directory, s);
          },
          py::arg("directory"), py::arg("state"))
      .def(
          "wait_until_finished",
          [](checkpoint::AsyncCheckpointer& self, const py::object& timeout) {
            wait_until_finished(self, timeout);
          },
          py::arg("timeout") = py::none())
      .def("close", &checkpoint::AsyncCheckpointer::close, Release())
      .def_property_readonly("saving", &checkpoint::AsyncCheckpointer::saving)
      .def_property_readonly("staging_bytes_allocated",
                             &checkpoint::AsyncCheckpointer::staging_bytes_allocated);

  py::class_<SafetensorsEntry>(parent, "SafetensorsEntry")
      .def_readonly("name", &SafetensorsEntry::name)
      .def_readonly("dtype", &SafetensorsEntry::dtype)
      .def_readonly("shape", &SafetensorsEntry::shape)
      .def_readonly("begin", &SafetensorsEntry::begin)
      .def_readonly("end", &SafetensorsEntry::end);
  py::class_<SafetensorsHeader>(parent, "SafetensorsHeader")
      .def_static("read", &SafetensorsHeader::read, py::arg("path"), Release())
      .def_readonly("entries", &SafetensorsHeader::entries)
      .def_readonly("metadata", &SafetensorsHeader::metadata)
      .def_readonly("data_start", &SafetensorsHeader::data_start)
      .def_readonly("file_size", &SafetensorsHeader::file_size)
      .def("__contains__", &SafetensorsHeader::contains, py::arg("name"))
      .def("encode", [](const SafetensorsHeader& h) { return py::bytes(h.encode()); });
  py::class_<SafetensorsFile>(parent, "SafetensorsFile")
      .def_static("read", &SafetensorsFile::read, py::arg("path"), Release())
      .def("tensor", &SafetensorsFile::tensor, py::arg("name"))
      .def("__contains__", &SafetensorsFile::contains, py::arg("name"))
      .def("metadata", &SafetensorsFile::metadata, py::arg("key"));
  parent.def("safetensors_dtype_name", &safetensors_dtype_name, py::arg("dtype"));
  parent.def("dtype_from_safetensors_name", &dtype_from_safetensors_name, py::arg("name"));
}

}  // namespace tessel::python
