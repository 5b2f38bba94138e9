// Bindings of autodiff.h (GradientTape, value_and_grad, relayout_batch), recompute_grad.h,
// tape_memory.h, optimizers.h (SGD, Adam) and relayout.h's relayout_stats, with TensorFlow's
// names.
//
// GradientTape: TF's `with tessel.GradientTape() as tape: tape.watch(x); y = f(x)` then
// `tape.gradient(y, x)` (after the block, as in TF). The Python object makes the C++ tape on the
// first __enter__ and stops its recording when the outermost `with` block ends; gradient() works
// afterwards. A tape records on the thread that entered it.
//
// Conversions only; calls that run on the devices release the GIL; value_and_grad's Python
// function runs with the GIL re-acquired.
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "casters.h"
#include "tessel/core/error.h"
#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor.h"
#include "tessel/dtensor/optimizers.h"
#include "tessel/dtensor/recompute_grad.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/dtensor/tape_memory.h"

namespace tessel::python {

py::object wrap_dtensor(DTensor tensor);             // bind_ops.cpp
py::list wrap_dtensors(std::vector<DTensor> tensors);  // bind_ops.cpp
void keep_runtime_alive(py::handle holder, const DTensor& t);  // bind_ops.cpp

namespace {

constexpr const char* kTape = "GradientTape";

// TF's single-tensor-or-list arguments: (the DTensors, whether it was one).
std::pair<std::vector<DTensor>, bool> to_dtensors(py::handle obj, const char* what) {
  if (py::isinstance<DTensor>(obj)) return {{obj.cast<DTensor>()}, true};
  if (!py::detail::is_plain_sequence(obj)) {
    throw py::type_error(std::string(what) + " must be a DTensor or a list of DTensors");
  }
  return {obj.cast<std::vector<DTensor>>(), false};
}

// The Python GradientTape: a C++ GradientTape made on the first __enter__ (see the file comment).
class Tape {
 public:
  explicit Tape(bool persistent) : persistent_(persistent) {}
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  bool persistent() const { return persistent_; }
  bool recording() const { return tape_ != nullptr; }

  void enter() {
    if (!tape_) make();
    ++depth_;
  }
  void exit() {
    if (depth_ > 0) --depth_;
    if (depth_ == 0 && tape_) tape_->stop_recording();
  }

  // TF's reset(): forgets everything recorded and watched; inside a `with`, records afresh.
  void reset() {
    check_thread("reset");
    tape_.reset();
    if (depth_ > 0) make();
  }

  GradientTape& tape(const char* call) {
    if (!tape_) {
      throw Error(ErrorCode::kFailedPrecondition, kTape,
                  std::string(call) +
                      "() on a tape that is not recording: use it as `with "
                      "tessel.GradientTape() as tape:`");
    }
    check_thread(call);
    return *tape_;
  }

 private:
  void make() {
    tape_ = std::make_unique<GradientTape>(persistent_);
    owner_ = std::this_thread::get_id();
  }
  void check_thread(const char* call) const {
    if (tape_ && owner_ != std::this_thread::get_id()) {
      throw Error(ErrorCode::kFailedPrecondition, kTape,
                  std::string(call) + "() from another thread: a tape records the ops of the "
                                      "thread that entered it");
    }
  }

  bool persistent_;
  std::unique_ptr<GradientTape> tape_;
  std::thread::id owner_;
  int depth_ = 0;  // open `with` blocks
};

// `call`'s gradients of `tensors` (a DTensor or a list, TF's convention), run without the GIL
// (the caller takes the C++ tape while it holds it): a DTensor for a DTensor, a list for a list.
template <typename Call>
py::object gradients_of(py::handle tensors, const char* what, const Call& call) {
  auto [list, single] = to_dtensors(tensors, what);
  std::vector<DTensor> grads;
  {
    py::gil_scoped_release release;
    grads = call(list);
  }
  if (single) return wrap_dtensor(std::move(grads.at(0)));
  return wrap_dtensors(std::move(grads));
}

void bind_tape(py::module_& m) {
  py::class_<Tape>(m, "GradientTape", R"doc(
TF's GradientTape: records the ops (on this thread) whose inputs depend on watched DTensors.

    with tessel.GradientTape() as tape:
        tape.watch(w)
        loss = tessel.reduce_mean(tessel.matmul(x, w))
    [grad] = tape.gradient(loss, [w])     # grad has w's layout

Recording starts at the first `with` and stops when the block ends. persistent=True allows
several gradient() calls. A source the target does not depend on gets zeros (TF: None).)doc")
      .def(py::init<bool>(), py::arg("persistent") = false)
      .def_property_readonly("persistent", &Tape::persistent)
      .def_property_readonly("recording", &Tape::recording,
                             "Whether the C++ tape exists (from the first __enter__ on).")
      .def("__enter__",
           [](py::object self) {
             self.cast<Tape&>().enter();
             return self;
           })
      .def(
          "__exit__",
          [](Tape& self, py::handle, py::handle, py::handle) {
            self.exit();
            return false;  // exceptions propagate
          },
          py::arg("exc_type"), py::arg("exc_value"), py::arg("traceback"))
      .def(
          "watch",
          [](Tape& self, py::handle tensor) {
            GradientTape& tape = self.tape("watch");
            for (const DTensor& t : to_dtensors(tensor, "watch: tensor").first) tape.watch(t);
          },
          py::arg("tensor"), "Watches a DTensor or each of a list of DTensors.")
      .def(
          "gradient",
          [](Tape& self, const DTensor& target, py::handle sources,
             const std::optional<DTensor>& output_gradients) {
            GradientTape& tape = self.tape("gradient");
            return gradients_of(sources, "gradient: sources", [&](const auto& list) {
              return tape.gradient(target, list, output_gradients.value_or(DTensor()));
            });
          },
          py::arg("target"), py::arg("sources"), py::arg("output_gradients") = py::none(),
          "d sum(target * output_gradients) / d source in each source's layout (None: "
          "d sum(target)): a DTensor for a DTensor, a list for a list.")
      .def(
          "backward_input",
          [](Tape& self, const DTensor& target, py::handle inputs,
             const std::optional<DTensor>& output_gradients) {
            GradientTape& tape = self.tape("backward_input");
            return gradients_of(inputs, "backward_input: inputs", [&](const auto& list) {
              return tape.backward_input(target, list, output_gradients.value_or(DTensor()));
            });
          },
          py::arg("target"), py::arg("inputs"), py::arg("output_gradients") = py::none(),
          "The first half of gradient() (zero-bubble pipelines; PyTorch's "
          "stage_backward_input): the gradients of `inputs` only; each matmul's weight "
          "gradient waits on the tape for backward_weight(). A non-persistent tape only.")
      .def(
          "backward_weight",
          [](Tape& self, py::handle weights) {
            GradientTape& tape = self.tape("backward_weight");
            return gradients_of(weights, "backward_weight: weights",
                                [&](const auto& list) { return tape.backward_weight(list); });
          },
          py::arg("weights"),
          "The second half: the gradients of `weights` (watched DTensors) from what "
          "backward_input() left; with it, gradient()'s values bit for bit.")
      .def("reset", &Tape::reset,
           "Forgets what was recorded and watched (inside a `with`: records afresh).");
}

// recompute_grad(f): f is called (again, in the backward pass) with the GIL taken; its last
// reference may go on a thread without the GIL (a tape released in gradient()): the deleter
// takes it.
py::object recompute(py::function f) {
  std::shared_ptr<py::function> held(new py::function(std::move(f)), [](py::function* p) {
    py::gil_scoped_acquire gil;
    delete p;
  });
  DTensorFunction recomputed = recompute_grad([held](const std::vector<DTensor>& in) {
    py::gil_scoped_acquire gil;
    py::object out = (*held)(*wrap_dtensors(in));
    if (!py::isinstance<DTensor>(out)) {
      throw py::type_error("recompute_grad: f must return a DTensor, got " +
                           std::string(py::str(py::type::of(out))));
    }
    return out.cast<DTensor>();
  });
  return py::cpp_function([recomputed](py::args args) {
    std::vector<DTensor> in;
    for (py::handle a : args) {
      if (!py::isinstance<DTensor>(a)) {
        throw py::type_error("recompute_grad: the arguments must be DTensors, got " +
                             std::string(py::str(py::type::of(a))));
      }
      in.push_back(a.cast<DTensor>());
    }
    return wrap_dtensor(recomputed(in));
  });
}

void bind_functions(py::module_& m) {
  m.def("recompute_grad", &recompute, py::arg("f"), R"doc(
TF's tf.recompute_grad (JAX's jax.checkpoint, PyTorch's torch.utils.checkpoint): f(*args) whose
forward pass keeps only its arguments on the gradient tapes; the backward pass runs f again and
differentiates it. Bit for bit the gradients of f itself. Every DTensor f reads that a tape
watches must be one of its arguments (ValueError otherwise).

    block = tessel.recompute_grad(lambda x, w: tessel.relu(tessel.matmul(x, w)))
    with tessel.GradientTape() as tape:
        tape.watch(w)
        loss = tessel.reduce_sum(block(x, w)))doc");
  py::class_<TapeMemoryStats>(m, "TapeMemoryStats",
                              "What gradient tapes keep on one device for their backward passes.")
      .def_readonly("device", &TapeMemoryStats::device)
      .def_readonly("live_bytes", &TapeMemoryStats::live_bytes)
      .def_readonly("peak_bytes", &TapeMemoryStats::peak_bytes)
      .def("__repr__", [](const TapeMemoryStats& s) {
        return "TapeMemoryStats(device='" + s.device +
               "', live_bytes=" + std::to_string(s.live_bytes) +
               ", peak_bytes=" + std::to_string(s.peak_bytes) + ")";
      });
  m.def("tape_memory_stats", &tape_memory_stats,
        "Per device: the bytes gradient tapes keep for their backward passes (activations), now "
        "and at most since the last reset_tape_memory_peak().");
  m.def("reset_tape_memory_peak", &reset_tape_memory_peak,
        "Sets each device's tape_memory_stats() peak_bytes to its live_bytes.");
  m.def(
      "value_and_grad",
      [](py::function fn, const std::vector<DTensor>& params) {
        const auto call = [&fn](const std::vector<DTensor>& p) {
          py::gil_scoped_acquire acquire;
          py::object result = fn(wrap_dtensors(p));
          if (!py::isinstance<DTensor>(result)) {
            throw py::type_error("value_and_grad: fn must return a DTensor, got " +
                                 std::string(py::str(py::type::of(result))));
          }
          return result.cast<DTensor>();
        };
        std::pair<DTensor, std::vector<DTensor>> out;
        {
          py::gil_scoped_release release;
          out = value_and_grad(call, params);
        }
        return py::make_tuple(wrap_dtensor(std::move(out.first)),
                              wrap_dtensors(std::move(out.second)));
      },
      py::arg("fn"), py::arg("params"),
      "(fn(params), gradients of sum(fn(params)) w.r.t. params); fn takes the list of DTensors.");
  m.def(
      "relayout_batch",
      [](const std::vector<DTensor>& tensors, const std::vector<Layout>& layouts,
         int64_t bucket_bytes) {
        std::vector<DTensor> out;
        {
          py::gil_scoped_release release;
          out = relayout_batch(tensors, layouts, bucket_bytes);
        }
        return wrap_dtensors(std::move(out));
      },
      py::arg("tensors"), py::arg("layouts"), py::arg("bucket_bytes") = int64_t{25} << 20,
      "Relayouts many tensors at once; single all_reduces, all_gathers or reduce_scatters over "
      "the same mesh dims, op and dtype are fused into buckets of at most bucket_bytes (one "
      "collective per bucket).");

  py::class_<RelayoutStats>(m, "RelayoutStats",
                            "Collectives relayouts have run in this process and the bytes their "
                            "plans sent between devices; unpacks as (collectives, bytes).")
      .def_readonly("collectives", &RelayoutStats::collectives)
      .def_readonly("bytes", &RelayoutStats::bytes)
      .def_readonly("seconds", &RelayoutStats::seconds)
      .def("__iter__",
           [](const RelayoutStats& s) {
             return py::iter(py::make_tuple(s.collectives, s.bytes));
           })
      .def("__repr__", [](const RelayoutStats& s) {
        return "RelayoutStats(collectives=" + std::to_string(s.collectives) +
               ", bytes=" + std::to_string(s.bytes) + ")";
      });
  m.def("relayout_stats", &relayout_stats);
}

void bind_optimizers(py::module_& m) {
  py::class_<Optimizer>(m, "Optimizer", R"doc(
Base of SGD and Adam. apply(params, grads) returns the updated parameters (a new list; the
state, with each parameter's layout, belongs to the first parameter list applied, and the
optimizer keeps that list's Runtime alive).)doc")
      .def(
          "apply",
          [](py::object self, std::vector<DTensor> params, const std::vector<DTensor>& grads) {
            Optimizer& optimizer = self.cast<Optimizer&>();
            {
              py::gil_scoped_release release;
              optimizer.apply(params, grads);
            }
            // The state made by the first apply lives on the parameters' runtime: keep it.
            if (optimizer.iterations() == 1) {
              for (const DTensor& p : params) keep_runtime_alive(self, p);
            }
            return wrap_dtensors(std::move(params));
          },
          py::arg("params"), py::arg("grads"))
      .def_property_readonly("iterations", &Optimizer::iterations)
      .def("slots", &Optimizer::slots)
      .def("restore", &Optimizer::restore, py::arg("iterations"), py::arg("params"),
           py::arg("slots"))
      .def_property("learning_rate", &Optimizer::learning_rate, &Optimizer::set_learning_rate);
  py::class_<SGD, Optimizer>(m, "SGD",
                             "v = momentum v - lr g; p += v (nesterov: p += momentum v - lr g).")
      .def(py::init<double, double, bool>(), py::arg("learning_rate") = 0.01,
           py::arg("momentum") = 0.0, py::arg("nesterov") = false);
  py::class_<Adam, Optimizer>(m, "Adam", "Keras' Adam (epsilon added to sqrt(v)).")
      .def(py::init<double, double, double, double>(), py::arg("learning_rate") = 0.001,
           py::arg("beta_1") = 0.9, py::arg("beta_2") = 0.999, py::arg("epsilon") = 1e-7);
  py::class_<AdamW, Adam>(m, "AdamW",
                          "Adam with decoupled weight decay (torch.optim.AdamW's arithmetic).")
      .def(py::init<double, double, double, double, double>(), py::arg("learning_rate") = 0.001,
           py::arg("beta_1") = 0.9, py::arg("beta_2") = 0.999, py::arg("epsilon") = 1e-8,
           py::arg("weight_decay") = 0.01)
      .def("set_decay_mask", &AdamW::set_decay_mask, py::arg("decays"))
      .def_property_readonly("weight_decay", &AdamW::weight_decay);
  m.def(
      "clip_by_global_norm",
      [](const std::vector<DTensor>& grads, double clip_norm) {
        std::pair<std::vector<DTensor>, DTensor> out;
        {
          py::gil_scoped_release release;
          out = clip_by_global_norm(grads, clip_norm);
        }
        return py::make_tuple(wrap_dtensors(std::move(out.first)),
                              wrap_dtensor(std::move(out.second)));
      },
      py::arg("t_list"), py::arg("clip_norm"),
      "(the gradients scaled to a global L2 norm of at most clip_norm, that norm).");
  py::class_<WarmupCosineDecay>(m, "WarmupCosineDecay",
                                "nanoGPT's schedule: linear warm-up, cosine decay, then minimum.")
      .def(py::init([](double peak, double minimum, int64_t warmup_steps, int64_t decay_steps) {
             return WarmupCosineDecay{peak, minimum, warmup_steps, decay_steps};
           }),
           py::arg("peak") = 1e-3, py::arg("minimum") = 1e-4, py::arg("warmup_steps") = 100,
           py::arg("decay_steps") = 2000)
      .def("__call__", &WarmupCosineDecay::operator(), py::arg("step"))
      .def_readwrite("peak", &WarmupCosineDecay::peak)
      .def_readwrite("minimum", &WarmupCosineDecay::minimum)
      .def_readwrite("warmup_steps", &WarmupCosineDecay::warmup_steps)
      .def_readwrite("decay_steps", &WarmupCosineDecay::decay_steps);
}

}  // namespace

void bind_autodiff(py::module_& m) {
  bind_tape(m);
  bind_functions(m);
  bind_optimizers(m);
}

}  // namespace tessel::python
