// ReplicaContext: what one replica of a replicated computation sees (replicate.h) — its id, the
// replica count, the mesh of its cores, its runtime — and the cross-replica collectives
// (TF's tf.distribute ReplicaContext / tpu.cross_replica_sum under TPUStrategy).
//
//   auto step = [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
//     DTensor grad = multiply(in[0], 2.0);                     // runs on this replica's cores
//     DTensor sum = ctx.all_reduce(grad);                      // sum over the replicas
//     DTensor all = ctx.all_gather(in[0], /*axis=*/0);         // [R * n, ...], replica order
//     return std::vector<DTensor>{sum, ctx.broadcast(in[0], /*root_replica=*/0)};
//   };
//
// mesh() is a 1-D mesh with dimension "core" over the replica's num_cores_per_replica devices
// (logical core c is mesh device c), named "replica_<id>". The computation's inputs arrive
// replicated on it and ops on them run on all its cores (DTensor SPMD).
//
// Collectives: every replica calls the same collectives in the same order, each with a DTensor
// on its own mesh() of the same shape, dtype and layout (the sharding specs and Partial dims
// compared, the mesh being each replica's own); the result has that layout. Core c of every
// replica forms one group: each collective acts on every core's component at once, on the
// cores' streams (in order with the work queued there). Sharded, uneven and Partial layouts
// are handled: all_gather unshards the gathered axis first when it is sharded, all_reduce
// reduces Partial dims first unless the pending reduction commutes with `op`.
// Errors (component "ReplicaContext"):
// - x null or not on this replica's mesh(), an axis out of range, a root outside
//   [0, num_replicas): kInvalidArgument, before anything is sent;
// - replicas calling different collectives (or different shapes, dtypes or layouts) at the same
//   position: kFailedPrecondition naming both replicas and both calls, on every replica;
// - a replica that returned from its computation while others wait in a collective it will
//   never call: kFailedPrecondition naming it, at once, not at the deadline;
// - a replica that failed: every other replica's pending and later collectives throw kAborted
//   naming the failure; a replica that does not arrive in time: kDeadlineExceeded naming it
//   (the deadline is ReplicateOptions::timeout).
//
// The protected virtual run_* methods let a tracer (compile.h) substitute a recording context;
// the base class implements the single-replica case (num_replicas() == 1: all_reduce and
// broadcast return x, all_gather returns x, barrier returns) after the same argument checks, and
// throws kFailedPrecondition for more replicas: only replicate()'s contexts have the
// communicators.
//
// Lifetime: replicate() and compile() make their contexts with std::make_shared and expire()
// them when the computation returns (or throws); a holder that kept one (ctx.shared_from_this(),
// or a Python reference) may still read replica_id(), num_replicas() and mesh(), but runtime()
// and every collective then throw kFailedPrecondition "ReplicaContext: <call> used after
// <what ended> (replica <r> of <n>)", e.g. "... after replicate() returned ...": the group and
// communicators of that call are gone. expire() waits for calls in flight on other threads
// (each bounded by its own deadline), so none of them outlives the call's group.
//
// Thread safety: a context belongs to its replica's controller thread; expire() may run while
// other threads call the context (it waits for them, and they then see the expiry).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "tessel/core/reduce_op.h"
#include "tessel/distribute/variable_aggregation.h"
#include "tessel/dtensor/dtensor.h"
#include "tessel/mesh/mesh.h"
#include "tessel/runtime/runtime.h"

namespace tessel {

class ReplicaContext : public std::enable_shared_from_this<ReplicaContext> {
 public:
  virtual ~ReplicaContext();
  ReplicaContext(const ReplicaContext&) = delete;
  ReplicaContext& operator=(const ReplicaContext&) = delete;

  // Plain values, readable for the context's whole life (also after expire()).
  int replica_id() const { return replica_id_; }
  int num_replicas() const { return num_replicas_; }
  // This replica's cores: a 1-D mesh "core" of num_cores_per_replica devices.
  const Mesh& mesh() const { return mesh_; }
  // The runtime of the replica's devices; kFailedPrecondition after expire().
  Runtime& runtime() const;

  // Each collective throws kFailedPrecondition after expire() (see the header comment).
  // Elementwise `op` over the replicas' x (kMean: the sum divided by num_replicas).
  DTensor all_reduce(const DTensor& x, ReduceOp op = ReduceOp::kSum);
  // The replicas' x concatenated along `axis` (negative counts from the end), in replica order.
  DTensor all_gather(const DTensor& x, int axis);
  // Replica root_replica's x, on every replica.
  DTensor broadcast(const DTensor& x, int root_replica);
  // Returns once every replica has called it (after the work queued on this replica's cores).
  void barrier();

  // The replicated variables (replicate()'s `variables`, by index), TF's resource variables
  // inside _TPUReplicate. read_variable(k): this replica's current value of variable k (what it
  // received, or what it last assigned). assign_variable(k, value): sets it; replicate() writes
  // the assigned values into the variables' tensors once every replica has finished without an
  // error (when the call fails nothing is written): a per-replica variable takes each assigning
  // replica's value; a mirrored one (one value for all replicas) the replicas' values combined by
  // its aggregation (SUM, MEAN, ONLY_FIRST_REPLICA: replica 0's), every replica assigning it
  // (TF's mirrored update is a cross-replica step; a mirrored variable assigned by some replicas
  // only is kInvalidArgument at replicate()'s end, naming one that did not).
  // Errors from "ReplicaContext": k outside [0, number of variables); a value null, not on
  // mesh(), of another dtype or shape (TF's "Cannot update variable with shape [2] using a
  // Tensor with shape [3], shapes must be equal."); a mirrored variable with aggregation NONE
  // assigned with more than one replica (TF's "You must specify an aggregation method to update
  // a MirroredVariable in Replica Context"): kInvalidArgument. compile()'s traced computation
  // does not record variable assignments: kUnimplemented. kFailedPrecondition after expire().
  DTensor read_variable(int index) const;
  void assign_variable(int index, const DTensor& value);

  // Ends the context for good: `what_ended` names the call whose computation returned
  // ("replicate() returned"). Waits for the calls in flight. Idempotent; never throws.
  void expire(const std::string& what_ended) noexcept;
  bool expired() const { return expired_.load(); }

 protected:
  // replica_id in [0, num_replicas), a non-empty mesh: kInvalidArgument otherwise.
  ReplicaContext(int replica_id, int num_replicas, Mesh mesh, Runtime& runtime);

  // The collectives of a live context, called with the expiry lock held (see expire()).
  virtual DTensor run_all_reduce(const DTensor& x, ReduceOp op);
  virtual DTensor run_all_gather(const DTensor& x, int axis);
  virtual DTensor run_broadcast(const DTensor& x, int root_replica);
  virtual void run_barrier();

  // The argument checks of the collectives (see the header comment), for subclasses: x defined
  // and on mesh(); axis in [-rank, rank) (returned normalised); root in [0, num_replicas).
  void check_input(const DTensor& x, const char* collective) const;
  int check_axis(const DTensor& x, int axis) const;
  void check_root(int root_replica) const;

  // One replicated variable as a replica sees it (replicate()'s contexts bind them).
  struct VariableSlot {
    std::string name;
    DType dtype;
    Shape shape;
    bool mirrored = false;
    VariableAggregation aggregation = VariableAggregation::kNone;
    DTensor value;  // the input, then the last value assigned
    int assignments = 0;
  };
  // Gives the context its variables (read_variable / assign_variable then work on them).
  void bind_variables(std::vector<VariableSlot> variables);
  const std::vector<VariableSlot>& variables() const { return variables_; }

 private:
  // A shared hold on the context for one call; kFailedPrecondition naming `call` once expired.
  std::shared_lock<std::shared_mutex> enter(const char* call) const;
  [[noreturn]] void throw_expired(const char* call) const;

  int replica_id_;
  int num_replicas_;
  Mesh mesh_;
  Runtime* runtime_;
  mutable std::shared_mutex expiry_mu_;  // shared by calls in flight, exclusive in expire()
  std::atomic<bool> expired_{false};
  std::string what_ended_;  // written once, under expiry_mu_ held exclusively
  bool variables_bound_ = false;
  std::vector<VariableSlot> variables_;
};

}  // namespace tessel
