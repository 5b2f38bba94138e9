// tessel bench embedding: a DLRM-like step of sharded embedding tables (ShardedEmbedding,
// row-wise MOD: lookup by all-to-all-v, sparse SGD on the owners) against two baselines run in
// the same process on the same ids:
//   (a) replicated: every table on every device (placement DATA_PARALLEL), lookups local, the
//       gradient made dense and all-reduced, the update applied to the rows it touched;
//   (b) gather: every table all-gathered to every device (get_table), then each device's bags
//       summed from the gathered copy. Only this forward is timed and counted: a lower bound of
//       that baseline's step (its backward, a reduce-scatter of the dense gradient, only adds).
// Reported per step (median of --steps after one warm-up): wall seconds, the process's CPU
// seconds (all threads: steadier than wall time on a shared machine), lookups+updates per second
// (ids looked up and updated), bytes sent to other devices (the library's count for the sharded
// and replicated steps; (N - 1) x the tables' bytes for the gather), and the ratios.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench_env.h"
#include "bench_stats.h"
#include "commands.h"
#include "flags.h"
#include "json_output.h"
#include "tessel/core/median.h"
#include "tessel/embedding/sharded_embedding.h"
#include "tessel/mesh/mesh.h"
#include "tessel/runtime/runtime.h"

namespace tessel::cli {
namespace {

constexpr const char* kHelp =
    "usage: tessel bench embedding [--tables N] [--rows N] [--dim N] [--batch N] [--devices N]\n"
    "                              [--ids N] [--steps N] [--sharded-only] [--json]\n"
    "\n"
    "One training step of N embedding tables (power-law ids, SGD) on a local mesh: sharded\n"
    "row-wise (MOD, all-to-all-v lookups, sparse updates) against (a) replicated tables with a\n"
    "dense all-reduce of the gradient and (b) gathering whole tables (its forward gather only,\n"
    "a lower bound). Medians of --steps after one warm-up: step time, lookups+updates per\n"
    "second, bytes sent to other devices per step, and the ratios; also the process's CPU\n"
    "seconds per step (every thread), steadier than wall time on a loaded machine.\n"
    "\n"
    "  --tables N   tables, one feature each (default 26)\n"
    "  --rows N     rows per table (default 100000)\n"
    "  --dim N      embedding dimension (default 64)\n"
    "  --batch N    bags per device per step (default 4096)\n"
    "  --devices N  devices of the mesh (default 4)\n"
    "  --ids N      ids per bag (default 1)\n"
    "  --steps N    timed steps (default 5)\n"
    "  --sharded-only  skip the baselines (their figures print as 0)\n"
    "  --json       print {\"sharded_s\", \"replicated_s\", \"gather_s\", \"sharded_cpu_s\",\n"
    "               \"replicated_cpu_s\", \"gather_cpu_s\", \"sharded_bytes\", \"replicated_bytes\",\n"
    "               \"gather_bytes\", \"lookups_per_s\", \"speedup\", \"bytes_ratio\"}\n"
    "\n"
    "Bad arguments print 'tessel: error: <reason>' and exit with status 2.\n";

struct Workload {
  int tables = 26, dim = 64, batch = 4096, devices = 4, ids = 1, steps = 5;
  int64_t rows = 100000;
};

EmbeddingConfiguration make_config(const Workload& w, TablePlacement placement) {
  EmbeddingConfiguration c;
  for (int t = 0; t < w.tables; ++t) {
    c.tables.push_back({.name = fmt::format("t{}", t), .vocabulary_size = w.rows,
                        .dimension = w.dim,
                        .optimization_parameters = {.optimizer = EmbeddingOptimizer::kSgd,
                                                    .learning_rate = 0.01f},
                        .placement = placement, .combiner = EmbeddingCombiner::kSum});
    c.features.push_back({.name = fmt::format("f{}", t), .table_id = t, .input_shape = {}});
  }
  c.batch_size_per_device = w.batch;
  c.sharding_strategy = ShardingStrategy::kMod;
  return c;
}

// Power-law ids: P(id) ~ 1 / (id + 1) (log-uniform), as click logs' categorical features.
std::vector<std::vector<RaggedIds>> make_inputs(const Workload& w, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double log_rows = std::log(static_cast<double>(w.rows));
  std::vector<std::vector<RaggedIds>> inputs(static_cast<size_t>(w.tables));
  for (auto& feature : inputs) {
    for (int d = 0; d < w.devices; ++d) {
      std::vector<int64_t> ids(static_cast<size_t>(w.batch) * static_cast<size_t>(w.ids));
      for (int64_t& id : ids) {
        id = std::min<int64_t>(w.rows - 1, static_cast<int64_t>(std::exp(u(rng) * log_rows)) - 1);
      }
      std::vector<int64_t> splits(static_cast<size_t>(w.batch) + 1);
      for (size_t b = 0; b < splits.size(); ++b) splits[b] = static_cast<int64_t>(b) * w.ids;
      feature.push_back({Tensor::from_vector(ids, Shape{static_cast<int64_t>(ids.size())}),
                         Tensor::from_vector(splits, Shape{static_cast<int64_t>(splits.size())}),
                         Tensor()});
    }
  }
  return inputs;
}

struct Timing {
  double seconds = 0;      // wall, median step
  double cpu_seconds = 0;  // the process's CPU time (every thread), median step
  int64_t bytes = 0;
  int64_t unique_ids = 0;  // distinct per device, summed over the devices
};

double cpu_now() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Median wall and CPU seconds of `step` over --steps runs after one warm-up.
std::pair<double, double> time_steps(const Workload& w, const std::function<void()>& step) {
  std::vector<double> wall, cpu;
  for (int s = 0; s <= w.steps; ++s) {
    const bench::Stopwatch watch;
    const double cpu_start = cpu_now();
    step();
    if (s == 0) continue;  // warm-up
    wall.push_back(watch.seconds());
    cpu.push_back(cpu_now() - cpu_start);
  }
  return {median(wall), median(cpu)};
}

// Median step of lookup + apply_gradients.
Timing time_training(ShardedEmbedding& emb, const Workload& w,
                     const std::vector<std::vector<RaggedIds>>& inputs) {
  std::vector<std::vector<Tensor>> grads(static_cast<size_t>(w.tables));
  for (auto& g : grads) {
    for (int d = 0; d < w.devices; ++d) {
      g.push_back(Tensor::full(Shape{w.batch, w.dim}, DType::kF32, 1e-3));
    }
  }
  const auto [wall, cpu] = time_steps(w, [&] {
    emb.lookup(inputs);
    emb.apply_gradients(grads);
  });
  return {wall, cpu, emb.last_step_stats().bytes_sent, emb.last_step_stats().unique_ids};
}

// Median of the gather baseline's forward: every table gathered whole (get_table), then each
// device's bags summed from the gathered copy.
Timing time_gather(ShardedEmbedding& emb, const Workload& w,
                   const std::vector<std::vector<RaggedIds>>& inputs) {
  const auto [wall, cpu] = time_steps(w, [&] {
    for (int t = 0; t < w.tables; ++t) {
      const Tensor table = emb.get_table(fmt::format("t{}", t));
      const float* rows = table.data<float>();
      for (const RaggedIds& in : inputs[static_cast<size_t>(t)]) {
        Tensor out = Tensor::zeros(Shape{w.batch, w.dim}, DType::kF32);
        float* o = out.data<float>();
        const int64_t* ids = in.values.data<int64_t>();
        for (int64_t k = 0; k < in.values.num_elements(); ++k) {
          const float* row = rows + ids[k] * w.dim;
          float* dst = o + (k / w.ids) * w.dim;
          for (int c = 0; c < w.dim; ++c) dst[c] += row[c];
        }
      }
    }
  });
  const int64_t table_bytes = w.rows * w.dim * 4 * w.tables;
  return {wall, cpu, table_bytes * (w.devices - 1)};
}

// The flags of bench embedding.
struct EmbeddingFlags {
  Workload w;
  bool json = false, sharded_only = false;
};

EmbeddingFlags parse(const Args& args) {
  EmbeddingFlags f;
  Workload& w = f.w;
  FlagParser flags("bench embedding");
  flags.integer({"--tables"}, w.tables, 1, 1000);
  flags.integer({"--dim"}, w.dim, 1, 4096);
  flags.integer({"--batch"}, w.batch, 1, 1 << 20);
  flags.integer({"--devices"}, w.devices, 1, 64);
  flags.integer({"--ids"}, w.ids, 1, 1024);
  flags.integer({"--steps"}, w.steps, 1, 1000);
  flags.integer({"--rows"}, w.rows, 1, 100'000'000);
  flags.set({"--json"}, f.json);
  flags.set({"--sharded-only"}, f.sharded_only);
  flags.parse(args);
  return f;
}

int embedding_benchmark(const EmbeddingFlags& f) {
  const Workload& w = f.w;
  const double table_bytes = static_cast<double>(w.rows) * w.dim * 4 * w.tables;
  // At most: the replicated copies on every device, plus one table's dense gradients (one per
  // device) and the sharded tables, or one gathered table per device.
  bench::check_fits_in_memory("bench embedding", table_bytes * (w.devices + 1.0) +
                                                     2.0 * w.devices * table_bytes / w.tables,
                              "--tables x --rows x --dim x --devices");

  Runtime rt({.num_cpu_devices = w.devices});
  const Mesh mesh = Mesh::create({{"x", w.devices}});
  const auto inputs = make_inputs(w, 1);
  Timing sharded, replicated, gather;
  {
    ShardedEmbedding emb(make_config(w, TablePlacement::kRowWise), mesh, rt);
    sharded = time_training(emb, w, inputs);
    if (!f.sharded_only) gather = time_gather(emb, w, inputs);
  }
  if (!f.sharded_only) {
    ShardedEmbedding emb(make_config(w, TablePlacement::kDataParallel), mesh, rt);
    replicated = time_training(emb, w, inputs);
  }
  const double ids = static_cast<double>(w.tables) * w.batch * w.ids * w.devices;
  const double best = std::min(replicated.seconds, gather.seconds);
  const double fewest = static_cast<double>(std::min(replicated.bytes, gather.bytes));
  if (f.json) {
    Json out;
    out["sharded_s"] = json_number(sharded.seconds);
    out["replicated_s"] = json_number(replicated.seconds);
    out["gather_s"] = json_number(gather.seconds);
    out["sharded_cpu_s"] = json_number(sharded.cpu_seconds);
    out["replicated_cpu_s"] = json_number(replicated.cpu_seconds);
    out["gather_cpu_s"] = json_number(gather.cpu_seconds);
    out["sharded_bytes"] = sharded.bytes;
    out["replicated_bytes"] = replicated.bytes;
    out["gather_bytes"] = gather.bytes;
    out["lookups_per_s"] = json_number(ids / sharded.seconds);
    out["speedup"] = json_number(best / sharded.seconds);
    out["bytes_ratio"] = json_number(fewest / static_cast<double>(sharded.bytes));
    print_json(out);
    return 0;
  }
  std::printf("embedding step: %d tables x %lld rows x dim %d (%.0f MiB), batch %d x %d ids per "
              "device, %d devices, median of %d\n",
              w.tables, static_cast<long long>(w.rows), w.dim, table_bytes / (1 << 20), w.batch,
              w.ids, w.devices, w.steps);
  std::printf("ids per step: %.0f, distinct per device (summed): %lld\n", ids,
              static_cast<long long>(sharded.unique_ids));
  std::printf("%-40s %10s %10s %14s %14s\n", "", "step s", "cpu s", "lookups/s", "bytes/step");
  const auto row = [&](const char* name, const Timing& t) {
    std::printf("%-40s %10.4f %10.4f %14.0f %14lld\n", name, t.seconds, t.cpu_seconds,
                ids / t.seconds, static_cast<long long>(t.bytes));
  };
  row("sharded (row-wise MOD, all-to-all-v)", sharded);
  row("(a) replicated + dense all-reduce", replicated);
  row("(b) gather whole tables (forward only)", gather);
  const double best_cpu = std::min(replicated.cpu_seconds, gather.cpu_seconds);
  std::printf("speedup vs the faster baseline: %.1fx (wall), %.1fx (cpu); bytes: %.1fx fewer "
              "than the fewest\n",
              best / sharded.seconds, best_cpu / sharded.cpu_seconds,
              fewest / static_cast<double>(sharded.bytes));
  return 0;
}

}  // namespace

int run_bench_embedding(const Args& args) {
  return run_command(args, kHelp, parse, embedding_benchmark);
}

}  // namespace tessel::cli
