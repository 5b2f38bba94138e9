// tessel bench relayout: one relayout of a DTensor (relayout.h) against one memcpy of the same
// bytes and against the raw collective its plan uses, in one run.
//
// The tensor lives on a local Runtime of `mesh size` CPU devices; the mesh is made on that
// runtime's devices. Three modes take turns in `rounds` rounds of iters/rounds timed calls
// (after `warmup` untimed calls in the first round, one in later rounds), so that all three see
// the same machine:
// - relayout: relayout(dtensor, to) on a DTensor made once with copy_to_mesh(host, from); one
//   call's time is the controller's wall time of the call (it returns when every device's
//   stream has finished the plan); each result is dropped after its call, outside the timing;
// - memcpy: one single-threaded std::memcpy of the global tensor's bytes between two
//   pre-touched host buffers;
// - collective: the raw Communicator collective of the plan's first communicating step
//   (all_to_all with equal splits, all_gather, all_reduce or reduce_scatter) over the step's
//   groups of in-process communicators (make_in_process_communicators), one worker thread per
//   device, each passing a flat tensor of its block's elements under the step's source layout
//   (the same per-device byte counts as the relayout's step). As in bench fusion, the workers
//   meet at a spin-yield barrier before each call and one call's time is the slowest worker's.
//   Plans without such a step (empty, local-only, send_recv) have no collective time (null).
// Every reported time is the median over a mode's timed calls. One relayout result is checked
// bit for bit against copy_to_mesh(host, to): `wrong` counts the elements whose bytes differ.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench_env.h"
#include "bench_stats.h"
#include "bench_team.h"
#include "commands.h"
#include "flags.h"
#include "json_output.h"
#include "tessel/comm/communicator.h"
#include "tessel/comm/mesh_groups.h"
#include "tessel/core/byte_size.h"
#include "tessel/core/dtype.h"
#include "tessel/core/error.h"
#include "tessel/core/median.h"
#include "tessel/core/reduce_op.h"
#include "tessel/core/shape.h"
#include "tessel/core/tensor.h"
#include "tessel/dtensor/dtensor.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/dtensor/relayout_plan.h"
#include "tessel/mesh/layout.h"
#include "tessel/mesh/mesh.h"
#include "tessel/mesh/mesh_spec.h"
#include "tessel/runtime/runtime.h"

namespace tessel::cli {
namespace {

constexpr const char* kHelp =
    "usage: tessel bench relayout --shape D0,D1,... --mesh x=N[,y=M...] --from SPECS --to SPECS\n"
    "                             [options]\n"
    "\n"
    "Prints the relayout plan (plan_relayout), then times, in one run and taking turns in rounds,\n"
    "(1) relayout(dtensor, to) of a DTensor made once with copy_to_mesh(host, from) on a local\n"
    "runtime of one CPU device per mesh point, (2) one single-threaded memcpy of the global\n"
    "tensor's bytes, and (3) the raw collective of the plan's first communicating step\n"
    "(all_to_all, all_gather, all_reduce or reduce_scatter over the step's groups of in-process\n"
    "communicators, one thread per device, with the step's per-device bytes; none for local-only\n"
    "and send_recv plans). Times are medians; a collective call's time is its slowest device's.\n"
    "One relayout result is checked bit for bit against copy_to_mesh(host, to); the exit status\n"
    "is 1 if any element differs.\n"
    "\n"
    "  --shape D0,D1,...   global shape (required), e.g. 4096,4096\n"
    "  --mesh x=N,...      mesh dimensions (required), e.g. x=4, x=2,y=2 or '|x=2,y=2|*CPU' (at most 64 devices)\n"
    "  --from SPECS        source sharding specs, one per tensor dimension (required), e.g.\n"
    "                      x,unsharded; a spec is a mesh dimension, x+y or unsharded\n"
    "  --to SPECS          target sharding specs (required; match takes the source's spec)\n"
    "  --dtype T           f32, f64, bf16, f16, i32, i64, u8, bool (default f32)\n"
    "  -n, --iters N       timed calls per mode (default 20)\n"
    "  -w, --warmup N      untimed calls before a mode's first round (default 3; 1 later)\n"
    "  --rounds R          the modes take turns in R rounds of iters/R calls (default 5)\n"
    "  --json              print {\"plan\": [<one string per step>], \"bytes\", \"relayout_us\",\n"
    "                      \"memcpy_us\", \"collective\", \"collective_us\", \"wrong\"} (medians;\n"
    "                      collective and collective_us are null without a collective step)\n"
    "\n"
    "Bad arguments print 'tessel: error: <reason>' and exit with status 2.\n";

constexpr int kMaxDevices = 64;

struct RelayoutConfig {
  Shape shape;
  std::vector<MeshDimension> mesh_dims;
  std::vector<std::string> from;
  std::vector<std::string> to;
  DType dtype = DType::kF32;
  int iters = 20;
  int warmup = 3;
  int rounds = 5;
  bool json = false;
};

// A usage error found after the flags were read (the layouts, the plan, the memory needed).
[[noreturn]] void usage(std::string message) {
  throw UsageError("bench relayout", std::move(message));
}

RelayoutConfig parse(const Args& args) {
  RelayoutConfig c;
  bool have_shape = false, have_mesh = false, have_from = false, have_to = false;
  FlagParser flags("bench relayout");
  flags.custom({"--shape"}, [&](const std::string& flag, const std::string& v) {
    std::vector<int64_t> dims;
    for (const std::string& d : split_list(v, ',')) {
      dims.push_back(flags.parse_integer(flag, d, 1, int64_t{1} << 40));
    }
    c.shape = Shape(dims);
    if (c.shape.num_elements() > (int64_t{1} << 40)) usage("--shape: " + v + " has more than 2^40 elements");
    have_shape = true;
  });
  flags.custom({"--mesh"}, [&](const std::string& flag, const std::string& v) {
    try {
      c.mesh_dims = parse_mesh(v, {}, kMaxDevices).dims();  // the sizes; devices are our own
    } catch (const Error& e) {
      flags.fail(flag + ": " + e.what());
    }
    have_mesh = true;
  });
  flags.custom({"--from"}, [&](const std::string&, const std::string& v) {
    c.from = split_list(v, ',');
    have_from = true;
  });
  flags.custom({"--to"}, [&](const std::string&, const std::string& v) {
    c.to = split_list(v, ',');
    have_to = true;
  });
  flags.custom({"--dtype"}, [&](const std::string&, const std::string& v) {
    try {
      c.dtype = dtype_from_name(v);
    } catch (const Error&) {
      usage("--dtype: unknown dtype '" + v + "' (expected f32, f64, bf16, f16, i32, i64, u8 or bool)");
    }
  });
  flags.integer({"-n", "--iters"}, c.iters, 1, 100000);
  flags.integer({"-w", "--warmup"}, c.warmup, 0, 100000);
  flags.integer({"--rounds"}, c.rounds, 1, 1000);
  flags.set({"--json"}, c.json);
  flags.parse(args);
  if (!have_shape) usage("--shape is required (e.g. --shape 4096,4096)");
  if (!have_mesh) usage("--mesh is required (e.g. --mesh x=4)");
  if (!have_from) usage("--from is required (e.g. --from x,unsharded)");
  if (!have_to) usage("--to is required (e.g. --to unsharded,x)");
  // At most a whole copy per device in each of the source, the result, the expected result and
  // the raw collective's inputs and outputs, plus the host copies.
  double devices = 1;
  for (const MeshDimension& d : c.mesh_dims) devices *= static_cast<double>(d.size);
  bench::check_fits_in_memory(
      "bench relayout",
      static_cast<double>(c.shape.num_elements()) * dtype_size(c.dtype) * (5 * devices + 2),
      "--shape " + c.shape.to_string() + " (" + std::string(dtype_name(c.dtype)) + ") on " +
          std::to_string(static_cast<int64_t>(devices)) + " devices");
  return c;
}

// Elements of `a` whose bytes differ from `b`'s (all of them if the shapes or dtypes differ).
int64_t count_wrong(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || !(a.shape() == b.shape()) || a.dtype() != b.dtype()) {
    return std::max(a.defined() ? a.num_elements() : 0, b.defined() ? b.num_elements() : 0);
  }
  const size_t item = dtype_size(a.dtype());
  const auto* pa = static_cast<const unsigned char*>(a.data());
  const auto* pb = static_cast<const unsigned char*>(b.data());
  const int64_t n = a.num_elements();
  constexpr int64_t kChunk = 4096;
  int64_t wrong = 0;
  for (int64_t first = 0; first < n; first += kChunk) {
    const int64_t count = std::min(kChunk, n - first);
    const size_t offset = static_cast<size_t>(first) * item;
    if (std::memcmp(pa + offset, pb + offset, static_cast<size_t>(count) * item) == 0) continue;
    for (int64_t e = 0; e < count; ++e) {
      const size_t at = offset + static_cast<size_t>(e) * item;
      wrong += std::memcmp(pa + at, pb + at, item) != 0;
    }
  }
  return wrong;
}

// The raw collective of the plan's first communicating step, over that step's groups.
class RawCollective {
 public:
  // Null unless the plan has an all_to_all, all_gather, all_reduce or reduce_scatter step
  // before any send_recv.
  static std::unique_ptr<RawCollective> for_plan(const RelayoutPlan& plan) {
    for (const RelayoutStep& step : plan.steps) {
      switch (step.kind) {
        case RelayoutStepKind::kAllToAll:
        case RelayoutStepKind::kAllGather:
        case RelayoutStepKind::kAllReduce:
        case RelayoutStepKind::kReduceScatter:
          return std::unique_ptr<RawCollective>(new RawCollective(plan, step));
        case RelayoutStepKind::kSendRecv:
          return nullptr;
        default:
          break;  // local steps move nothing between devices
      }
    }
    return nullptr;
  }

  std::string name() const { return step_.kind_name(); }
  int devices() const { return static_cast<int>(inputs_.size()); }

  // Rank `offset`'s call (on its worker); the result is dropped after the call returns.
  Tensor call(int offset) {
    const auto o = static_cast<size_t>(offset);
    Communicator& comm = *comm_of_[o];
    switch (step_.kind) {
      case RelayoutStepKind::kAllToAll:
        return comm.all_to_all(inputs_[o], splits_[o]);
      case RelayoutStepKind::kAllGather:
        return comm.all_gather(inputs_[o]);
      case RelayoutStepKind::kAllReduce:
        comm.all_reduce(inputs_[o], outputs_[o], op_);
        return Tensor();
      default:
        return comm.reduce_scatter(inputs_[o], op_);
    }
  }

  void abort(const std::string& reason) {
    for (auto& group : groups_) {
      for (auto& comm : group) comm->abort(reason);
    }
  }

 private:
  RawCollective(const RelayoutPlan& plan, const RelayoutStep& step) : step_(step) {
    const Mesh& mesh = step.from.mesh();
    const int64_t n = mesh.size();
    comm_of_.resize(static_cast<size_t>(n));
    for (const std::vector<int64_t>& members : collective_groups(mesh, step.mesh_dims)) {
      groups_.push_back(make_in_process_communicators(static_cast<int>(members.size())));
      for (size_t r = 0; r < members.size(); ++r) {
        comm_of_[static_cast<size_t>(members[r])] = groups_.back()[r].get();
      }
    }
    if (!step.from.partial().empty()) op_ = step.from.partial().front().op;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t elements = step.from.local_shape(plan.shape, k).num_elements();
      inputs_.push_back(Tensor::random_uniform(Shape{elements}, plan.dtype, 11 + static_cast<uint64_t>(k), 0, 100));
      outputs_.push_back(step.kind == RelayoutStepKind::kAllReduce ? Tensor::zeros(Shape{elements}, plan.dtype)
                                                                   : Tensor());
      // Equal splits (chunk semantics when the elements do not divide).
      const int64_t g = comm_of_[static_cast<size_t>(k)]->size();
      std::vector<int64_t> counts;
      for (int64_t j = 0; j < g; ++j) counts.push_back(elements / g + (j < elements % g ? 1 : 0));
      splits_.push_back(std::move(counts));
    }
  }

  RelayoutStep step_;
  ReduceOp op_ = ReduceOp::kSum;
  std::vector<std::vector<std::unique_ptr<Communicator>>> groups_;
  std::vector<Communicator*> comm_of_;  // by mesh offset
  std::vector<Tensor> inputs_;
  std::vector<Tensor> outputs_;
  std::vector<std::vector<int64_t>> splits_;
};

// Host buffers of `bytes` bytes each, written before use so that no page fault is timed.
struct MemcpyBuffers {
  explicit MemcpyBuffers(size_t bytes)
      : size(bytes), src(new unsigned char[std::max<size_t>(bytes, 1)]),
        dst(new unsigned char[std::max<size_t>(bytes, 1)]) {
    std::memset(src.get(), 0x5a, size);
    std::memset(dst.get(), 0, size);
  }
  size_t size;
  std::unique_ptr<unsigned char[]> src;
  std::unique_ptr<unsigned char[]> dst;
};

int run(const RelayoutConfig& c) {
  // Everything the arguments decide is checked (and reported as a usage error) before timing.
  Mesh mesh;
  Layout from, to;
  RelayoutPlan plan;
  try {
    mesh = Mesh::create(c.mesh_dims);
  } catch (const Error& e) {
    usage(std::string("--mesh: ") + e.what());
  }
  try {
    from = Layout(c.from, mesh);
  } catch (const Error& e) {
    usage(std::string("--from: ") + e.what());
  }
  try {
    to = Layout(c.to, mesh);
  } catch (const Error& e) {
    usage(std::string("--to: ") + e.what());
  }
  if (from.rank() != c.shape.rank()) {
    usage("--from has " + std::to_string(from.rank()) + " specs for a shape of rank " + std::to_string(c.shape.rank()));
  }
  if (to.rank() != c.shape.rank()) {
    usage("--to has " + std::to_string(to.rank()) + " specs for a shape of rank " + std::to_string(c.shape.rank()));
  }
  try {
    plan = plan_relayout(c.shape, from, to, c.dtype);
  } catch (const Error& e) {
    usage(e.what());
  }
  const int64_t bytes = c.shape.num_elements() * static_cast<int64_t>(dtype_size(c.dtype));
  const int n = static_cast<int>(mesh.size());
  // Refuse sizes whose buffers cannot fit (rather than being killed halfway): the host tensor,
  // the memcpy buffers, the source DTensor, two relayout results (one held while the next is
  // made) plus the reference, and the raw collective's inputs and outputs.
  const auto replicas = [&](const Layout& l) {
    int64_t shards = 1;
    for (int64_t s : l.num_shards_per_dim()) shards *= s;
    return static_cast<double>(n) / static_cast<double>(shards);
  };
  const double needed = static_cast<double>(bytes) * (3 + replicas(from) + 3 * replicas(plan.to) +
                                                      2 * std::max(replicas(from), replicas(plan.to)));
  bench::check_fits_in_memory("bench relayout", needed, "--shape " + c.shape.to_string());

  Runtime rt({.num_cpu_devices = n});
  const Tensor host = Tensor::random_uniform(c.shape, c.dtype, 7, 0, 100);
  const DTensor source = copy_to_mesh(host, from, rt);
  MemcpyBuffers buffers(static_cast<size_t>(bytes));
  std::unique_ptr<RawCollective> collective = RawCollective::for_plan(plan);
  std::optional<bench::Team> team;
  if (collective) team.emplace(collective->devices());

  // relayout: the controller's wall time of one call.
  const auto time_relayout = [&](int warmup, int iters, std::vector<double>& samples) {
    DTensor held;
    for (int i = 0; i < warmup + iters; ++i) {
      const bench::Stopwatch watch;
      DTensor result = relayout(source, to);
      const double us = watch.microseconds();
      if (i >= warmup) samples.push_back(us);
      held = std::move(result);  // the previous result is freed outside the timed region
    }
  };
  volatile unsigned char sink = 0;
  const auto time_memcpy = [&](int warmup, int iters, std::vector<double>& samples) {
    for (int i = 0; i < warmup + iters; ++i) {
      const bench::Stopwatch watch;
      std::memcpy(buffers.dst.get(), buffers.src.get(), buffers.size);
      const double us = watch.microseconds();
      if (i >= warmup) samples.push_back(us);
      if (buffers.size > 0) sink = static_cast<unsigned char>(sink + buffers.dst[static_cast<size_t>(i) % buffers.size]);
    }
  };
  // collective: the slowest worker's time of each call (as bench fusion).
  const auto time_collective = [&](int warmup, int iters, std::vector<double>& samples) {
    const int devices = collective->devices();
    std::vector<std::vector<double>> times(static_cast<size_t>(iters), std::vector<double>(static_cast<size_t>(devices)));
    team->run([&](int rank) {
      try {
        Tensor held;
        for (int i = 0; i < warmup + iters; ++i) {
          team->sync();
          const bench::Stopwatch watch;
          Tensor result = collective->call(rank);
          const double us = watch.microseconds();
          if (i >= warmup) times[static_cast<size_t>(i - warmup)][static_cast<size_t>(rank)] = us;
          held = std::move(result);
        }
      } catch (const std::exception& e) {
        collective->abort("tessel bench relayout: device " + std::to_string(rank) + " failed: " + e.what());
        throw;
      }
    });
    for (const auto& row : times) samples.push_back(*std::max_element(row.begin(), row.end()));
  };

  std::vector<double> relayout_samples, memcpy_samples, collective_samples;
  const int rounds = std::min(c.rounds, c.iters);
  for (int round = 0; round < rounds; ++round) {
    const int iters = c.iters / rounds + (round < c.iters % rounds ? 1 : 0);
    const int warmup = round == 0 ? c.warmup : 1;
    time_relayout(warmup, iters, relayout_samples);
    time_memcpy(warmup, iters, memcpy_samples);
    if (collective) time_collective(warmup, iters, collective_samples);
  }
  const double relayout_us = median(relayout_samples);
  const double memcpy_us = median(memcpy_samples);
  // NaN without a collective step (printed as null / n/a).
  const double collective_us = collective ? median(collective_samples) : std::nan("");

  // Check one result against the layout's blocks cut from the host tensor.
  int64_t wrong = 0;
  {
    const DTensor result = relayout(source, to);
    const DTensor expected = copy_to_mesh(host, plan.to, rt);
    if (result.num_components() != expected.num_components() || !(result.layout() == expected.layout())) {
      wrong = c.shape.num_elements();
    } else {
      for (int i = 0; i < result.num_components(); ++i) {
        wrong += count_wrong(result.component(i), expected.component(i));
      }
    }
  }

  if (c.json) {
    Json steps = Json::array();
    for (const auto& step : plan.steps) steps.push_back(step.to_string());
    print_json(Json{{"plan", steps},
                    {"bytes", bytes},
                    {"relayout_us", json_number(relayout_us)},
                    {"memcpy_us", json_number(memcpy_us)},
                    {"collective", collective ? Json(collective->name()) : Json(nullptr)},
                    {"collective_us", json_number(collective_us)},
                    {"wrong", wrong}});
  } else {
    std::printf("# tessel bench relayout: %s %s (%s), mesh %s on %d CPU devices; hardware threads %u, load "
                "average %s; medians of %d calls in %d rounds\n",
                c.shape.to_string().c_str(), std::string(dtype_name(c.dtype)).c_str(),
                format_bytes(bytes).c_str(),
                mesh.to_string().substr(0, mesh.to_string().find('|', 1) + 1).c_str(), n,
                std::thread::hardware_concurrency(), bench::load_average_text().c_str(), c.iters, rounds);
    std::cout << plan.to_string();
    if (plan.to_string().empty() || plan.to_string().back() != '\n') std::cout << "\n";
    std::cout.flush();
    const std::string coll_name = collective ? collective->name() + " (raw)" : "collective";
    std::printf("%-24s %12s %10s %12s\n", "mode", "time (us)", "/ memcpy", "/ collective");
    const auto row = [&](const std::string& name, double us) {
      if (!std::isfinite(us)) {
        std::printf("%-24s %12s %10s %12s\n", name.c_str(), "n/a", "n/a", "n/a");
        return;
      }
      char vs_coll[32] = "n/a";
      if (collective) std::snprintf(vs_coll, sizeof vs_coll, "%.2fx", us / collective_us);
      std::printf(us < 100 ? "%-24s %12.2f %9.2fx %12s\n" : "%-24s %12.1f %9.2fx %12s\n", name.c_str(), us,
                  us / memcpy_us, vs_coll);
    };
    row("relayout", relayout_us);
    row("memcpy (1 thread)", memcpy_us);
    row(coll_name, collective_us);
    std::printf("# relayout / memcpy = %.2fx", relayout_us / memcpy_us);
    if (collective) std::printf("; relayout / %s = %.2fx", collective->name().c_str(), relayout_us / collective_us);
    else std::printf("; no collective step (%s)", plan.steps.empty() ? "empty plan" : "local or send_recv plan");
    std::printf("; wrong results: %lld\n", static_cast<long long>(wrong));
  }
  if (wrong != 0) {
    std::cerr << "tessel: error: bench relayout: " << wrong << " wrong result elements\n";
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

int run_bench_relayout(const Args& args) {
  return run_command(args, kHelp, parse, run, "bench relayout");
}

}  // namespace tessel::cli
