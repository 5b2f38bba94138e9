// tessel demo: trains a small MLP with a batch x model mesh of virtual CPU devices (Megatron
// column-parallel then row-parallel layers behind a data-parallel input projection) and checks
// every step's loss against the same model on one device.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.h"
#include "flags.h"
#include "json_output.h"
#include "process_mesh.h"
#include "tessel/comm/mpi.h"
#include "tessel/core/error.h"
#include "tessel/core/median.h"
#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/optimizers.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/runtime/clients.h"
#include "tessel/runtime/runtime.h"

namespace tessel::cli {
namespace {

constexpr const char* kHelp =
    "usage: tessel demo [options]\n"
    "\n"
    "Trains a small MLP on a synthetic classification task over a batch x model mesh of\n"
    "virtual CPU devices: an input projection (replicated weights: data parallel), a column-\n"
    "parallel layer and a row-parallel layer (Megatron: no communication between them), Adam.\n"
    "Every step's loss is checked against the same model on one device: a relative difference\n"
    "above 1e-4 (or NaN) fails the run (exit status 1). A non-finite loss stops training at\n"
    "once with an error naming the step and the value (exit status 1).\n"
    "\n"
    "  --mesh BxM          batch x model mesh (default 2x2)\n"
    "  --batch N           examples per step (default 512)\n"
    "  --features N        input features (default 256)\n"
    "  --width N           projection width (default 512)\n"
    "  --hidden N          hidden units of the parallel layers (default 2048)\n"
    "  --classes N         classes (default 16)\n"
    "  --steps N           training steps (default 100)\n"
    "  --lr X              Adam learning rate (default 0.002)\n"
    "  --no-check          skip the single-device run\n"
    "  --losses FILE       write every step's loss to FILE, one per line (%.9g)\n"
    "  --json              print {\"mesh\", \"steps\", \"final_loss\", \"final_accuracy\",\n"
    "                      \"max_rel_loss_diff\", \"step_us\", \"single_device_step_us\",\n"
    "                      \"collectives_per_step\", \"bytes_per_step\"} instead of the summary\n"
    "                      (one line; a number that is NaN or infinite is written as null)\n"
    "  --layouts           the older walkthrough of layouts on a 2x2 mesh instead\n"
    "\n"
    "Several processes: `mpirun -np P tessel demo` makes each process a client holding B*M/P\n"
    "devices of the mesh (batch across processes, model within); only process 0 prints, the\n"
    "single-device check runs on every process's first device.\n";

struct Options {
  int64_t mesh_batch = 2, mesh_model = 2;
  int64_t batch = 512, features = 256, width = 512, hidden = 2048, classes = 16, steps = 100;
  double lr = 0.002;
  bool check = true, json = false;
  std::string losses_path;
};

Options parse(const Args& args) {
  Options o;
  FlagParser flags("demo");
  flags.custom({"--mesh"}, [&](const std::string& flag, const std::string& v) {
    std::tie(o.mesh_batch, o.mesh_model) = parse_mesh_shape(flags, flag, v);
  });
  flags.positive({"--batch"}, o.batch);
  flags.positive({"--features"}, o.features);
  flags.positive({"--width"}, o.width);
  flags.positive({"--hidden"}, o.hidden);
  flags.positive({"--classes"}, o.classes);
  flags.positive({"--steps"}, o.steps);
  flags.number({"--lr"}, o.lr);
  flags.set({"--no-check"}, o.check, false);
  flags.text({"--losses"}, o.losses_path);
  flags.set({"--json"}, o.json);
  flags.parse(args);
  return o;
}

// The synthetic task: labels are the argmax of a fixed random linear teacher.
struct Batch {
  Tensor x;       // [batch, features] f32
  Tensor labels;  // [batch] i32
};

Batch make_batch(const Options& o, const Tensor& teacher, uint64_t seed) {
  Batch b{Tensor::random_normal(Shape{o.batch, o.features}, DType::kF32, seed),
          Tensor::zeros(Shape{o.batch}, DType::kI32)};
  const float* x = b.x.data<float>();
  const float* w = teacher.data<float>();
  for (int64_t i = 0; i < o.batch; ++i) {
    int best = 0;
    double best_score = -1e300;
    for (int64_t c = 0; c < o.classes; ++c) {
      double score = 0;
      for (int64_t f = 0; f < o.features; ++f) score += x[i * o.features + f] * w[f * o.classes + c];
      if (score > best_score) {
        best_score = score;
        best = static_cast<int>(c);
      }
    }
    b.labels.data<int32_t>()[i] = best;
  }
  return b;
}

// One model on one mesh: parameters, layouts and the optimizer.
class Model {
 public:
  Model(const Options& o, const Mesh& mesh, Runtime& rt) : o_(o), mesh_(mesh), rt_(rt), adam_(o.lr) {
    const auto init = [&](const Shape& shape, const Layout& layout, uint64_t seed) {
      return random_normal(shape, layout, seed, 0.0, 1.0 / std::sqrt(static_cast<double>(shape[0])),
                           DType::kF32, &rt_);
    };
    params_ = {init(Shape{o.features, o.width}, layout({"unsharded", "unsharded"}), 1),
               init(Shape{o.width, o.hidden}, layout({"unsharded", "model"}), 2),
               init(Shape{o.hidden, o.classes}, layout({"model", "unsharded"}), 3)};
  }

  Layout layout(const std::vector<std::string>& specs) const { return Layout(specs, mesh_); }
  const std::vector<DTensor>& params() const { return params_; }

  DTensor logits(const std::vector<DTensor>& p, const DTensor& x) const {
    const DTensor projected = matmul(x, p[0]);           // (batch, -): data parallel
    const DTensor hidden = gelu(matmul(projected, p[1]));  // (batch, model): column parallel
    return matmul(hidden, p[2]);                           // Partial(sum over model): row parallel
  }

  // One training step; returns the loss.
  double step(const Batch& batch) {
    const DTensor x = copy_to_mesh(batch.x, layout({"batch", "unsharded"}), rt_);
    const DTensor y = copy_to_mesh(batch.labels, layout({"batch"}), rt_);
    auto [loss, grads] = value_and_grad(
        [&](const std::vector<DTensor>& p) {
          return reduce_mean(sparse_softmax_cross_entropy_with_logits(y, logits(p, x)));
        },
        params_);
    adam_.apply(params_, grads);
    return full_tensor(loss).astype(DType::kF64).data<double>()[0];
  }

  double accuracy(const Batch& batch) const {
    // full_tensor: on several processes each holds only its rows.
    const Tensor out = full_tensor(logits(params_, copy_to_mesh(batch.x, layout({"batch", "unsharded"}), rt_)));
    int64_t right = 0;
    for (int64_t i = 0; i < o_.batch; ++i) {
      const float* row = out.data<float>() + i * o_.classes;
      const int64_t guess = std::max_element(row, row + o_.classes) - row;
      right += guess == batch.labels.data<int32_t>()[i] ? 1 : 0;
    }
    return static_cast<double>(right) / static_cast<double>(o_.batch);
  }

 private:
  Options o_;
  Mesh mesh_;
  Runtime& rt_;
  Adam adam_;
  std::vector<DTensor> params_;
};

void write_losses(const std::string& path, const std::vector<double>& losses) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    throw Error(ErrorCode::kInvalidArgument, "demo", fmt::format("cannot write --losses file '{}'", path));
  }
  for (double l : losses) std::fprintf(f, "%.9g\n", l);
  std::fclose(f);
}

std::string bar(int64_t done, int64_t total) {
  const int width = 30;
  const int filled = static_cast<int>(width * done / std::max<int64_t>(total, 1));
  return std::string(static_cast<size_t>(filled), '=') + std::string(static_cast<size_t>(width - filled), ' ');
}

// The largest relative loss difference from one device the demo accepts.
constexpr double kParityTolerance = 1e-4;

// Stops training at the first non-finite loss, naming the step and the value (as torchtitan
// and Keras' TerminateOnNaN do): continuing would only print NaN.
void check_finite_loss(double loss, int64_t step, const char* model, double lr) {
  if (!std::isfinite(loss)) {
    throw Error(ErrorCode::kFailedPrecondition, "demo",
                fmt::format("step {}: the {} loss is {} (Adam lr {}); training stopped", step + 1,
                            model, loss, lr));
  }
}

// |loss - ref| relative to |ref|; NaN when either is NaN.
double relative_difference(double loss, double ref) {
  return std::abs(loss - ref) / std::max(std::abs(ref), 1e-12);
}

int train(const Options& o) {
  const ProcessMesh pm("demo", o.mesh_batch, o.mesh_model);
  Runtime& rt = pm.runtime();
  const Mesh& mesh = pm.mesh();
  const Mesh one = Mesh::create_on_devices({{"batch", 1}, {"model", 1}}, {rt.device(0).name()});
  Model model(o, mesh, rt);
  std::optional<Model> single;
  if (o.check) single.emplace(o, one, rt);
  const Tensor teacher = Tensor::random_normal(Shape{o.features, o.classes}, DType::kF32, 99);

  const bool quiet = o.json || !pm.prints();
  if (!quiet) {
    std::cout << "tessel demo: MLP " << o.features << " -> " << o.width << " -> " << o.hidden
              << " -> " << o.classes << ", batch " << o.batch << ", Adam lr " << o.lr << "\n"
              << "mesh " << mesh.to_string();
    if (pm.client().num_clients > 1) {
      std::cout << fmt::format(" over {} processes ({} devices each)", pm.client().num_clients,
                               pm.local_devices());
    }
    std::cout << "\n\n";
    const char* names[] = {"input projection (data parallel)", "layer 1 (column parallel)",
                           "layer 2 (row parallel)"};
    for (size_t i = 0; i < model.params().size(); ++i) {
      const DTensor& p = model.params()[i];
      std::cout << names[i] << ": " << p.shape().to_string() << " "
                << fmt::format("{}", fmt::join(p.layout().sharding_spec_strings(), ",")) << "\n"
                << visualize(p) << "\n";
    }
  }
  const bool tty = redraw_progress(pm.client());
  std::vector<double> step_us, single_us, losses;
  double max_rel = 0, loss = 0;
  int64_t collectives = 0, bytes = 0;
  for (int64_t s = 0; s < o.steps; ++s) {
    const Batch batch = make_batch(o, teacher, 1000 + static_cast<uint64_t>(s));
    const RelayoutStats before = relayout_stats();
    auto t0 = std::chrono::steady_clock::now();
    loss = model.step(batch);
    auto t1 = std::chrono::steady_clock::now();
    check_finite_loss(loss, s, "mesh", o.lr);
    losses.push_back(loss);
    const RelayoutStats after = relayout_stats();
    if (s == o.steps - 1 || s == 3) {
      collectives = after.collectives - before.collectives;
      bytes = after.bytes - before.bytes;
    }
    if (s >= 3 || o.steps <= 3) step_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    if (single) {
      auto t2 = std::chrono::steady_clock::now();
      const double ref = single->step(batch);
      auto t3 = std::chrono::steady_clock::now();
      check_finite_loss(ref, s, "single-device", o.lr);
      if (s >= 3 || o.steps <= 3) single_us.push_back(std::chrono::duration<double, std::micro>(t3 - t2).count());
      const double rel = relative_difference(loss, ref);
      if (std::isnan(rel) || rel > max_rel) max_rel = rel;  // a NaN sticks (std::max drops it)
    }
    // On a terminal the bar is redrawn every step; in a log, a line every 10 steps.
    const bool keep = s % 10 == 9 || s == o.steps - 1 || s == 0;
    if (!quiet && (tty || keep)) {
      std::cout << fmt::format("{}step {:4}/{} [{}] loss {:.5f}", tty ? "\r" : "", s + 1, o.steps,
                               bar(s + 1, o.steps), loss);
      if (single) std::cout << fmt::format("  (one device: rel. diff so far {:.1e})", max_rel);
      std::cout << (keep ? "\n" : "") << std::flush;
    }
  }
  const double accuracy = model.accuracy(make_batch(o, teacher, 7));
  const double mesh_us = median(step_us);
  const double one_us = single ? median(single_us) : 0.0;  // no single-device run: not shown
  if (!pm.prints()) return kExitOk;
  if (!o.losses_path.empty()) write_losses(o.losses_path, losses);
  const bool parity = !single || max_rel <= kParityTolerance;  // false for NaN
  if (o.json) {
    print_json(Json{{"mesh", fmt::format("{}x{}", o.mesh_batch, o.mesh_model)},
                    {"processes", pm.client().num_clients},
                    {"steps", o.steps},
                    {"final_loss", json_number(loss)},
                    {"final_accuracy", json_number(accuracy, 4)},
                    {"max_rel_loss_diff", single ? json_number(max_rel, 3) : Json(nullptr)},
                    {"step_us", json_number(mesh_us)},
                    {"single_device_step_us", single ? json_number(one_us) : Json(nullptr)},
                    {"collectives_per_step", collectives},
                    {"bytes_per_step", bytes}});
    return parity ? kExitOk : kExitFailure;
  }
  std::cout << fmt::format("\nfinal loss {:.5f}, accuracy {:.1f}% on a fresh batch\n", loss,
                           100 * accuracy)
            << fmt::format("collectives per step: {} ({} bytes between devices)\n", collectives, bytes)
            << fmt::format("step time: {:.0f} us on the {}x{} mesh", mesh_us, o.mesh_batch, o.mesh_model);
  if (single) {
    std::cout << fmt::format(", {:.0f} us on one device ({:.2f}x)\n", one_us, mesh_us / one_us)
              << fmt::format(
                     "largest relative loss difference from one device: {:.2e} ({} {:.0e})\n",
                     max_rel, parity ? "within" : "ABOVE", kParityTolerance);
  } else {
    std::cout << "\n";
  }
  if (!parity) {
    std::cerr << fmt::format(
        "tessel: error: demo: the mesh's losses differ from one device's by {:.2e} "
        "(relative), above {:.0e}\n",
        max_rel, kParityTolerance);
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

int run_demo_train(const Args& args) { return run_command(args, kHelp, parse, train); }

}  // namespace tessel::cli
