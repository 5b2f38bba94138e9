// tessel train gpt: trains the GPT of examples/gpt (nanoGPT's character model) on tiny
// Shakespeare over a batch x model mesh, in one process or as one of several under mpirun.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "char_dataset.h"
#include "commands.h"
#include "flags.h"
#include "gpt_reference.h"
#include "gpt_trainer.h"
#include "json_output.h"
#include "process_mesh.h"
#include "tessel/checkpoint/checkpoint_manager.h"
#include "tessel/comm/mpi.h"
#include "tessel/core/error.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/runtime/clients.h"
#include "tessel/runtime/runtime.h"

namespace tessel::cli {
namespace {

constexpr const char* kHelp =
    "usage: tessel train gpt [options]\n"
    "\n"
    "Trains nanoGPT's character-level GPT on tiny Shakespeare over a batch x model mesh:\n"
    "data parallel over batch, Megatron tensor parallel over model (heads, MLP columns and the\n"
    "vocabulary sharded), AdamW with warm-up and cosine decay, gradient clipping at norm 1.\n"
    "\n"
    "  --config NAME       tiny (4 layers, width 128, context 64, batch 12: nanoGPT's CPU "
    "recipe),\n"
    "                      baby (6 layers, width 384, context 256, batch 64) or test (default "
    "tiny)\n"
    "  --mesh BxM          batch x model mesh, also batch=B,model=M (default 2x2)\n"
    "  --device cpu|gpu    the mesh's devices: virtual CPU devices (default) or GPU devices\n"
    "                      (one per GPU, or as TESSEL_GPU_DEVICES lists them: \"0,0,0,0\"\n"
    "                      puts a 2x2 mesh on GPU 0; TESSEL_SIMULATED_GPUS=N simulates N\n"
    "                      without a GPU)\n"
    "  --steps N           training steps (default: the config's, 2000 for tiny)\n"
    "  --eval-interval N   validation loss every N steps and at the end (default: the config's)\n"
    "  --eval-iters N      batches per validation estimate (default: the config's)\n"
    "  --sp                sequence parallelism: norms and dropout on sequence shards\n"
    "  --dropout X         dropout rate (default: the config's)\n"
    "  --lr X              peak learning rate (default: the config's)\n"
    "  --seed N            initialisation, data and dropout seed (default 1337)\n"
    "  --data FILE         training text (default data/shakespeare_char/input.txt)\n"
    "  --sample N          characters to generate at the end (default 300; 0: none)\n"
    "  --metrics FILE      write step,loss,lr,grad_norm,step_seconds and the evaluations as CSV\n"
    "  --json              print one JSON object at the end instead of the progress output\n"
    "                      (one line; a number that is NaN or infinite is written as null)\n"
    "  --checkpoint-dir D  keep checkpoints in D (docs/checkpoints.md; step-NNNNNNNN/, last 3)\n"
    "  --checkpoint-every N  save a checkpoint after every N steps (needs --checkpoint-dir)\n"
    "  --async-checkpoint  write the checkpoints in the background (the step waits only for a\n"
    "                      copy of the state; the last one is waited for before the end)\n"
    "  --resume            continue from the newest checkpoint in --checkpoint-dir, on any mesh\n"
    "                      (bit for bit on the same mesh); none there: start afresh\n"
    "  --check-reference FILE  instead of training, check the `test` model on this mesh against\n"
    "                      the JAX reference dump FILE (examples/gpt/reference/): logits,\n"
    "                      gradients and 10 AdamW steps in f32; exit 1 when out of tolerance\n"
    "\n"
    "A non-finite loss or gradient norm stops training before the update, with an error naming\n"
    "the step and the values (exit status 1).\n"
    "\n"
    "Several processes: `mpirun -np P tessel train gpt` makes each process a client holding\n"
    "B*M/P devices of the mesh; only process 0 prints.\n";

// Options left unset keep the configuration's values.
struct Options {
  std::string config = "tiny";
  int64_t mesh_batch = 2, mesh_model = 2;
  std::string device_type = "CPU";  // --device: the mesh's devices
  int64_t steps = 0, eval_interval = 0, eval_iters = 0, seed = -1;  // 0 / -1: the config's
  std::optional<double> dropout, lr;
  bool sp = false, json = false;
  std::string data = "data/shakespeare_char/input.txt";
  int64_t sample = 300;
  std::string metrics;
  std::string check_reference;  // a reference dump: check against it instead of training
  std::string checkpoint_dir;   // "" : no checkpoints
  int64_t checkpoint_every = 0;  // 0: never
  bool async_checkpoint = false;
  bool resume = false;
};

[[noreturn]] void bad(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, "train", message);
}

Options parse(const Args& args) {
  FlagParser flags("train");
  Options o;
  bool model_named = false;
  double dropout = -1, lr = -1;
  flags.positional([&](const std::string& a) {
    if (model_named || a != "gpt") flags.fail(fmt::format("the model to train is 'gpt', got '{}'", a));
    model_named = true;
  });
  flags.text({"--config"}, o.config);
  flags.custom({"--mesh"}, [&](const std::string& flag, const std::string& v) {
    std::tie(o.mesh_batch, o.mesh_model) = parse_mesh_shape(flags, flag, v);
  });
  flags.integer({"--steps"}, o.steps, 1, 100000000);
  flags.integer({"--eval-interval"}, o.eval_interval, 1, 100000000);
  flags.integer({"--eval-iters"}, o.eval_iters, 1, 100000);
  flags.integer({"--seed"}, o.seed, 0, FlagParser::kNoLimit);
  flags.number({"--dropout"}, dropout);
  flags.number({"--lr"}, lr);
  flags.set({"--sp"}, o.sp);
  flags.custom({"--device"}, [&](const std::string& flag, const std::string& v) {
    if (v != "cpu" && v != "gpu") flags.fail(fmt::format("{} expects cpu or gpu, got '{}'", flag, v));
    o.device_type = v == "gpu" ? "GPU" : "CPU";
  });
  flags.text({"--data"}, o.data);
  flags.integer({"--sample"}, o.sample, 0, 1000000);
  flags.text({"--metrics"}, o.metrics);
  flags.set({"--json"}, o.json);
  flags.text({"--check-reference"}, o.check_reference);
  flags.text({"--checkpoint-dir"}, o.checkpoint_dir);
  flags.integer({"--checkpoint-every"}, o.checkpoint_every, 1, 100000000);
  flags.set({"--resume"}, o.resume);
  flags.set({"--async-checkpoint"}, o.async_checkpoint);
  flags.parse(args);
  if ((o.checkpoint_every > 0 || o.resume) && o.checkpoint_dir.empty()) {
    flags.fail("--checkpoint-every and --resume need --checkpoint-dir");
  }
  if (!model_named) flags.fail("the model to train: `tessel train gpt [options]`");
  if (dropout != -1) {
    if (!(dropout >= 0 && dropout < 1)) flags.fail(fmt::format("--dropout must be in [0, 1), got {}", dropout));
    o.dropout = dropout;
  }
  if (lr != -1) {
    if (!(lr > 0) || !std::isfinite(lr)) flags.fail(fmt::format("--lr must be a finite number > 0, got {}", lr));
    o.lr = lr;
  }
  return o;
}

gpt::GptConfig config_of(const Options& o) {
  gpt::GptConfig c = gpt::GptConfig::preset(o.config);
  if (o.steps > 0) {
    c.max_iters = static_cast<int>(o.steps);
    c.lr_decay_iters = c.max_iters;
    c.warmup_iters = std::min(c.warmup_iters, c.max_iters / 10);
  }
  if (o.eval_interval > 0) c.eval_interval = static_cast<int>(o.eval_interval);
  if (o.eval_iters > 0) c.eval_iters = static_cast<int>(o.eval_iters);
  if (o.seed >= 0) c.seed = static_cast<uint64_t>(o.seed);
  if (o.dropout) c.dropout = *o.dropout;
  if (o.lr) c.learning_rate = *o.lr;
  return c;
}

std::string progress_line(const gpt::StepReport& r, int64_t total, double tokens_per_step,
                          double elapsed) {
  const int width = 24;
  const int filled = static_cast<int>(width * (r.step + 1) / std::max<int64_t>(total, 1));
  const double eta = elapsed / static_cast<double>(r.step + 1) * static_cast<double>(total - r.step - 1);
  return fmt::format("[{}{}] step {:>5}/{} loss {:.4f} lr {:.2e} {:>7.0f} tok/s ETA {:>4.0f} s",
                     std::string(static_cast<size_t>(filled), '='),
                     std::string(static_cast<size_t>(width - filled), ' '), r.step + 1, total,
                     r.loss, r.learning_rate, tokens_per_step / r.seconds, eta);
}

int train_gpt(const Options& o) {
  const gpt::GptConfig config = config_of(o);  // a bad configuration fails before anything starts
  const ProcessMesh pm("train", o.mesh_batch, o.mesh_model, o.device_type);
  const ClientConfig& client = pm.client();
  Runtime& rt = pm.runtime();
  const Mesh& mesh = pm.mesh();
  if (!o.check_reference.empty()) {
    const gpt::ReferenceErrors e = gpt::check_reference(o.check_reference, mesh, DType::kF32, &rt);
    if (client.client_id == 0) {
      std::cout << fmt::format("reference check on mesh batch={} model={} ({} process{}): {} -> {}\n",
                               o.mesh_batch, o.mesh_model, client.num_clients,
                               client.num_clients > 1 ? "es" : "", e.to_string(),
                               e.passes() ? "PASS" : "FAIL");
    }
    return e.passes() ? kExitOk : kExitFailure;
  }
  gpt::GptTrainer trainer(config, mesh, gpt::CharDataset::load(o.data), &rt, o.sp);
  const gpt::GptConfig& c = trainer.config();
  const bool prints = client.client_id == 0;
  const bool progress = prints && !o.json;
  const bool tty = redraw_progress(client);
  if (progress) {
    std::cout << fmt::format(
        "tessel train gpt: {} ({} layers, {} heads, width {}, context {}, {:.2f} M parameters), "
        "batch {}, {} steps, mesh batch={} model={}{}{}{}\n",
        o.config, c.n_layer, c.n_head, c.n_embd, c.block_size, c.num_parameters() / 1e6,
        c.batch_size, c.max_iters, o.mesh_batch, o.mesh_model,
        o.device_type == "GPU" ? " of GPU devices" : "", o.sp ? ", sequence parallel" : "",
        client.num_clients > 1 ? fmt::format(" over {} processes", client.num_clients) : "");
  }
  std::vector<gpt::StepReport> reports;
  struct Eval {
    int64_t step;
    double train, val;
  };
  std::vector<Eval> evals;
  const double tokens_per_step = static_cast<double>(c.batch_size) * c.block_size;
  const auto evaluate = [&](int64_t step) {
    Eval e{step, trainer.estimate_loss(gpt::Split::kTrain), trainer.estimate_loss(gpt::Split::kVal)};
    evals.push_back(e);
    if (progress) {
      std::cout << (tty ? "\r\033[K" : "")
                << fmt::format("step {:>5}: train loss {:.4f}, val loss {:.4f}\n", step, e.train,
                               e.val)
                << std::flush;
    }
  };
  std::optional<checkpoint::CheckpointManager> checkpoints;
  if (!o.checkpoint_dir.empty()) {
    checkpoints.emplace(o.checkpoint_dir,
                        checkpoint::CheckpointManagerOptions{.max_to_keep = 3, .save = {}});
  }
  if (o.resume) {
    if (const std::optional<int64_t> latest = checkpoints->latest_step()) {
      trainer.restore(checkpoints->step_directory(*latest));
      if (progress) {
        std::cout << fmt::format("resumed from step {} ({})\n", *latest,
                                 checkpoints->step_directory(*latest));
      }
    }
  }
  const auto start = std::chrono::steady_clock::now();
  for (int64_t s = trainer.next_step(); s < c.max_iters; ++s) {
    if (s % c.eval_interval == 0 && s > 0) evaluate(s);
    reports.push_back(trainer.step());
    if (o.checkpoint_every > 0 && (s + 1) % o.checkpoint_every == 0) {
      checkpoints->save(s + 1, trainer.state(), o.async_checkpoint);
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (progress && (tty || (s + 1) % 50 == 0 || s + 1 == c.max_iters)) {
      std::cout << (tty ? "\r\033[K" : "") << progress_line(reports.back(), c.max_iters, tokens_per_step, elapsed)
                << (tty ? "" : "\n") << std::flush;
    }
  }
  if (checkpoints) checkpoints->close();  // the last asynchronous save committed (or thrown)
  const double train_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (progress && tty) std::cout << "\n";
  evaluate(c.max_iters);
  std::string sample;
  if (o.sample > 0) sample = trainer.generate("\n", static_cast<int>(o.sample), 1.0, 0, c.seed);
  if (!prints) return kExitOk;
  std::vector<double> step_seconds;
  for (const auto& r : reports) step_seconds.push_back(r.seconds);
  std::sort(step_seconds.begin(), step_seconds.end());
  const double median_step = step_seconds.empty() ? 0.0 : step_seconds[step_seconds.size() / 2];
  if (!o.metrics.empty()) {
    std::ofstream out(o.metrics);
    if (!out) bad(fmt::format("cannot write --metrics file '{}'", o.metrics));
    out << "kind,step,loss,lr,grad_norm,step_seconds,val_loss\n";
    for (const auto& r : reports) {
      out << fmt::format("train,{},{:.6f},{:.6g},{:.6f},{:.6f},\n", r.step, r.loss,
                         r.learning_rate, r.grad_norm, r.seconds);
    }
    for (const auto& e : evals) out << fmt::format("eval,{},{:.6f},,,,{:.6f}\n", e.step, e.train, e.val);
  }
  if (o.json) {
    Json losses = Json::array();
    for (const auto& r : reports) losses.push_back(json_number(r.loss));
    Json ev = Json::array();
    for (const auto& e : evals) {
      ev.push_back(Json{{"step", e.step},
                        {"train_loss", json_number(e.train)},
                        {"val_loss", json_number(e.val)}});
    }
    print_json(Json{{"config", o.config},
                    {"mesh", {o.mesh_batch, o.mesh_model}},
                    {"device", o.device_type},
                    {"processes", client.num_clients},
                    {"sequence_parallel", o.sp},
                    {"steps", c.max_iters},
                    {"final_train_loss", json_number(evals.back().train)},
                    {"final_val_loss", json_number(evals.back().val)},
                    {"train_seconds", json_number(train_seconds)},
                    {"median_step_seconds", json_number(median_step)},
                    {"tokens_per_second", json_number(tokens_per_step / median_step)},
                    {"losses", losses},
                    {"evals", ev}});
    return kExitOk;
  }
  std::cout << fmt::format("trained {} steps in {:.1f} s (median step {:.1f} ms, {:.0f} tokens/s); "
                           "final val loss {:.4f}\n",
                           c.max_iters, train_seconds, median_step * 1e3,
                           tokens_per_step / median_step, evals.back().val);
  if (!sample.empty()) std::cout << "\n--- sample ---\n" << sample << "\n--------------\n";
  return kExitOk;
}

}  // namespace

int run_train(const Args& args) { return run_command(args, kHelp, parse, train_gpt); }

}  // namespace tessel::cli
