// tessel bench matmul / tessel bench dispatch: the SPMD op layer's two benchmarks, each against a
// baseline measured in the same run (one device; the op count).
#include <algorithm>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "bench_env.h"
#include "bench_stats.h"
#include "commands.h"
#include "flags.h"
#include "json_output.h"
#include "tessel/core/median.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/ops.h"
#include "tessel/runtime/runtime.h"

namespace tessel::cli {
namespace {

constexpr const char* kMatmulHelp =
    "usage: tessel bench matmul [--n N] [--devices D] [--rounds R] [--json]\n"
    "\n"
    "Times an N x N x N f32 matmul on one device and with its rows sharded over D devices\n"
    "(column-parallel: no communication), alternating for R rounds (default 5); medians.\n"
    "--n defaults to 2048, --devices to 2. --json prints {\"n\", \"devices\", \"single_us\",\n"
    "\"sharded_us\", \"speedup\"}.\n";

constexpr const char* kDispatchHelp =
    "usage: tessel bench dispatch [--devices D] [--ops N] [--rounds R] [--json]\n"
    "\n"
    "Dispatches N (default 1000) tiny elementwise adds on an [8] f32 DTensor sharded over D\n"
    "devices (default 4) and waits for them: the time per op dispatched and executed, median\n"
    "over R rounds (default 7). The baseline, alternating with it in the same rounds: the same\n"
    "work without dispatch, each device's output block allocated and the add's local kernel\n"
    "called on it directly. --json prints {\"devices\", \"ops\", \"per_op_us\",\n"
    "\"kernel_us\", \"overhead_ratio\"} (overhead_ratio = per_op_us / kernel_us).\n";

struct MatmulFlags {
  int64_t n = 2048, devices = 2, rounds = 5;
  bool json = false;
};

struct DispatchFlags {
  int64_t devices = 4, ops = 1000, rounds = 7;
  bool json = false;
};

// The largest --n (a 65536^2 f32 matrix is 16 GiB) and --rounds.
constexpr int64_t kMaxN = 65536;
constexpr int64_t kMaxRounds = 1000;

// Microseconds one call of fn() takes.
template <typename Fn>
double time_us(Fn&& fn) {
  return bench::seconds_of(std::forward<Fn>(fn)) * 1e6;
}

// The dispatch benchmark's baseline: op `name`'s local kernel on each local block of `x` (as
// both inputs), with a freshly allocated output block per device, on the calling thread.
class DirectKernel {
 public:
  DirectKernel(const DTensor& x, std::string_view name) : def_(OpRegistry::global().get(name)) {
    for (int i = 0; i < x.num_components(); ++i) {
      devices_.push_back(&x.device(i));
      inputs_.push_back({x.component(i), x.component(i)});
    }
  }
  void run() const {
    for (size_t i = 0; i < devices_.size(); ++i) {
      const Tensor& in = inputs_[i][0];
      Tensor out = devices_[i]->allocate(in.shape(), in.dtype(), /*zero_fill=*/false);
      def_.kernel(inputs_[i], out, attrs_, context_);
    }
  }

 private:
  const OpDef& def_;
  std::vector<Device*> devices_;
  std::vector<std::vector<Tensor>> inputs_;  // per device: the kernel's input blocks
  OpAttrs attrs_;
  LocalContext context_;  // the elementwise kernels do not read it
};

MatmulFlags parse_matmul(const Args& args) {
  MatmulFlags f;
  FlagParser flags("bench matmul");
  flags.integer({"--n"}, f.n, 1, kMaxN);
  flags.integer({"--devices"}, f.devices, 1, kMaxCpuDevices);
  flags.integer({"--rounds"}, f.rounds, 1, kMaxRounds);
  flags.set({"--json"}, f.json);
  flags.parse(args);
  return f;
}

int matmul_benchmark(const MatmulFlags& f) {
  // A, B and the product, once on one device and once sharded over the mesh.
  bench::check_fits_in_memory("bench matmul",
                              6.0 * static_cast<double>(f.n) * static_cast<double>(f.n) * 4,
                              "--n " + std::to_string(f.n));
  Runtime rt({.num_cpu_devices = static_cast<int>(f.devices)});
  const Shape square{f.n, f.n};
  const Mesh one = Mesh::create_on_devices({{"x", 1}}, {rt.device(0).name()});
  const Mesh many = Mesh::create({{"x", f.devices}});
  const Tensor a_host = Tensor::random_uniform(square, DType::kF32, 1, -1, 1);
  const Tensor b_host = Tensor::random_uniform(square, DType::kF32, 2, -1, 1);
  const DTensor a1 = copy_to_mesh(a_host, Layout::replicated(one, 2), rt);
  const DTensor b1 = copy_to_mesh(b_host, Layout::replicated(one, 2), rt);
  const DTensor an = copy_to_mesh(a_host, Layout({"x", "unsharded"}, many), rt);
  const DTensor bn = copy_to_mesh(b_host, Layout::replicated(many, 2), rt);
  unpack(matmul(a1, b1));  // warm up (OpenBLAS buffers, page faults)
  unpack(matmul(an, bn));
  std::vector<double> single, sharded;
  for (int64_t r = 0; r < f.rounds; ++r) {
    single.push_back(time_us([&] { unpack(matmul(a1, b1)); }));
    sharded.push_back(time_us([&] { unpack(matmul(an, bn)); }));
  }
  const double s = median(single), p = median(sharded);
  if (f.json) {
    print_json(Json{{"n", f.n},
                    {"devices", f.devices},
                    {"single_us", json_number(s)},
                    {"sharded_us", json_number(p)},
                    {"speedup", json_number(s / p, 4)}});
  } else {
    std::cout << fmt::format("matmul {0}x{0}x{0} f32: one device {1:.0f} us, rows over {2} devices "
                             "{3:.0f} us: {4:.2f}x faster\n",
                             f.n, s, f.devices, p, s / p);
  }
  return kExitOk;
}

}  // namespace

int run_bench_matmul(const Args& args) {
  return run_command(args, kMatmulHelp, parse_matmul, matmul_benchmark);
}

namespace {

DispatchFlags parse_dispatch(const Args& args) {
  DispatchFlags f;
  FlagParser flags("bench dispatch");
  flags.integer({"--devices"}, f.devices, 1, kMaxCpuDevices);
  flags.integer({"--ops"}, f.ops, 1, 10000000);
  flags.integer({"--rounds"}, f.rounds, 1, kMaxRounds);
  flags.set({"--json"}, f.json);
  flags.parse(args);
  return f;
}

int dispatch_benchmark(const DispatchFlags& f) {
  Runtime rt({.num_cpu_devices = static_cast<int>(f.devices)});
  const Mesh mesh = Mesh::create({{"x", f.devices}});
  const DTensor x = copy_to_mesh(Tensor::full(Shape{8}, DType::kF32, 1.0), Layout({"x"}, mesh), rt);
  const DirectKernel direct(x, "add");
  std::vector<double> per_op, kernel;
  for (int64_t r = 0; r < f.rounds + 1; ++r) {
    DTensor y;
    const double us = time_us([&] {
      for (int64_t i = 0; i < f.ops; ++i) y = add(x, x);
      unpack(y);  // waits for every device's stream
    });
    const double kernel_us = time_us([&] {
      for (int64_t i = 0; i < f.ops; ++i) direct.run();
    });
    if (r > 0) {  // round 0 warms up
      per_op.push_back(us / static_cast<double>(f.ops));
      kernel.push_back(kernel_us / static_cast<double>(f.ops));
    }
  }
  const double m = median(per_op), k = median(kernel);
  if (f.json) {
    print_json(Json{{"devices", f.devices},
                    {"ops", f.ops},
                    {"per_op_us", json_number(m)},
                    {"kernel_us", json_number(k)},
                    {"overhead_ratio", json_number(m / k, 4)}});
  } else {
    std::cout << fmt::format("add of two [8] f32 DTensors over {} devices: {:.2f} us per op "
                             "dispatched and executed, {:.2f} us for its local kernels called "
                             "directly ({:.2f}x; median of {} rounds of {})\n",
                             f.devices, m, k, m / k, f.rounds, f.ops);
  }
  return kExitOk;
}

}  // namespace

int run_bench_dispatch(const Args& args) {
  return run_command(args, kDispatchHelp, parse_dispatch, dispatch_benchmark);
}

}  // namespace tessel::cli
