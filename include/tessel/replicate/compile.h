// compile(): trace a replica computation once, run it many times (TF's TPUCompile /
// TPUCompilationResult in front of _TPUReplicate, seed 105).
//
//   Function step("sgd_step", [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
//     auto [loss, grads] = value_and_grad(model_loss(in[0], in[1]), {in[2]});
//     DTensor g = ctx.all_reduce(grads[0], ReduceOp::kMean);
//     return std::vector<DTensor>{loss, subtract(in[2], multiply(g, 0.1))};
//   });
//   CompileOptions options;
//   options.replicate.metadata.num_replicas = 4;
//   CompilationResult r = compile(step, {{Shape{32, 16}}, {Shape{32, 1}}, {Shape{16, 1}}},
//                                 options);
//   if (!r.ok()) std::cerr << r.status_string();      // e.g. "InvalidArgument: compile: ..."
//   std::cout << r.computation()->graph();            // what every replica will run
//   auto outs = r.computation()->run({{x0, x1, x2, x3}, {y0, y1, y2, y3}}, {w});  // [replica][output]
//
// Tracing. compile() calls the function once, on the calling thread, with abstract inputs
// (dtensor.h: shape, dtype, layout, no data) on replica 0's core mesh and a recording
// ReplicaContext. While it runs, every op (ops.h, op_registry.h) runs its shape inference and
// sharding rule but no kernel and returns an abstract value; the relayouts the rules require,
// the ops, and the context's all_reduce / all_gather / broadcast / barrier become the nodes of a
// Graph (graph.h), printable before anything runs. A GradientTape inside the function records
// as usual, so gradients are traced too. Concrete DTensors the function uses (created before,
// or inside it with copy_to_mesh) are captured as constants; they must lie on the core mesh.
// Reading data while tracing is refused with kFailedPrecondition: pack and unpack (BR-74-05:
// eager only), to_host / unpack / relayout / components of an abstract value. Only the calling
// thread traces: ops the function runs on other threads see abstract values outside their
// trace (kFailedPrecondition).
//
// Replay. run() calls replicate() (replicate.h) with a computation that replays the graph on
// each replica's own core mesh and collectives; the function is not called again. Everything
// dispatch would recompute per call is computed at compile time for every replica's mesh:
// output layouts, placements (devices and blocks), relayout plans, captured constants on each
// replica's devices. With one core per replica every kernel runs on the replica's thread when
// its device is idle; values live until the replay returns (as an eager step's tape keeps
// them). Nodes nothing returned depends on are not run (graph.h).
//
// Across processes (a runtime that is a client of a multi-client program, replicate.h): every
// client compiles the same function with the same signature and options; the trace runs on the
// core mesh of the client's first replica (replica 0's in one process; a client that runs no
// replica traces on its first devices), replay plans are made for the client's own replicas,
// and run() is replicate() over the job, so the replayed collectives meet the other clients'
// replicas.
//
// Signature. One InputSpec per input the computation receives, in replicate()'s order:
// per-replica inputs, broadcast inputs, variables, guaranteed constants. replicate() hands each
// replica its inputs replicated on the core mesh; an InputSpec with sharding_specs (on the mesh
// dimension "core") relays that input out to them on entry (a local slice).
//
// Cache. Compiled computations are cached by (function id, signature, options): compiling
// the same Function with an equal signature and equal options (every metadata attribute, the
// runtime, the timeout, packed inputs, output_types) returns the cached computation without
// tracing (CompilationResult::cache_hit()). std::function has no identity, so a Function
// carries one: each Function constructed gets a fresh id, never reused; copies share it. Two
// Functions made from the same lambda, or with the same name, are different keys: a stale hit
// needs the same Function object (or a copy), whose callable cannot change. What the trace
// records is the path the function took once: control flow on captured state, and captured
// DTensors' values, are fixed at compile time (as with tf.function); make a new Function when
// they change. The entries of a
// Function are dropped when its last copy is destroyed; failed compilations are not cached.
// Two threads compiling the same key at once may both trace; the first result stored wins.
//
// Errors. compile() does not throw: CompilationResult holds the error (code, and a message
// from component "compile" naming the function) and no computation — nothing runs on any
// replica. Caught there: bad metadata or device assignment (ReplicateMetadata::validate_for_run,
// replica placement on the runtime's (or the job's) devices: kInvalidArgument; cores > 1 without
// SPMD: kUnimplemented); a bad InputSpec (its layout: kInvalidArgument naming the input); a shape
// mismatch (the op's inference error, kInvalidArgument); an unknown op (kNotFound); no sharding
// rule for the layouts (kUnimplemented); a bad collective argument (kInvalidArgument); outputs
// other than options.output_types (count or dtypes: kInvalidArgument) or null; anything else
// the function throws (a tessel::Error keeps its code; another exception is kInternal).
// run() throws replicate()'s errors, and before running anything kInvalidArgument for inputs
// whose count, shape or dtype differ from the signature (naming the input and replica).
//
// Thread safety: compile() may be called from any thread (the trace runs on the caller's);
// a CompiledComputation is immutable and run() may be called from several threads on disjoint
// devices, as replicate().
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessel/core/dtype.h"
#include "tessel/core/error.h"
#include "tessel/core/shape.h"
#include "tessel/replicate/graph.h"
#include "tessel/replicate/replicate.h"

namespace tessel {

namespace detail {
class ReplayPlan;
}

// A replica computation with an identity: the compile cache's key.
class Function {
 public:
  // A null computation: kInvalidArgument. `name` appears in errors and graphs.
  Function(std::string name, ReplicaComputation computation);

  // Unique per constructed Function (process-wide, never reused); copies share it.
  uint64_t id() const;
  const std::string& name() const;
  std::vector<DTensor> operator()(ReplicaContext& ctx, const std::vector<DTensor>& inputs) const;

 private:
  struct State;
  std::shared_ptr<const State> state_;
};

// One input of the computation: its global shape, dtype and layout on the replica's core mesh.
struct InputSpec {
  InputSpec(Shape shape, DType dtype = DType::kF32, std::vector<std::string> sharding_specs = {})
      : shape(std::move(shape)), dtype(dtype), sharding_specs(std::move(sharding_specs)) {}

  Shape shape;
  DType dtype = DType::kF32;
  // One spec per dimension: "core" or "unsharded" (TF's Layout specs); empty: replicated.
  std::vector<std::string> sharding_specs;

  // "[32,16] f32" or "[32,16] f32 {core,unsharded}".
  std::string to_string() const;
  friend bool operator==(const InputSpec&, const InputSpec&) = default;
};
using InputSignature = std::vector<InputSpec>;

struct CompileOptions {
  ReplicateOptions replicate;  // the metadata, runtime, timeout and packed inputs run() uses
  // TF's output_types: when given, the number of outputs and their dtypes.
  std::optional<std::vector<DType>> output_types;
};

class CompiledComputation : public std::enable_shared_from_this<CompiledComputation> {
 public:
  const std::string& name() const { return name_; }
  uint64_t function_id() const { return function_id_; }
  const InputSignature& signature() const { return signature_; }
  const CompileOptions& options() const { return options_; }
  const Graph& graph() const { return *graph_; }

  // replicate(replay, ...) with options().replicate: outputs [replica][output]. Inputs checked
  // against the signature first (see the header comment).
  std::vector<std::vector<DTensor>> run(
      const std::vector<std::vector<Tensor>>& per_replica_inputs,
      const std::vector<Tensor>& broadcast_inputs = {},
      const std::vector<ReplicatedVariable>& variables = {},
      const std::vector<Tensor>& guaranteed_constants = {}) const;
  // One replica's replay on its context (what run() hands replicate()); inputs on ctx.mesh().
  std::vector<DTensor> replay(ReplicaContext& ctx, const std::vector<DTensor>& inputs) const;
  // replay() as a ReplicaComputation (it keeps this computation alive; compile() made it).
  ReplicaComputation replica_computation() const;

  // ---- internal: made by compile() --------------------------------------------------------
  CompiledComputation(std::string name, uint64_t function_id, InputSignature signature,
                      CompileOptions options, std::shared_ptr<const Graph> graph,
                      std::vector<std::shared_ptr<const detail::ReplayPlan>> replica_plans);
  ~CompiledComputation();

 private:
  // The plan for ctx's mesh: the one made at compile time for ctx.replica_id() when the meshes
  // agree, else one made now and kept (a context other than replicate()'s).
  const detail::ReplayPlan& plan_for(const ReplicaContext& ctx) const;
  void check_inputs(const std::vector<std::vector<Tensor>>& per_replica_inputs,
                    const std::vector<Tensor>& broadcast_inputs,
                    const std::vector<ReplicatedVariable>& variables,
                    const std::vector<Tensor>& guaranteed_constants) const;

  std::string name_;
  uint64_t function_id_;
  InputSignature signature_;
  CompileOptions options_;
  std::shared_ptr<const Graph> graph_;
  std::vector<std::shared_ptr<const detail::ReplayPlan>> replica_plans_;  // by replica id
  mutable std::mutex other_plans_mu_;
  mutable std::unordered_map<Mesh, std::shared_ptr<const detail::ReplayPlan>> other_plans_;
};

// TF's TPUCompilationResult: ok, or the error that stopped compilation.
class CompilationResult {
 public:
  static CompilationResult success(std::shared_ptr<const CompiledComputation> computation,
                                   bool cache_hit);
  static CompilationResult failure(Error error);

  bool ok() const { return computation_ != nullptr; }
  // The error; kFailedPrecondition when ok().
  const Error& error() const;
  ErrorCode code() const { return error().code(); }
  // "OK" or "<code name>: <what>" (TF: the CompilationResultProto's status code and message).
  std::string status_string() const;
  // The compiled computation; null when !ok().
  const std::shared_ptr<const CompiledComputation>& computation() const { return computation_; }
  // True when compile() returned a cached computation without tracing.
  bool cache_hit() const { return cache_hit_; }

 private:
  std::shared_ptr<const CompiledComputation> computation_;
  std::optional<Error> error_;
  bool cache_hit_ = false;
};

CompilationResult compile(const Function& function, const InputSignature& signature,
                          const CompileOptions& options = {});

// The compile cache: entries held, and lookups that hit or missed since the process started
// (or the last clear).
struct CompileCacheStats {
  int64_t entries = 0;
  int64_t hits = 0;
  int64_t misses = 0;
};
CompileCacheStats compile_cache_stats();
// Drops every entry and zeroes the counters.
void clear_compile_cache();

}  // namespace tessel
