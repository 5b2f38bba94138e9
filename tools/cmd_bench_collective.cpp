// tessel bench <collective>: collective benchmark over N in-process devices, in nccl-tests' table
// format.
//
// Participants are N worker threads, each with its own Communicator of one in-process group
// (make_in_process_communicators), which is what a runtime's device workers are. For every size
// from -b to -e (times -f), each mode (out-of-place, in-place) runs `warmup` untimed and `iters`
// timed calls, then one extra call on fresh inputs whose results are checked element by element
// against an exact reference (bench_check.h): #wrong is counted, never assumed. Each collective's
// buffers, calls and reference are in bench_collectives.h.
//
// Timing: before every call the workers meet at a spin-yield barrier; each times its own call
// on the steady clock; one call's time is the slowest worker's; the reported time is the median
// over the timed calls. algbw and busbw follow nccl-tests (reference §B.2):
//   algbw = S / time, S = max(send, recv) bytes of one rank (the table's size column);
//   busbw = algbw * factor: all_reduce 2(N-1)/N; all_gather, reduce_scatter, all_to_all (N-1)/N;
//   broadcast 1.
//
// Efficiency = (fewest bytes the collective must move through memory / time) / memcpy bandwidth,
// where the memcpy bandwidth is measured in the same run and also counts bytes read + bytes
// written (bench_team.h, measure_memcpy_gbps). The fewest bytes per collective are listed in
// bench_collectives.h (Collective::min_traffic).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_collectives.h"
#include "bench_env.h"
#include "bench_stats.h"
#include "bench_team.h"
#include "commands.h"
#include "flags.h"
#include "json_output.h"
#include "tessel/comm/collective_options.h"
#include "tessel/comm/communicator.h"
#include "tessel/core/dtype.h"
#include "tessel/core/error.h"
#include "tessel/core/median.h"
#include "tessel/core/reduce_op.h"
#include "tessel/core/tensor.h"

namespace tessel::cli {
namespace {

using bench::Collective;
using bench::Team;

constexpr const char* kHelp =
    "usage: tessel bench <collective> [options]\n"
    "\n"
    "Times a collective over N in-process devices (one thread and one Communicator each) and\n"
    "prints nccl-tests' table (size, count, type, redop, root, then time, algbw, busbw, #wrong\n"
    "out-of-place and in-place) with an efficiency column: the fewest bytes the collective must\n"
    "move through memory per second, over this machine's memcpy bandwidth measured in the same\n"
    "run. Results are checked against an exact reference; the exit status is 1 if any is wrong.\n"
    "\n"
    "  <collective>        all_reduce, all_gather, reduce_scatter, broadcast or all_to_all\n"
    "                      (tessel bench fusion --help: the fused batch all-reduce;\n"
    "                      tessel bench relayout --help: a DTensor relayout;\n"
    "                      tessel bench matmul --help, tessel bench dispatch --help: SPMD ops;\n"
    "                      tessel bench replicate --help: a compiled replicated training step)\n"
    "  --devices N         participants (default 4, at most 64)\n"
    "  -b, --minbytes S    smallest size (default 4K; K, M, G are powers of 1024)\n"
    "  -e, --maxbytes S    largest size (default 256M)\n"
    "  -f, --stepfactor F  multiply the size by F (>= 2) between rows (default 2)\n"
    "  --algo A            all_reduce algorithm: auto, direct, ring, tree (= halving_doubling),\n"
    "                      halving_doubling, reduce_to_one (default auto); the other\n"
    "                      collectives have one in-process algorithm (auto or direct)\n"
    "  --dtype T           f32, f64, bf16, f16, i32, i64, u8, bool (default f32)\n"
    "  --op OP             sum, mean, max, min, prod (all_reduce, reduce_scatter; default sum)\n"
    "  --root R            broadcast root (default 0)\n"
    "  -n, --iters N       timed calls per size and mode (default 20); time = their median\n"
    "  -w, --warmup N      untimed calls before them (default 5)\n"
    "  --memcpy-threads T  threads of the memcpy baseline (default min(devices, hardware "
    "threads))\n"
    "  --json              print one JSON object instead of the table (one line; every\n"
    "                      tessel bench --json writes a NaN or infinite number as null)\n"
    "\n"
    "Bad arguments print 'tessel: error: <reason>' and exit with status 2.\n";

constexpr size_t kMemcpyBytes = size_t{64} << 20;
constexpr int kMemcpyRepetitions = 10;
constexpr int kMaxDevices = 64;
constexpr int64_t kMaxBytes = int64_t{1} << 40;

// The collective and its parameters, plus the sizes and repetitions of the sweep.
struct Config : bench::CollectiveParams {
  int64_t min_bytes = 4 << 10;
  int64_t max_bytes = int64_t{256} << 20;
  int64_t factor = 2;
  bool op_given = false;
  int iters = 20;
  int warmup = 5;
  int memcpy_threads = 0;  // 0: min(devices, hardware threads)
  bool json = false;
};

// A usage error found after the flags were read.
[[noreturn]] void usage(std::string message) { throw UsageError("bench", std::move(message)); }

Config parse_args(const Args& args) {
  Config c;
  FlagParser flags("bench");
  flags.integer({"--devices", "-g"}, c.devices, 1, kMaxDevices);
  flags.size({"-b", "--minbytes"}, c.min_bytes, 1, kMaxBytes);
  flags.size({"-e", "--maxbytes"}, c.max_bytes, 1, kMaxBytes);
  flags.integer({"-f", "--stepfactor"}, c.factor, 2, 1 << 20);
  flags.custom({"--algo"}, [&](const std::string&, const std::string& name) {
    try {
      c.algorithm = algorithm_from_name(name);
    } catch (const Error&) {
      usage("--algo: unknown algorithm '" + name +
            "' (expected auto, direct, ring, tree, halving_doubling or reduce_to_one)");
    }
    if (c.algorithm == Algorithm::kHierarchical) {
      usage("--algo: hierarchical needs several hosts; in one process it is direct");
    }
  });
  flags.custom({"--dtype", "-d"}, [&](const std::string&, const std::string& name) {
    try {
      c.dtype = dtype_from_name(name);
    } catch (const Error&) {
      usage("--dtype: unknown dtype '" + name + "' (expected f32, f64, bf16, f16, i32, i64, u8 or bool)");
    }
  });
  flags.custom({"--op", "-o"}, [&](const std::string&, const std::string& name) {
    try {
      c.op = reduce_op_from_name(name);
    } catch (const Error&) {
      usage("--op: unknown reduce op '" + name + "' (expected sum, mean, max, min or prod)");
    }
    c.op_given = true;
  });
  flags.integer({"--root", "-r"}, c.root, 0, kMaxDevices - 1);
  flags.integer({"--iters", "-n"}, c.iters, 1, 1000000);
  flags.integer({"--warmup", "-w"}, c.warmup, 0, 1000000);
  flags.integer({"--memcpy-threads"}, c.memcpy_threads, 1, kMaxDevices);
  flags.set({"--json"}, c.json);
  flags.positional([&](const std::string& argument) {
    if (!c.collective.empty()) {
      usage("unexpected argument '" + argument + "' (the collective is '" + c.collective + "')");
    }
    c.collective = argument;
  });
  flags.parse(args);
  if (c.collective.empty()) usage("name a collective: all_reduce, all_gather, reduce_scatter, broadcast or all_to_all");
  const std::vector<std::string>& known = bench::kCollectives;
  if (std::find(known.begin(), known.end(), c.collective) == known.end()) {
    usage("unknown collective '" + c.collective +
          "' (expected all_reduce, all_gather, reduce_scatter, broadcast or all_to_all)");
  }
  if (c.min_bytes > c.max_bytes) {
    usage("-b " + std::to_string(c.min_bytes) + " is larger than -e " + std::to_string(c.max_bytes));
  }
  if (c.collective != "all_reduce" && c.algorithm != Algorithm::kAuto && c.algorithm != Algorithm::kDirect) {
    usage("--algo " + std::string(algorithm_name(c.algorithm)) + " applies to all_reduce only; " + c.collective +
          " has one in-process algorithm (direct)");
  }
  const bool reduces = c.collective == "all_reduce" || c.collective == "reduce_scatter";
  if (c.op_given && !reduces) usage("--op applies to all_reduce and reduce_scatter, not " + c.collective);
  if (reduces && c.dtype == DType::kBool && c.op == ReduceOp::kMean) usage("--op mean is not defined for bool");
  if (c.root >= c.devices) {
    usage("--root " + std::to_string(c.root) + " is not a rank of " + std::to_string(c.devices) + " devices");
  }
  if (c.collective != "broadcast" && c.root != 0) usage("--root applies to broadcast only");
  // The reference stays exact only while sums and products of the small inputs fit the dtype.
  // u8: a mean's inputs sum to at most 8*N*N, a product is at most 2^ceil(N/4), a sum 8*N.
  int exact_limit = 32;
  if (c.dtype == DType::kU8) exact_limit = c.op == ReduceOp::kMean ? 5 : c.op == ReduceOp::kProd ? 28 : 31;
  if (reduces && c.dtype != DType::kBool && c.devices > exact_limit) {
    usage("--devices " + std::to_string(c.devices) + ": the exact reference for " + std::string(dtype_name(c.dtype)) +
          " " + std::string(reduce_op_name(c.op)) + " allows at most " + std::to_string(exact_limit) + " devices");
  }
  return c;
}

// ---- measurement -----------------------------------------------------------------------------

struct Mode {
  bool measured = false;
  double time_us = 0;
  double algbw = 0;
  double busbw = 0;
  double efficiency = 0;
  int64_t wrong = 0;
};

struct Row {
  int64_t bytes = 0;
  int64_t count = 0;
  Mode mode[2];  // [0] out-of-place, [1] in-place
};

// Runs one size in both modes on the team.
Row measure(const Config& c, Collective& coll, Team& team, std::vector<std::unique_ptr<Communicator>>& comms,
            int64_t count, double memcpy_gbps) {
  const int n = c.devices;
  const int calls = c.warmup + c.iters;
  Row row;
  row.count = count;
  row.bytes = coll.size_of(count);
  // seconds[mode][rank][call]
  std::vector<std::vector<std::vector<double>>> seconds(
      2, std::vector<std::vector<double>>(n, std::vector<double>(static_cast<size_t>(calls))));
  std::vector<std::vector<int64_t>> wrong(2, std::vector<int64_t>(n, 0));
  team.run([&](int r) {
    try {
      coll.setup(r, count);
      for (int m = 0; m < 2; ++m) {
        const bool in_place = m == 1;
        if (!coll.has_mode(in_place)) continue;
        Tensor held;
        for (int i = 0; i < calls; ++i) {
          team.sync();
          const bench::Stopwatch watch;
          Tensor result = coll.call(r, in_place);
          seconds[m][r][i] = watch.seconds();
          held = std::move(result);  // the previous result is freed outside the timed region
        }
        held = Tensor();
        team.sync();  // every rank is done reading the others' buffers
        coll.prepare_check(r, in_place);
        team.sync();  // every rank's inputs are restored
        const Tensor result = coll.call(r, in_place);
        wrong[m][r] = coll.check(r, in_place, result);
        team.sync();  // every rank has checked before anyone writes again
      }
      coll.teardown(r);
    } catch (const std::exception& e) {
      comms[r]->abort("tessel bench: rank " + std::to_string(r) + " failed: " + e.what());
      throw;
    }
  });
  for (int m = 0; m < 2; ++m) {
    if (!coll.has_mode(m == 1)) continue;
    std::vector<double> slowest;
    for (int i = c.warmup; i < calls; ++i) {
      double t = 0;
      for (int r = 0; r < n; ++r) t = std::max(t, seconds[m][r][i]);
      slowest.push_back(t);
    }
    Mode& mode = row.mode[m];
    mode.measured = true;
    const double t = median(slowest);
    mode.time_us = t * 1e6;
    mode.algbw = static_cast<double>(row.bytes) / t / 1e9;
    mode.busbw = mode.algbw * coll.bus_factor();
    mode.efficiency = coll.min_traffic(count) / t / 1e9 / memcpy_gbps;
    for (int r = 0; r < n; ++r) mode.wrong += wrong[m][r];
  }
  return row;
}

// ---- output ----------------------------------------------------------------------------------

std::string time_text(double us) {
  char buf[32];
  if (us >= 10000) std::snprintf(buf, sizeof buf, "%7.0f", us);
  else if (us >= 100) std::snprintf(buf, sizeof buf, "%7.1f", us);
  else std::snprintf(buf, sizeof buf, "%7.2f", us);
  return buf;
}

const char* traffic_text(const std::string& collective) {
  if (collective == "all_reduce") return "N*S read + N*S written";
  if (collective == "reduce_scatter") return "N*S read + S written";
  if (collective == "all_gather") return "S read + N*S written";
  if (collective == "broadcast") return "S read + (N-1)*S written";
  return "N*S read + N*S written";
}

const char* bus_text(const std::string& collective) {
  if (collective == "all_reduce") return "2(N-1)/N";
  if (collective == "broadcast") return "1";
  return "(N-1)/N";
}

void print_header(const Config& c, int memcpy_threads, double memcpy_gbps, double memcpy_1t_gbps) {
  const unsigned hw = std::thread::hardware_concurrency();
  std::printf("# memcpy: %.2f GB/s (read+write: 2 x bytes copied / time; %d thread%s each copying 1/%d of a "
              "64 MiB buffer with memcpy, median of %d)%s\n",
              memcpy_gbps, memcpy_threads, memcpy_threads == 1 ? "" : "s", memcpy_threads, kMemcpyRepetitions,
              memcpy_threads == 1 ? "" : "; efficiency uses this figure");
  if (memcpy_threads != 1) std::printf("# memcpy, 1 thread, 64 MiB: %.2f GB/s (read+write, for reference)\n", memcpy_1t_gbps);
  std::printf("# tessel bench %s: devices %d (one thread and one in-process Communicator each), "
              "hardware threads %u, load average %s\n",
              c.collective.c_str(), c.devices, hw, bench::load_average_text().c_str());
  std::printf("# minBytes %lld maxBytes %lld step: %lld(factor) warmup iters: %d iters: %d validation: 1 "
              "algo: %s dtype: %s\n",
              static_cast<long long>(c.min_bytes), static_cast<long long>(c.max_bytes),
              static_cast<long long>(c.factor), c.warmup, c.iters, std::string(algorithm_name(c.algorithm)).c_str(),
              std::string(dtype_name(c.dtype)).c_str());
  std::printf("# time: median over iters of one call's time on its slowest rank; algbw = size/time; busbw = "
              "algbw * %s\n",
              bus_text(c.collective));
  std::printf("# effic: fewest bytes through memory (%s, S = size) / time / memcpy bandwidth\n",
              traffic_text(c.collective));
  if (c.collective == "broadcast") std::printf("# broadcast is in place by API (out-of-place: N/A)\n");
  if (c.collective == "all_gather" || c.collective == "reduce_scatter" || c.collective == "all_to_all") {
    std::printf("# %s returns a new tensor (allocated inside the timed call); in-place: N/A\n", c.collective.c_str());
  }
  std::printf("#\n");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %38s  %38s\n", "", "", "", "", "", "out-of-place", "in-place");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %5s  %7s  %6s  %6s  %6s  %5s\n", "size", "count",
              "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "effic", "time", "algbw", "busbw",
              "#wrong", "effic");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %5s  %7s  %6s  %6s  %6s  %5s\n", "(B)",
              "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "", "(us)", "(GB/s)", "(GB/s)", "", "");
}

void print_row(const Config& c, const Collective& coll, const Row& row) {
  std::printf("%12lld  %12lld  %8s  %6s  %6d", static_cast<long long>(row.bytes), static_cast<long long>(row.count),
              std::string(dtype_name(c.dtype)).c_str(), coll.redop().c_str(), coll.root());
  for (const Mode& m : row.mode) {
    if (!m.measured) {
      std::printf("  %7s  %6s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A", "N/A");
    } else {
      std::printf("  %7s  %6.2f  %6.2f  %6lld  %5.2f", time_text(m.time_us).c_str(), m.algbw, m.busbw,
                  static_cast<long long>(m.wrong), m.efficiency);
    }
  }
  std::printf("\n");
  std::fflush(stdout);
}

// The reduce op of a reducing collective, else "none".
std::string reduces_text(const Config& c) {
  const bool reduces = c.collective == "all_reduce" || c.collective == "reduce_scatter";
  return reduces ? std::string(reduce_op_name(c.op)) : "none";
}

void print_report_json(const Config& c, int memcpy_threads, double memcpy_gbps, double other_cpu,
                       const std::vector<Row>& rows) {
  const int primary = c.collective == "broadcast" ? 1 : 0;
  Json out;
  out["collective"] = c.collective;
  out["devices"] = c.devices;
  out["dtype"] = dtype_name(c.dtype);
  out["op"] = reduces_text(c);
  out["algo"] = algorithm_name(c.algorithm);
  out["iters"] = c.iters;
  out["warmup"] = c.warmup;
  out["memcpy_gbps"] = json_number(memcpy_gbps);
  out["memcpy_threads"] = memcpy_threads;
  out["other_cpu_fraction"] = json_number(other_cpu);
  out["mode"] = primary == 1 ? "in_place" : "out_of_place";
  out["rows"] = Json::array();
  for (const Row& row : rows) {
    const Mode& m = row.mode[primary];
    out["rows"].push_back(Json{{"bytes", row.bytes},
                               {"count", row.count},
                               {"time_us", json_number(m.time_us)},
                               {"algbw_gbps", json_number(m.algbw)},
                               {"busbw_gbps", json_number(m.busbw)},
                               {"efficiency", json_number(m.efficiency)},
                               {"wrong", m.wrong}});
  }
  print_json(out);
}

int run(const Config& c) {
  std::vector<std::unique_ptr<Communicator>> comms = make_in_process_communicators(c.devices);
  std::unique_ptr<Collective> coll = make_collective(c, comms);
  std::vector<int64_t> counts;
  for (int64_t bytes = c.min_bytes; bytes <= c.max_bytes; bytes *= c.factor) {
    const int64_t count = coll->count_for(bytes);
    if (counts.empty() || counts.back() != count) counts.push_back(count);
    if (bytes > c.max_bytes / c.factor) break;
  }
  bench::check_fits_in_memory(
      "bench", coll->footprint(counts.back()),
      "-e " + std::to_string(c.max_bytes) + " on " + std::to_string(c.devices) + " devices");

  const bench::CpuSample start = bench::sample_cpu();
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const int memcpy_threads = c.memcpy_threads > 0 ? c.memcpy_threads : std::min<int>(c.devices, static_cast<int>(hw));
  const double memcpy_gbps = bench::measure_memcpy_gbps(memcpy_threads, kMemcpyBytes, kMemcpyRepetitions);
  const double memcpy_1t_gbps =
      memcpy_threads == 1 ? memcpy_gbps : bench::measure_memcpy_gbps(1, kMemcpyBytes, kMemcpyRepetitions);

  if (!c.json) print_header(c, memcpy_threads, memcpy_gbps, memcpy_1t_gbps);
  Team team(c.devices);
  std::vector<Row> rows;
  for (int64_t count : counts) {
    rows.push_back(measure(c, *coll, team, comms, count, memcpy_gbps));
    if (!c.json) print_row(c, *coll, rows.back());
  }
  int64_t wrong = 0;
  double busbw_sum = 0;
  int measured = 0;
  for (const Row& row : rows) {
    for (const Mode& m : row.mode) {
      if (!m.measured) continue;
      wrong += m.wrong;
      busbw_sum += m.busbw;
      ++measured;
    }
  }
  const double other_cpu = bench::other_cpu_fraction(start, bench::sample_cpu());
  if (c.json) {
    print_report_json(c, memcpy_threads, memcpy_gbps, other_cpu, rows);
  } else {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong), wrong == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %g\n", measured ? busbw_sum / measured : 0.0);
    std::printf("# Other processes and steal took %.1f%% of the machine's CPU time during this run "
                "(/proc/stat); figures from a busy machine are not comparable\n",
                100 * other_cpu);
    std::printf("#\n");
  }
  if (wrong != 0) {
    std::cerr << "tessel: error: bench: " << wrong << " wrong result elements\n";
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

int run_bench_collective(const Args& args) {
  return run_command(args, kHelp, parse_args, run, "bench");
}

}  // namespace tessel::cli
