// Bindings of the runtime layer: Runtime and Device (streams are driven from C++ only).
#include <chrono>
#include <optional>
#include <string>

#include "casters.h"
#include "tessel/core/error.h"
#include "tessel/runtime/busy_time.h"
#include "tessel/runtime/device.h"
#include "tessel/runtime/gpu.h"
#include "tessel/runtime/gpu_event.h"
#include "tessel/runtime/runtime.h"

namespace tessel::python {
namespace {

void bind_device(py::module_& m) {
  py::class_<Device>(m, "Device", R"doc(
One device of a Runtime (a virtual CPU device, or a GPU device): a TF-style name, an in-order
stream with its own worker thread, and an allocator that accounts every byte allocated through
it. A GPU device's tensors live in its GPU's memory (Tensor.memory_space; Tensor.to_host copies
them back). Obtained from a Runtime; keeps its Runtime alive.)doc")
      .def_property_readonly("name", &Device::name)
      .def_property_readonly("device_type", &Device::device_type, "'CPU' or 'GPU'.")
      .def_property_readonly("gpu_ordinal", &Device::gpu_ordinal,
                             "The CUDA ordinal of a GPU device; -1 for a CPU device.")
      .def_property_readonly("memory_space", &Device::memory_space)
      .def_property_readonly("is_simulated_gpu", &Device::is_simulated_gpu,
                             "True for a simulated GPU device (TESSEL_SIMULATED_GPUS).")
      .def_property_readonly("index", &Device::index)
      .def_property_readonly("parsed_name", &Device::parsed_name)
      .def(
          "memory_stats", [](const Device& d) { return memory_stats_dict(d.memory_stats()); },
          "A dict: live_bytes, peak_bytes, total_allocated_bytes, num_allocations, limit_bytes "
          "(the memory limit) and cached_bytes (always 0 for a device).")
      .def(
          "busy_time",
          [](const Device& d) {
            const BusyTime t = busy_time(d);
            py::dict out;
            out["kernel_seconds"] = t.kernel_seconds;
            out["communication_seconds"] = t.communication_seconds;
            out["kernels"] = t.kernels;
            out["collectives"] = t.collectives;
            return out;
          },
          "A dict of the device's totals so far (tessel/runtime/busy_time.h): kernel_seconds and "
          "kernels (op kernels run), communication_seconds and collectives (collective tasks, "
          "waiting for peers included). Read differences.")
      .def("reset_peak_memory", &Device::reset_peak_memory)
      .def_property_readonly("memory_limit", &Device::memory_limit,
                             "Bytes this device's tensors may hold at once.")
      .def("set_memory_limit", &Device::set_memory_limit, py::arg("bytes"),
           "Sets memory_limit; a request beyond it raises ResourceExhaustedError.")
      .def("allocate", &Device::allocate, py::arg("shape"), py::arg("dtype") = DType::kF32,
           py::arg("zero_fill") = true,
           "A tensor allocated through this device's accounting allocator.")
      .def("__repr__", [](const Device& d) { return "Device(" + d.name() + ")"; });
}

void bind_gpu(py::module_& m) {
  m.def("built_with_cuda", &built_with_cuda, "True when this build has GPU devices and NCCL.");
  m.def("visible_gpu_count", &visible_gpu_count,
        "CUDA GPUs this process sees; 0 without CUDA, a driver or a GPU.");
  py::class_<GpuEvent>(m, "GpuEvent", "A point in a GPU device's stream (a CUDA event).")
      .def(py::init<Device&>(), py::arg("gpu"), py::keep_alive<1, 2>())
      .def("record", &GpuEvent::record)
      .def("done", &GpuEvent::done)
      .def("make_wait", &GpuEvent::make_wait, py::arg("other"))
      .def(
          "synchronize",
          [](const GpuEvent& e, double timeout_seconds, const std::string& what) {
            const auto timeout = seconds_arg(timeout_seconds, "timeout_seconds", "GpuEvent");
            py::gil_scoped_release release;
            e.synchronize(std::chrono::steady_clock::now() + timeout, what);
          },
          py::arg("timeout_seconds"), py::arg("what") = "GpuEvent.synchronize",
          "Waits until done(); past the timeout raises DeadlineExceededError.");
}

void bind_runtime_class(py::module_& m) {
  py::class_<Runtime>(m, "Runtime", R"doc(
The virtual CPU devices of this process, named /job:<job>/replica:<r>/task:<t>/device:CPU:<i>.

num_cpu_devices=-1 reads TESSEL_CPU_DEVICES (default 4). memory_limit (bytes per device) -1 reads
TESSEL_DEVICE_MEMORY_LIMIT, else each device gets host_memory_limit() / num_cpu_devices
(docs/memory.md). Several runtimes may exist at once (one
per simulated host, with distinct task ids); Runtime.global_runtime() is the process default.
Errors in a device's work surface at synchronize(), naming the device and the op.)doc")
      .def(py::init([](int num_cpu_devices, std::string job, int replica, int task,
                       int64_t memory_limit, int num_gpu_devices, int num_simulated_gpu_devices,
                       std::vector<int> gpu_ordinals) {
             return new Runtime(RuntimeOptions{num_cpu_devices, std::move(job), replica, task,
                                               memory_limit, num_gpu_devices,
                                               num_simulated_gpu_devices, std::move(gpu_ordinals)});
           }),
           py::arg("num_cpu_devices") = -1, py::arg("job") = "localhost", py::arg("replica") = 0,
           py::arg("task") = 0, py::arg("memory_limit") = -1, py::arg("num_gpu_devices") = -1,
           py::arg("num_simulated_gpu_devices") = -1, py::arg("gpu_ordinals") = std::vector<int>{})
      .def_static("global_runtime", &Runtime::global, py::return_value_policy::reference,
                  "The process-wide runtime, created on first use.")
      .def("num_devices", &Runtime::num_devices)
      .def("topology", &Runtime::topology)
      .def(
          "devices",
          [](py::object self) {  // each Device keeps the Runtime alive
            py::list out;
            for (Device* d : self.cast<const Runtime&>().devices()) {
              out.append(py::cast(d, py::return_value_policy::reference_internal, self));
            }
            return out;
          },
          "Every CPU device, in index order.")
      .def(
          "gpu_devices",
          [](py::object self) {  // each Device keeps the Runtime alive
            py::list out;
            for (Device* d : self.cast<const Runtime&>().gpu_devices()) {
              out.append(py::cast(d, py::return_value_policy::reference_internal, self));
            }
            return out;
          },
          "Every GPU device (one per visible GPU, or as gpu_ordinals / num_gpu_devices / "
          "TESSEL_GPU_DEVICES choose; an ordinal listed k times: k devices sharing that GPU), "
          "GPU:0 first; empty without CUDA or a GPU.")
      .def("device", py::overload_cast<int>(&Runtime::device, py::const_), py::arg("index"),
           py::return_value_policy::reference_internal)
      .def("device", py::overload_cast<std::string_view>(&Runtime::device, py::const_),
           py::arg("name"), py::return_value_policy::reference_internal)
      .def_property_readonly("job", [](const Runtime& r) { return r.options().job; })
      .def_property_readonly("replica", [](const Runtime& r) { return r.options().replica; })
      .def_property_readonly("task", [](const Runtime& r) { return r.options().task; })
      .def_property_readonly("memory_limit",
                             [](const Runtime& r) { return r.options().memory_limit; })
      .def_property_readonly("gpu_ordinals",
                             [](const Runtime& r) { return r.options().gpu_ordinals; })
      .def(
          "synchronize",
          [](Runtime& r, std::optional<double> timeout_seconds) {
            std::optional<std::chrono::milliseconds> timeout;
            // A negative timeout reaches C++, which rejects it with its own message.
            if (timeout_seconds) {
              timeout = seconds_arg(*timeout_seconds, "timeout_seconds", "Runtime");
            }
            py::gil_scoped_release release;
            if (timeout) {
              r.synchronize(*timeout);
            } else {
              r.synchronize();
            }
          },
          py::arg("timeout_seconds") = py::none(),
          "Waits for every device; raises the first error of their work. With timeout_seconds, "
          "raises DeadlineExceededError (a TimeoutError) naming the devices still busy.")
      .def("__len__", &Runtime::num_devices)
      .def("__repr__", [](const Runtime& r) {
        return "Runtime(" + std::to_string(r.num_devices()) + " devices, " + r.device(0).name() +
               ", ...)";
      });
}

}  // namespace

void bind_runtime(py::module_& m) {
  bind_device(m);
  bind_gpu(m);
  bind_runtime_class(m);
}

}  // namespace tessel::python
