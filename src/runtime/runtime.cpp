// Runtime: options and environment, device lookup, synchronize across devices.
#include "tessel/runtime/runtime.h"

#include "tessel/runtime/clients.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <utility>

#include "core/env.h"
#include "core/errors.h"
#include "core/text.h"
#include "tessel/core/host_memory.h"
#include "tessel/runtime/gpu.h"
#include "tessel/runtime/gpu_event.h"

namespace tessel {
namespace {

constexpr int kDefaultCpuDevices = 4;
constexpr const char* kCpuDevicesEnv = "TESSEL_CPU_DEVICES";
constexpr const char* kDeviceMemoryLimitEnv = "TESSEL_DEVICE_MEMORY_LIMIT";
constexpr const char* kGpuDevicesEnv = "TESSEL_GPU_DEVICES";
constexpr const char* kSimulatedGpusEnv = "TESSEL_SIMULATED_GPUS";

// A device count: `requested` (`option`, checked to be in [low, kMaxCpuDevices]) unless it is
// -1, else the integer in environment variable `env`, else `fallback`. `what` describes the
// range in the environment error ("a positive integer up to 1024").
int resolve_count(int requested, const char* option, const char* env, int low, int fallback,
                  const std::string& what) {
  if (requested != -1) {
    if (requested < low || requested > kMaxCpuDevices) {
      detail::throw_invalid("Runtime", "{} must be -1 or in [{}, {}], got {}", option, low,
                            kMaxCpuDevices, requested);
    }
    return requested;
  }
  return static_cast<int>(
      detail::env_int(env, {low, kMaxCpuDevices}, "Runtime", what).value_or(fallback));
}

// num_cpu_devices from the options, else the environment, else the default.
int resolve_num_devices(int requested) {
  return resolve_count(requested, "num_cpu_devices", kCpuDevicesEnv, 1, kDefaultCpuDevices,
                       fmt::format("a positive integer up to {}", kMaxCpuDevices));
}

// The CUDA ordinals of the GPU devices: `listed` (RuntimeOptions::gpu_ordinals), else the first
// `requested` visible GPUs, else the list in TESSEL_GPU_DEVICES, else every visible GPU. An
// ordinal may repeat: several devices share that GPU.
std::vector<int> resolve_gpu_ordinals(const std::vector<int>& listed, int requested) {
  const int visible = visible_gpu_count();
  std::vector<int> ordinals;
  if (!listed.empty()) {
    if (requested != -1) {
      detail::throw_invalid("Runtime", "gpu_ordinals [{}] and num_gpu_devices {} both given; give one",
                            fmt::join(listed, ", "), requested);
    }
    if (listed.size() > static_cast<size_t>(kMaxCpuDevices)) {
      detail::throw_invalid("Runtime", "gpu_ordinals has {} entries, more than {}", listed.size(),
                            kMaxCpuDevices);
    }
    for (size_t i = 0; i < listed.size(); ++i) {
      if (listed[i] < 0 || listed[i] >= visible) {
        detail::throw_invalid("Runtime", "gpu_ordinals[{}] = {} is not a visible CUDA ordinal ({} "
                              "visible GPUs)", i, listed[i], visible);
      }
    }
    return listed;
  }
  if (requested != -1) {
    if (requested < 0 || requested > visible) {
      detail::throw_invalid("Runtime", "num_gpu_devices must be -1 or in [0, {}] ({} visible GPUs), got {}",
                            visible, visible, requested);
    }
    for (int i = 0; i < requested; ++i) ordinals.push_back(i);
    return ordinals;
  }
  const std::optional<std::string> text = detail::env_raw(kGpuDevicesEnv);
  if (!text) {
    for (int i = 0; i < visible; ++i) ordinals.push_back(i);
    return ordinals;
  }
  if (text->empty() || *text == "none") return ordinals;
  for (const std::string& item : detail::split(*text, ',')) {
    const std::optional<int64_t> value = detail::parse_integer(item);
    if (!value || *value < 0 || *value >= visible) {
      detail::throw_invalid("Runtime", "{}='{}': '{}' is not a visible CUDA ordinal ({} visible GPUs)",
                            kGpuDevicesEnv, *text, item, visible);
    }
    if (ordinals.size() == static_cast<size_t>(kMaxCpuDevices)) {
      detail::throw_invalid("Runtime", "{}='{}' lists more than {} devices", kGpuDevicesEnv,
                            *text, kMaxCpuDevices);
    }
    ordinals.push_back(static_cast<int>(*value));
  }
  return ordinals;
}

// The simulated GPU count from the options, else TESSEL_SIMULATED_GPUS, else 0.
int resolve_simulated_gpus(int requested) {
  return resolve_count(requested, "num_simulated_gpu_devices", kSimulatedGpusEnv, 0, 0,
                       fmt::format("an integer in [0, {}]", kMaxCpuDevices));
}

// Each device's memory limit from the options, else the environment, else an equal share of the
// process's host limit.
int64_t resolve_memory_limit(int64_t requested, int num_devices) {
  if (requested != -1) {
    if (requested < 1) {
      detail::throw_invalid("Runtime", "memory_limit must be -1 or at least 1 byte, got {}",
                            requested);
    }
    return requested;
  }
  if (const auto bytes = detail::env_byte_size(kDeviceMemoryLimitEnv, 1, "Runtime")) {
    return *bytes;
  }
  return std::max<int64_t>(1, host_memory_limit() / num_devices);
}

// "<device> running 'op' (N pending)" for a busy device.
std::string describe_busy(Device& device) {
  Stream& s = device.stream();
  const std::string current = s.current_op();
  const std::string next = s.next_op();
  std::string what = !current.empty() ? fmt::format("running '{}'", current)
                     : !next.empty()  ? fmt::format("next '{}'", next)
                                      : std::string("finishing");
  return fmt::format("{} {} ({} pending)", device.name(), what, s.pending());
}

// Waits for every device (until now + timeout, if given); see Runtime::synchronize.
void synchronize_devices(const std::vector<Device*>& devices,
                         std::optional<std::chrono::milliseconds> timeout) {
  for (Device* d : devices) {
    if (d->stream().on_worker_thread()) {
      detail::throw_error(ErrorCode::kFailedPrecondition, "Runtime",
                          "synchronize() called from op '{}' running on {} would wait for itself",
                          d->stream().current_op(), d->name());
    }
  }
  const auto deadline =
      std::chrono::steady_clock::now() + timeout.value_or(std::chrono::milliseconds(0));
  std::optional<Error> first;  // the lowest-indexed device's failure
  std::string others;          // the other failures, for the message
  std::vector<std::string> busy;
  for (Device* d : devices) {
    try {
      if (!timeout) {
        d->stream().synchronize();
      } else if (!d->stream().synchronize(deadline)) {
        busy.push_back(describe_busy(*d));
        continue;
      }
      if (d->cuda_stream() != nullptr) {  // then the kernels and copies its ops queued on the GPU
        GpuEvent drained(*d);
        drained.record();
        if (!timeout) {
          drained.synchronize(std::chrono::steady_clock::time_point::max(), "synchronize");
        } else if (std::chrono::steady_clock::now() < deadline || drained.done()) {
          drained.synchronize(deadline, "synchronize");
        } else {
          busy.push_back(fmt::format("{} (its CUDA stream)", d->name()));
        }
      }
    } catch (const Error& e) {
      if (!first) {
        first = e;
      } else {
        others += fmt::format("; also: {}", e.message());
      }
    }
  }
  if (first) {
    if (!busy.empty()) {
      others +=
          fmt::format("; still busy after {} ms: {}", timeout->count(), fmt::join(busy, ", "));
    }
    throw Error(first->code(), first->component(), first->message() + others);
  }
  if (!busy.empty()) {
    detail::throw_error(ErrorCode::kDeadlineExceeded, "Runtime",
                        "synchronize timed out after {} ms; still busy: {}", timeout->count(),
                        fmt::join(busy, ", "));
  }
}

}  // namespace

Runtime::Runtime(RuntimeOptions options) : options_(std::move(options)) {
  static std::atomic<uint64_t> next_id{1};
  id_ = next_id.fetch_add(1);
  options_.num_cpu_devices = resolve_num_devices(options_.num_cpu_devices);
  options_.memory_limit = resolve_memory_limit(options_.memory_limit, options_.num_cpu_devices);
  try {
    (void)DeviceName::make(options_.job, options_.replica, options_.task, "CPU", 0);
  } catch (const Error& e) {
    detail::throw_invalid("Runtime", "bad options (job '{}', replica {}, task {}): {}",
                          options_.job, options_.replica, options_.task, e.message());
  }
  devices_.reserve(static_cast<size_t>(options_.num_cpu_devices));
  for (int i = 0; i < options_.num_cpu_devices; ++i) {
    devices_.push_back(std::make_unique<Device>(
        DeviceName::make(options_.job, options_.replica, options_.task, "CPU", i), i,
        options_.memory_limit));
    device_ptrs_.push_back(devices_.back().get());
  }
  if (options_.num_simulated_gpu_devices > 0 && !options_.gpu_ordinals.empty()) {
    detail::throw_invalid("Runtime", "num_simulated_gpu_devices {} and gpu_ordinals [{}] both given; "
                          "give one", options_.num_simulated_gpu_devices,
                          fmt::join(options_.gpu_ordinals, ", "));
  }
  // Real GPUs named explicitly: TESSEL_SIMULATED_GPUS does not replace them.
  if (!options_.gpu_ordinals.empty()) options_.num_simulated_gpu_devices = 0;
  options_.num_simulated_gpu_devices =
      resolve_simulated_gpus(options_.num_simulated_gpu_devices);
  if (options_.num_simulated_gpu_devices > 0) {
    options_.num_gpu_devices = options_.num_simulated_gpu_devices;
    for (int i = 0; i < options_.num_simulated_gpu_devices; ++i) {
      gpu_devices_.push_back(Device::make_simulated_gpu(
          DeviceName::make(options_.job, options_.replica, options_.task, "GPU", i), i,
          options_.memory_limit));
      gpu_device_ptrs_.push_back(gpu_devices_.back().get());
    }
    return;
  }
  const std::vector<int> gpus = resolve_gpu_ordinals(options_.gpu_ordinals, options_.num_gpu_devices);
  options_.gpu_ordinals = gpus;
  options_.num_gpu_devices = static_cast<int>(gpus.size());
  for (size_t i = 0; i < gpus.size(); ++i) {
    const int id = static_cast<int>(i);
    gpu_devices_.push_back(Device::make_gpu(
        DeviceName::make(options_.job, options_.replica, options_.task, "GPU", id), id, gpus[i]));
    gpu_device_ptrs_.push_back(gpu_devices_.back().get());
    // Devices sharing a GPU share its memory equally.
    const auto sharing = std::count(gpus.begin(), gpus.end(), gpus[i]);
    if (sharing > 1) {
      Device& d = *gpu_devices_.back();
      d.set_memory_limit(std::max<int64_t>(1, d.memory_limit() / sharing));
    }
  }
}

Runtime::~Runtime() {
  // Every stream stops (draining) before any device object goes away, so a task that enqueues
  // onto another device of this runtime meets a stopped stream, never a destroyed one.
  for (Device* d : device_ptrs_) d->stream().shutdown();
  for (Device* d : gpu_device_ptrs_) d->stream().shutdown();
}

Topology Runtime::topology() const { return Topology::for_hosts(1, num_devices(), "CPU"); }

Runtime& Runtime::global() {
  // This client's identity (clients.h): localhost/task 0 alone, worker/task <rank> under mpirun.
  static Runtime runtime(RuntimeOptions{.job = job_name(), .task = client_id()});
  return runtime;
}

Device& Runtime::device(int index) const {
  if (index < 0 || index >= num_devices()) {
    detail::throw_error(ErrorCode::kOutOfRange, "Runtime",
                        "device index {} is out of range for {} devices", index, num_devices());
  }
  return *devices_[static_cast<size_t>(index)];
}

Device& Runtime::device(std::string_view name) const {
  const std::optional<DeviceName> parsed = DeviceName::try_parse(name);
  if (!parsed || !parsed->type || !parsed->id) {
    detail::throw_invalid("Runtime",
                          "'{}' is not a device name with a type and an id (e.g. '{}' or "
                          "'/device:CPU:0')",
                          name, devices_.front()->name());
  }
  for (const auto& d : devices_) {
    if (parsed->matches(d->parsed_name())) return *d;
  }
  for (const auto& d : gpu_devices_) {
    if (parsed->matches(d->parsed_name())) return *d;
  }
  const std::string gpus =
      gpu_devices_.empty() ? std::string(" (no GPU devices)")
                           : fmt::format(" and the {} GPU devices {}..{}", gpu_devices_.size(),
                                         gpu_devices_.front()->name(), gpu_devices_.back()->name());
  detail::throw_error(ErrorCode::kNotFound, "Runtime", "no device '{}' among the {} devices {}..{}{}",
                      name, num_devices(), devices_.front()->name(), devices_.back()->name(), gpus);
}

namespace {
std::vector<Device*> concat(const std::vector<Device*>& a, const std::vector<Device*>& b) {
  std::vector<Device*> all(a);
  all.insert(all.end(), b.begin(), b.end());
  return all;
}
}  // namespace

void Runtime::synchronize() {
  synchronize_devices(concat(device_ptrs_, gpu_device_ptrs_), std::nullopt);
}

void Runtime::synchronize(std::chrono::milliseconds timeout) {
  if (timeout.count() < 0) {
    detail::throw_invalid("Runtime", "synchronize with a negative timeout of {} ms",
                          timeout.count());
  }
  synchronize_devices(concat(device_ptrs_, gpu_device_ptrs_), timeout);
}

}  // namespace tessel
