// tessel bench fusion: the batch all-reduce of many tensors fused into buckets (FusedAllReducer),
// against the same tensors as separate all-reduces and one all-reduce of a single buffer of the
// same total size, over N in-process devices, in one run.
//
// Each device is a worker thread with its own Communicator of one in-process group. The modes
// take turns in `rounds` rounds of iters/rounds timed calls (after `warmup` untimed calls in the
// first round, one in later rounds); before each call the workers meet at a
// spin-yield barrier, each times its own call on the steady clock, one call's time is the slowest
// worker's, and the reported time is the median over the timed calls.
// - fused: the tensors live in their buckets (FusedAllReducer::tensor_view, as DDP's
//   gradient_as_bucket_view), so a call (all_reduce_buckets) is one all-reduce per bucket and no
//   copy; the checked call below passes the views through all_reduce;
// - fused_copy: the same with the tensors in their own storage (copied into the buckets);
// - unfused: one all-reduce per tensor;
// - single_buffer: one all-reduce of tensors * bytes bytes.
// The results of one extra fused call (on inputs rank + 1) are checked against the exact sum.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bench_env.h"
#include "bench_stats.h"
#include "bench_team.h"
#include "commands.h"
#include "flags.h"
#include "json_output.h"
#include "tessel/alloc/fused_all_reduce.h"
#include "tessel/alloc/fusion.h"
#include "tessel/comm/collective_options.h"
#include "tessel/comm/communicator.h"
#include "tessel/core/error.h"
#include "tessel/core/median.h"
#include "tessel/core/reduce_op.h"
#include "tessel/core/tensor.h"

namespace tessel::cli {
namespace {

constexpr const char* kHelp =
    "usage: tessel bench fusion [options]\n"
    "\n"
    "Times, over N in-process devices, the f32 sum all-reduce of many tensors three ways: fused\n"
    "into buckets (one all-reduce per bucket, tensors living in their buckets), as separate\n"
    "all-reduces, and as one all-reduce of a single buffer of the same total size. Times are\n"
    "medians of the slowest device's time per call.\n"
    "\n"
    "  --tensors N         number of tensors (default 1000)\n"
    "  --bytes S           bytes of each tensor (default 4K; K, M are powers of 1024; a multiple\n"
    "                      of 4)\n"
    "  --devices N         participants (default 4, at most 64)\n"
    "  --bucket-bytes S    fusion threshold, TF's greedy bytes_per_pack (default 25M; 0: one\n"
    "                      bucket)\n"
    "  -n, --iters N       timed calls per mode (default 20)\n"
    "  -w, --warmup N      untimed calls before a mode's first round (default 3; 1 later)\n"
    "  --rounds R          the modes take turns in R rounds of iters/R calls (default 5)\n"
    "  --json              print {\"tensors\", \"bytes_each\", \"devices\", \"buckets\", "
    "\"fused_us\",\n"
    "                      \"unfused_us\", \"single_buffer_us\", \"fused_copy_us\", \"wrong\"}\n"
    "\n"
    "Bad arguments print 'tessel: error: <reason>' and exit with status 2.\n";

struct FusionConfig {
  int tensors = 1000;
  int64_t bytes = 4 << 10;
  int devices = 4;
  int64_t bucket_bytes = int64_t{25} << 20;
  int iters = 20;
  int warmup = 3;
  int rounds = 5;
  bool json = false;
};

FusionConfig parse(const Args& args) {
  FusionConfig c;
  FlagParser flags("bench fusion");
  flags.integer({"--tensors"}, c.tensors, 1, 1000000);
  flags.size({"--bytes"}, c.bytes, 4, int64_t{1} << 30);
  flags.integer({"--devices"}, c.devices, 1, 64);
  flags.size({"--bucket-bytes"}, c.bucket_bytes, 0, int64_t{1} << 40);
  flags.integer({"-n", "--iters"}, c.iters, 1, 100000);
  flags.integer({"--rounds"}, c.rounds, 1, 1000);
  flags.integer({"-w", "--warmup"}, c.warmup, 0, 100000);
  flags.set({"--json"}, c.json);
  flags.parse(args);
  if (c.bytes % 4 != 0) flags.fail("--bytes: must be a multiple of 4 (f32)");
  // Per device: the fused buckets, the separate tensors and the single buffer, each of
  // tensors x bytes.
  bench::check_fits_in_memory(
      "bench fusion", 3.0 * c.tensors * static_cast<double>(c.bytes) * c.devices,
      fmt::format("--tensors {} --bytes {} on {} devices", c.tensors, c.bytes, c.devices));
  return c;
}

// Appends to `samples` the slowest worker's time (microseconds) of each of `iters` calls of
// `call`, after `warmup` untimed calls.
void time_mode(bench::Team& team, const FusionConfig& c, int warmup, int iters,
               const std::function<void(int rank)>& call, std::vector<double>& samples) {
  std::vector<std::vector<double>> times(static_cast<size_t>(iters),
                                         std::vector<double>(static_cast<size_t>(c.devices)));
  team.run([&](int rank) {
    for (int i = 0; i < warmup + iters; ++i) {
      team.sync();
      const bench::Stopwatch watch;
      call(rank);
      const double us = watch.microseconds();
      if (i >= warmup) times[static_cast<size_t>(i - warmup)][static_cast<size_t>(rank)] = us;
    }
  });
  for (const auto& row : times) samples.push_back(*std::max_element(row.begin(), row.end()));
}

int run(const FusionConfig& c) {
  const int64_t elements = c.bytes / 4;
  auto comms = make_in_process_communicators(c.devices);
  bench::Team team(c.devices);
  std::vector<FusionTensor> specs;
  for (int i = 0; i < c.tensors; ++i) {
    specs.push_back({std::to_string(i), Shape{elements}, DType::kF32, ""});
  }
  const FusionOptions options{.bytes_per_pack = c.bucket_bytes, .num_packs = 0};
  std::vector<std::unique_ptr<FusedAllReducer>> fused(static_cast<size_t>(c.devices));
  std::vector<std::vector<Tensor>> views(static_cast<size_t>(c.devices));
  std::vector<std::vector<Tensor>> own(static_cast<size_t>(c.devices));
  std::vector<Tensor> single(static_cast<size_t>(c.devices));
  team.run([&](int r) {
    const auto ru = static_cast<size_t>(r);
    fused[ru] = std::make_unique<FusedAllReducer>(*comms[ru], specs, options);
    for (int i = 0; i < c.tensors; ++i) {
      views[ru].push_back(fused[ru]->tensor_view(i));
      own[ru].push_back(Tensor::zeros(Shape{elements}, DType::kF32));
    }
    single[ru] = Tensor::zeros(Shape{elements * c.tensors}, DType::kF32);
  });
  const CollectiveOptions copts;
  // The modes take turns in rounds, so that all four see the same machine (noise on a busy or
  // small machine comes in bursts); each mode's time is the median over all its samples.
  const std::vector<std::function<void(int)>> modes = {
      [&](int r) { fused[static_cast<size_t>(r)]->all_reduce_buckets(ReduceOp::kSum, copts); },
      [&](int r) {
        fused[static_cast<size_t>(r)]->all_reduce(own[static_cast<size_t>(r)], ReduceOp::kSum,
                                                  copts);
      },
      [&](int r) {
        for (Tensor& t : own[static_cast<size_t>(r)]) {
          comms[static_cast<size_t>(r)]->all_reduce(t, t, ReduceOp::kSum, copts);
        }
      },
      [&](int r) {
        Tensor& t = single[static_cast<size_t>(r)];
        comms[static_cast<size_t>(r)]->all_reduce(t, t, ReduceOp::kSum, copts);
      }};
  std::vector<std::vector<double>> samples(modes.size());
  const int rounds = std::min(c.rounds, c.iters);
  for (int round = 0; round < rounds; ++round) {
    const int iters = c.iters / rounds + (round < c.iters % rounds ? 1 : 0);
    for (size_t m = 0; m < modes.size(); ++m) {
      time_mode(team, c, round == 0 ? c.warmup : 1, iters, modes[m], samples[m]);
    }
  }
  const double fused_us = median(samples[0]);
  const double fused_copy_us = median(samples[1]);
  const double unfused_us = median(samples[2]);
  const double single_us = median(samples[3]);
  // Check one fused call: rank r's tensors hold r + 1, so every result is N(N+1)/2.
  std::vector<int64_t> wrong(static_cast<size_t>(c.devices), 0);
  team.run([&](int r) {
    const auto ru = static_cast<size_t>(r);
    for (Tensor& v : views[ru]) v.fill(r + 1);
    const std::vector<Tensor>& out = fused[ru]->all_reduce(views[ru], ReduceOp::kSum, copts);
    const float expect = static_cast<float>(c.devices * (c.devices + 1) / 2);
    for (const Tensor& t : out) {
      const float* p = t.data<float>();
      for (int64_t e = 0; e < t.num_elements(); ++e) wrong[ru] += p[e] != expect;
    }
  });
  int64_t total_wrong = 0;
  for (int64_t w : wrong) total_wrong += w;
  const int buckets = fused[0]->num_buckets();
  if (c.json) {
    print_json(Json{{"tensors", c.tensors},
                    {"bytes_each", c.bytes},
                    {"devices", c.devices},
                    {"buckets", buckets},
                    {"fused_us", json_number(fused_us)},
                    {"unfused_us", json_number(unfused_us)},
                    {"single_buffer_us", json_number(single_us)},
                    {"fused_copy_us", json_number(fused_copy_us)},
                    {"wrong", total_wrong}});
  } else {
    std::printf(
        "# tessel bench fusion: %d f32 tensors x %lld bytes, %d devices, bucket threshold "
        "%lld bytes -> %d buckets; hardware threads %u, load average %s; median of %d\n",
        c.tensors, static_cast<long long>(c.bytes), c.devices,
        static_cast<long long>(c.bucket_bytes), buckets, std::thread::hardware_concurrency(),
        bench::load_average_text().c_str(), c.iters);
    std::printf("%-28s %12s %10s\n", "mode", "time (us)", "vs single");
    const auto row = [&](const char* name, double us) {
      std::printf("%-28s %12.1f %9.2fx\n", name, us, us / single_us);
    };
    row("fused (in-bucket tensors)", fused_us);
    row("fused (copied in)", fused_copy_us);
    row("unfused (one per tensor)", unfused_us);
    row("single buffer", single_us);
    std::printf("# unfused / fused = %.1fx; wrong results: %lld\n", unfused_us / fused_us,
                static_cast<long long>(total_wrong));
  }
  return total_wrong == 0 ? kExitOk : kExitFailure;
}

}  // namespace

int run_bench_fusion(const Args& args) {
  return run_command(args, kHelp, parse, run, "bench fusion");
}

}  // namespace tessel::cli
