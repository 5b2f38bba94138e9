// tessel bench nccl: NCCL collectives through tessel's Communicator on every visible GPU (one
// rank per GPU, a thread each) beside raw NCCL calls on the same GPUs in the same run, as an
// nccl-tests table: size, count, type, redop, root, then out-of-place and in-place time, algbw,
// busbw and #wrong, then raw NCCL's time and busbw and tessel's bandwidth as a fraction of it.
//
// Both sides are timed the way each is used: a tessel call returns when its GPU work is done
// (Communicator semantics: it meets the other ranks on the host, queues NCCL, waits), so it is
// timed call by call; raw NCCL is timed as nccl-tests does, --iters calls queued back to back
// and one wait at the end. The gap at small sizes is tessel's per-call host meeting and wait.
// #wrong counts elements that differ from the exact result (inputs are small integers). tessel's
// all_gather and reduce_scatter return new tensors, so their in-place columns time the same
// call as out-of-place.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "bench_stats.h"
#include "bench_team.h"
#include "commands.h"
#include "flags.h"
#include "json_output.h"
#include "tessel/comm/nccl.h"
#include "tessel/core/error.h"
#include "tessel/runtime/gpu.h"
#include "tessel/runtime/runtime.h"

namespace tessel::cli {
namespace {

constexpr const char* kHelp =
    "usage: tessel bench nccl [--op all_reduce|all_gather|reduce_scatter|broadcast]\n"
    "                         [-b BYTES] [-e BYTES] [-f FACTOR] [-n ITERS] [-w WARMUP] [--json]\n"
    "\n"
    "NCCL collectives on every visible GPU (one rank each; TESSEL_GPU_DEVICES chooses) through\n"
    "tessel's Communicator, beside raw NCCL calls on the same GPUs in the same run, printed as\n"
    "an nccl-tests table (f32, sum) with raw NCCL's time and busbw and tessel/raw.\n"
    "\n"
    "  --op NAME   the collective (default all_reduce)\n"
    "  -b BYTES    smallest size (default 8)\n"
    "  -e BYTES    largest size (default 128M)\n"
    "  -f FACTOR   size multiplier between rows (default 2)\n"
    "  -n ITERS    timed calls per size (default 20)\n"
    "  -w WARMUP   untimed calls first (default 5)\n"
    "  --json      one line of JSON instead of the table: {\"op\", \"ranks\", \"nccl\",\n"
    "              \"iters\", \"warmup_iters\", \"rows\": [{\"bytes\", \"count\", \"time_us\",\n"
    "              \"algbw_gbps\", \"busbw_gbps\", \"wrong\", \"inplace_time_us\",\n"
    "              \"inplace_busbw_gbps\", \"inplace_wrong\", \"raw_time_us\",\n"
    "              \"raw_busbw_gbps\", \"ratio\"}]}\n"
    "\n"
    "No GPU, or built without CUDA: 'tessel: error: ...' and status 1.\n";

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw Error(ErrorCode::kInternal, "bench nccl",
                std::string(what) + ": " + cudaGetErrorString(status));
  }
}
void check_nccl(ncclResult_t result, const char* what) {
  if (result != ncclSuccess) {
    throw Error(ErrorCode::kInternal, "bench nccl", std::string(what) + ": " + ncclGetErrorString(result));
  }
}

enum class Op { kAllReduce, kAllGather, kReduceScatter, kBroadcast };

Op op_from(const std::string& name, const FlagParser& flags) {
  if (name == "all_reduce") return Op::kAllReduce;
  if (name == "all_gather") return Op::kAllGather;
  if (name == "reduce_scatter") return Op::kReduceScatter;
  if (name == "broadcast") return Op::kBroadcast;
  flags.fail("--op expects all_reduce, all_gather, reduce_scatter or broadcast, got '" + name + "'");
}

// nccl-tests' bus bandwidth factor.
double bus_factor(Op op, int n) {
  switch (op) {
    case Op::kAllReduce: return 2.0 * (n - 1) / n;
    case Op::kAllGather:
    case Op::kReduceScatter: return static_cast<double>(n - 1) / n;
    case Op::kBroadcast: return 1.0;
  }
  return 1.0;
}

// Elements each rank sends and receives for a row of `bytes` (nccl-tests' size convention: the
// larger buffer of the call).
struct Counts {
  int64_t in = 0, out = 0;
};
Counts counts_of(Op op, int64_t bytes, int n) {
  const int64_t elements = std::max<int64_t>(1, bytes / 4 / n * n);
  switch (op) {
    case Op::kAllReduce:
    case Op::kBroadcast: return {elements, elements};
    case Op::kAllGather: return {elements / n, elements};
    case Op::kReduceScatter: return {elements, elements / n};
  }
  return {elements, elements};
}

// The exact f32 result at every element of rank r's output, inputs being rank + 1.
double expected(Op op, int n) {
  return op == Op::kBroadcast ? 1.0 : op == Op::kAllGather ? -1.0 : n * (n + 1) / 2.0;
}

// tessel's side of the run: a communicator per GPU, and a worker thread per rank to call it
// (bench_team.h; declared last, so that its threads are joined before the communicators go).
struct Ranks {
  Runtime runtime;
  std::vector<std::unique_ptr<Communicator>> comms;
  std::unique_ptr<bench::Team> workers;
  int n() const { return static_cast<int>(comms.size()); }
};

// One tessel call of `op`; in place when out is in.
void tessel_call(Communicator& comm, Op op, Tensor& in, Tensor& out) {
  switch (op) {
    case Op::kAllReduce: comm.all_reduce(in, out, ReduceOp::kSum); return;
    case Op::kBroadcast: comm.broadcast(in, 0); return;
    case Op::kAllGather: out = comm.all_gather(in, 0); return;
    case Op::kReduceScatter: out = comm.reduce_scatter(in, ReduceOp::kSum); return;
  }
}

// Seconds per tessel call (wall time of rank 0, ranks in lockstep) and elements wrong.
std::pair<double, int64_t> time_tessel(Ranks& ranks, Op op, Counts c, bool in_place, int iters,
                                       int warmup) {
  const int n = ranks.n();
  std::vector<double> seconds(static_cast<size_t>(n));
  std::vector<int64_t> wrong(static_cast<size_t>(n));
  ranks.workers->run([&](int r) {
    Device& gpu = *ranks.runtime.gpu_devices()[static_cast<size_t>(r)];
    auto fill = [&](Tensor& t) { t.copy_from(Tensor::full(t.shape(), DType::kF32, r + 1)); };
    Tensor in = gpu.allocate(Shape{c.in}, DType::kF32, false);
    Tensor out = (in_place && op == Op::kAllReduce) ? in : gpu.allocate(Shape{c.out}, DType::kF32, false);
    fill(in);
    for (int i = 0; i < warmup; ++i) tessel_call(*ranks.comms[r], op, in, out);
    const bench::Stopwatch watch;
    for (int i = 0; i < iters; ++i) tessel_call(*ranks.comms[r], op, in, out);
    seconds[r] = watch.seconds() / iters;
    // The check: fresh inputs, one call, every element against the exact value.
    fill(in);
    if (in_place && op == Op::kAllReduce) out = in;
    tessel_call(*ranks.comms[r], op, in, out);
    const std::vector<float> got = (op == Op::kBroadcast ? in : out).to_host().to_vector<float>();
    const double want = expected(op, n);
    for (size_t i = 0; i < got.size(); ++i) {
      const double w = want >= 0 ? want : static_cast<double>(i / static_cast<size_t>(c.in) + 1);
      if (got[i] != w) ++wrong[r];
    }
  });
  int64_t total_wrong = 0;
  for (int64_t w : wrong) total_wrong += w;
  return {seconds[0], total_wrong};
}

// Seconds per raw NCCL call, nccl-tests style (iters queued, one wait), out of place, on raw
// communicators over the same GPUs.
double time_raw(const std::vector<ncclComm_t>& comms, const std::vector<int>& ordinals,
                const std::vector<cudaStream_t>& streams, Op op, Counts c, int iters, int warmup) {
  const int n = static_cast<int>(comms.size());
  std::vector<void*> in(static_cast<size_t>(n)), out(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    check_cuda(cudaSetDevice(ordinals[r]), "cudaSetDevice");
    check_cuda(cudaMalloc(&in[r], static_cast<size_t>(c.in) * 4), "cudaMalloc");
    check_cuda(cudaMalloc(&out[r], static_cast<size_t>(c.out) * 4), "cudaMalloc");
  }
  const auto in_count = static_cast<size_t>(c.in);
  const auto out_count = static_cast<size_t>(c.out);
  auto launch = [&] {
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < n; ++r) {
      ncclResult_t result = ncclSuccess;
      switch (op) {
        case Op::kAllReduce:
          result = ncclAllReduce(in[r], out[r], in_count, ncclFloat32, ncclSum, comms[r], streams[r]);
          break;
        case Op::kBroadcast:
          result = ncclBroadcast(in[r], out[r], in_count, ncclFloat32, 0, comms[r], streams[r]);
          break;
        case Op::kAllGather:
          result = ncclAllGather(in[r], out[r], in_count, ncclFloat32, comms[r], streams[r]);
          break;
        case Op::kReduceScatter:
          result = ncclReduceScatter(in[r], out[r], out_count, ncclFloat32, ncclSum, comms[r], streams[r]);
          break;
      }
      check_nccl(result, "raw NCCL call");
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
  };
  auto wait_all = [&] {
    for (int r = 0; r < n; ++r) {
      check_cuda(cudaSetDevice(ordinals[r]), "cudaSetDevice");
      check_cuda(cudaStreamSynchronize(streams[r]), "cudaStreamSynchronize");
    }
  };
  for (int i = 0; i < warmup; ++i) launch();
  wait_all();
  const bench::Stopwatch watch;
  for (int i = 0; i < iters; ++i) launch();
  wait_all();
  const double seconds = watch.seconds() / iters;
  for (int r = 0; r < n; ++r) {
    check_cuda(cudaSetDevice(ordinals[r]), "cudaSetDevice");
    (void)cudaFree(in[r]);
    (void)cudaFree(out[r]);
  }
  return seconds;
}

// The flags of bench nccl.
struct NcclFlags {
  std::string op_name = "all_reduce";
  Op op = Op::kAllReduce;  // op_name's
  int64_t min_bytes = 8, max_bytes = int64_t{128} << 20;
  int factor = 2, iters = 20, warmup = 5;
  bool json = false;
};

NcclFlags parse(const Args& args) {
  NcclFlags f;
  FlagParser flags("bench nccl");
  flags.text({"--op"}, f.op_name);
  flags.size({"-b", "--minbytes"}, f.min_bytes, 4, int64_t{1} << 34);
  flags.size({"-e", "--maxbytes"}, f.max_bytes, 4, int64_t{1} << 34);
  flags.integer({"-f", "--stepfactor"}, f.factor, 2, 1024);
  flags.integer({"-n", "--iters"}, f.iters, 1, 1000000);
  flags.integer({"-w", "--warmup_iters"}, f.warmup, 0, 1000000);
  flags.set({"--json"}, f.json);
  flags.parse(args);
  f.op = op_from(f.op_name, flags);
  if (f.min_bytes > f.max_bytes) flags.fail("-b must not exceed -e");
  return f;
}

int nccl_benchmark(const NcclFlags& f) {
  Ranks ranks{Runtime(RuntimeOptions{.num_cpu_devices = 1}), {}, nullptr};
  if (ranks.runtime.gpu_devices().empty()) {
    throw Error(ErrorCode::kUnavailable, "bench nccl",
                built_with_cuda() ? "no GPU is visible (or TESSEL_GPU_DEVICES chose none)"
                                  : "tessel was built without CUDA");
  }
  ranks.comms = make_nccl_communicators(ranks.runtime.gpu_devices());
  const int n = ranks.n();
  ranks.workers = std::make_unique<bench::Team>(n);
  std::vector<int> ordinals;
  for (Device* d : ranks.runtime.gpu_devices()) ordinals.push_back(d->gpu_ordinal());
  std::vector<ncclComm_t> raw(static_cast<size_t>(n));
  check_nccl(ncclCommInitAll(raw.data(), n, ordinals.data()), "ncclCommInitAll");
  std::vector<cudaStream_t> streams(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    check_cuda(cudaSetDevice(ordinals[r]), "cudaSetDevice");
    check_cuda(cudaStreamCreate(&streams[r]), "cudaStreamCreate");
  }
  if (!f.json) {
    std::printf("# tessel bench nccl: %s, %d rank(s), NCCL %s, %d iters (+%d warm-up)\n", f.op_name.c_str(), n,
                nccl_version().c_str(), f.iters, f.warmup);
    std::printf("#                                         out-of-place                       in-place          "
                "      raw NCCL (out-of-place)\n");
    std::printf("#       size    count  type  redop  root    time   algbw   busbw  #wrong    time   algbw   busbw  "
                "#wrong     time   busbw  tessel/raw\n");
    std::printf("#        (B)  (elems)                       (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)  "
                "            (us)  (GB/s)\n");
  }
  const double bus = bus_factor(f.op, n);
  Json rows = Json::array();
  for (int64_t bytes = f.min_bytes; bytes <= f.max_bytes; bytes *= f.factor) {
    const Counts c = counts_of(f.op, bytes, n);
    const int64_t row_bytes = std::max(c.in, c.out) * 4;
    const auto [oop_s, oop_wrong] = time_tessel(ranks, f.op, c, false, f.iters, f.warmup);
    const auto [ip_s, ip_wrong] = time_tessel(ranks, f.op, c, true, f.iters, f.warmup);
    const double raw_s = time_raw(raw, ordinals, streams, f.op, c, f.iters, f.warmup);
    const double algbw = row_bytes / oop_s / 1e9, ip_algbw = row_bytes / ip_s / 1e9;
    const double raw_algbw = row_bytes / raw_s / 1e9;
    if (f.json) {
      rows.push_back(Json{{"bytes", row_bytes},
                          {"count", c.out},
                          {"time_us", json_number(oop_s * 1e6)},
                          {"algbw_gbps", json_number(algbw)},
                          {"busbw_gbps", json_number(algbw * bus)},
                          {"wrong", oop_wrong},
                          {"inplace_time_us", json_number(ip_s * 1e6)},
                          {"inplace_busbw_gbps", json_number(ip_algbw * bus)},
                          {"inplace_wrong", ip_wrong},
                          {"raw_time_us", json_number(raw_s * 1e6)},
                          {"raw_busbw_gbps", json_number(raw_algbw * bus)},
                          {"ratio", json_number(raw_s / oop_s, 4)}});
      continue;
    }
    const char* root = f.op == Op::kBroadcast ? "0" : "-1";
    std::printf("%12lld %8lld %5s %6s %5s %7.1f %7.2f %7.2f %7lld %7.1f %7.2f %7.2f %7lld %8.1f %7.2f %10.3f\n",
                static_cast<long long>(row_bytes), static_cast<long long>(c.out), "float", "sum", root,
                oop_s * 1e6, algbw, algbw * bus, static_cast<long long>(oop_wrong), ip_s * 1e6, ip_algbw,
                ip_algbw * bus, static_cast<long long>(ip_wrong), raw_s * 1e6, raw_algbw * bus, raw_s / oop_s);
    std::fflush(stdout);
  }
  for (int r = 0; r < n; ++r) {
    (void)cudaStreamDestroy(streams[r]);
    (void)ncclCommDestroy(raw[r]);
  }
  if (f.json) {
    print_json(Json{{"op", f.op_name},
                    {"ranks", n},
                    {"nccl", nccl_version()},
                    {"iters", f.iters},
                    {"warmup_iters", f.warmup},
                    {"rows", rows}});
  }
  return kExitOk;
}

}  // namespace

int run_bench_nccl(const Args& args) {
  return run_command(args, kHelp, parse, nccl_benchmark);
}

}  // namespace tessel::cli
