// replicate(): the checks, one controller thread per replica, the call's deadline, failure
// propagation, late replicas (see replicate.h).
#include "tessel/replicate/replicate.h"

#include <fmt/format.h>

#include <cxxabi.h>
#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>
#include <utility>

#include "comm/group_service.h"
#include "core/errors.h"
#include "distribute/replica_thread.h"
#include "replicate/context_expiry.h"
#include "replicate/cross_replica_group.h"
#include "replicate/group_replica_context.h"
#include "replicate/replica_placement.h"
#include "replicate/variable_write_back.h"
#include "tessel/comm/collective_options.h"
#include "tessel/dtensor/dtensor_api.h"

namespace tessel {
namespace {

constexpr const char* kComponent = "replicate";

using Clock = std::chrono::steady_clock;

// Everything a replica's thread reads: the caller's arguments, copied (tensors are handles),
// since a late replica may still read them after replicate() returned.
struct Arguments {
  ReplicaComputation computation;
  std::vector<std::vector<Tensor>> per_replica;
  std::vector<Tensor> broadcast;
  std::vector<ReplicatedVariable> variables;
  std::vector<Tensor> constants;
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
    if (i < 0 || i >= static_cast<int>(args.per_replica.size())) {
      detail::throw_invalid(kComponent, "packed input {} is not one of the {} per-replica inputs",
                            i, args.per_replica.size());
    }
  }
  for (size_t i = 0; i < args.per_replica.size(); ++i) {
    const std::vector<Tensor>& values = args.per_replica[i];
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
  check_not_null(args.broadcast, "broadcast input");
  check_not_null(args.constants, "guaranteed constant");
  for (const ReplicatedVariable& v : args.variables) merge_variable_handles(v, replicas);
}

// Replica r's inputs, in _TPUReplicate's order, replicated on its core mesh.
std::vector<DTensor> place_inputs(const Arguments& args, int r, const Mesh& mesh, Runtime& rt) {
  std::vector<DTensor> inputs;
  const auto place = [&](const Tensor& t) {
    inputs.push_back(copy_to_mesh(t, Layout::replicated(mesh, t.rank()), rt));
  };
  for (size_t i = 0; i < args.per_replica.size(); ++i) {
    const std::vector<Tensor>& values = args.per_replica[i];
    place(values[args.packed.count(static_cast<int>(i)) != 0 ? 0 : static_cast<size_t>(r)]);
  }
  for (const Tensor& t : args.broadcast) place(t);
  for (const ReplicatedVariable& v : args.variables) place(v.value(r));
  for (const Tensor& t : args.constants) place(t);
  return inputs;
}

// Replica r's variables as its context starts with them: each one's value as placed among
// `inputs` (after the per-replica and broadcast inputs).
std::vector<detail::GroupReplicaContext::VariableSlot> variable_slots(
    const Arguments& args, const std::vector<DTensor>& inputs) {
  std::vector<detail::GroupReplicaContext::VariableSlot> slots;
  const size_t first = args.per_replica.size() + args.broadcast.size();
  for (size_t k = 0; k < args.variables.size(); ++k) {
    const ReplicatedVariable& v = args.variables[k];
    const DTensor& value = inputs[first + k];
    slots.push_back({v.name, v.dtype, value.shape(), v.is_mirrored_variable, v.aggregation, value});
  }
  return slots;
}

// [variable]: the host value of each variable the replica assigned (undefined: not assigned).
std::vector<Tensor> assigned_values(const detail::GroupReplicaContext& ctx) {
  std::vector<Tensor> values;
  for (const auto& slot : ctx.variables()) {
    values.push_back(slot.assignments > 0 ? to_host(slot.value) : Tensor());
  }
  return values;
}

// Waits for the work queued on a replica's cores (FIFO: what other callers queued before it
// too); a core still busy at the call's deadline: kDeadlineExceeded naming it.
void synchronize_cores(const std::vector<Device*>& cores, const detail::CrossReplicaGroup& group) {
  for (Device* d : cores) {
    if (!d->stream().synchronize(group.deadline())) {
      detail::throw_error(ErrorCode::kDeadlineExceeded, kComponent,
                          "the work of {} did not finish within the call's {} ms (running '{}', "
                          "{} ops pending)",
                          d->name(), group.timeout().count(), d->stream().current_op(),
                          d->stream().pending());
    }
  }
}

// After a failure: lets the cores' queued work drain, until the call's deadline at most (its
// errors are the failure's consequences), so that the next user of the devices starts clean.
void drain_cores(const std::vector<Device*>& cores, const detail::CrossReplicaGroup& group) {
  for (Device* d : cores) {
    try {
      d->stream().synchronize(group.deadline());
    } catch (...) {  // already reported through the replica's own failure
    }
  }
}

// What the replicas of one call share with the caller. Every replica thread holds it, so that a
// replica still running when replicate() returns (a late one, detached) has all it uses.
struct Call {
  Arguments args;
  std::shared_ptr<detail::CrossReplicaGroup> group;
  Runtime* runtime;
  std::vector<std::vector<Device*>> cores;    // [replica][core]
  std::vector<std::vector<DTensor>> outputs;  // [replica]; read once its thread is done
  std::vector<std::vector<Tensor>> assigned;  // [replica][variable], as outputs
  // Across clients with a mirrored variable: the replicas exchange their assignments before
  // returning (variable_write_back.h); the first of this client's replicas fills the rows of
  // the other clients' replicas.
  bool exchange_mirrored = false;
  int first_local = 0;
  std::mutex mu;
  std::condition_variable done_cv;
  std::vector<bool> done;  // [replica]: its thread has nothing more to do
};

void run_replica(int r, const std::shared_ptr<Call>& call) {
  detail::CrossReplicaGroup& group = *call->group;
  const std::vector<Device*>& cores = call->cores[static_cast<size_t>(r)];
  const auto fail = [&](ErrorCode code, const std::string& what) {
    group.record_failure(r, code, what);
    group.abort(fmt::format("replica {} failed: {}", r, what));
    group.note(r, "waiting for its cores' work after its failure");
    drain_cores(cores, group);
  };
  try {
    const Mesh mesh = detail::replica_core_mesh(r, cores);
    // Shared, so that a context the computation kept expires instead of dangling.
    const auto ctx =
        std::make_shared<detail::GroupReplicaContext>(r, mesh, *call->runtime, call->group);
    std::vector<DTensor> outputs;
    {
      const detail::ExpireOnExit expiry(*ctx, "replicate() returned");
      DefaultMeshScope scope(mesh);
      group.note(r, "placing its inputs");
      std::vector<DTensor> inputs = place_inputs(call->args, r, mesh, *call->runtime);
      ctx->bind_variables(variable_slots(call->args, inputs));
      group.note(r, detail::CrossReplicaGroup::kInComputation);
      const detail::ReplicaThreadScope replica_thread(r, group.num_replicas());
      outputs = call->args.computation(*ctx, inputs);
    }
    std::vector<Tensor> assigned;
    if (call->exchange_mirrored) {
      group.note(r, "exchanging its assignments of mirrored variables with the other replicas");
      assigned = assigned_values(*ctx);
      std::vector<std::vector<Tensor>> all =
          detail::exchange_mirrored(*ctx, call->args.variables, assigned);
      if (r == call->first_local) {
        for (size_t q = 0; q < all.size(); ++q) {
          if (call->cores[q][0] == nullptr) call->assigned[q] = std::move(all[q]);
        }
      }
    }
    group.finished(r);
    for (size_t k = 0; k < outputs.size(); ++k) {
      if (!outputs[k].defined()) {
        detail::throw_invalid(kComponent, "the computation returned a null DTensor as output {}",
                              k);
      }
    }
    group.note(r, "waiting for its cores' work");
    synchronize_cores(cores, group);
    call->assigned[static_cast<size_t>(r)] =
        call->exchange_mirrored ? std::move(assigned) : assigned_values(*ctx);
    call->outputs[static_cast<size_t>(r)] = std::move(outputs);
  } catch (const abi::__forced_unwind&) {
    throw;  // the thread is being ended (an exiting Python interpreter does that): let it end
  } catch (const Error& e) {
    fail(e.code(), e.what());
  } catch (const std::exception& e) {
    fail(ErrorCode::kInternal, e.what());
  } catch (...) {
    fail(ErrorCode::kInternal, "an exception that is not a std::exception");
  }
  group.note(r, "done");
  {
    std::lock_guard<std::mutex> lock(call->mu);
    call->done[static_cast<size_t>(r)] = true;
  }
  call->done_cv.notify_all();
}

// How long replicate() waits past its deadline for replicas whose own waits end at the
// deadline to report (their errors name what they waited for): 5% of the timeout, 10 ms to 1 s.
// A replica in its own code is not waited for.
std::chrono::milliseconds grace(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 20, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
}

// Waits for every replica thread until the deadline, then, while some replica is still in one
// of tessel's waits (which end at the deadline and report what they waited for), until the
// deadline + grace; joins those that finished. Each one still running is late: recorded as
// kDeadlineExceeded naming it and what it is doing, the group aborted (its next collective
// fails with kAborted), its thread detached.
void finish_threads(Call& call, std::vector<std::thread>& threads, Clock::time_point deadline) {
  const detail::CrossReplicaGroup& group = *call.group;
  const auto all_done = [&] {
    return std::all_of(call.done.begin(), call.done.end(), [](bool d) { return d; });
  };
  const auto only_computations_left = [&] {
    for (size_t r = 0; r < call.done.size(); ++r) {
      if (!call.done[r] &&
          group.doing(static_cast<int>(r)) != detail::CrossReplicaGroup::kInComputation) {
        return false;
      }
    }
    return true;
  };
  std::vector<bool> done;
  {
    std::unique_lock<std::mutex> lock(call.mu);
    if (!call.done_cv.wait_until(lock, deadline, all_done)) {
      call.done_cv.wait_until(lock, deadline + grace(group.timeout()),
                              [&] { return all_done() || only_computations_left(); });
    }
    done = call.done;
  }
  std::vector<int> late;
  for (size_t r = 0; r < threads.size(); ++r) {
    if (!threads[r].joinable()) continue;
    if (done[r]) {
      threads[r].join();
      continue;
    }
    late.push_back(static_cast<int>(r));
    call.group->record_failure(
        static_cast<int>(r), ErrorCode::kDeadlineExceeded,
        fmt::format("still {} at the call's deadline ({} ms); replicate() returned without it "
                    "(its thread goes on detached: its next collective fails with kAborted)",
                    group.doing(static_cast<int>(r)), group.timeout().count()));
    threads[r].detach();
  }
  if (!late.empty()) {
    call.group->abort(fmt::format("replicate() passed its deadline of {} ms with replica {} late",
                                  group.timeout().count(), late.front()));
  }
}

// Every replica returns the same number of outputs with the same dtypes (TF's output_types);
// checked among this client's replicas (`local`).
void check_outputs_agree(const std::vector<std::vector<DTensor>>& outputs,
                         const std::vector<bool>& local) {
  const auto first_local = static_cast<size_t>(std::find(local.begin(), local.end(), true) - local.begin());
  if (first_local == local.size()) return;
  const std::vector<DTensor>& first = outputs[first_local];
  for (size_t r = first_local + 1; r < outputs.size(); ++r) {
    if (!local[r]) continue;
    const std::vector<DTensor>& outs = outputs[r];
    if (outs.size() != first.size()) {
      detail::throw_invalid(kComponent, "replica {} returned {} outputs and replica {} returned {}",
                            r, outs.size(), first_local, first.size());
    }
    for (size_t k = 0; k < outs.size(); ++k) {
      if (outs[k].dtype() != first[k].dtype()) {
        detail::throw_invalid(kComponent,
                              "output {} is {} on replica {} and {} on replica {}; every replica "
                              "returns the same output types",
                              k, dtype_name(outs[k].dtype()), r, dtype_name(first[k].dtype()),
                              first_local);
      }
    }
  }
}

}  // namespace

std::vector<std::vector<std::string>> replica_device_names(const ReplicateMetadata& metadata,
                                                           Runtime& runtime) {
  return detail::place_replicas(metadata, runtime).names;
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
  const detail::ReplicaPlacement placement = detail::place_replicas(options.metadata, runtime);
  const int replicas = options.metadata.num_replicas;
  auto call = std::make_shared<Call>();
  call->args = Arguments{computation,
                         per_replica_inputs,
                         broadcast_inputs,
                         variables,
                         guaranteed_constants,
                         std::set<int>(options.packed_inputs.begin(), options.packed_inputs.end())};
  check_per_replica_inputs(call->args, replicas);
  call->exchange_mirrored = placement.spans_clients() && detail::any_mirrored(variables);

  const auto timeout =
      options.timeout.count() == 0 ? default_collective_timeout() : options.timeout;
  const Clock::time_point deadline = Clock::now() + timeout;
  call->group = std::make_shared<detail::CrossReplicaGroup>(detail::GroupService::of(runtime),
                                                            placement, timeout, deadline);
  call->runtime = &runtime;
  call->cores = placement.devices;
  call->outputs.resize(static_cast<size_t>(replicas));
  // Another client's replica assigns nothing here.
  call->assigned.assign(static_cast<size_t>(replicas), std::vector<Tensor>(variables.size()));
  std::vector<bool> local;
  for (int r = 0; r < replicas; ++r) local.push_back(placement.is_local(r));
  call->first_local = static_cast<int>(std::find(local.begin(), local.end(), true) - local.begin());
  call->done.assign(static_cast<size_t>(replicas), false);
  for (int r = 0; r < replicas; ++r) call->done[static_cast<size_t>(r)] = !local[static_cast<size_t>(r)];
  std::vector<std::thread> threads(static_cast<size_t>(replicas));  // not joinable: not started
  for (int r = 0; r < replicas; ++r) {
    if (!local[static_cast<size_t>(r)]) continue;  // runs in its own client
    try {
      threads[static_cast<size_t>(r)] = std::thread(run_replica, r, call);
    } catch (const std::system_error& e) {
      const std::string what =
          fmt::format("{}: could not start the controller thread: {}", kComponent, e.what());
      call->group->record_failure(r, ErrorCode::kUnavailable, what);
      call->group->abort(what);
      std::lock_guard<std::mutex> lock(call->mu);
      std::fill(call->done.begin() + r, call->done.end(), true);  // never started
      break;
    }
  }
  finish_threads(*call, threads, deadline);
  if (auto failure = call->group->first_failure()) {
    throw Error(failure->code, kComponent,
                fmt::format("replica {}: {}", failure->replica, failure->what));
  }
  check_outputs_agree(call->outputs, local);
  detail::write_back_variables(call->args.variables, call->assigned);
  return std::move(call->outputs);
}

}  // namespace tessel
