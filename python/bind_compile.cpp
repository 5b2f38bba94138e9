// Bindings of compile() (compile.h) and the Graph it traces (graph.h): Function, InputSpec,
// CompileOptions, CompilationResult, CompiledComputation, compile, the cache's stats. A Python
// function is traced once (on the calling thread, with the GIL); CompiledComputation.run replays
// the graph with the GIL released and never calls Python.
//
//   step = tessel.Function("step", lambda ctx, xs: [ctx.all_reduce(tessel.relu(xs[0]))])
//   r = tessel.compile(step, [tessel.InputSpec((8, 4))],
//                      tessel.CompileOptions(tessel.ReplicateMetadata(4)))
//   print(r.computation.graph)
//   outs = r.computation.run([[x0, x1, x2, x3]])     # [replica][output] DTensors
//
// ReplicaContext, ReplicateOptions and ReplicatedVariable come from bind_replicate (called
// first, module.cpp).
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "casters.h"
#include "tessel/core/error.h"
#include "tessel/replicate/compile.h"
#include "tessel/replicate/graph.h"

namespace tessel::python {

py::list wrap_dtensors(std::vector<DTensor> tensors);  // bind_ops.cpp

namespace {

// tessel.Error raised in Python (by an op the function called) -> the tessel::Error it was, so
// that compile() reports its code; anything else stays a Python error (kInternal in compile()).
[[noreturn]] void rethrow(py::error_already_set& e) {
  const py::object base = py::module_::import("tessel._tessel").attr("Error");
  if (e.matches(base)) {
    const std::string code = py::str(e.value().attr("code"));
    for (int c = 0; c < kNumErrorCodes; ++c) {
      if (error_code_name(static_cast<ErrorCode>(c)) == code) {
        throw Error(static_cast<ErrorCode>(c), py::str(e.value().attr("component")).cast<std::string>(),
                    py::str(e.value().attr("message")).cast<std::string>());
      }
    }
  }
  throw;
}

// A Python fn(ctx, inputs) -> sequence of DTensors as a ReplicaComputation: called with the GIL
// taken; the function object is released with the GIL held, whatever thread drops the last copy.
ReplicaComputation python_computation(py::function fn) {
  std::shared_ptr<py::function> held(new py::function(std::move(fn)), [](py::function* f) {
    py::gil_scoped_acquire gil;
    delete f;
  });
  return [held](ReplicaContext& ctx, const std::vector<DTensor>& inputs) {
    py::gil_scoped_acquire gil;
    try {
      py::object out = (*held)(py::cast(ctx.shared_from_this()), wrap_dtensors(inputs));
      return out.cast<std::vector<DTensor>>();
    } catch (py::error_already_set& e) {
      rethrow(e);
    }
  };
}

void bind_graph(py::module_& m) {
  py::enum_<GraphNodeKind>(m, "GraphNodeKind")
      .value("INPUT", GraphNodeKind::kInput)
      .value("CAPTURE", GraphNodeKind::kCapture)
      .value("OP", GraphNodeKind::kOp)
      .value("RELAYOUT", GraphNodeKind::kRelayout)
      .value("COLLECTIVE", GraphNodeKind::kCollective);
  py::enum_<CollectiveKind>(m, "CollectiveKind")
      .value("ALL_REDUCE", CollectiveKind::kAllReduce)
      .value("ALL_GATHER", CollectiveKind::kAllGather)
      .value("BROADCAST", CollectiveKind::kBroadcast)
      .value("BARRIER", CollectiveKind::kBarrier);
  py::class_<GraphNode>(m, "GraphNode", "One traced node (read only).")
      .def_readonly("kind", &GraphNode::kind)
      .def_readonly("op", &GraphNode::op)
      .def_readonly("inputs", &GraphNode::inputs)
      .def_readonly("output", &GraphNode::output)
      .def_readonly("input_index", &GraphNode::input_index)
      .def_readonly("plan", &GraphNode::plan)
      .def_readonly("collective", &GraphNode::collective)
      .def_readonly("reduce_op", &GraphNode::reduce_op)
      .def_readonly("axis", &GraphNode::axis)
      .def_readonly("root", &GraphNode::root);
  py::class_<Graph>(m, "Graph", R"doc(
What compile() traced: one node per op, inserted relayout, collective, input and captured
constant; str(graph) prints one line per node.)doc")
      .def_property_readonly("mesh", &Graph::mesh)
      .def_property_readonly("nodes", &Graph::nodes)
      .def_property_readonly("values", &Graph::values)
      .def_property_readonly("outputs", &Graph::outputs)
      .def_property_readonly("num_inputs", &Graph::num_inputs)
      .def_property_readonly("removed_nodes", &Graph::removed_nodes)
      .def("count", &Graph::count, py::arg("kind"))
      .def("to_string", &Graph::to_string)
      .def("__str__", &Graph::to_string);
}

void bind_compile_types(py::module_& m) {
  py::class_<Function>(m, "Function", R"doc(
A replica computation fn(ctx, inputs) -> list of DTensors with an identity (the compile cache's
key): each Function made gets a fresh id; copies share it.)doc")
      .def(py::init([](std::string name, py::function fn) {
             return Function(std::move(name), python_computation(std::move(fn)));
           }),
           py::arg("name"), py::arg("computation"))
      .def_property_readonly("id", &Function::id)
      .def_property_readonly("name", &Function::name)
      .def("__call__", &Function::operator(), py::arg("ctx"), py::arg("inputs"));

  py::class_<InputSpec>(m, "InputSpec", R"doc(
One input of a compiled computation: shape, dtype and sharding specs on the replica's core
mesh ("core" / "unsharded"; empty: replicated).)doc")
      .def(py::init<Shape, DType, std::vector<std::string>>(), py::arg("shape"),
           py::arg("dtype") = DType::kF32, py::arg("sharding_specs") = std::vector<std::string>{})
      .def_readwrite("shape", &InputSpec::shape)
      .def_readwrite("dtype", &InputSpec::dtype)
      .def_readwrite("sharding_specs", &InputSpec::sharding_specs)
      .def("__eq__", [](const InputSpec& a, const InputSpec& b) { return a == b; })
      .def("__repr__", [](const InputSpec& s) { return "InputSpec(" + s.to_string() + ")"; });

  py::class_<CompileOptions>(m, "CompileOptions", R"doc(
replicate: the ReplicateOptions run() uses (the constructor takes its fields: metadata, runtime,
timeout in seconds, packed_inputs); output_types: when given, the dtypes the computation must
return.)doc")
      .def(py::init([](std::optional<ReplicateMetadata> metadata, Runtime* runtime,
                       double timeout_seconds, std::vector<int> packed_inputs,
                       std::optional<std::vector<DType>> output_types) {
             CompileOptions o;  // the fields of o.replicate as ReplicateOptions(...) takes them
             if (metadata) o.replicate.metadata = *metadata;
             o.replicate.runtime = runtime;
             o.replicate.timeout = seconds_arg(timeout_seconds, "timeout_seconds", "compile");
             o.replicate.packed_inputs = std::move(packed_inputs);
             o.output_types = std::move(output_types);
             return o;
           }),
           py::arg("metadata") = std::nullopt, py::arg("runtime") = nullptr,
           py::arg("timeout") = 0.0, py::arg("packed_inputs") = std::vector<int>{},
           py::arg("output_types") = std::nullopt, py::keep_alive<1, 3>())
      // The setter's keep_alive: the assigned options (and so their runtime) live as long.
      // (pybind11 applies keep_alive only as an attribute of the setter's own cpp_function.)
      .def_property(
          "replicate", [](CompileOptions& o) -> ReplicateOptions& { return o.replicate; },
          py::cpp_function([](CompileOptions& o, const ReplicateOptions& r) { o.replicate = r; },
                           py::keep_alive<1, 2>()),
          py::return_value_policy::reference_internal)
      .def_readwrite("output_types", &CompileOptions::output_types);

  py::class_<CompiledComputation, std::shared_ptr<CompiledComputation>>(m, "CompiledComputation")
      .def_property_readonly("name", &CompiledComputation::name)
      .def_property_readonly("function_id", &CompiledComputation::function_id)
      .def_property_readonly("signature", &CompiledComputation::signature)
      .def_property_readonly("options", &CompiledComputation::options)
      .def_property_readonly("graph", &CompiledComputation::graph,
                             py::return_value_policy::reference_internal)
      .def(
          "run",
          [](const CompiledComputation& c, const std::vector<std::vector<Tensor>>& per_replica,
             const std::vector<Tensor>& broadcast, const std::vector<ReplicatedVariable>& variables,
             const std::vector<Tensor>& constants) {
            std::vector<std::vector<DTensor>> outs;
            {
              py::gil_scoped_release release;  // the replay never calls Python
              outs = c.run(per_replica, broadcast, variables, constants);
            }
            py::list result;
            for (std::vector<DTensor>& replica : outs) result.append(wrap_dtensors(std::move(replica)));
            return result;
          },
          py::arg("per_replica_inputs"), py::arg("broadcast_inputs") = std::vector<Tensor>{},
          py::arg("variables") = std::vector<ReplicatedVariable>{},
          py::arg("guaranteed_constants") = std::vector<Tensor>{},
          "replicate() replaying the graph: outputs [replica][output].")
      .def(
          "replay",
          [](const CompiledComputation& c, ReplicaContext& ctx, const std::vector<DTensor>& inputs) {
            std::vector<DTensor> outs;
            {
              py::gil_scoped_release release;
              outs = c.replay(ctx, inputs);
            }
            return wrap_dtensors(std::move(outs));
          },
          py::arg("ctx"), py::arg("inputs"));

  py::class_<CompilationResult>(m, "CompilationResult", R"doc(
TF's TPUCompilationResult: ok(), or the error (code, message) that stopped compilation; the
compiled computation; cache_hit when it came from the cache without tracing.)doc")
      .def("ok", &CompilationResult::ok)
      .def_property_readonly("code",
                             [](const CompilationResult& r) -> std::optional<ErrorCode> {
                               if (r.ok()) return std::nullopt;
                               return r.code();
                             })
      .def_property_readonly("message",
                             [](const CompilationResult& r) -> std::optional<std::string> {
                               if (r.ok()) return std::nullopt;
                               return std::string(r.error().what());
                             })
      .def("status_string", &CompilationResult::status_string)
      .def(
          "raise_if_error",
          [](const CompilationResult& r) {
            if (!r.ok()) throw r.error();
          },
          "Raises the error as the tessel exception of its code (ValueError, ...).")
      // keep_alive: the computation keeps the result, and so the options and their runtime.
      .def_property_readonly(
          "computation", py::cpp_function(
                             [](const CompilationResult& r) {
                               return std::const_pointer_cast<CompiledComputation>(r.computation());
                             },
                             py::keep_alive<0, 1>()))
      .def_property_readonly("cache_hit", &CompilationResult::cache_hit)
      .def("__repr__", [](const CompilationResult& r) {
        return "CompilationResult(" + r.status_string() + ")";
      });

  py::class_<CompileCacheStats>(m, "CompileCacheStats")
      .def_readonly("entries", &CompileCacheStats::entries)
      .def_readonly("hits", &CompileCacheStats::hits)
      .def_readonly("misses", &CompileCacheStats::misses);
}

}  // namespace

void bind_compile(py::module_& m) {
  bind_graph(m);
  bind_compile_types(m);
  // keep_alive: the result keeps the options, and with them the runtime it runs on.
  m.def("compile", &compile, py::arg("function"), py::arg("signature"),
        py::arg("options") = CompileOptions{}, py::keep_alive<0, 3>(),
        "Traces function once (here, with the GIL) and returns a CompilationResult.");
  m.def("compile_cache_stats", &compile_cache_stats);
  m.def("clear_compile_cache", &clear_compile_cache);
}

}  // namespace tessel::python
