// tessel bench replicate: a data-parallel training step of a small MLP replicated over R
// replicas, compiled (compile.h: traced once, replayed) against eager replicate() and against R
// sequential single-replica steps, all in one run; plus the compiled replay's overhead per step
// over the kernels' own time.
//
// The step (one replica): h = relu(x w1); out = h w2; loss = mean((out - y)^2); gradients of
// w1, w2 by the tape; each gradient all-reduced (mean) across the replicas; SGD (lr 0.01).
// Inputs: x [batch, features] and y [batch, classes] per replica, w1 [features, hidden] and
// w2 [hidden, classes] broadcast. Outputs: loss, w1', w2'.
//
// Timing (steady clock, medians over rounds; each round runs every configuration `steps` times,
// configurations interleaved so that load changes hit them alike):
//   compiled     CompiledComputation::run (replicate() replaying the graph on every replica)
//   eager        replicate() calling the step function (dispatch, rules, planner every op)
//   sequential   R calls of eager replicate() with one replica each, one after the other
// Overhead over the kernels, one replica on one device, inputs already there (no replicate()):
//   kernels      every op node's kernel of the compiled graph called directly on host tensors,
//                one after the other on this thread (preallocated outputs): the kernels' own time
//   replay       CompiledComputation::replay on a single-replica context, until its device is idle
//   eager step   the step function on the same context
// replay - kernels is what the compiled replay adds per step (allocation, launch, stream
// hand-off, and the page faults of fresh output blocks, counted per step); eager step - kernels
// the same for eager dispatch. For R replicas the line
// "compiled - kernels x R / P" subtracts the kernels' time spread over P = min(R, hardware
// threads) cores from the compiled step.
// Compiled and eager outputs are compared bit for bit ("wrong"); any difference exits 1.
#include <sys/resource.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bench_env.h"
#include "bench_stats.h"
#include "commands.h"
#include "flags.h"
#include "json_output.h"
#include "tessel/core/error.h"
#include "tessel/core/median.h"
#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/ops.h"
#include "tessel/replicate/compile.h"
#include "tessel/replicate/replicate.h"
#include "tessel/runtime/runtime.h"

namespace tessel::cli {
namespace {

constexpr const char* kHelp =
    "usage: tessel bench replicate [--replicas R] [--devices D] [--batch B] [--features F]\n"
    "                              [--hidden H] [--classes C] [--steps N] [--rounds K] [--json]\n"
    "\n"
    "A data-parallel training step of an MLP (x[B,F] -> relu(x w1[F,H]) w2[H,C], mean squared\n"
    "error, tape gradients all-reduced across replicas, SGD) replicated over R replicas of one\n"
    "core each on a runtime of D devices: compiled (traced once, replayed) vs eager replicate()\n"
    "vs R sequential single-replica steps, as ratios; then, on one replica without\n"
    "replicate(), the compiled replay's and eager dispatch's overhead per step over the\n"
    "kernels' own time (the graph's kernels called directly), in us. Medians of K rounds\n"
    "(default 7) of N steps (default 10) per configuration.\n"
    "Defaults: R 4, D = R, B 64, F 256, H 512, C 64. OpenBLAS runs one thread (tessel bench sets it).\n"
    "--json prints one object. Exit status 1 if compiled and eager outputs differ.\n";

struct Config {
  int64_t replicas = 4, devices = 0, batch = 64, features = 256, hidden = 512, classes = 64;
  int64_t steps = 10, rounds = 7;
  bool json = false;
};

Config parse(const Args& args) {
  Config c;
  FlagParser flags("bench replicate");
  flags.integer({"--replicas"}, c.replicas, 1, kMaxCpuDevices);
  flags.integer({"--devices"}, c.devices, 1, kMaxCpuDevices);
  flags.positive({"--batch"}, c.batch);
  flags.positive({"--features"}, c.features);
  flags.positive({"--hidden"}, c.hidden);
  flags.positive({"--classes"}, c.classes);
  flags.integer({"--steps"}, c.steps, 1, 1000000);
  flags.integer({"--rounds"}, c.rounds, 1, 1000);
  flags.set({"--json"}, c.json);
  flags.parse(args);
  if (c.devices == 0) c.devices = c.replicas;
  if (c.devices < c.replicas) {
    flags.fail(fmt::format("--devices {} is fewer than --replicas {}", c.devices, c.replicas));
  }
  // Per replica: inputs, weights, activations and gradients of the MLP (a few copies each, for
  // the compiled, eager and sequential runs), f32.
  const double b = static_cast<double>(c.batch), f = static_cast<double>(c.features),
               h = static_cast<double>(c.hidden), k = static_cast<double>(c.classes);
  bench::check_fits_in_memory(
      "bench replicate",
      8.0 * 4 * static_cast<double>(c.replicas) * (b * f + f * h + h * k + b * h + b * k),
      fmt::format("--batch {} --features {} --hidden {} --classes {} on {} replicas", c.batch,
                  c.features, c.hidden, c.classes, c.replicas));
  return c;
}

constexpr double kLearningRate = 0.01;

std::vector<DTensor> mlp_step(ReplicaContext& ctx, const std::vector<DTensor>& in) {
  const DTensor &x = in[0], &y = in[1], &w1 = in[2], &w2 = in[3];
  GradientTape tape;
  tape.watch(w1);
  tape.watch(w2);
  const DTensor err = subtract(matmul(relu(matmul(x, w1)), w2), y);
  const DTensor loss = reduce_mean(multiply(err, err));
  const std::vector<DTensor> grads = tape.gradient(loss, {w1, w2});
  const DTensor g1 = ctx.all_reduce(grads[0], ReduceOp::kMean);
  const DTensor g2 = ctx.all_reduce(grads[1], ReduceOp::kMean);
  return {loss, subtract(w1, multiply(g1, kLearningRate)),
          subtract(w2, multiply(g2, kLearningRate))};
}

// A context of one replica (the base class implements the single-replica collectives).
class OneReplica : public ReplicaContext {
 public:
  OneReplica(Mesh mesh, Runtime& runtime) : ReplicaContext(0, 1, std::move(mesh), runtime) {}
};

// The op kernels of `graph` on host tensors, one after the other on this thread: a one-core
// graph's blocks are whole values, collectives and relayouts are the identity here.
class KernelRunner {
 public:
  KernelRunner(const Graph& graph, const std::vector<Tensor>& inputs) : graph_(graph) {
    values_.resize(graph.values().size());
    for (const GraphNode& node : graph.nodes()) {
      if (node.output < 0) continue;
      const TensorSpec& spec = graph.values()[static_cast<size_t>(node.output)];
      Tensor& out = values_[static_cast<size_t>(node.output)];
      if (node.kind == GraphNodeKind::kInput) {
        out = inputs[static_cast<size_t>(node.input_index)];
      } else if (node.kind == GraphNodeKind::kOp) {
        out = Tensor::zeros(spec.shape, spec.dtype);
      }
    }
  }

  void run() {
    for (const GraphNode& node : graph_.nodes()) {
      if (node.output < 0) continue;
      Tensor& out = values_[static_cast<size_t>(node.output)];
      if (node.kind == GraphNodeKind::kCapture) out = to_host(node.capture);
      if (node.kind == GraphNodeKind::kRelayout || node.kind == GraphNodeKind::kCollective) {
        out = values_[static_cast<size_t>(node.inputs[0])];
      }
      if (node.kind != GraphNodeKind::kOp) continue;
      LocalContext context;
      std::vector<Tensor> ins;
      for (int v : node.inputs) {
        ins.push_back(values_[static_cast<size_t>(v)]);
        context.input_blocks.push_back(whole(ins.back().shape()));
        context.input_shapes.push_back(ins.back().shape());
      }
      const TensorSpec& spec = graph_.values()[static_cast<size_t>(node.output)];
      context.output_shape = spec.shape;
      context.output_block = whole(spec.shape);
      context.output_layout = &spec.layout;
      OpRegistry::global().get(node.op).kernel(ins, out, *node.attrs, context);
    }
  }

 private:
  static Box whole(const Shape& shape) {
    return Box{std::vector<int64_t>(static_cast<size_t>(shape.rank()), 0), shape.dims()};
  }
  const Graph& graph_;
  std::vector<Tensor> values_;
};

int64_t minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Microseconds per call of fn over `steps` calls; adds the page faults per call to *faults.
template <typename Fn>
double us_per_step(int64_t steps, Fn&& fn, std::vector<double>* faults = nullptr) {
  const int64_t faults0 = minor_faults();
  const bench::Stopwatch watch;
  for (int64_t s = 0; s < steps; ++s) fn();
  const double us = watch.microseconds();
  if (faults) faults->push_back(static_cast<double>(minor_faults() - faults0) / steps);
  return us / static_cast<double>(steps);
}

int count_differences(const std::vector<std::vector<DTensor>>& a,
                      const std::vector<std::vector<DTensor>>& b) {
  int wrong = 0;
  for (size_t r = 0; r < a.size(); ++r) {
    for (size_t k = 0; k < a[r].size(); ++k) {
      if (to_host(a[r][k]).to_doubles() != to_host(b[r][k]).to_doubles()) ++wrong;
    }
  }
  return wrong;
}

std::shared_ptr<const CompiledComputation> compile_or_throw(const Function& fn, const InputSignature& signature,
                                        const CompileOptions& options) {
  const CompilationResult r = compile(fn, signature, options);
  if (!r.ok()) throw r.error();
  return r.computation();
}

int replicate_benchmark(const Config& c) {
  Runtime rt({.num_cpu_devices = static_cast<int>(c.devices)});
  const int replicas = static_cast<int>(c.replicas);

  // Data: each replica its own x, y; w1, w2 broadcast.
  std::vector<std::vector<Tensor>> per_replica(2);
  for (int r = 0; r < replicas; ++r) {
    per_replica[0].push_back(Tensor::random_normal(Shape{c.batch, c.features}, DType::kF32, 10 + r));
    per_replica[1].push_back(Tensor::random_normal(Shape{c.batch, c.classes}, DType::kF32, 50 + r));
  }
  const std::vector<Tensor> weights = {
      Tensor::random_normal(Shape{c.features, c.hidden}, DType::kF32, 1, 0.0, 0.05),
      Tensor::random_normal(Shape{c.hidden, c.classes}, DType::kF32, 2, 0.0, 0.05)};
  const InputSignature signature = {{Shape{c.batch, c.features}}, {Shape{c.batch, c.classes}},
                                    {Shape{c.features, c.hidden}}, {Shape{c.hidden, c.classes}}};

  const Function step("mlp_step", mlp_step);
  CompileOptions options;
  options.replicate.metadata.num_replicas = replicas;
  options.replicate.runtime = &rt;
  CompileOptions one_replica = options;
  one_replica.replicate.metadata.num_replicas = 1;
  const auto compiled = compile_or_throw(step, signature, options);
  const auto compiled_one = compile_or_throw(step, signature, one_replica);

  // One replica without replicate(): inputs on device 0.
  const Mesh mesh = Mesh::create_on_devices({{"core", 1}}, {rt.device(0).name()});
  OneReplica ctx(mesh, rt);
  std::vector<Tensor> host_inputs = {per_replica[0][0], per_replica[1][0], weights[0], weights[1]};
  std::vector<DTensor> inputs;
  for (const Tensor& t : host_inputs) inputs.push_back(copy_to_mesh(t, Layout::replicated(mesh, 2), rt));
  KernelRunner kernels(compiled_one->graph(), host_inputs);

  const auto run_compiled = [&] { return compiled->run(per_replica, weights); };
  const auto run_eager = [&] {
    return replicate(mlp_step, per_replica, weights, {}, {}, options.replicate);
  };
  const auto run_sequential = [&] {
    for (int r = 0; r < replicas; ++r) {
      replicate(mlp_step, {{per_replica[0][r]}, {per_replica[1][r]}}, weights, {}, {},
                one_replica.replicate);
    }
  };
  const int wrong = count_differences(run_compiled(), run_eager());  // also warms up
  run_sequential();
  std::vector<double> t_compiled, t_eager, t_sequential, t_kernels, t_replay, t_direct;
  std::vector<double> f_compiled, f_eager, f_sequential, f_replay, f_direct;  // faults per step
  for (int64_t round = 0; round < c.rounds; ++round) {
    t_compiled.push_back(us_per_step(c.steps, run_compiled, &f_compiled));
    t_eager.push_back(us_per_step(c.steps, run_eager, &f_eager));
    t_sequential.push_back(us_per_step(c.steps, run_sequential, &f_sequential));
    t_kernels.push_back(us_per_step(c.steps, [&] { kernels.run(); }));
    t_replay.push_back(us_per_step(
        c.steps,
        [&] {
          compiled_one->replay(ctx, inputs);
          rt.synchronize();
        },
        &f_replay));
    t_direct.push_back(us_per_step(
        c.steps,
        [&] {
          mlp_step(ctx, inputs);
          rt.synchronize();
        },
        &f_direct));
  }
  const double compiled_us = median(t_compiled), eager_us = median(t_eager);
  const double sequential_us = median(t_sequential), kernels_us = median(t_kernels);
  const double replay_us = median(t_replay), direct_us = median(t_direct);
  const int cores = static_cast<int>(
      std::min<unsigned>(static_cast<unsigned>(replicas), std::max(1u, std::thread::hardware_concurrency())));
  const double parallel_overhead_us = compiled_us - kernels_us * replicas / cores;
  const double load = bench::load_average();  // -1 when unknown

  if (c.json) {
    print_json(Json{{"replicas", replicas},
                    {"devices", c.devices},
                    {"hardware_threads", std::thread::hardware_concurrency()},
                    {"batch", c.batch},
                    {"features", c.features},
                    {"hidden", c.hidden},
                    {"classes", c.classes},
                    {"graph_nodes", compiled->graph().nodes().size()},
                    {"compiled_us", json_number(compiled_us)},
                    {"eager_us", json_number(eager_us)},
                    {"sequential_us", json_number(sequential_us)},
                    {"eager_over_compiled", json_number(eager_us / compiled_us, 4)},
                    {"sequential_over_compiled", json_number(sequential_us / compiled_us, 4)},
                    {"kernels_us", json_number(kernels_us)},
                    {"replay_us", json_number(replay_us)},
                    {"eager_step_us", json_number(direct_us)},
                    {"replay_overhead_us", json_number(replay_us - kernels_us)},
                    {"eager_overhead_us", json_number(direct_us - kernels_us)},
                    {"parallel_overhead_us", json_number(parallel_overhead_us)},
                    {"compiled_faults", json_number(median(f_compiled))},
                    {"eager_faults", json_number(median(f_eager))},
                    {"sequential_faults", json_number(median(f_sequential))},
                    {"replay_faults", json_number(median(f_replay))},
                    {"eager_step_faults", json_number(median(f_direct))},
                    {"load1", json_number(load, 3)},
                    {"wrong", wrong}});
  } else {
    std::cout << fmt::format(
        "MLP step [{}x{}] -> {} -> {}, {} replicas x 1 core on {} devices ({} hardware threads, "
        "load {:.2f}), {} graph nodes; medians of {} rounds x {} steps\n",
        c.batch, c.features, c.hidden, c.classes, replicas, c.devices,
        std::thread::hardware_concurrency(), load, compiled->graph().nodes().size(), c.rounds,
        c.steps);
    std::cout << fmt::format(
        "  compiled replicate()          {:9.1f} us/step  1.00x ({:.0f} page faults)\n",
        compiled_us, median(f_compiled));
    std::cout << fmt::format(
        "  eager replicate()             {:9.1f} us/step  {:.2f}x compiled ({:.0f} page faults)\n",
        eager_us, eager_us / compiled_us, median(f_eager));
    std::cout << fmt::format(
        "  {} sequential 1-replica steps {:9.1f} us/step  {:.2f}x compiled ({:.0f} page faults)\n",
        replicas, sequential_us, sequential_us / compiled_us, median(f_sequential));
    std::cout << fmt::format("one replica, no replicate(): kernels alone {:.1f} us/step\n", kernels_us);
    std::cout << fmt::format(
        "  compiled replay               {:9.1f} us/step  overhead {:.1f} us ({:.0f} page faults)\n",
        replay_us, replay_us - kernels_us, median(f_replay));
    std::cout << fmt::format(
        "  eager step                    {:9.1f} us/step  overhead {:.1f} us ({:.0f} page faults)\n",
        direct_us, direct_us - kernels_us, median(f_direct));
    std::cout << fmt::format("{} replicas: compiled - kernels x {} / {} cores = {:.1f} us/step\n",
                             replicas, replicas, cores, parallel_overhead_us);
    std::cout << fmt::format("wrong results: {}\n", wrong);
  }
  return wrong == 0 ? kExitOk : kExitFailure;
}

}  // namespace

int run_bench_replicate(const Args& args) {
  return run_command(args, kHelp, parse, replicate_benchmark);
}

}  // namespace tessel::cli
