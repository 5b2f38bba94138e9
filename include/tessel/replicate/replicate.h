// replicate(): runs one computation on N replicas at once, each on its own device(s), with
// cross-replica collectives between them (TF's _TPUReplicate with TPUReplicatedInput /
// TPUReplicatedOutput around it; seed 105, docs/replicate.md).
//
//   ReplicateOptions opts;
//   opts.metadata.num_replicas = 2;                  // 2 replicas x 1 core: CPU:0 and CPU:1
//   auto outs = replicate(
//       [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
//         DTensor local = multiply(in[0], in[1]);    // in[0]: this replica's x, in[1]: w
//         return std::vector<DTensor>{ctx.all_reduce(local)};
//       },
//       {{x0, x1}},          // per-replica inputs: [input][replica]
//       {w},                 // broadcast inputs: one value copied to every replica
//       {}, {}, opts);
//   to_host(outs[1][0])      // replica 1's output: x0 * w + x1 * w
//
// The computation runs once per replica, concurrently, on one controller thread per replica,
// with this replica's core mesh as the default mesh (dtensor_api.h). It receives, in order:
// the per-replica inputs (its own value; a packed input's one value), the broadcast inputs,
// the variables (its own value, or the mirrored one) and the guaranteed constants, each as a
// DTensor replicated on ctx.mesh(). It returns its outputs; replicate() returns them as
// [replica][output] after the work of every replica has finished on its devices.
//
// Placement: metadata.device_assignment (with metadata.topology) when given, else
// DeviceAssignment::build over metadata.topology, or over the runtime's devices
// (Runtime::topology) when no topology is given, with computation_shape
// [num_cores_per_replica, 1, ..]. Every assigned device must be a device of the runtime: this
// runtime's task and job, CPU, index < num_devices() (kInvalidArgument naming the replica,
// core and device). With num_cores_per_replica > 1, metadata.use_spmd_for_xla_partitioning
// must be on (the body is DTensor SPMD over its cores); off: kUnimplemented (TF's
// model parallelism without SPMD places ops on cores by hand, which tessel has no API for).
//
// Across processes: when the runtime is a client of a multi-client program (processes under
// mpirun with the runtime named after this one, as Runtime::global() is; or set_cluster), the
// replicas are placed over every client's devices: the default topology is one task per client
// with as many devices as this runtime (Topology::for_hosts(clients, num_devices())), a given
// one names clients by task. Every client makes the same call (same metadata and arguments);
// each runs its own replicas, the cross-replica collectives cross the processes (per-core groups
// joined through the cluster, for this call), and the result lists only its own replicas'
// outputs (another client's replica has an empty list). An assigned device beyond the clients
// or beyond the devices of a client: kInvalidArgument naming the replica, core and device; a
// replica over several clients: kUnimplemented. A replica's failure reaches the other clients'
// replicas through their collectives (kAborted). Per-replica variables are written back by the
// client of each replica; mirrored ones by every client running a replica, with the value of
// the one-process call: the replicas exchange their assignments through the call's groups
// before returning (a collective of the call, by its deadline), and each client combines them
// alike (or raises the same error). compile() works across processes the same way (compile.h).
//
// Checks before anything runs, each Error kInvalidArgument from "replicate" unless noted:
// metadata.validate_for_run() (num_replicas >= 1, ...); num_replicas * num_cores_per_replica
// devices at most the runtime's (naming both counts); every per-replica input has num_replicas
// values (naming the input and both counts), one when packed; no null tensor (naming it); the
// replicas' values of an input have one dtype and merging shapes (BR-105-01,
// merge_replicated_input_shapes: naming the input, both replicas and both shapes); variables
// pass merge_variable_handles (BR-105-02).
//
// Failure: when a replica's computation throws, every cross-replica group is aborted so that
// the other replicas' collectives fail at once (kAborted), and replicate() throws, once every
// replica has stopped (or is late, below), Error(code, "replicate", "replica <k>: <what>") for the
// first failure that is not a consequence of another one (kAborted), with that failure's code (a
// non-tessel exception counts as kInternal).
//
// Deadline: options.timeout is one deadline for the whole call, from its start. Every wait
// inside ends by it — each collective's rendezvous (a replica that does not arrive is
// kDeadlineExceeded naming it, the collective and what it is doing), the collective itself, its
// start on a busy stream (naming the device and what its stream runs), the final
// synchronisation of each replica's devices — and replicate() returns by the deadline + 5 %
// (10 ms to 1 s, for those waits to report) whatever the replicas' own code does.
// Late replicas: a replica still running at that point (its own code overran) is
// kDeadlineExceeded "replica <k>: still running its computation at the call's deadline ...",
// the call's groups are aborted and its thread is detached. It keeps what it uses (the call's
// arguments are copied, the groups and its context are shared), so nothing is freed under it;
// its next collective throws kAborted, the ops it dispatches still run on its devices. The
// runtime must outlive it (Runtime::global() lives until static destruction).
//
// Concurrency contract: replicate() may be called from any number of threads at once, over the
// same devices or others, beside DTensor ops, relayouts and CrossDeviceOps on those devices.
// Calls run concurrently, interleaved on the devices: each device runs work in the order it was
// enqueued (FIFO, so no caller starves), and the parts of each cross-replica collective are
// enqueued together by the last replica to reach it, under the process's launch lock, so the
// collectives of concurrent calls reach every stream in one order and cannot wait for each
// other. Each call finishes within its timeout (+ the 5 % above), or fails with
// kDeadlineExceeded naming what it waited for. A call's failure aborts its own groups only.
// The computation runs on the call's replica threads, never on the caller's.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "tessel/core/tensor.h"
#include "tessel/dtensor/dtensor.h"
#include "tessel/replicate/replica_context.h"
#include "tessel/replicate/replicate_metadata.h"
#include "tessel/replicate/replicated_io.h"
#include "tessel/runtime/runtime.h"

namespace tessel {

using ReplicaComputation =
    std::function<std::vector<DTensor>(ReplicaContext& ctx, const std::vector<DTensor>& inputs)>;

struct ReplicateOptions {
  ReplicateMetadata metadata;            // num_replicas (>= 1 to run), num_cores_per_replica, ...
  Runtime* runtime = nullptr;            // null: Runtime::global()
  std::chrono::milliseconds timeout{0};  // the whole call's deadline (see above); 0: the
                                         // default collective timeout
                                         // (default_collective_timeout())
  // Indexes into per_replica_inputs of packed inputs (TF's TPUReplicatedInput is_packed: one
  // input stands for all replicas): such an input has one value, and every replica receives it.
  std::vector<int> packed_inputs;
};

std::vector<std::vector<DTensor>> replicate(
    const ReplicaComputation& computation,
    const std::vector<std::vector<Tensor>>& per_replica_inputs,
    const std::vector<Tensor>& broadcast_inputs = {},
    const std::vector<ReplicatedVariable>& variables = {},
    const std::vector<Tensor>& guaranteed_constants = {}, const ReplicateOptions& options = {});

// The devices replicate() would run `metadata`'s replicas on: [replica][logical core] -> the
// runtime device's name. The placement checks above (and metadata.validate_for_run()) apply.
std::vector<std::vector<std::string>> replica_device_names(const ReplicateMetadata& metadata,
                                                           Runtime& runtime);

}  // namespace tessel
