// replicate(): the checks, one controller thread per replica, failure propagation (see
// replicate.h).
#include "tessel/replicate/replicate.h"

#include <fmt/format.h>

#include <memory>
#include <set>
#include <system_error>
#include <thread>
#include <utility>

#include "comm/group_service.h"
#include "core/errors.h"
#include "replicate/context_expiry.h"
#include "replicate/cross_replica_group.h"
#include "replicate/group_replica_context.h"
#include "replicate/replica_placement.h"
#include "tessel/comm/collective_options.h"
#include "tessel/dtensor/dtensor_api.h"

namespace tessel {
namespace {

constexpr const char* kComponent = "replicate";

using Clock = std::chrono::steady_clock;

// Everything a replica's thread reads: the caller's arguments (shared, read only).
struct Arguments {
  const ReplicaComputation* computation;
  const std::vector<std::vector<Tensor>>* per_replica;
  const std::vector<Tensor>* broadcast;
  const std::vector<ReplicatedVariable>* variables;
  const std::vector<Tensor>* constants;
  std::set<int> packed;
};

void check_not_null(const std::vector<Tensor>& tensors, const char* what) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined()) detail::throw_invalid(kComponent, "{} {} is a null tensor", what, i);
  }
}

// Counts, nulls, dtypes and shapes of the per-replica inputs (BR-105-01).
void check_per_replica_inputs(const Arguments& args, int replicas) {
  for (int i : args.packed) {
    if (i < 0 || i >= static_cast<int>(args.per_replica->size())) {
      detail::throw_invalid(kComponent, "packed input {} is not one of the {} per-replica inputs",
                            i, args.per_replica->size());
    }
  }
  for (size_t i = 0; i < args.per_replica->size(); ++i) {
    const std::vector<Tensor>& values = (*args.per_replica)[i];
    const bool packed = args.packed.count(static_cast<int>(i)) != 0;
    const size_t expected = packed ? 1 : static_cast<size_t>(replicas);
    if (values.size() != expected) {
      detail::throw_invalid(kComponent,
                            "per-replica input {} has {} values; {} expected (num_replicas = {}{})",
                            i, values.size(), expected, replicas,
                            packed ? ", a packed input has one value for all replicas" : "");
    }
    std::vector<PartialShape> shapes;
    for (size_t r = 0; r < values.size(); ++r) {
      if (!values[r].defined()) {
        detail::throw_invalid(kComponent, "per-replica input {} of replica {} is a null tensor", i,
                              r);
      }
      if (values[r].dtype() != values.back().dtype()) {
        detail::throw_invalid(kComponent,
                              "per-replica input {}: replica {} has dtype {} and replica {} has "
                              "dtype {}; the replicas of an input share one dtype",
                              i, r, dtype_name(values[r].dtype()), values.size() - 1,
                              dtype_name(values.back().dtype()));
      }
      shapes.push_back(PartialShape(values[r].shape()));
    }
    merge_replicated_input_shapes(shapes, fmt::format("per-replica input {}: ", i));
  }
  check_not_null(*args.broadcast, "broadcast input");
  check_not_null(*args.constants, "guaranteed constant");
  for (const ReplicatedVariable& v : *args.variables) merge_variable_handles(v, replicas);
}

// Replica r's inputs, in _TPUReplicate's order, replicated on its core mesh.
std::vector<DTensor> place_inputs(const Arguments& args, int r, const Mesh& mesh, Runtime& rt) {
  std::vector<DTensor> inputs;
  const auto place = [&](const Tensor& t) {
    inputs.push_back(copy_to_mesh(t, Layout::replicated(mesh, t.rank()), rt));
  };
  for (size_t i = 0; i < args.per_replica->size(); ++i) {
    const std::vector<Tensor>& values = (*args.per_replica)[i];
    place(values[args.packed.count(static_cast<int>(i)) != 0 ? 0 : static_cast<size_t>(r)]);
  }
  for (const Tensor& t : *args.broadcast) place(t);
  for (const ReplicatedVariable& v : *args.variables) place(v.value(r));
  for (const Tensor& t : *args.constants) place(t);
  return inputs;
}

// Waits for the work queued on a replica's cores; a core still busy at the deadline:
// kDeadlineExceeded naming it.
void synchronize_cores(const std::vector<Device*>& cores, Clock::time_point deadline,
                       std::chrono::milliseconds timeout) {
  for (Device* d : cores) {
    if (!d->stream().synchronize(deadline)) {
      detail::throw_error(ErrorCode::kDeadlineExceeded, kComponent,
                          "the work of {} did not finish within {} ms (running '{}', {} ops "
                          "pending)",
                          d->name(), timeout.count(), d->stream().current_op(),
                          d->stream().pending());
    }
  }
}

// After a failure: lets the cores' queued work drain (its errors are the failure's
// consequences) so that the next user of the devices starts clean.
void drain_cores(const std::vector<Device*>& cores, Clock::time_point deadline) {
  for (Device* d : cores) {
    try {
      d->stream().synchronize(deadline);
    } catch (...) {  // already reported through the replica's own failure
    }
  }
}

struct ReplicaRun {
  const Arguments* args;
  detail::CrossReplicaGroup* group;
  Runtime* runtime;
  std::vector<Device*> cores;
  std::vector<DTensor> outputs;
};

void run_replica(int r, ReplicaRun& run) {
  detail::CrossReplicaGroup& group = *run.group;
  const auto deadline_after = [&] { return Clock::now() + group.timeout(); };
  const auto fail = [&](ErrorCode code, const std::string& what) {
    group.record_failure(r, code, what);
    group.abort(fmt::format("replica {} failed: {}", r, what));
    drain_cores(run.cores, deadline_after());
  };
  try {
    const Mesh mesh = detail::replica_core_mesh(r, run.cores);
    // Shared, so that a context the computation kept expires instead of dangling.
    const auto ctx = std::make_shared<detail::GroupReplicaContext>(r, mesh, *run.runtime, group);
    std::vector<DTensor> outputs;
    {
      const detail::ExpireOnExit expiry(*ctx, "replicate() returned");
      DefaultMeshScope scope(mesh);
      outputs = (*run.args->computation)(*ctx, place_inputs(*run.args, r, mesh, *run.runtime));
    }
    group.finished(r);
    for (size_t k = 0; k < outputs.size(); ++k) {
      if (!outputs[k].defined()) {
        detail::throw_invalid(kComponent, "the computation returned a null DTensor as output {}",
                              k);
      }
    }
    synchronize_cores(run.cores, deadline_after(), group.timeout());
    run.outputs = std::move(outputs);
  } catch (const Error& e) {
    fail(e.code(), e.what());
  } catch (const std::exception& e) {
    fail(ErrorCode::kInternal, e.what());
  } catch (...) {
    fail(ErrorCode::kInternal, "an exception that is not a std::exception");
  }
}

// Every replica returns the same number of outputs with the same dtypes (TF's output_types).
void check_outputs_agree(const std::vector<ReplicaRun>& runs) {
  const std::vector<DTensor>& first = runs[0].outputs;
  for (size_t r = 1; r < runs.size(); ++r) {
    const std::vector<DTensor>& outs = runs[r].outputs;
    if (outs.size() != first.size()) {
      detail::throw_invalid(kComponent, "replica {} returned {} outputs and replica 0 returned {}",
                            r, outs.size(), first.size());
    }
    for (size_t k = 0; k < outs.size(); ++k) {
      if (outs[k].dtype() != first[k].dtype()) {
        detail::throw_invalid(kComponent,
                              "output {} is {} on replica {} and {} on replica 0; every replica "
                              "returns the same output types",
                              k, dtype_name(outs[k].dtype()), r, dtype_name(first[k].dtype()));
      }
    }
  }
}

}  // namespace

std::vector<std::vector<std::string>> replica_device_names(const ReplicateMetadata& metadata,
                                                           Runtime& runtime) {
  std::vector<std::vector<std::string>> names;
  for (const auto& cores : detail::assign_replica_devices(metadata, runtime)) {
    names.emplace_back();
    for (const Device* d : cores) names.back().push_back(d->name());
  }
  return names;
}

std::vector<std::vector<DTensor>> replicate(
    const ReplicaComputation& computation,
    const std::vector<std::vector<Tensor>>& per_replica_inputs,
    const std::vector<Tensor>& broadcast_inputs, const std::vector<ReplicatedVariable>& variables,
    const std::vector<Tensor>& guaranteed_constants, const ReplicateOptions& options) {
  if (!computation) detail::throw_invalid(kComponent, "the computation is empty");
  if (options.timeout.count() < 0) {
    detail::throw_invalid(kComponent, "timeout must be >= 0 ms; got {}", options.timeout.count());
  }
  Runtime& runtime = options.runtime ? *options.runtime : Runtime::global();
  const std::vector<std::vector<Device*>> devices =
      detail::assign_replica_devices(options.metadata, runtime);
  const int replicas = options.metadata.num_replicas;
  Arguments args{&computation,
                 &per_replica_inputs,
                 &broadcast_inputs,
                 &variables,
                 &guaranteed_constants,
                 std::set<int>(options.packed_inputs.begin(), options.packed_inputs.end())};
  check_per_replica_inputs(args, replicas);

  const auto timeout =
      options.timeout.count() == 0 ? default_collective_timeout() : options.timeout;
  detail::CrossReplicaGroup group(detail::GroupService::of(runtime), devices, timeout);
  std::vector<ReplicaRun> runs;
  for (int r = 0; r < replicas; ++r) runs.push_back({&args, &group, &runtime, devices[r], {}});
  std::vector<std::thread> threads;
  for (int r = 0; r < replicas; ++r) {
    try {
      threads.emplace_back(run_replica, r, std::ref(runs[static_cast<size_t>(r)]));
    } catch (const std::system_error& e) {
      const std::string what =
          fmt::format("{}: could not start the controller thread: {}", kComponent, e.what());
      group.record_failure(r, ErrorCode::kUnavailable, what);
      group.abort(what);
      break;
    }
  }
  for (std::thread& t : threads) t.join();
  if (auto failure = group.first_failure()) {
    throw Error(failure->code, kComponent,
                fmt::format("replica {}: {}", failure->replica, failure->what));
  }
  check_outputs_agree(runs);
  std::vector<std::vector<DTensor>> outputs;
  for (ReplicaRun& run : runs) outputs.push_back(std::move(run.outputs));
  return outputs;
}

}  // namespace tessel
