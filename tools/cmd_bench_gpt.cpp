// tessel bench gpt: the GPT training step (examples/gpt) on several meshes of one process, against
// baselines measured in the same run: the 2-thread sgemm peak of OpenBLAS (for MFU) and the 1x1
// mesh's step time (for the speedup of the parallel meshes). A mesh with pipeline stages also
// gets each stage's measured idle fraction beside the formula's bubble (pipeline_idle.h).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "bench_env.h"
#include "bench_stats.h"
#include "char_dataset.h"
#include "commands.h"
#include "gpt_memory.h"
#include "gpt_pipeline_trainer.h"
#include "gpt_trainer.h"
#include "json_output.h"
#include "pipeline_idle_json.h"
#include "process_mesh.h"
#include "tessel/core/blas.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/runtime/runtime.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace tessel::cli {
namespace {

constexpr const char* kHelp =
    "usage: tessel bench gpt [--config baby|tiny|test] [--meshes 1x1,2x2] [--steps N]\n"
    "                        [--warmup N] [--sgemm-threads T] [--dropout X] [--batch B]\n"
    "                        [--recompute none|selective|full] [--fsdp] [--dtype f32|bf16|f16]\n"
    "                        [--attention fused|composed]\n"
    "                        [--data FILE] [--json]\n"
    "                        [--schedule gpipe|1f1b|interleaved|zero-bubble] [--microbatches M] "
    "[--chunks V]\n"
    "                        [--stage-threads]\n"
    "\n"
    "Times GPT training steps (examples/gpt: forward, backward, clipping, AdamW) on each mesh of\n"
    "virtual devices in this process, after --warmup untimed steps (default 1); medians of\n"
    "--steps (default 3). The first steps of a large configuration are slower while the host\n"
    "memory settles (fresh pages: baby on 2x2 took 18, 16, 10, 8.7, 8.6 s); compare with a peer\n"
    "after the same warm-up.\n"
    "Baselines from the same run: sgemm (2048^3, --sgemm-threads threads, default 2; the better\n"
    "of tessel's BLAS split over its threads and OpenBLAS's own threads)\n"
    "for MFU, counting FLOPs as torchtitan does (6 N + 12 L H Q T per token); the first mesh's\n"
    "step time for the others' ratio. Per mesh also: collectives and bytes per step (relayout\n"
    "stats) and the peak bytes of a device against the parameters + gradients + AdamW state it\n"
    "holds. --config defaults to baby (6 layers, width 384, context 256, batch 64, dropout 0.2;\n"
    "--dropout 0 for the work of a model without dropout, as the JAX peer's; --batch B for\n"
    "another global batch).\n"
    "Memory (the busiest device, over the timed steps): its peak split into parameters, "
    "gradients,\n"
    "AdamW's moments and activations (the rest of the peak), the most the gradient tapes kept\n"
    "(saved: activations proper) and Korthikanti et al.'s activation count in fp32 for the mesh\n"
    "(K: layers * 2 s b h (10 + 24/t + 5 a s / (h t)); s context, b batch per device, h width,\n"
    "a heads, t model shards), with the ratios act/K and saved/K. --recompute: what the backward\n"
    "pass computes again (none, attention's [B,H,T,T] part: selective, each block: full; the\n"
    "same losses bit for bit: --json lists each mesh's step losses, warm-up included).\n"
    "--attention: fused (default; one causal_attention op, no [B,H,T,T] map kept) or composed\n"
    "(matmul, causal_softmax, dropout, matmul).\n"
    "--fsdp: each mesh runs twice, replicated parameters and then fully sharded ones (ZeRO-3:\n"
    "parameters, gradients and AdamW's moments sharded over batch, docs/memory.md), with the\n"
    "ratios fsdp / replicated of the state bytes, the peak and the step time. --dtype bf16: the\n"
    "matmuls of activations by weights in bf16 with f32 sums; --dtype f16: in f16 (MKL's hgemm)\n"
    "with dynamic loss scaling (docs/gpt.md, mixed precision).\n"
    "Pipeline stages: --meshes takes named meshes separated by ';' "
    "(\"stage=2,batch=1,model=1;1x1\")\n"
    "and a mesh with a stage dimension trains the pipelined GPT (docs/pipeline.md) with\n"
    "--schedule (default 1f1b), --microbatches (default the stages) and --chunks (interleaved,\n"
    "default 2). Per stage, over the timed steps' schedules (forward and backward passes, the\n"
    "streams drained at both ends; clipping and AdamW not in it): the measured idle fraction (1 -\n"
    "the time its devices ran op kernels / wall time), the formula's bubble ((p-1)/(m+p-1),\n"
    "interleaved (p-1)/(v m+p-1), zero-bubble (p-1)/(3m+p-1)), the simulated one (forward 1,\n"
    "backward 2; zero-bubble's input and weight backwards 1 each), the measured\n"
    "transfer time between stages as a fraction of the wall time, and (idle - transfer) / bubble\n"
    "(the goal: <= 1.2). A stage mesh runs a controller thread per stage (the default in one\n"
    "process; --stage-threads asks for it explicitly) or, with --one-controller, one thread for\n"
    "the whole step (PipelineOptions::controllers). --compare-controllers: each stage mesh runs\n"
    "twice, with one controller and then with a thread per stage, for the ratio.\n";

struct MeshShape {
  int64_t stage = 0;  // 0: no stage dimension
  int64_t batch = 1, model = 1;
};

struct Flags {
  std::string config = "baby";
  std::string meshes = "1x1,2x2";
  std::vector<MeshShape> mesh_shapes;  // --meshes read
  int64_t steps = 3, warmup = 1, sgemm_threads = 2;
  double dropout = -1;  // -1: the configuration's
  int64_t batch = 0;    // 0: the configuration's
  std::string recompute = "none";
  std::string attention = "fused";
  bool fsdp = false;  // every mesh replicated, then fully sharded
  std::string dtype = "f32";
  std::string data = "data/shakespeare_char/input.txt";
  bool json = false;
  std::string schedule;  // "": 1f1b (flags for the stage meshes only)
  int64_t microbatches = 0, chunks = 0;
  bool stage_threads = false, one_controller = false;  // the stage meshes' controllers
  bool compare_controllers = false;  // each stage mesh with one controller, then stage threads
};

// FLOP/s of an n^3 sgemm on `threads` threads, best of 3 after a warm-up, the better of two ways
// of using them: OpenBLAS's own threads, and tessel's sgemm (core/blas.h) split over the
// intra-op threads (all cores while no device is alive) -- the peak MFU is measured against.
double sgemm_peak(int n, int threads) {
  blas_info();  // the kernel checked against the CPU before the first call
  std::vector<float> a(static_cast<size_t>(n) * n, 1.0f), b(a), c(a.size());
  const auto best_of = [&](auto&& gemm) {
    double best = 1e300;
    for (int r = 0; r < 4; ++r) {
      const double seconds = bench::seconds_of(gemm);
      if (r > 0) best = std::min(best, seconds);
    }
    return 2.0 * n * n * n / best;
  };
  openblas_set_num_threads(threads);
  const double own = best_of([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
  });
  openblas_set_num_threads(1);  // tessel's calls run OpenBLAS single-threaded each
  const double split =
      best_of([&] { sgemm(false, false, n, n, n, a.data(), n, b.data(), n, c.data(), n); });
  return std::max(own, split);
}

// A stage mesh's schedule and its measured idle (pipeline_idle.h) over the timed steps.
struct PipelineResult {
  train::PipelineSchedule schedule;
  double bubble = 0;                     // bubble_formula
  train::ScheduleSimulation simulation;  // forward 1, backward 2
  train::PipelineIdle idle;              // the timed steps' windows added
};

struct MeshResult {
  int64_t stage = 0, batch = 1, model = 1;
  bool fsdp = false;
  bool stage_threads = false;  // a stage mesh's step ran a controller thread per stage
  std::optional<PipelineResult> pipeline;
  double step_seconds = 0, tokens_per_second = 0, mfu = 0;
  double collectives = 0, bytes = 0, collective_seconds = 0;  // per step; seconds per device
  double peak_bytes = 0, state_bytes = 0;  // the busiest device; parameters + grads + 2 moments
  gpt::DeviceMemory memory;                // the busiest device's peak, split
  double korthikanti_bytes = 0;            // per device, fp32
  std::vector<double> losses;
};

// The pipeline options of a stage mesh from the flags (measuring each stage's idle time).
gpt::PipelineOptions pipeline_options(const Flags& f, int64_t stages,
                                      gpt::Controllers controllers) {
  const train::ScheduleKind kind =
      train::parse_schedule_kind(f.schedule.empty() ? "1f1b" : f.schedule);
  return {.schedule = kind,
          .microbatches = static_cast<int>(f.microbatches > 0 ? f.microbatches : stages),
          .chunks = static_cast<int>(f.chunks > 0                                    ? f.chunks
                                     : kind == train::ScheduleKind::kInterleaved1F1B ? 2
                                                                                     : 1),
          .measure_idle = true,
          .controllers = controllers};
}

MeshResult run_mesh(const gpt::GptConfig& config, const gpt::CharDataset& data,
                    const MeshShape& shape, const Flags& f, double peak,
                    gpt::Controllers controllers) {
  const int64_t batch = shape.batch, model = shape.model,
                stages = std::max<int64_t>(shape.stage, 1);
  const int64_t warmup = f.warmup, steps = f.steps;
  MeshResult r;
  r.stage = shape.stage;
  r.batch = batch;
  r.model = model;
  r.fsdp = config.fsdp;
  Runtime rt({.num_cpu_devices = static_cast<int>(stages * batch * model)});
  std::vector<std::string> names;
  for (const Device* d : rt.devices()) names.push_back(d->name());
  std::unique_ptr<gpt::LanguageModelTrainer> owned;
  gpt::GptPipelineTrainer* piped = nullptr;
  if (shape.stage > 0) {
    const Mesh mesh = Mesh::create_on_devices(
        {{"stage", shape.stage}, {"batch", batch}, {"model", model}}, names);
    auto t = std::make_unique<gpt::GptPipelineTrainer>(
        config, mesh, pipeline_options(f, shape.stage, controllers), data, &rt);
    piped = t.get();
    r.stage_threads = t->pipeline().stage_threads();
    owned = std::move(t);
  } else {
    const Mesh mesh = Mesh::create_on_devices({{"batch", batch}, {"model", model}}, names);
    owned = std::make_unique<gpt::GptTrainer>(config, mesh, data, &rt);
  }
  gpt::LanguageModelTrainer& trainer = *owned;
  // Warm-up: first allocations, the op registry, the host memory settling.
  for (int64_t s = 0; s < warmup; ++s) r.losses.push_back(trainer.step().loss);
  gpt::reset_memory_peaks(trainer);
  if (piped != nullptr) piped->reset_idle();
  std::vector<double> times;
  const RelayoutStats before = relayout_stats();
  for (int64_t s = 0; s < steps; ++s) {
    const gpt::StepReport step = trainer.step();
    times.push_back(step.seconds);
    r.losses.push_back(step.loss);
  }
  const RelayoutStats after = relayout_stats();
  if (piped != nullptr) {
    const train::PipelineSchedule& schedule = piped->pipeline().schedule();
    r.pipeline = PipelineResult{schedule,
                                train::bubble_formula(schedule.kind, schedule.stages,
                                                      schedule.microbatches, schedule.chunks),
                                train::simulate(schedule), piped->idle_total()};
  }
  std::sort(times.begin(), times.end());
  r.step_seconds = times[times.size() / 2];
  const double tokens = static_cast<double>(config.batch_size) * config.block_size;
  r.tokens_per_second = tokens / r.step_seconds;
  r.mfu = config.flops_per_token() * r.tokens_per_second / peak;
  r.collectives = static_cast<double>(after.collectives - before.collectives) / steps;
  r.bytes = static_cast<double>(after.bytes - before.bytes) / steps;
  r.collective_seconds =
      (after.seconds - before.seconds) / steps / static_cast<double>(stages * batch * model);
  for (const gpt::DeviceMemory& d : gpt::memory_report(trainer)) {
    if (static_cast<double>(d.peak_bytes) >= r.peak_bytes) {
      r.peak_bytes = static_cast<double>(d.peak_bytes);
      r.memory = d;
    }
  }
  // Korthikanti's count is for the whole model on each device: not a stage's (no figure then).
  if (piped == nullptr) {
    r.korthikanti_bytes = gpt::korthikanti_activation_bytes(config, batch, model, false);
  }
  // Parameters, gradients and AdamW's two moments: four copies of what a device holds of each.
  const std::vector<DTensor>& params = trainer.params();
  std::vector<double> held(rt.devices().size(), 0.0);
  for (const DTensor& p : params) {
    for (int i = 0; i < p.num_components(); ++i) {
      held[static_cast<size_t>(p.device(i).index())] +=
          4.0 * static_cast<double>(p.component(i).nbytes());
    }
  }
  r.state_bytes = *std::max_element(held.begin(), held.end());
  return r;
}

// "2x2", "2x2 fsdp" for a fully sharded run; with stages "s2 1x1 threads" (a controller thread
// per stage) or "s2 1x1 one controller".
std::string mesh_label(const MeshResult& r) {
  const char* controllers = r.stage == 0 ? "" : r.stage_threads ? " threads" : " one controller";
  return fmt::format("{}{}x{}{}{}", r.stage > 0 ? fmt::format("s{} ", r.stage) : "", r.batch,
                     r.model, r.fsdp ? " fsdp" : "", controllers);
}

// The text table of a stage mesh's idle per stage.
std::string pipeline_text(const MeshResult& r) {
  const PipelineResult& p = *r.pipeline;
  const double steps = std::max(p.idle.windows, 1);
  std::string out = fmt::format(
      "{}: {} schedule, {} microbatches{}: the schedule took {:.4f} s of the {:.4f} s step, {:.0f} "
      "transfers between stages\n",
      mesh_label(r), train::schedule_kind_name(p.schedule.kind), p.schedule.microbatches,
      p.schedule.chunks > 1 ? fmt::format(" x {} chunks", p.schedule.chunks) : "",
      p.idle.wall_seconds / steps, r.step_seconds, p.idle.transfers / steps);
  out += fmt::format("{:>7} {:>8} {:>8} {:>10} {:>10} {:>12} {:>22}\n", "stage", "idle", "formula",
                     "simulated", "transfer", "transfer ms", "(idle-transfer)/formula");
  for (size_t s = 0; s < p.idle.stages.size(); ++s) {
    const train::StageIdle& st = p.idle.stages[s];
    if (st.devices == 0) {
      out += fmt::format("{:>7} (its devices are another process's)\n", s);
      continue;
    }
    out += fmt::format("{:>7} {:>8.4f} {:>8.4f} {:>10.4f} {:>10.4f} {:>12.3f} {:>22.3f}\n", s,
                       st.idle_fraction, p.bubble, p.simulation.idle_fraction.at(s),
                       st.transfer_fraction, 1e3 * st.transfer_seconds / steps,
                       idle_less_transfer_over_bubble(st, p.bubble));
  }
  return out;
}

Json memory_json(const MeshResult& r) {
  const gpt::DeviceMemory& m = r.memory;
  if (r.korthikanti_bytes <= 0) {  // a stage mesh: no count to compare with
    return Json{{"device", m.device},
                {"peak_bytes", m.peak_bytes},
                {"parameter_bytes", m.parameter_bytes},
                {"gradient_bytes", m.gradient_bytes},
                {"optimizer_bytes", m.optimizer_bytes},
                {"activation_bytes", m.activation_bytes},
                {"saved_activation_bytes", m.saved_bytes}};
  }
  return Json{
      {"device", m.device},
      {"peak_bytes", m.peak_bytes},
      {"parameter_bytes", m.parameter_bytes},
      {"gradient_bytes", m.gradient_bytes},
      {"optimizer_bytes", m.optimizer_bytes},
      {"activation_bytes", m.activation_bytes},
      {"saved_activation_bytes", m.saved_bytes},
      {"korthikanti_bytes", json_number(r.korthikanti_bytes, 15)},
      {"activation_ratio",
       json_number(static_cast<double>(m.activation_bytes) / r.korthikanti_bytes, 4)},
      {"saved_ratio", json_number(static_cast<double>(m.saved_bytes) / r.korthikanti_bytes, 4)}};
}

Flags parse(const Args& args) {
  FlagParser flags("bench gpt");
  Flags f;
  flags.text({"--config"}, f.config);
  flags.text({"--meshes"}, f.meshes);
  flags.integer({"--steps"}, f.steps, 1, 1000);
  flags.integer({"--warmup"}, f.warmup, 0, 1000);
  flags.integer({"--sgemm-threads"}, f.sgemm_threads, 1, 1024);
  flags.text({"--data"}, f.data);
  flags.number({"--dropout"}, f.dropout);
  flags.integer({"--batch"}, f.batch, 1, 1 << 20);
  flags.text({"--recompute"}, f.recompute);
  flags.text({"--attention"}, f.attention);
  flags.set({"--fsdp"}, f.fsdp);
  flags.text({"--dtype"}, f.dtype);
  flags.set({"--json"}, f.json);
  flags.text({"--schedule"}, f.schedule);
  flags.integer({"--microbatches"}, f.microbatches, 1, 4096);
  flags.integer({"--chunks"}, f.chunks, 1, 64);
  flags.set({"--stage-threads"}, f.stage_threads);
  flags.set({"--one-controller"}, f.one_controller);
  flags.set({"--compare-controllers"}, f.compare_controllers);
  flags.parse(args);
  if (f.stage_threads + f.one_controller + f.compare_controllers > 1) {
    flags.fail("--stage-threads, --one-controller and --compare-controllers exclude each other");
  }
  // Named meshes ("stage=2,batch=1,model=1") hold commas: then ';' separates the meshes.
  const bool named = f.meshes.find('=') != std::string::npos;
  for (const std::string& item : split_list(f.meshes, named ? ';' : ',')) {
    if (!named && item.find('x') == std::string::npos) {
      flags.fail(
          fmt::format("--meshes takes BxM,BxM,... or named meshes separated by ';' "
                      "(stage=2,batch=1,model=1;1x1), got '{}'",
                      item));
    }
    MeshShape shape;
    std::tie(shape.batch, shape.model) = parse_mesh_shape(flags, "--meshes", item, &shape.stage);
    f.mesh_shapes.push_back(shape);
  }
  const bool stages = std::any_of(f.mesh_shapes.begin(), f.mesh_shapes.end(),
                                  [](const MeshShape& s) { return s.stage > 0; });
  if (!stages && (!f.schedule.empty() || f.microbatches > 0 || f.chunks > 0 || f.stage_threads ||
                  f.one_controller || f.compare_controllers)) {
    flags.fail(
        "--schedule, --microbatches, --chunks, --stage-threads, --one-controller and "
        "--compare-controllers need a mesh with a stage dimension in --meshes (e.g. "
        "stage=2,batch=1,model=1)");
  }
  if (stages && f.fsdp) flags.fail("--fsdp runs the meshes without stages only");
  if (!f.schedule.empty()) {
    try {
      train::parse_schedule_kind(f.schedule);
    } catch (const Error& e) {
      flags.fail(fmt::format("--schedule: {}", e.what()));
    }
  }
  return f;
}

int gpt_benchmark(const Flags& f) {
  gpt::GptConfig config = gpt::GptConfig::preset(f.config);
  if (f.dropout != -1) {
    config.dropout = f.dropout;
    config.validate();
  }
  config.recompute = gpt::parse_recompute(f.recompute);
  config.attention = gpt::parse_attention(f.attention);
  gpt::set_matmul_dtype(config, f.dtype);
  if (f.batch > 0) config.batch_size = static_cast<int>(f.batch);
  const gpt::CharDataset data = gpt::CharDataset::load(f.data);
  const bench::CpuSample cpu_before = bench::sample_cpu();
  const double peak = sgemm_peak(2048, static_cast<int>(f.sgemm_threads));
  std::vector<MeshResult> results;
  for (const MeshShape& shape : f.mesh_shapes) {
    for (const bool fsdp : f.fsdp ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
      config.fsdp = fsdp;
      using gpt::Controllers;
      const Controllers chosen = f.stage_threads    ? Controllers::kStageThreads
                                 : f.one_controller ? Controllers::kOneController
                                                    : Controllers::kAuto;
      const bool both = shape.stage > 0 && f.compare_controllers;
      for (const Controllers c :
           both ? std::vector{Controllers::kOneController, Controllers::kStageThreads}
                : std::vector{chosen}) {
        results.push_back(run_mesh(config, data, shape, f, peak, c));
      }
    }
  }
  const double others = bench::other_cpu_fraction(cpu_before, bench::sample_cpu());
  if (f.json) {
    Json rows = Json::array();
    for (const MeshResult& r : results) {
      Json mesh = r.stage > 0 ? Json{r.stage, r.batch, r.model} : Json{r.batch, r.model};
      rows.push_back(
          Json{{"mesh", mesh},
               {"fsdp", r.fsdp},
               {"stage_threads", r.stage_threads},
               {"step_seconds", json_number(r.step_seconds)},
               {"tokens_per_second", json_number(r.tokens_per_second)},
               {"mfu", json_number(r.mfu, 4)},
               {"vs_first", json_number(r.step_seconds / results.front().step_seconds, 4)},
               {"collectives_per_step", json_number(r.collectives)},
               {"bytes_per_step", json_number(r.bytes, 15)},
               {"collective_seconds_per_step", json_number(r.collective_seconds)},
               {"peak_bytes_per_device", json_number(r.peak_bytes, 15)},
               {"state_bytes_per_device", json_number(r.state_bytes, 15)},
               {"memory", memory_json(r)},
               {"losses", r.losses}});
      if (r.pipeline)
        rows.back()["pipeline"] = pipeline_idle_json(r.pipeline->schedule, r.pipeline->idle);
    }
    print_json(Json{{"config", f.config},
                    {"warmup_steps", f.warmup},
                    {"dropout", json_number(config.dropout)},
                    {"recompute", f.recompute},
                    {"attention", f.attention},
                    {"fsdp", f.fsdp},
                    {"dtype", f.dtype},
                    {"batch", config.batch_size},
                    {"parameters", config.num_parameters()},
                    {"flops_per_token", json_number(config.flops_per_token(), 15)},
                    {"sgemm_peak_flops", json_number(peak, 4)},
                    {"sgemm_threads", f.sgemm_threads},
                    {"load", bench::load_average_text()},
                    {"other_cpu", json_number(others, 3)},
                    {"meshes", rows}});
    return kExitOk;
  }
  std::cout << fmt::format(
      "tessel bench gpt: {} ({:.2f} M parameters, {:.1f} MFLOP per token, dropout {}, recompute "
      "{}, attention {}, matmuls in {}), "
      "{} timed steps after {} warm-up\nbaseline: OpenBLAS sgemm 2048^3 with {} threads = {:.1f} "
      "GFLOP/s; load {}, other processes took {:.0f}% of the CPUs\n\n",
      f.config, config.num_parameters() / 1e6, config.flops_per_token() / 1e6, config.dropout,
      f.recompute, f.attention, f.dtype, f.steps, f.warmup, f.sgemm_threads, peak / 1e9,
      bench::load_average_text(), others * 100);
  std::cout << fmt::format("{:>11} {:>10} {:>9} {:>7} {:>9} {:>12} {:>10} {:>9} {:>10} {:>10}\n",
                           "mesh", "step (s)", "tokens/s", "MFU", "vs first", "collectives",
                           "MiB moved", "coll. s", "peak MiB", "state MiB");
  for (const MeshResult& r : results) {
    std::cout << fmt::format(
        "{:>11} {:>10.3f} {:>9.0f} {:>6.1f}% {:>9.2f} {:>12.0f} {:>10.1f} "
        "{:>9.3f} {:>10.1f} {:>10.1f}\n",
        mesh_label(r), r.step_seconds, r.tokens_per_second, r.mfu * 100,
        r.step_seconds / results.front().step_seconds, r.collectives, r.bytes / (1 << 20),
        r.collective_seconds, r.peak_bytes / (1 << 20), r.state_bytes / (1 << 20));
  }
  std::cout << "\n(vs first: step time / the first mesh's, same global batch; coll. s: seconds a "
               "device spends inside relayout collectives per step, waiting for peers included; "
               "state: parameters, gradients and AdamW's moments the busiest device holds)\n\n";
  std::cout << fmt::format("{:>11} {:>10} {:>8} {:>8} {:>8} {:>10} {:>10} {:>10} {:>7} {:>8}\n",
                           "mesh", "peak MiB", "params", "grads", "AdamW", "act MiB", "saved MiB",
                           "K MiB", "act/K", "saved/K");
  for (const MeshResult& r : results) {
    const gpt::DeviceMemory& m = r.memory;
    const auto mib = [](int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); };
    std::cout << fmt::format(
        "{:>11} {:>10.1f} {:>8.1f} {:>8.1f} {:>8.1f} {:>10.1f} {:>10.1f} {:>10.1f} {:>7.3f} "
        "{:>8.3f}\n",
        mesh_label(r), mib(m.peak_bytes), mib(m.parameter_bytes), mib(m.gradient_bytes),
        mib(m.optimizer_bytes), mib(m.activation_bytes), mib(m.saved_bytes),
        r.korthikanti_bytes / (1 << 20),
        static_cast<double>(m.activation_bytes) / r.korthikanti_bytes,
        static_cast<double>(m.saved_bytes) / r.korthikanti_bytes);
  }
  std::cout << "\n(the busiest device's peak: act = peak - parameters - gradients - AdamW, what "
               "the step keeps for its backward pass and its temporaries; saved: the most the "
               "gradient tapes kept; K: Korthikanti et al.'s activation count in fp32)\n";
  bool first_pipeline = true;
  for (const MeshResult& r : results) {
    if (!r.pipeline) continue;
    if (first_pipeline) {
      std::cout << "\n(pipeline stages: idle = 1 - the time the stage's devices ran op kernels "
                   "/ the schedule's wall time; transfer: the time of its transfers between "
                   "stages, the same fraction; the goal is (idle - transfer)/formula <= 1.2)\n";
      first_pipeline = false;
    }
    std::cout << "\n" << pipeline_text(r);
  }
  // Each stage-threads run against the single controller's on its mesh, the row before it
  // (--compare-controllers).
  for (size_t i = 1; f.compare_controllers && i < results.size(); ++i) {
    const MeshResult &one = results[i - 1], &threads = results[i];
    if (!threads.stage_threads || one.stage_threads || one.stage != threads.stage) continue;
    std::cout << fmt::format(
        "{} / one controller: step time {:.3f}, schedule time {:.3f}\n", mesh_label(threads),
        threads.step_seconds / one.step_seconds,
        (threads.pipeline->idle.wall_seconds / threads.pipeline->idle.windows) /
            (one.pipeline->idle.wall_seconds / one.pipeline->idle.windows));
  }
  // Each fully sharded run against the replicated run on its mesh, the row before it.
  for (size_t i = 1; i < results.size(); ++i) {
    const MeshResult &plain = results[i - 1], &sharded = results[i];
    if (!sharded.fsdp) continue;
    std::cout << fmt::format(
        "{}x{} fsdp / replicated: state bytes per device {:.3f}, peak {:.3f}, step time {:.3f}\n",
        sharded.batch, sharded.model, sharded.state_bytes / plain.state_bytes,
        sharded.peak_bytes / plain.peak_bytes, sharded.step_seconds / plain.step_seconds);
  }
  return kExitOk;
}

}  // namespace

int run_bench_gpt(const Args& args) { return run_command(args, kHelp, parse, gpt_benchmark); }

}  // namespace tessel::cli
