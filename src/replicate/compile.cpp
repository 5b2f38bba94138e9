// compile(): checks, the trace, the per-replica replay plans and the cache; CompiledComputation's
// run and replay; Function and CompilationResult (see compile.h).
#include "tessel/replicate/compile.h"

#include <atomic>
#include <exception>
#include <memory>
#include <optional>

#include "core/errors.h"
#include "distribute/replica_thread.h"
#include "replicate/compile_cache.h"
#include "replicate/compile_context.h"
#include "replicate/context_expiry.h"
#include "replicate/replica_placement.h"
#include "replicate/trace.h"
#include "replicate/trace_replay.h"
#include "tessel/dtensor/dtensor_api.h"

namespace tessel {
namespace {

constexpr std::string_view kComponent = "compile";

// The function's identity: a process-wide counter, never reused.
uint64_t next_function_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

Layout input_layout(const InputSpec& spec, const Mesh& mesh, size_t index) {
  if (spec.sharding_specs.empty()) return Layout::replicated(mesh, spec.shape.rank());
  if (static_cast<int>(spec.sharding_specs.size()) != spec.shape.rank()) {
    detail::throw_invalid(kComponent, "input {} ({}) has {} sharding specs for rank {}", index,
                          spec.to_string(), spec.sharding_specs.size(), spec.shape.rank());
  }
  try {
    return Layout(spec.sharding_specs, mesh);
  } catch (const Error& e) {
    detail::throw_invalid(kComponent, "input {} ({}): {}", index, spec.to_string(), e.what());
  }
}

void check_outputs(const std::vector<DTensor>& outputs, const CompileOptions& options) {
  if (!options.output_types) return;
  const std::vector<DType>& types = *options.output_types;
  if (outputs.size() != types.size()) {
    detail::throw_invalid(kComponent, "the computation returned {} outputs; output_types has {}",
                          outputs.size(), types.size());
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].defined() && outputs[i].dtype() != types[i]) {
      detail::throw_invalid(kComponent, "output {} is {}; output_types says {}", i,
                            dtype_name(outputs[i].dtype()), dtype_name(types[i]));
    }
  }
}

// Traces `function` on replica 0's mesh and returns its graph.
std::shared_ptr<const Graph> trace(const Function& function, const InputSignature& signature,
                                   const CompileOptions& options, const Mesh& mesh,
                                   Runtime& runtime) {
  std::vector<Layout> layouts;
  for (size_t i = 0; i < signature.size(); ++i)
    layouts.push_back(input_layout(signature[i], mesh, i));
  detail::Tracer tracer(mesh, runtime);
  DefaultMeshScope scope(mesh);  // as replicate() gives each replica
  std::vector<DTensor> inputs;
  for (size_t i = 0; i < signature.size(); ++i) {
    inputs.push_back(tracer.add_input(static_cast<int>(i),
                                      {signature[i].shape, signature[i].dtype, layouts[i]}));
  }
  const auto ctx = std::make_shared<detail::RecordingReplicaContext>(
      options.replicate.metadata.num_replicas, mesh, runtime, tracer);
  std::vector<DTensor> outputs;
  {
    const detail::ExpireOnExit expiry(*ctx, "compile() traced the function");
    // Traced as replica 0 runs it: a replica context (BR-70-05).
    const detail::ReplicaThreadScope replica_thread(0, options.replicate.metadata.num_replicas);
    outputs = function(*ctx, inputs);
  }
  check_outputs(outputs, options);
  return std::make_shared<const Graph>(tracer.finish(outputs));
}

// The core mesh the function is traced on: the first of this client's replicas (replica 0's
// in one process). A client that runs no replica (the job has more devices than replicas x
// cores) traces on its first num_cores_per_replica devices, so that it holds the same graph.
Mesh trace_mesh(const std::vector<std::optional<Mesh>>& meshes,
                const detail::ReplicaPlacement& placement, Runtime& runtime) {
  for (const std::optional<Mesh>& mesh : meshes) {
    if (mesh) return *mesh;
  }
  std::vector<Device*> cores;
  for (size_t c = 0; c < placement.devices.front().size(); ++c) {
    cores.push_back(&runtime.device(static_cast<int>(c)));
  }
  return detail::replica_core_mesh(0, cores);
}

CompilationResult compile_uncached(const Function& function, const InputSignature& signature,
                                   const CompileOptions& options, Runtime& runtime) {
  const auto fail = [&](ErrorCode code, const std::string& what) {
    return CompilationResult::failure(
        Error(code, kComponent, fmt::format("function '{}': {}", function.name(), what)));
  };
  try {
    // Across clients (processes), this client's replicas only: the others replay in theirs.
    const detail::ReplicaPlacement placement =
        detail::place_replicas(options.replicate.metadata, runtime);
    std::vector<std::optional<Mesh>> meshes;  // [replica]; none: another client's
    for (size_t r = 0; r < placement.devices.size(); ++r) {
      if (!placement.is_local(static_cast<int>(r))) {
        meshes.emplace_back();
        continue;
      }
      meshes.push_back(detail::replica_core_mesh(static_cast<int>(r), placement.devices[r]));
    }
    auto graph =
        trace(function, signature, options, trace_mesh(meshes, placement, runtime), runtime);
    std::vector<std::shared_ptr<const detail::ReplayPlan>> plans;  // null: another client's
    for (const std::optional<Mesh>& mesh : meshes) {
      plans.push_back(mesh ? std::make_shared<const detail::ReplayPlan>(graph, *mesh, runtime)
                           : nullptr);
    }
    return CompilationResult::success(
        std::make_shared<const CompiledComputation>(function.name(), function.id(), signature,
                                                    options, std::move(graph), std::move(plans)),
        /*cache_hit=*/false);
  } catch (const Error& e) {
    return fail(e.code(), e.what());
  } catch (const std::exception& e) {
    return fail(ErrorCode::kInternal, fmt::format("the traced function threw: {}", e.what()));
  } catch (...) {
    return fail(ErrorCode::kInternal, "the traced function threw a non-std::exception");
  }
}

}  // namespace

// ---- Function ----------------------------------------------------------------------------

struct Function::State {
  uint64_t id = next_function_id();
  std::string name;
  ReplicaComputation computation;
  ~State() { detail::compile_cache().evict_function(id); }
};

Function::Function(std::string name, ReplicaComputation computation) {
  if (!computation) detail::throw_invalid(kComponent, "function '{}' has no computation", name);
  auto state = std::make_shared<State>();
  state->name = std::move(name);
  state->computation = std::move(computation);
  state_ = std::move(state);
}

uint64_t Function::id() const { return state_->id; }
const std::string& Function::name() const { return state_->name; }

std::vector<DTensor> Function::operator()(ReplicaContext& ctx,
                                          const std::vector<DTensor>& inputs) const {
  return state_->computation(ctx, inputs);
}

std::string InputSpec::to_string() const {
  const std::string base = fmt::format("{} {}", shape.to_string(), dtype_name(dtype));
  if (sharding_specs.empty()) return base;
  return fmt::format("{} {{{}}}", base, fmt::join(sharding_specs, ","));
}

// ---- CompilationResult ---------------------------------------------------------------------

CompilationResult CompilationResult::success(std::shared_ptr<const CompiledComputation> computation,
                                             bool cache_hit) {
  CompilationResult r;
  r.computation_ = std::move(computation);
  r.cache_hit_ = cache_hit;
  return r;
}

CompilationResult CompilationResult::failure(Error error) {
  CompilationResult r;
  r.error_ = std::move(error);
  return r;
}

const Error& CompilationResult::error() const {
  if (!error_) {
    detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                        "error() of a successful compilation");
  }
  return *error_;
}

std::string CompilationResult::status_string() const {
  if (ok()) return "OK";
  return fmt::format("{}: {}", error_code_name(error_->code()), error_->what());
}

// ---- CompiledComputation -------------------------------------------------------------------

CompiledComputation::CompiledComputation(
    std::string name, uint64_t function_id, InputSignature signature, CompileOptions options,
    std::shared_ptr<const Graph> graph,
    std::vector<std::shared_ptr<const detail::ReplayPlan>> replica_plans)
    : name_(std::move(name)),
      function_id_(function_id),
      signature_(std::move(signature)),
      options_(std::move(options)),
      graph_(std::move(graph)),
      replica_plans_(std::move(replica_plans)) {}

CompiledComputation::~CompiledComputation() = default;

const detail::ReplayPlan& CompiledComputation::plan_for(const ReplicaContext& ctx) const {
  const size_t r = static_cast<size_t>(ctx.replica_id());
  if (r < replica_plans_.size() && replica_plans_[r] && replica_plans_[r]->mesh() == ctx.mesh()) {
    return *replica_plans_[r];
  }
  std::lock_guard<std::mutex> lock(other_plans_mu_);
  auto [it, fresh] = other_plans_.try_emplace(ctx.mesh());
  if (fresh)
    it->second = std::make_shared<const detail::ReplayPlan>(graph_, ctx.mesh(), ctx.runtime());
  return *it->second;
}

std::vector<DTensor> CompiledComputation::replay(ReplicaContext& ctx,
                                                 const std::vector<DTensor>& inputs) const {
  detail::ContextCollectives collectives(ctx);
  return plan_for(ctx).run(inputs, collectives);
}

ReplicaComputation CompiledComputation::replica_computation() const {
  return [self = shared_from_this()](ReplicaContext& ctx, const std::vector<DTensor>& inputs) {
    return self->replay(ctx, inputs);
  };
}

void CompiledComputation::check_inputs(const std::vector<std::vector<Tensor>>& per_replica_inputs,
                                       const std::vector<Tensor>& broadcast_inputs,
                                       const std::vector<ReplicatedVariable>& variables,
                                       const std::vector<Tensor>& guaranteed_constants) const {
  const size_t count = per_replica_inputs.size() + broadcast_inputs.size() + variables.size() +
                       guaranteed_constants.size();
  if (count != signature_.size()) {
    detail::throw_invalid(kComponent,
                          "'{}' was compiled for {} inputs; got {} ({} per-replica, {} broadcast, "
                          "{} variables, {} guaranteed constants)",
                          name_, signature_.size(), count, per_replica_inputs.size(),
                          broadcast_inputs.size(), variables.size(), guaranteed_constants.size());
  }
  size_t index = 0;
  const auto check = [&](const Tensor& t, const std::string& what) {
    const InputSpec& spec = signature_[index];
    if (t.defined() && (t.shape() != spec.shape || t.dtype() != spec.dtype)) {
      detail::throw_invalid(kComponent, "'{}': input {} ({}) is {} {}; it was compiled for {}",
                            name_, index, what, t.shape().to_string(), dtype_name(t.dtype()),
                            spec.to_string());
    }
  };
  for (const std::vector<Tensor>& values : per_replica_inputs) {
    for (size_t r = 0; r < values.size(); ++r) check(values[r], fmt::format("replica {}", r));
    ++index;
  }
  for (const Tensor& t : broadcast_inputs) {
    check(t, "broadcast");
    ++index;
  }
  for (const ReplicatedVariable& v : variables) {
    for (size_t r = 0; r < v.values.size(); ++r) check(v.values[r], "variable " + v.name);
    ++index;
  }
  for (const Tensor& t : guaranteed_constants) {
    check(t, "guaranteed constant");
    ++index;
  }
}

std::vector<std::vector<DTensor>> CompiledComputation::run(
    const std::vector<std::vector<Tensor>>& per_replica_inputs,
    const std::vector<Tensor>& broadcast_inputs, const std::vector<ReplicatedVariable>& variables,
    const std::vector<Tensor>& guaranteed_constants) const {
  check_inputs(per_replica_inputs, broadcast_inputs, variables, guaranteed_constants);
  return replicate(replica_computation(), per_replica_inputs, broadcast_inputs, variables,
                   guaranteed_constants, options_.replicate);
}

// ---- compile and the cache -----------------------------------------------------------------

CompilationResult compile(const Function& function, const InputSignature& signature,
                          const CompileOptions& options) {
  Runtime& runtime = options.replicate.runtime ? *options.replicate.runtime : Runtime::global();
  const detail::CompileKey key = detail::CompileKey::of(function.id(), signature, options, runtime);
  if (auto cached = detail::compile_cache().find(key)) {
    return CompilationResult::success(std::move(cached), /*cache_hit=*/true);
  }
  CompilationResult result = compile_uncached(function, signature, options, runtime);
  if (!result.ok()) return result;
  return CompilationResult::success(detail::compile_cache().insert(key, result.computation()),
                                    /*cache_hit=*/false);
}

CompileCacheStats compile_cache_stats() { return detail::compile_cache().stats(); }

void clear_compile_cache() { detail::compile_cache().clear(); }

}  // namespace tessel
