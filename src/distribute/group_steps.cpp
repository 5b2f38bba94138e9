// Internal: steps that run through a communicator group: packed all-reduce, sparse all-reduce,
// all-gather. Every device of the job runs one task that issues the same collectives in the same
// order; the first device's task is the one the plan describes.
#include <algorithm>
#include <memory>
#include <mutex>

#include "comm/group_step.h"
#include "core/errors.h"
#include "distribute/kernels.h"
#include "distribute/ops_internal.h"
#include "tessel/alloc/scoped_allocator.h"

namespace tessel::detail {
namespace {

// Runs fn(d) for every device d of the job on its stream, with the job's group (group_step.h:
// a failure aborts the group and evicts it, so that the next call gets a fresh one). The
// collectives' scratch memory is the host's: see cross_device_ops.h.
void run_group(const GroupJob& job, const std::string& step,
               const std::function<void(size_t, Communicator&)>& fn) {
  std::shared_ptr<CommGroup> group = job.groups->get(job.devices, job.group_size, job.deadline.at);
  GroupStep group_step("CrossDeviceOps", group,
                       [groups = job.groups, group] { groups->evict(group); },
                       GroupStep::Scratch::kHost);
  for (size_t d = 0; d < job.devices.size(); ++d) {
    Communicator* comm = &group->at(job.devices[d]->name());
    group_step.add(*job.devices[d], comm, [comm, fn, d] { fn(d, *comm); });
  }
  group_step.run(step, job.deadline);
}

// Steps recorded by the first device's task (what it issued depends on the data).
struct StepLog {
  std::mutex mu;
  std::vector<PlanStep> steps;
  void add(PlanStep s) {
    std::lock_guard<std::mutex> lock(mu);
    steps.push_back(std::move(s));
  }
};

// One device's share of a dense batch all-reduce: each pack's bucket is allocated from the
// device (its memory space: a GPU's packs live in the GPU's memory), the inputs are copied into
// it there, the collective runs over it in place (NCCL on CUDA GPUs; a group without device
// collectives stages it through the host, device_path.h) and the results are views of it.
struct PackReducer {
  Device& device;
  Communicator& comm;
  const std::vector<Tensor>& in;
  ReduceOp op;
  int64_t divisor;
  CollectiveOptions options;

  void reduce(const PackSpec& p, std::vector<Tensor>& out) const {
    const Tensor& first = in[static_cast<size_t>(p.tensors[0])];
    // The communicator's kMean divides by the group size; on device memory only floating dtypes
    // (NCCL's ncclAvg takes no integers), so an integer mean there, or another divisor, is a sum
    // divided afterwards (truncating, as the host's kMean does).
    const bool comm_divides = op == ReduceOp::kMean && divisor == comm.size() &&
                              (first.memory_space().is_host() || is_floating(first.dtype()));
    const bool divide_after = op == ReduceOp::kMean && !comm_divides;
    const ReduceOp comm_op = divide_after ? ReduceOp::kSum : op;
    if (p.tensors.size() == 1 && p.ranges.size() == 1) {
      const Tensor x = first.contiguous();
      Tensor y = device.allocate(x.shape(), x.dtype(), /*zero_fill=*/false);
      comm.all_reduce(x, y, comm_op, options);
      if (divide_after) divide_in_place(y, divisor);
      out[static_cast<size_t>(p.tensors[0])] = y;
    } else if (p.scoped) {
      reduce_scoped(p, comm_op, divide_after, out);
    } else {
      reduce_concatenated(p, comm_op, divide_after, out);
    }
  }

  // A bytes_per_pack pack: one scoped allocation (fields at 64-byte offsets), inputs copied into
  // their fields, one all_reduce over the backing, results are the fields. The scope is per
  // call: the caller owns the results (persistent buckets whose views are overwritten every step
  // are FusedAllReducer's, for callers that want them).
  void reduce_scoped(const PackSpec& p, ReduceOp comm_op, bool divide_after,
                     std::vector<Tensor>& out) const {
    std::vector<Shape> shapes;
    for (int t : p.tensors) shapes.push_back(in[static_cast<size_t>(t)].shape());
    ScopedAllocator scope(std::move(shapes), in[static_cast<size_t>(p.tensors[0])].dtype(),
                          "batch_all_reduce_pack", /*scope_id=*/0,
                          static_cast<int>(p.tensors.size()), device.allocator());
    const std::vector<Tensor>& fields = scope.allocate_all();
    for (size_t f = 0; f < fields.size(); ++f)
      Tensor(fields[f]).copy_from(in[static_cast<size_t>(p.tensors[f])]);
    Tensor all = scope.concat(scope.backing(), fields);
    comm.all_reduce(all, all, comm_op, options);
    scope.close();
    if (divide_after) divide_in_place(all, divisor);  // padding too: harmless, never read
    for (size_t f = 0; f < fields.size(); ++f) out[static_cast<size_t>(p.tensors[f])] = fields[f];
  }

  // TF's num_packs packing: the tensors flattened into one buffer, one all_reduce per range.
  void reduce_concatenated(const PackSpec& p, ReduceOp comm_op, bool divide_after,
                           std::vector<Tensor>& out) const {
    int64_t total = 0;
    for (int t : p.tensors) total += in[static_cast<size_t>(t)].num_elements();
    Tensor buffer = device.allocate(Shape{total}, in[static_cast<size_t>(p.tensors[0])].dtype(),
                                    /*zero_fill=*/false);
    int64_t offset = 0;
    for (int t : p.tensors) {
      const Tensor& x = in[static_cast<size_t>(t)];
      const int64_t n = x.num_elements();
      buffer.slice(0, offset, offset + n).copy_from(x.contiguous().reshape(Shape{n}));
      offset += n;
    }
    for (Tensor piece : split_flat(buffer, p.ranges)) comm.all_reduce(piece, piece, comm_op, options);
    if (divide_after) divide_in_place(buffer, divisor);
    offset = 0;
    for (int t : p.tensors) {
      const Tensor& x = in[static_cast<size_t>(t)];
      const int64_t n = x.num_elements();
      out[static_cast<size_t>(t)] = buffer.slice(0, offset, offset + n).reshape(x.shape());
      offset += n;
    }
  }
};

}  // namespace

std::vector<std::vector<Tensor>> all_reduce_dense(const GroupJob& job,
                                                  const std::vector<std::vector<Tensor>>& inputs,
                                                  const std::vector<PackSpec>& packs, ReduceOp op,
                                                  int64_t divisor, CrossDevicePlan& plan) {
  auto results = std::make_shared<std::vector<std::vector<Tensor>>>(job.devices.size());
  const std::vector<Device*> devices = job.devices;
  const CollectiveOptions copts = job.collective;
  const auto work = [results, devices, inputs, packs, op, divisor, copts](size_t d,
                                                                          Communicator& comm) {
    PackReducer reducer{*devices[d], comm, inputs[d], op, divisor, copts};
    std::vector<Tensor> out(inputs[d].size());
    for (const PackSpec& p : packs) reducer.reduce(p, out);
    (*results)[d] = std::move(out);
  };
  const std::string algorithm = resolved_algorithm_name(copts.algorithm);
  for (const PackSpec& p : packs) {
    const DType dtype = inputs[0][static_cast<size_t>(p.tensors[0])].dtype();
    std::vector<int64_t> counts = p.ranges;
    if (p.tensors.size() > 1 && p.scoped) {
      // The scoped backing: fields padded to 64 bytes.
      std::vector<Shape> shapes;
      for (int t : p.tensors) shapes.push_back(inputs[0][static_cast<size_t>(t)].shape());
      int64_t bytes = 0;
      scoped_layout(shapes, dtype, 0, &bytes);
      counts = {bytes / static_cast<int64_t>(dtype_size(dtype))};
    }
    for (int64_t r : counts) {
      plan.steps.push_back(PlanStep{"all_reduce", algorithm, static_cast<int>(p.tensors.size()), r,
                                    dtype, names_of(devices)});
    }
  }
  if (op == ReduceOp::kMean) {
    for (size_t k = 0; k < inputs[0].size(); ++k) plan.mean_divisors.push_back(divisor);
  }
  run_group(job, "all_reduce", work);
  return *results;
}

std::vector<IndexedSlices> all_reduce_sparse(const GroupJob& job,
                                             const std::vector<IndexedSlices>& inputs, ReduceOp op,
                                             int64_t divisor, CrossDevicePlan& plan) {
  auto results = std::make_shared<std::vector<std::optional<IndexedSlices>>>(job.devices.size());
  auto log = std::make_shared<StepLog>();
  const std::vector<Device*> devices = job.devices;
  const CollectiveOptions copts = job.collective;
  const std::string algorithm = resolved_algorithm_name(copts.algorithm);
  const std::vector<std::string> names = names_of(devices);
  const auto work = [=](size_t d, Communicator& comm) {
    const IndexedSlices& in = inputs[d];
    const auto record = [&](const char* kind, int64_t n, DType dtype) {
      if (d == 0) log->add(PlanStep{kind, algorithm, 1, n, dtype, names});
    };
    const Tensor rows = Tensor::from_vector<int64_t>({in.num_slices()}, Shape{1});
    record("all_gather", 1, DType::kI64);
    const std::vector<int64_t> counts = comm.all_gather(rows, 0, copts).to_vector<int64_t>();
    const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
    std::optional<IndexedSlices> out;
    if (*lo == *hi) {
      record("all_gather", in.values().num_elements(), in.dtype());
      Tensor values = comm.all_gather(in.values().contiguous(), 0, copts);
      record("all_gather", in.num_slices(), DType::kI64);
      Tensor indices = comm.all_gather(in.indices(), 0, copts);
      if (op == ReduceOp::kMean) divide_in_place(values, divisor);
      out.emplace(values, indices, in.dense_shape());
    } else {
      Tensor dense = in.to_dense();
      record("all_reduce", dense.num_elements(), dense.dtype());
      comm.all_reduce(dense, dense, ReduceOp::kSum, copts);
      if (op == ReduceOp::kMean) divide_in_place(dense, divisor);
      const int64_t n = in.dense_shape()[0];
      Tensor all_rows = Tensor::empty(Shape{n}, DType::kI64);
      auto* p = all_rows.data<int64_t>();
      for (int64_t i = 0; i < n; ++i) p[i] = i;
      out.emplace(dense, all_rows, in.dense_shape());
    }
    (*results)[d] = std::move(out);
  };
  if (op == ReduceOp::kMean) plan.mean_divisors.push_back(divisor);
  try {
    run_group(job, "all_reduce_indexed_slices", work);
  } catch (...) {
    plan.steps.insert(plan.steps.end(), log->steps.begin(), log->steps.end());
    throw;
  }
  plan.steps.insert(plan.steps.end(), log->steps.begin(), log->steps.end());
  std::vector<IndexedSlices> out;
  for (auto& r : *results) out.push_back(*r);
  return out;
}

std::vector<Tensor> all_gather(const GroupJob& job, const std::vector<Tensor>& inputs, int axis,
                               CrossDevicePlan& plan) {
  auto results = std::make_shared<std::vector<Tensor>>(job.devices.size());
  const CollectiveOptions copts = job.collective;
  const auto work = [results, inputs, axis, copts](size_t d, Communicator& comm) {
    (*results)[d] = comm.all_gather(inputs[d].contiguous(), axis, copts);
  };
  plan.steps.push_back(PlanStep{"all_gather", resolved_algorithm_name(Algorithm::kDirect), 1,
                                inputs[0].num_elements(), inputs[0].dtype(),
                                names_of(job.devices)});
  run_group(job, "all_gather", work);
  return *results;
}

}  // namespace tessel::detail
