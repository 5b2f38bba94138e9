// CrossDeviceOps: reduce, batch_reduce, broadcast and gather over the devices of a Runtime, with
// TensorFlow's tf.distribute semantics (cross_device_ops.py), seen from the controller.
//
//   Runtime& rt = Runtime::global();
//   PerReplica grads({"/cpu:0", "/cpu:1"}, {g0, g1});
//   NcclAllReduce ops(/*num_packs=*/1, rt);
//   Mirrored sum = ops.reduce(ReduceOp::kSum, grads, grads);       // g0 + g1 on both devices
//   Mirrored mean = ops.reduce(ReduceOp::kMean, grads, "/cpu:0");  // (g0 + g1) / 2 on CPU:0
//   std::vector<Mirrored> both = ops.batch_reduce(ReduceOp::kSum, {{grads, grads}, {b, b}});
//   Mirrored cat = ops.gather(grads, grads, /*axis=*/0);           // [g0; g1] everywhere
//
// Implementations (TF's names and rules, collectives-replication-config.md §A):
// - ReductionToOneDevice: the values are reduced on one device (reduce_to_device, else the first
//   destination), then copied to every destination. MEAN divides by the number of values.
// - AllReduceCrossDeviceOps (NcclAllReduce, HierarchicalCopyAllReduce): when the destinations
//   are the value's devices, one all-reduce per pack (num_packs, tessel/alloc/fusion_rules.h) over a communicator
//   of those devices; otherwise ReductionToOneDevice. MEAN divides by the number of destination
//   devices. IndexedSlices always go through ReductionToOneDevice.
// - CollectiveAllReduce: its own devices, in a group of group_size devices over all workers
//   (several Runtimes in one process join by group key, as TF's collective keys do; across
//   processes, TF's MultiWorkerMirroredStrategy, each client of a multi-client program is one
//   worker, see the class); one all-reduce per bytes_per_pack pack; MEAN divides by group_size.
//
// Shared rules, enforced by the base class before any implementation runs, in TF's order:
// destinations must not be empty (kInvalidArgument, kDestinationsEmptyMessage); an empty value:
// "`per_replica_value` must be non-empty"; ReduceOp SUM and MEAN as TF, plus MAX, MIN and PROD
// for dense values (a tessel extension; IndexedSlices: "`reduce_op` must be Reduce.SUM or
// Reduce.MEAN."); the single-replica shortcut (one worker, one component, destinations equal
// to the value's device): reduce and gather return an identity copy, batch_reduce the values
// themselves, with no MEAN division; gather of IndexedSlices: kUnimplemented "gather/all_gather
// does not support IndexedSlices"; an empty batch_reduce returns no results (TF crashes).
// Results are Mirrored over the destination devices in destination order (regroup() in
// distributed_values.h gives TF's plain tensor for one device). They are new tensors (never the
// inputs, except in batch_reduce's shortcut), allocated from the device that holds them; a
// packed all-reduce's results are views into that device's pack buffer, and collective gathers
// come from the host allocator as the Communicator returns them.
//
// Execution: every step runs on the streams of the devices involved (stream.h), in order with
// the work already enqueued there; the call returns when the steps are done. Collectives use
// the runtime's communicator group of the device set (one per set, shared by every object of
// the runtime, gone with the runtime). CommunicationOptions.timeout_seconds bounds the whole
// call, measured from its start: every step of it (a reduce and then its copies, each pair of a
// batch_reduce that is reduced pair by pair) shares that one budget.
// A failure throws the root cause (not the Aborted of its peers) with its code, naming the op and
// the device: "CrossDeviceOps: all_reduce on /job:.../device:CPU:1 failed: ...". A device whose
// stream does not reach the step within the timeout: kDeadlineExceeded naming it and what its
// stream is running. After a failure the device set gets a fresh communicator group.
//
// Context (BR-70-05): TF allows these calls only in a cross-replica context. A call from inside
// replicate()'s computation (a replica context: the replica's thread) fails with
// kFailedPrecondition naming the replica (a replica reduces with its ReplicaContext's
// collectives instead), and so does a call from a task running on one of the runtime's streams,
// which would wait for itself; every other thread is a controller (cross-replica context).
//
// Thread safety: calls on one object are serialised; different objects may be used from
// different threads (several workers, one per thread; or several objects over the same devices:
// each step's tasks are enqueued on all its streams at once under a process-wide lock, TF's
// collective launch lock, so concurrent steps cannot wait for each other in opposite orders, and
// every member of their shared group sees them in the same order).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "tessel/core/reduce_op.h"
#include "tessel/distribute/communication_options.h"
#include "tessel/distribute/destinations.h"
#include "tessel/distribute/distributed_values.h"
#include "tessel/runtime/runtime.h"

namespace tessel {

namespace detail {
class DeviceGroups;
struct CallDeadline;
}

// One step a call ran, in order, as seen from its first device.
struct PlanStep {
  // "all_reduce", "all_gather" (collectives); "reduce_to_one", "gather_to_one" (on one device);
  // "copy" (identity copies, broadcast).
  std::string kind;
  std::string algorithm;             // collectives: algorithm_name(); on one device: that device
  int num_tensors = 0;               // tensors fused into this step
  int64_t num_elements = 0;          // elements per participant
  DType dtype = DType::kF32;         // of the data moved
  std::vector<std::string> devices;  // the local devices taking part, in rank order
};

// What the last call on an object did; lets tests and users check fusion and MEAN counts.
struct CrossDevicePlan {
  std::string method;  // "reduce", "batch_reduce", "broadcast", "gather"
  // "single_replica_shortcut", "reduce_to_one_device", "all_reduce", "collective", "per_pair",
  // "broadcast", "empty".
  std::string path;
  std::vector<PlanStep> steps;
  std::vector<int64_t> mean_divisors;  // per MEAN reduction, in the order they ran
  // Steps that are collectives (all_reduce or all_gather).
  int num_collectives() const;
};

using ValueDestinationPair = std::pair<DistributedValues, Destinations>;

// The base class. Its own implementation hooks throw kUnimplemented with TF's texts, except
// broadcast (identity copies); a subclass overrides them.
class CrossDeviceOps {
 public:
  explicit CrossDeviceOps(Runtime& runtime = Runtime::global());
  virtual ~CrossDeviceOps();
  CrossDeviceOps(const CrossDeviceOps&) = delete;
  CrossDeviceOps& operator=(const CrossDeviceOps&) = delete;

  // Reduces the components of `per_replica_value` and places the result on `destinations`.
  Mirrored reduce(ReduceOp reduce_op, const DistributedValues& per_replica_value,
                  const Destinations& destinations, const CommunicationOptions& options = {});
  // One reduce per pair, fused where the implementation can; results in pair order.
  std::vector<Mirrored> batch_reduce(
      ReduceOp reduce_op, const std::vector<ValueDestinationPair>& value_destination_pairs,
      const CommunicationOptions& options = {});
  // An identity copy of `tensor` on every destination.
  Mirrored broadcast(const Tensor& tensor, const Destinations& destinations);
  // The components concatenated along `axis` (negative counts from the end) in component order
  // (collectives: rank order), on every destination. Sizes along `axis` may differ; every other
  // dimension and the dtype must agree (kInvalidArgument naming both components otherwise).
  Mirrored gather(const DistributedValues& per_replica_value, const Destinations& destinations,
                  int axis, const CommunicationOptions& options = {});

  // The plan of the last call that got past validation.
  CrossDevicePlan last_plan() const;
  // Collectives (all_reduce, all_gather) issued by this object since it was made.
  int64_t num_collectives() const;
  Runtime& runtime() const { return *runtime_; }
  // TF's _num_between_graph_workers: 1, or group_size / devices for CollectiveAllReduce.
  int num_between_graph_workers() const { return num_workers_; }

 protected:
  // TF's hooks. Called with validated arguments (destinations not empty, value not empty, op
  // allowed for the value), outside the shortcut, with the call's plan to fill.
  virtual Mirrored reduce_implementation(ReduceOp reduce_op, const DistributedValues& value,
                                         const Destinations& destinations,
                                         const CommunicationOptions& options);
  virtual std::vector<Mirrored> batch_reduce_implementation(
      ReduceOp reduce_op, const std::vector<ValueDestinationPair>& pairs,
      const CommunicationOptions& options);
  virtual Mirrored broadcast_implementation(const Tensor& tensor, const Destinations& destinations);
  virtual Mirrored gather_implementation(const DistributedValues& value,
                                         const Destinations& destinations, int axis,
                                         const CommunicationOptions& options);

  // Devices of the runtime named by `names` (full or partial names); an unknown one: kNotFound.
  std::vector<Device*> resolve(const std::vector<std::string>& names) const;
  // The destination devices: empty destinations fail with kDestinationsEmptyMessage, a device
  // named twice with kInvalidArgument.
  std::vector<Device*> destinations_of(const Destinations& destinations) const;
  // The devices of the value's components; two components on one device: kInvalidArgument.
  std::vector<Device*> devices_of(const DistributedValues& value) const;
  // Whether every pair's value and destinations lie on one and the same device set (checking
  // every pair's devices and destinations as above, in pair order).
  bool on_one_device_set(const std::vector<ValueDestinationPair>& pairs) const;
  // The plan being filled by the current call.
  CrossDevicePlan& plan() { return plan_; }
  // The current call's deadline: `options`' timeout (or the process default) after the call
  // started. Every step of one public call uses it, so the call as a whole ends in time.
  detail::CallDeadline call_deadline(const CommunicationOptions& options) const;
  void set_num_between_graph_workers(int n) { num_workers_ = n; }
  // The communicator groups of this object's calls (the runtime's, per device set).
  detail::DeviceGroups& groups() { return *groups_; }

 private:
  void begin(const char* method);
  void finish();
  // TF's shortcut of reduce and gather: with one worker and a single replica already on the
  // destinations there is nothing to combine, and the value is copied to them; nullopt when the
  // call has more to do.
  std::optional<Mirrored> single_replica_copy(const DistributedValues& value,
                                              const std::vector<Device*>& devices,
                                              const std::vector<Device*>& dests,
                                              const CommunicationOptions& options);

  Runtime* runtime_;
  int num_workers_ = 1;
  std::unique_ptr<detail::DeviceGroups> groups_;
  mutable std::mutex call_mu_;  // serialises calls
  mutable std::mutex plan_mu_;  // guards last_plan_ and num_collectives_
  CrossDevicePlan plan_;        // the current call's (call_mu_ held)
  std::chrono::steady_clock::time_point call_started_;  // the current call's (call_mu_ held)
  CrossDevicePlan last_plan_;
  int64_t num_collectives_ = 0;
};

// Reduce on one device, then copy to the destinations (TF: ReductionToOneDevice).
class ReductionToOneDevice : public CrossDeviceOps {
 public:
  // Sums a list of equally shaped tensors (TF's accumulation_fn; default add_n). It runs on the
  // reduce device's stream and is used for SUM and MEAN (MEAN then divides by the count);
  // MAX, MIN and PROD always use tessel's elementwise reduction.
  using AccumulationFn = std::function<Tensor(const std::vector<Tensor>&)>;

  // reduce_to_device: "" (the first destination) or a device of `runtime` (kNotFound otherwise).
  explicit ReductionToOneDevice(std::string reduce_to_device = "",
                                AccumulationFn accumulation_fn = nullptr,
                                Runtime& runtime = Runtime::global());
  const std::string& reduce_to_device() const { return reduce_to_device_; }

 protected:
  Mirrored reduce_implementation(ReduceOp reduce_op, const DistributedValues& value,
                                 const Destinations& destinations,
                                 const CommunicationOptions& options) override;
  std::vector<Mirrored> batch_reduce_implementation(ReduceOp reduce_op,
                                                    const std::vector<ValueDestinationPair>& pairs,
                                                    const CommunicationOptions& options) override;
  Mirrored gather_implementation(const DistributedValues& value, const Destinations& destinations,
                                 int axis, const CommunicationOptions& options) override;

 private:
  std::string reduce_to_device_;  // full name, or ""
  AccumulationFn accumulation_fn_;
};

// All-reduce over the value's devices (TF: AllReduceCrossDeviceOps).
class AllReduceCrossDeviceOps : public CrossDeviceOps {
 public:
  // all_reduce_alg: TF's "nccl" (tessel's fastest in-process all-reduce, Algorithm::kAuto) or
  // "hierarchical_copy" (Algorithm::kHierarchical), or any name of algorithm_from_name() (a
  // tessel extension; TF treats every other name as hierarchical_copy, tessel rejects unknown
  // names with kInvalidArgument). num_packs: 0 = one all-reduce per tensor; K > 0 = K packs per
  // dtype (tessel/alloc/fusion_rules.h); negative: kInvalidArgument (TF silently does not pack).
  explicit AllReduceCrossDeviceOps(std::string all_reduce_alg = "nccl", int num_packs = 1,
                                   Runtime& runtime = Runtime::global());
  const std::string& all_reduce_alg() const { return all_reduce_alg_; }
  int num_packs() const { return num_packs_; }

 protected:
  Mirrored reduce_implementation(ReduceOp reduce_op, const DistributedValues& value,
                                 const Destinations& destinations,
                                 const CommunicationOptions& options) override;
  std::vector<Mirrored> batch_reduce_implementation(ReduceOp reduce_op,
                                                    const std::vector<ValueDestinationPair>& pairs,
                                                    const CommunicationOptions& options) override;
  Mirrored gather_implementation(const DistributedValues& value, const Destinations& destinations,
                                 int axis, const CommunicationOptions& options) override;

 private:
  std::vector<Mirrored> batch_all_reduce(ReduceOp reduce_op,
                                         const std::vector<ValueDestinationPair>& pairs,
                                         const CommunicationOptions& options);
  std::string all_reduce_alg_;
  Algorithm algorithm_;
  int num_packs_;
};

// TF: NcclAllReduce. num_packs < 0: kInvalidArgument
// "NCCL all-reduce requires num_packs >= 0, but {n} is specified".
class NcclAllReduce : public AllReduceCrossDeviceOps {
 public:
  explicit NcclAllReduce(int num_packs = 1, Runtime& runtime = Runtime::global());
};

// TF: HierarchicalCopyAllReduce, run as Algorithm::kHierarchical (within each host, then across
// hosts) rather than TF's fixed two-groups-of-four DGX-1 tree. num_packs < 0: kInvalidArgument
// "HierarchicalCopy requires num_packs >= 0, but {n} is specified".
class HierarchicalCopyAllReduce : public AllReduceCrossDeviceOps {
 public:
  explicit HierarchicalCopyAllReduce(int num_packs = 1, Runtime& runtime = Runtime::global());
};

// Collectives over a group of group_size devices, `devices` being this worker's (TF:
// CollectiveAllReduce). Values must live on exactly these devices.
class CollectiveAllReduce : public CrossDeviceOps {
 public:
  // Errors (kInvalidArgument): no devices, a device twice, group_size < 1, and TF's
  // "group_size must be divisible by the number of devices."; unknown devices: kNotFound.
  // With group_size > devices, the other workers (other Runtimes of this process, each with its
  // own CollectiveAllReduce) must run the same calls in the same order: groups are matched by
  // TF's group key (1, 2, ... per distinct device set, in order of first use) and group_size.
  // Across processes (TF's MultiWorkerMirroredStrategy): when `runtime` is a client of a
  // multi-client program (under mpirun, a runtime named after this process, as
  // Runtime::global() is: job and task of clients.h; or one given a cluster by set_cluster),
  // every client is one worker, calls with its local per-replica values, and the group is every
  // client's devices named as `devices` but for the task (every worker has the same local
  // devices); group_size must then be clients x devices (kInvalidArgument naming both). The
  // group is joined through the cluster DTensor's meshes use (shared memory within a host, MPI
  // across) on the first call, within its deadline; the results equal the in-process ones.
  CollectiveAllReduce(std::vector<std::string> devices, int group_size,
                      CommunicationOptions options = {}, Runtime& runtime = Runtime::global());
  const std::vector<std::string>& devices() const { return devices_; }  // full names
  int group_size() const { return group_size_; }
  const CommunicationOptions& options() const { return options_; }

 protected:
  Mirrored reduce_implementation(ReduceOp reduce_op, const DistributedValues& value,
                                 const Destinations& destinations,
                                 const CommunicationOptions& options) override;
  std::vector<Mirrored> batch_reduce_implementation(ReduceOp reduce_op,
                                                    const std::vector<ValueDestinationPair>& pairs,
                                                    const CommunicationOptions& options) override;
  Mirrored gather_implementation(const DistributedValues& value, const Destinations& destinations,
                                 int axis, const CommunicationOptions& options) override;

 private:
  std::vector<Mirrored> all_reduce_values(ReduceOp reduce_op,
                                          const std::vector<DistributedValues>& values,
                                          const CommunicationOptions& options);
  std::vector<std::string> devices_;
  int group_size_;
  CommunicationOptions options_;
};

// TF's reduce_non_distributed_value: reducing a value that is the same on every one of
// `num_replicas_in_graph` replicas. MEAN (and tessel's MAX and MIN) return `value` itself; with
// one replica any op copies it to `destinations` (empty: kDestinationsEmptyMessage); SUM or PROD
// over several replicas is kInvalidArgument "A non-DistributedValues value <value> cannot be
// reduced with the given reduce op <op>." (summing copies of one value is not clearly defined).
// Python also rejects a DistributedValues with TF's text; C++ does not compile it.
std::variant<Tensor, Mirrored> reduce_non_distributed_value(ReduceOp reduce_op, const Tensor& value,
                                                            const Destinations& destinations,
                                                            int num_replicas_in_graph,
                                                            Runtime& runtime = Runtime::global());

// Names of devices 0..count-1 of `runtime` (a default placement for PerReplica values).
// count < 0 or above the device count: kInvalidArgument.
std::vector<std::string> first_devices(int count, const Runtime& runtime = Runtime::global());

}  // namespace tessel
