// tessel train gpt|llama: trains the GPT of examples/gpt (nanoGPT's character model) or the
// Llama of examples/llama on tiny Shakespeare over a batch x model mesh, in one process or as one
// of several under mpirun. This file parses the flags and prints; train::TrainLoop
// (examples/train) runs the training.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "char_dataset.h"
#include "commands.h"
#include "flags.h"
#include "gpt_memory.h"
#include "gpt_model.h"
#include "gpt_pipeline_trainer.h"
#include "gpt_reference.h"
#include "gpt_trainer.h"
#include "json_output.h"
#include "llama_model.h"
#include "llama_reference.h"
#include "llama_trainer.h"
#include "memory_plan.h"
#include "pipeline_idle_json.h"
#include "process_mesh.h"
#include "tessel/comm/mpi.h"
#include "tessel/core/error.h"
#include "tessel/core/matmul_precision.h"
#include "tessel/dtensor/op_profile.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/runtime/clients.h"
#include "tessel/runtime/runtime.h"
#include "train_loop.h"

namespace tessel::cli {
namespace {

constexpr const char* kHelp =
    "usage: tessel train gpt|llama [options]\n"
    "\n"
    "Trains a character-level model on tiny Shakespeare over a batch x model mesh: gpt is\n"
    "nanoGPT's GPT (docs/gpt.md), llama a Llama-style model (RMSNorm, rotary embeddings, SwiGLU,\n"
    "grouped-query attention; docs/llama.md). Data parallel over batch, Megatron tensor parallel\n"
    "over model (heads, MLP columns and the vocabulary sharded), AdamW with warm-up and cosine\n"
    "decay, gradient clipping at norm 1.\n"
    "\n"
    "  --config NAME       gpt: tiny (4 layers, width 128, context 64, batch 12: nanoGPT's CPU\n"
    "                      recipe), baby (6 layers, width 384, context 256, batch 64), gpt2\n"
    "                      (12 layers, 12 heads, width 768, context 256, batch 8) or test;\n"
    "                      llama: tiny (4 layers, 4 heads / 2 kv heads, width 128, SwiGLU 384:\n"
    "                      the gpt tiny's parameter count and recipe) or test (default tiny)\n"
    "  --layers N          the number of transformer blocks (default: the config's)\n"
    "  --mesh BxM          batch x model mesh, also batch=B,model=M (default 2x2); gpt:\n"
    "                      stage=S,batch=B,model=M cuts the model into S pipeline stages\n"
    "                      (docs/pipeline.md), each on a batch x model sub-mesh\n"
    "  --schedule NAME     with stages: gpipe, 1f1b (default), interleaved or zero-bubble\n"
    "  --microbatches N    with stages: microbatches per step (default: the stages); the\n"
    "                      batch must split into them\n"
    "  --chunks V          with stages: model chunks per stage (interleaved: default 2)\n"
    "  --stage-threads     with stages: a controller thread per stage (the default when every\n"
    "                      stage is in this process; refused when the mesh spans processes;\n"
    "                      docs/pipeline.md, \"Stage threads\")\n"
    "  --one-controller    with stages: one controller thread issues the whole step's actions\n"
    "                      (the default when the stages are in different processes)\n"
    "  --print-schedule    with stages: print the schedule (each stage's actions, the bubble,\n"
    "                      a time chart) and the layers of each stage, then exit\n"
    "  --device cpu|gpu    the mesh's devices: virtual CPU devices (default) or GPU devices\n"
    "                      (one per GPU, or as TESSEL_GPU_DEVICES lists them: \"0,0,0,0\"\n"
    "                      puts a 2x2 mesh on GPU 0; TESSEL_SIMULATED_GPUS=N simulates N\n"
    "                      without a GPU)\n"
    "  --steps N           training steps (default: the config's, 2000 for tiny)\n"
    "  --eval-interval N   validation loss every N steps and at the end (default: the config's)\n"
    "  --eval-iters N      batches per validation estimate (default: the config's)\n"
    "  --sp                gpt: sequence parallelism, norms and dropout on sequence shards\n"
    "  --recompute WHAT    gpt: what the backward pass computes again instead of keeping: none\n"
    "                      (default), selective (attention's [B,H,T,T] maps) or full (each\n"
    "                      transformer block from its input); the same losses bit for bit\n"
    "  --attention HOW     gpt: fused (default: one causal_attention op, no [B,H,T,T] map kept)\n"
    "                      or composed (matmul, causal_softmax, dropout, matmul)\n"
    "  --fsdp              fully sharded parameters (ZeRO-3): parameters, gradients and AdamW's\n"
    "                      moments stored sharded over batch, each parameter all-gathered where\n"
    "                      it is used, its gradient reduce-scattered (docs/memory.md); no effect\n"
    "                      on a mesh whose batch dimension is 1\n"
    "  --dtype f32|bf16|f16  the dtype of the matmuls of activations by weights (default\n"
    "                      f32); bf16: mixed precision as torch's CPU autocast (bf16 operands,\n"
    "                      f32 sums; parameters, gradients, AdamW, norms, softmax and the loss\n"
    "                      in f32; docs/gpt.md); f16: the same with f16 products (MKL's hgemm)\n"
    "                      and dynamic loss scaling from 65536 (overflowing steps skipped)\n"
    "  --dropout X         gpt: dropout rate (default: the config's)\n"
    "  --lr X              peak learning rate (default: the config's)\n"
    "  --seed N            initialisation, data and dropout seed (default 1337)\n"
    "  --data FILE         training text (default data/shakespeare_char/input.txt)\n"
    "  --sample N          characters to generate at the end (default 300; 0: none)\n"
    "  --metrics FILE      write step,loss,lr,grad_norm,step_seconds and the evaluations as CSV\n"
    "  --profile           time every op kernel per phase (forward, backward, optimizer, eval)\n"
    "                      and every relayout collective under the phase that launched it (the\n"
    "                      final data-parallel reduction of the gradients: \"gradient\n"
    "                      reduction\"), and print the table at the end (ms per step, summed\n"
    "                      over devices)\n"
    "  --memory-plan       print each device's planned memory for a step (parameters, gradients,\n"
    "                      AdamW, the gathered layer under --fsdp, estimated activations) and the\n"
    "                      limit, then exit without training (docs/memory.md)\n"
    "  --json              print one JSON object at the end instead of the progress output\n"
    "                      (one line; a number that is NaN or infinite is written as null); with\n"
    "                      stages, \"pipeline\": each stage's measured idle over every step's\n"
    "                      schedule beside the formula's bubble (docs/pipeline.md)\n"
    "  --checkpoint-dir D  keep checkpoints in D (docs/checkpoints.md; step-NNNNNNNN/, last 3)\n"
    "  --checkpoint-every N  save a checkpoint after every N steps (needs --checkpoint-dir)\n"
    "  --async-checkpoint  write the checkpoints in the background (the step waits only for a\n"
    "                      copy of the state; the last one is waited for before the end)\n"
    "  --resume            continue from the newest checkpoint in --checkpoint-dir, on any mesh\n"
    "                      (bit for bit on the same mesh); none there: start afresh\n"
    "  --check-reference FILE  instead of training, check the `test` model on this mesh against\n"
    "                      the JAX reference dump FILE (examples/<model>/reference/): logits,\n"
    "                      gradients and 10 AdamW steps in f32; exit 1 when out of tolerance\n"
    "\n"
    "A non-finite loss or gradient norm stops training before the update, with an error naming\n"
    "the step and the values (exit status 1).\n"
    "\n"
    "Several processes: `mpirun -np P tessel train gpt|llama` makes each process a client holding\n"
    "B*M/P devices of the mesh (with stages, S*B*M/P, whole stages: -np 2 with stage=2 puts a\n"
    "stage in each process); only process 0 prints.\n";

// Options left unset keep the configuration's values.
struct Options {
  std::string model;  // gpt or llama
  std::string config = "tiny";
  int64_t mesh_batch = 2, mesh_model = 2;
  int64_t mesh_stage = 0;  // 0: no stage dimension (no pipeline)
  std::string schedule = "1f1b";
  int64_t microbatches = 0, chunks = 0;  // 0: the stages / 1 (interleaved: 2)
  bool print_schedule = false;
  bool stage_threads = false, one_controller = false;  // explicit: PipelineOptions::controllers
  std::string device_type = "CPU";                     // --device: the mesh's devices
  int64_t steps = 0, eval_interval = 0, eval_iters = 0, seed = -1;  // 0 / -1: the config's
  int64_t layers = 0;                                               // 0: the config's
  std::optional<double> dropout, lr;
  std::string recompute = "none";
  std::string attention = "fused";
  std::string dtype = "f32";  // --dtype: gpt's matmul dtype
  bool sp = false, fsdp = false, json = false, profile = false, memory_plan = false;
  std::string data = "data/shakespeare_char/input.txt";
  int64_t sample = 300;
  std::string metrics;
  std::string check_reference;  // a reference dump: check against it instead of training
  // The checkpoint flags; train_gpt sets the rest from the configuration and the process.
  train::TrainOptions loop;
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
    if (model_named || (a != "gpt" && a != "llama")) {
      flags.fail(fmt::format("the model to train is 'gpt' or 'llama', got '{}'", a));
    }
    o.model = a;
    model_named = true;
  });
  flags.text({"--config"}, o.config);
  flags.custom({"--mesh"}, [&](const std::string& flag, const std::string& v) {
    std::tie(o.mesh_batch, o.mesh_model) = parse_mesh_shape(flags, flag, v, &o.mesh_stage);
  });
  flags.custom({"--schedule"}, [&](const std::string& flag, const std::string& v) {
    try {
      train::parse_schedule_kind(v);
    } catch (const Error& e) {
      flags.fail(fmt::format("{}: {}", flag, e.what()));
    }
    o.schedule = v;
  });
  flags.integer({"--microbatches"}, o.microbatches, 1, 100000);
  flags.integer({"--chunks"}, o.chunks, 1, 1000);
  flags.set({"--print-schedule"}, o.print_schedule);
  flags.set({"--stage-threads"}, o.stage_threads);
  flags.set({"--one-controller"}, o.one_controller);
  flags.integer({"--steps"}, o.steps, 1, 100000000);
  flags.integer({"--layers"}, o.layers, 1, 100000);
  flags.integer({"--eval-interval"}, o.eval_interval, 1, 100000000);
  flags.integer({"--eval-iters"}, o.eval_iters, 1, 100000);
  flags.integer({"--seed"}, o.seed, 0, FlagParser::kNoLimit);
  flags.number({"--dropout"}, dropout);
  flags.number({"--lr"}, lr);
  flags.set({"--sp"}, o.sp);
  flags.set({"--fsdp"}, o.fsdp);
  flags.custom({"--recompute"}, [&](const std::string& flag, const std::string& v) {
    if (v != "none" && v != "selective" && v != "full") {
      flags.fail(fmt::format("{} expects none, selective or full, got '{}'", flag, v));
    }
    o.recompute = v;
  });
  flags.custom({"--attention"}, [&](const std::string& flag, const std::string& v) {
    if (v != "fused" && v != "composed") {
      flags.fail(fmt::format("{} expects fused or composed, got '{}'", flag, v));
    }
    o.attention = v;
  });
  flags.custom({"--dtype"}, [&](const std::string& flag, const std::string& v) {
    if (v != "f32" && v != "bf16" && v != "f16")
      flags.fail(fmt::format("{} expects f32, bf16 or f16, got '{}'", flag, v));
    o.dtype = v;
  });
  flags.custom({"--device"}, [&](const std::string& flag, const std::string& v) {
    if (v != "cpu" && v != "gpu")
      flags.fail(fmt::format("{} expects cpu or gpu, got '{}'", flag, v));
    o.device_type = v == "gpu" ? "GPU" : "CPU";
  });
  flags.text({"--data"}, o.data);
  flags.integer({"--sample"}, o.sample, 0, 1000000);
  flags.text({"--metrics"}, o.metrics);
  flags.set({"--json"}, o.json);
  flags.set({"--profile"}, o.profile);
  flags.set({"--memory-plan"}, o.memory_plan);
  flags.text({"--check-reference"}, o.check_reference);
  flags.text({"--checkpoint-dir"}, o.loop.checkpoint_dir);
  flags.integer({"--checkpoint-every"}, o.loop.checkpoint_every, 1, 100000000);
  flags.set({"--resume"}, o.loop.resume);
  flags.set({"--async-checkpoint"}, o.loop.async_checkpoint);
  flags.parse(args);
  if ((o.loop.checkpoint_every > 0 || o.loop.resume) && o.loop.checkpoint_dir.empty()) {
    flags.fail("--checkpoint-every and --resume need --checkpoint-dir");
  }
  if (!model_named) flags.fail("the model to train: `tessel train gpt|llama [options]`");
  if (o.memory_plan && o.mesh_stage > 0) {
    flags.fail(
        "--memory-plan plans meshes without a stage dimension (which stage holds a layer "
        "is not planned yet)");
  }
  if (o.model == "llama" && o.sp) {
    flags.fail("--sp is gpt's: the llama has no sequence parallel path");
  }
  if (o.model == "llama" && o.recompute != "none") {
    flags.fail("--recompute is gpt's: the llama has no recomputation path");
  }
  if (o.model == "llama" && o.attention != "fused") {
    flags.fail("--attention is gpt's: the llama runs causal_attention wherever it has a kernel");
  }
  if (o.model == "llama" && dropout != -1) {
    flags.fail("--dropout is gpt's: the llama has no dropout");
  }
  const bool pipeline_flags = o.microbatches > 0 || o.chunks > 0 || o.print_schedule ||
                              o.schedule != "1f1b" || o.stage_threads || o.one_controller;
  if (o.mesh_stage == 0 && pipeline_flags) {
    flags.fail(
        "--schedule, --microbatches, --chunks, --print-schedule, --stage-threads and "
        "--one-controller need a stage dimension in --mesh (e.g. stage=2,batch=1,model=2)");
  }
  if (o.stage_threads && o.one_controller) {
    flags.fail("--stage-threads and --one-controller exclude each other");
  }
  if (o.mesh_stage > 0) {
    if (o.model != "gpt") flags.fail("pipeline stages (--mesh stage=...) are gpt's");
    if (!o.check_reference.empty()) {
      flags.fail("--check-reference checks the plain model: not with pipeline stages");
    }
  }
  if (dropout != -1) {
    if (!(dropout >= 0 && dropout < 1))
      flags.fail(fmt::format("--dropout must be in [0, 1), got {}", dropout));
    o.dropout = dropout;
  }
  if (lr != -1) {
    if (!(lr > 0) || !std::isfinite(lr))
      flags.fail(fmt::format("--lr must be a finite number > 0, got {}", lr));
    o.lr = lr;
  }
  return o;
}

// The flags that set the training hyper-parameters, on a model's configuration.
void apply_training_flags(const Options& o, train::TrainingConfig& c) {
  if (o.steps > 0) {
    c.max_iters = static_cast<int>(o.steps);
    c.lr_decay_iters = c.max_iters;
    c.warmup_iters = std::min(c.warmup_iters, c.max_iters / 10);
  }
  if (o.eval_interval > 0) c.eval_interval = static_cast<int>(o.eval_interval);
  if (o.eval_iters > 0) c.eval_iters = static_cast<int>(o.eval_iters);
  if (o.seed >= 0) c.seed = static_cast<uint64_t>(o.seed);
  if (o.lr) c.learning_rate = *o.lr;
  c.fsdp = o.fsdp;
}

// The attention that runs: --attention, or the composed ops on GPU devices while the fused op
// has no GPU kernel (gpt::attention_on).
std::string attention_run(const Options& o) {
  return std::string(
      gpt::attention_name(gpt::attention_on(gpt::parse_attention(o.attention), o.device_type)));
}

gpt::GptConfig gpt_config_of(const Options& o) {
  gpt::GptConfig c = gpt::GptConfig::preset(o.config);
  apply_training_flags(o, c);
  if (o.layers > 0) c.n_layer = static_cast<int>(o.layers);
  if (o.dropout) c.dropout = *o.dropout;
  c.recompute = gpt::parse_recompute(o.recompute);
  c.attention = gpt::attention_on(gpt::parse_attention(o.attention), o.device_type);
  gpt::set_matmul_dtype(c, o.dtype);
  return c;
}

llama::LlamaConfig llama_config_of(const Options& o) {
  llama::LlamaConfig c = llama::LlamaConfig::preset(o.config);
  apply_training_flags(o, c);
  if (o.layers > 0) c.n_layer = static_cast<int>(o.layers);
  gpt::set_matmul_dtype(c, o.dtype);
  return c;
}

// The model's shape for the first progress line, e.g. "4 layers, 4 heads, width 128, context 64".
std::string shape_of(const gpt::GptConfig& c) {
  return fmt::format("{} layers, {} heads, width {}, context {}, {:.2f} M parameters", c.n_layer,
                     c.n_head, c.n_embd, c.block_size, c.num_parameters() / 1e6);
}

std::string shape_of(const llama::LlamaConfig& c) {
  return fmt::format(
      "{} layers, {} heads / {} kv heads, width {}, SwiGLU {}, context {}, {} embeddings, "
      "{:.2f} M parameters",
      c.n_layer, c.n_head, c.n_kv_head, c.n_embd, c.ffn_hidden, c.block_size,
      c.tie_embeddings ? "tied" : "untied", c.num_parameters() / 1e6);
}

// The pipelined trainer's schedule and layer split (--print-schedule).
std::string pipeline_text(const gpt::GptPipeline& pipeline) {
  std::string out = pipeline.schedule().to_string();
  for (int k = 0; k < pipeline.schedule().virtual_stages(); ++k) {
    const auto [first, last] = pipeline.layers(k);
    out += fmt::format(
        "virtual stage {} (stage {}, chunk {}): layers {}..{}{}{}\n", k, k % pipeline.stages(),
        k / pipeline.stages(), first, last - 1, k == 0 ? ", embeddings" : "",
        k == pipeline.schedule().virtual_stages() - 1 ? ", final norm and head" : "");
  }
  return out;
}

// ", 1f1b schedule, 8 microbatches, stage threads" for a pipelined trainer (or "one
// controller": who issues the step's actions), else "".
std::string pipeline_summary(const gpt::LanguageModelTrainer& trainer) {
  const auto* piped = dynamic_cast<const gpt::GptPipelineTrainer*>(&trainer);
  if (piped == nullptr) return "";
  const train::PipelineSchedule& s = piped->pipeline().schedule();
  return fmt::format(", {} schedule, {} microbatches{}, {}", train::schedule_kind_name(s.kind),
                     s.microbatches, s.chunks > 1 ? fmt::format(", {} chunks", s.chunks) : "",
                     piped->pipeline().stage_threads() ? "stage threads" : "one controller");
}

// Each local device's peak memory over the run, split (gpt_memory.h), with Korthikanti's count.
Json memory_json(const gpt::LanguageModelTrainer& trainer, std::optional<double> korthikanti) {
  Json devices = Json::array();
  for (const gpt::DeviceMemory& d : gpt::memory_report(trainer)) {
    devices.push_back(Json{{"device", d.device},
                           {"peak_bytes", d.peak_bytes},
                           {"parameter_bytes", d.parameter_bytes},
                           {"gradient_bytes", d.gradient_bytes},
                           {"optimizer_bytes", d.optimizer_bytes},
                           {"activation_bytes", d.activation_bytes},
                           {"saved_activation_bytes", d.saved_bytes}});
  }
  Json out{{"devices", devices}};
  if (korthikanti) out["korthikanti_bytes_per_device"] = json_number(*korthikanti, 15);
  return out;
}

// The busiest local device's peak, split, in a line.
std::string memory_line(const gpt::LanguageModelTrainer& trainer,
                        std::optional<double> korthikanti) {
  gpt::DeviceMemory m;
  for (const gpt::DeviceMemory& d : gpt::memory_report(trainer)) {
    if (d.peak_bytes >= m.peak_bytes) m = d;
  }
  const auto mib = [](double bytes) { return bytes / (1 << 20); };
  return fmt::format(
      "memory: peak {:.1f} MiB on {}: parameters {:.1f}, gradients {:.1f}, AdamW {:.1f}, "
      "activations {:.1f} (tapes kept {:.1f} at most{})",
      mib(m.peak_bytes), m.device, mib(m.parameter_bytes), mib(m.gradient_bytes),
      mib(m.optimizer_bytes), mib(m.activation_bytes), mib(m.saved_bytes),
      korthikanti ? fmt::format("; Korthikanti's fp32 count {:.1f}", mib(*korthikanti)) : "");
}

// The --json object: the run's settings, then what the training loop did.
Json run_json(const Options& o, const ClientConfig& client, const train::TrainHistory& history,
              const Json& memory) {
  Json losses = Json::array();
  int64_t skipped = 0;  // dynamic loss scaling's skipped updates (f16)
  for (const train::StepReport& r : history.steps) {
    losses.push_back(json_number(r.loss));
    skipped += r.skipped ? 1 : 0;
  }
  Json evals = Json::array();
  for (const train::Evaluation& e : history.evaluations) {
    evals.push_back(Json{{"step", e.step},
                         {"train_loss", json_number(e.train_loss)},
                         {"val_loss", json_number(e.val_loss)}});
  }
  const train::Evaluation& last = history.evaluations.back();
  return Json{{"config", o.config},
              {"mesh", o.mesh_stage > 0 ? Json{o.mesh_stage, o.mesh_batch, o.mesh_model}
                                        : Json{o.mesh_batch, o.mesh_model}},
              {"device", o.device_type},
              {"processes", client.num_clients},
              {"model", o.model},
              {"sequence_parallel", o.sp},
              {"recompute", o.recompute},
              {"attention", attention_run(o)},
              {"fsdp", o.fsdp},
              {"dtype", o.dtype},
              {"matmul_precision", matmul_precision_name(matmul_precision())},
              {"steps", history.total_steps},
              {"final_train_loss", json_number(last.train_loss)},
              {"final_val_loss", json_number(last.val_loss)},
              {"train_seconds", json_number(history.train_seconds)},
              {"median_step_seconds", json_number(history.median_step_seconds())},
              {"tokens_per_second", json_number(history.tokens_per_second())},
              {"losses", losses},
              {"skipped_steps", skipped},
              {"final_loss_scale",
               json_number(history.steps.empty() ? 0.0 : history.steps.back().loss_scale)},
              {"evals", evals},
              {"memory", memory}};
}

// --memory-plan: the planned memory of a step per device (memory_plan.h), from the model's
// layouts; nothing is allocated and nothing trains. Exit 1 when the state cannot fit.
int print_memory_plan(const Options& o, const std::optional<gpt::GptConfig>& gpt_config,
                      const std::optional<llama::LlamaConfig>& llama_config,
                      const gpt::CharDataset& data, const Mesh& mesh, Runtime& rt,
                      const ClientConfig& client) {
  std::unique_ptr<gpt::LanguageModel> model;
  int64_t activations = 0;       // the llama's are not estimated
  bool keeps_gathered = o.fsdp;  // the llama has no recomputation
  if (gpt_config) {
    gpt::GptConfig c = *gpt_config;
    c.vocab_size = data.vocab_size();
    activations = gpt::planned_activation_bytes(c, o.mesh_batch, o.mesh_model);
    keeps_gathered = o.fsdp && c.recompute != gpt::Recompute::kFull;
    model = std::make_unique<gpt::GptModel>(c, mesh, &rt, o.sp);
  } else {
    llama::LlamaConfig c = *llama_config;
    c.vocab_size = data.vocab_size();
    model = std::make_unique<llama::LlamaModel>(c, mesh, &rt);
  }
  const std::vector<gpt::DeviceMemoryPlan> plan =
      gpt::plan_memory(*model, activations, keeps_gathered);
  if (client.client_id == 0) {
    std::cout << gpt::format_memory_plan(plan)
              << (gpt_config ? "activations: Korthikanti's fp32 count for --recompute " +
                                   o.recompute + ", plus the logits (an estimate)\n"
                             : "activations: not estimated for the llama\n");
  }
  gpt::check_memory_plan(plan, o.model);
  return kExitOk;
}

int train_model(const Options& o) {
  // A bad configuration fails before anything starts (TESSEL_MATMUL_PRECISION included: the
  // JSON reads it only at the end).
  matmul_precision();
  std::optional<gpt::GptConfig> gpt_config;
  std::optional<llama::LlamaConfig> llama_config;
  if (o.model == "gpt") {
    gpt_config = gpt_config_of(o);
  } else {
    llama_config = llama_config_of(o);
  }
  const ProcessMesh pm("train", o.mesh_batch, o.mesh_model, o.device_type, o.mesh_stage);
  const ClientConfig& client = pm.client();
  Runtime& rt = pm.runtime();
  const Mesh& mesh = pm.mesh();
  if (!o.check_reference.empty()) {
    const gpt::ReferenceErrors e =
        gpt_config ? gpt::check_reference(o.check_reference, mesh, DType::kF32, &rt)
                   : llama::check_reference(o.check_reference, mesh, DType::kF32, &rt);
    if (client.client_id == 0) {
      std::cout << fmt::format(
          "{} reference check on mesh batch={} model={} ({} process{}): {} -> {}\n", o.model,
          o.mesh_batch, o.mesh_model, client.num_clients, client.num_clients > 1 ? "es" : "",
          e.to_string(), e.passes() ? "PASS" : "FAIL");
    }
    return e.passes() ? kExitOk : kExitFailure;
  }
  gpt::CharDataset data = gpt::CharDataset::load(o.data);
  if (o.memory_plan) return print_memory_plan(o, gpt_config, llama_config, data, mesh, rt, client);
  std::unique_ptr<gpt::LanguageModelTrainer> trainer;
  std::string shape;
  if (o.mesh_stage > 0) {
    const train::ScheduleKind kind = train::parse_schedule_kind(o.schedule);
    const gpt::PipelineOptions pipeline{
        .schedule = kind,
        .microbatches = static_cast<int>(o.microbatches > 0 ? o.microbatches : o.mesh_stage),
        .chunks = static_cast<int>(o.chunks > 0                                    ? o.chunks
                                   : kind == train::ScheduleKind::kInterleaved1F1B ? 2
                                                                                   : 1),
        .measure_idle = o.json,  // --json reports each stage's measured idle
        .controllers = o.stage_threads    ? gpt::Controllers::kStageThreads
                       : o.one_controller ? gpt::Controllers::kOneController
                                          : gpt::Controllers::kAuto};
    auto t = std::make_unique<gpt::GptPipelineTrainer>(*gpt_config, mesh, pipeline, std::move(data),
                                                       &rt, o.sp);
    shape = shape_of(t->config());
    if (o.print_schedule) {
      if (client.client_id == 0) std::cout << pipeline_text(t->pipeline());
      return kExitOk;
    }
    trainer = std::move(t);
  } else if (gpt_config) {
    auto t = std::make_unique<gpt::GptTrainer>(*gpt_config, mesh, std::move(data), &rt, o.sp);
    shape = shape_of(t->config());
    trainer = std::move(t);
  } else {
    auto t = std::make_unique<llama::LlamaTrainer>(*llama_config, mesh, std::move(data), &rt);
    shape = shape_of(t->config());
    trainer = std::move(t);
  }
  const train::TrainingConfig& c = trainer->training();
  // Korthikanti et al.'s activation count to compare the peak with (the GPT's; gpt_memory.h).
  std::optional<double> korthikanti;
  if (gpt_config && o.mesh_stage == 0) {
    korthikanti = gpt::korthikanti_activation_bytes(*gpt_config, o.mesh_batch, o.mesh_model, o.sp);
  }
  const int block_size = trainer->language_model().block_size();
  const bool prints = client.client_id == 0;
  const bool progress = prints && !o.json;
  if (progress) {
    std::cout << fmt::format(
        "tessel train {}: {} ({}), batch {}, {} steps, mesh {}batch={} model={}{}{}{}{}{}{}{}{}\n",
        o.model, o.config, shape, c.batch_size, c.max_iters,
        o.mesh_stage > 0 ? fmt::format("stage={} ", o.mesh_stage) : "", o.mesh_batch, o.mesh_model,
        pipeline_summary(*trainer), o.device_type == "GPU" ? " of GPU devices" : "",
        o.sp ? ", sequence parallel" : "",
        o.recompute != "none" ? ", recompute " + o.recompute : "",
        attention_run(o) != "fused" ? ", attention " + attention_run(o) : "",
        trainer->language_model().fsdp() ? ", parameters sharded over batch (fsdp)" : "",
        o.fsdp && !trainer->language_model().fsdp() ? ", --fsdp without effect (batch 1)" : "",
        o.dtype != "f32" ? ", matmuls in " + o.dtype : "",
        client.num_clients > 1 ? fmt::format(" over {} processes", client.num_clients) : "");
  }
  train::TrainOptions loop = o.loop;
  loop.steps = c.max_iters;
  loop.eval_interval = c.eval_interval;
  loop.tokens_per_step = static_cast<double>(c.batch_size) * block_size;
  loop.progress = progress ? &std::cout : nullptr;
  loop.redraw = redraw_progress(client);
  if (o.profile) start_op_profile();
  const train::TrainHistory history = train::TrainLoop(loop).run(*trainer);
  const OpProfile profile = stop_op_profile();
  std::string sample;
  if (o.sample > 0) sample = trainer->generate("\n", static_cast<int>(o.sample), 1.0, 0, c.seed);
  // Every stage's measured idle, from the process that holds it (a collective under mpirun).
  std::optional<train::PipelineIdle> idle;
  const auto* piped = dynamic_cast<const gpt::GptPipelineTrainer*>(trainer.get());
  if (o.json && piped != nullptr) idle = piped->pipeline().idle_everywhere(piped->idle_total());
  if (!prints) return kExitOk;
  if (!o.metrics.empty()) {
    std::ofstream out(o.metrics);
    if (!out) bad(fmt::format("cannot write --metrics file '{}'", o.metrics));
    train::write_metrics_csv(out, history);
  }
  if (o.json) {
    Json out = run_json(o, client, history, memory_json(*trainer, korthikanti));
    if (idle) {
      out["pipeline"] = pipeline_idle_json(piped->pipeline().schedule(), *idle);
      out["pipeline"]["stage_threads"] = piped->pipeline().stage_threads();  // the controllers
    }
    print_json(out);
    return kExitOk;
  }
  std::cout << history.summary() << "\n" << memory_line(*trainer, korthikanti) << "\n";
  if (o.profile) {
    std::cout << "\n--- profile (every step, evaluations included) ---\n"
              << profile.table(history.total_steps);
  }
  if (!sample.empty()) std::cout << "\n--- sample ---\n" << sample << "\n--------------\n";
  return kExitOk;
}

}  // namespace

int run_train(const Args& args) { return run_command(args, kHelp, parse, train_model); }

}  // namespace tessel::cli
