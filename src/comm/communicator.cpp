// Communicator: argument checks, signatures, failure handling and algorithm choice. The data
// movement lives in the algorithm files (algorithms.h, direct_collectives.h, p2p_collectives.h):
// the collectives other than all_reduce run their direct versions when the transport shares
// memory and their point-to-point versions otherwise (MPI, hierarchical groups across processes).
// A call on device memory that has no device path opens by handing its tensors to HostStaging
// (device_path.h), which decides for the whole call; a staged call runs again on host copies.
#include "tessel/comm/communicator.h"

#include <numeric>

#include "comm/algorithms.h"
#include "comm/communicator_internal.h"
#include "comm/device_path.h"
#include "comm/direct_collectives.h"
#include "comm/in_process_hub.h"
#include "comm/p2p_collectives.h"
#include "comm/reduce_kernels.h"
#include "core/errors.h"
#include "tessel/mesh/shard_range.h"

namespace tessel {
namespace {

using detail::deadline_of;
using detail::guarded;
using detail::kComm;
using detail::make_signature;
using detail::require_tensor;

// Rows per rank along axis 0: `counts` when given (checked), else chunk semantics.
std::vector<int64_t> row_counts(std::string_view op, int64_t rows, int n,
                                const std::vector<int64_t>& counts) {
  if (counts.empty()) {
    std::vector<int64_t> out(n);
    for (int r = 0; r < n; ++r) out[r] = shard_range(rows, n, r).extent;
    return out;
  }
  if (static_cast<int>(counts.size()) != n) {
    detail::throw_invalid(kComm, "{}: {} counts given for a group of {}", op, counts.size(), n);
  }
  int64_t total = 0;
  for (int64_t c : counts) {
    if (c < 0) detail::throw_invalid(kComm, "{}: count {} is negative", op, c);
    total += c;
  }
  if (total != rows) {
    detail::throw_invalid(kComm, "{}: counts [{}] add up to {} but the tensor has {} rows", op,
                          fmt::join(counts, ","), total, rows);
  }
  return counts;
}

void check_root(std::string_view op, int root, int size) {
  if (root < 0 || root >= size) {
    detail::throw_invalid(kComm, "{}: root {} is not a rank of {}", op, root, size);
  }
}

// A point-to-point partner must be another rank; tags below 0 belong to the algorithms.
void check_peer(std::string_view op, int peer, int tag, int rank, int size) {
  if (peer < 0 || peer >= size || peer == rank) {
    detail::throw_invalid(kComm, "{}: peer {} is not another rank of {}", op, peer, size);
  }
  if (tag < 0) detail::throw_invalid(kComm, "{}: tag {} is negative", op, tag);
}

std::string shape_without(const Shape& s, int axis) {
  std::vector<std::string> parts;
  for (int i = 0; i < s.rank(); ++i) parts.push_back(i == axis ? "*" : std::to_string(s[i]));
  return fmt::format("[{}]", fmt::join(parts, ","));
}

}  // namespace

Communicator::Communicator(std::shared_ptr<detail::Transport> transport)
    : transport_(std::move(transport)) {}

Communicator::~Communicator() = default;

int Communicator::rank() const { return transport_->rank(); }
int Communicator::size() const { return transport_->size(); }
const std::vector<std::string>& Communicator::members() const { return transport_->members(); }

void Communicator::abort(const std::string& reason) { transport_->abort(reason); }

void Communicator::all_reduce(const Tensor& input, Tensor& output, ReduceOp op,
                              const CollectiveOptions& options) {
  if (detail::HostStaging host{*transport_, input, &output}) {
    all_reduce(host.input(), host.output(), op, options);
    return host.finish();
  }
  Algorithm algo = options.algorithm;
  if (algo == Algorithm::kAuto) {
    algo = transport_->shares_memory()
               ? Algorithm::kDirect
               : detail::auto_all_reduce_algorithm(
                     *transport_, input.defined() ? input.nbytes() : 0);
  }
  const std::string base = fmt::format("all_reduce({}, {} elements, {}",
                                       input.defined() ? dtype_name(input.dtype()) : "null",
                                       input.defined() ? input.num_elements() : 0,
                                       reduce_op_name(op));
  // The algorithm decides the protocol, so the ranks must agree on it too; messages show it when
  // the caller chose one.
  const std::string what =
      options.algorithm == Algorithm::kAuto ? base + ")" : fmt::format("{}, {})", base, algorithm_name(algo));
  const detail::Signature sig =
      make_signature(++sequence_, fmt::format("{}) via {}", base, algorithm_name(algo)), what);
  guarded(*transport_, sig, [&] {
    require_tensor(input, "all_reduce", "input");
    require_tensor(output, "all_reduce", "output");
    if (!(output.shape() == input.shape()) || output.dtype() != input.dtype()) {
      detail::throw_invalid(kComm, "all_reduce: output {} {} does not match input {} {}",
                            dtype_name(output.dtype()), output.shape().to_string(),
                            dtype_name(input.dtype()), input.shape().to_string());
    }
    detail::check_reducible(input.dtype(), op);
    if (auto* dev = detail::device_collectives_for(*transport_, input, "all_reduce")) {
      return detail::device_all_reduce(*dev, *transport_, input, output, op, sig, deadline_of(options));
    }
    detail::AllReduceArgs a;
    a.input = input.data();
    a.output = output.data();
    a.count = input.num_elements();
    a.dtype = input.dtype();
    a.op = op;
    a.segment_bytes = options.segment_bytes;
    a.scratch = host_scratch();
    a.signature = &sig;
    a.deadline = deadline_of(options);
    if (algo == Algorithm::kRing || algo == Algorithm::kHalvingDoubling ||
        algo == Algorithm::kReduceToOne || algo == Algorithm::kMpi) {
      // These move data with send/recv (or MPI's collective) only, which compares no
      // signatures: meet once first, so that ranks calling different collectives fail with
      // kFailedPrecondition (and a missing rank is named) instead of exchanging mismatched
      // messages.
      transport_->barrier(sig, a.deadline);
    }
    switch (algo) {
      case Algorithm::kDirect: return detail::direct_all_reduce(*transport_, a);
      case Algorithm::kRing: return detail::ring_all_reduce(*transport_, a);
      case Algorithm::kHalvingDoubling: return detail::halving_doubling_all_reduce(*transport_, a);
      case Algorithm::kReduceToOne: return detail::reduce_to_one_all_reduce(*transport_, a);
      case Algorithm::kHierarchical: return detail::hierarchical_all_reduce(*transport_, a);
      case Algorithm::kMpi: return detail::mpi_all_reduce(*transport_, a);
      case Algorithm::kAuto: break;
    }
  });
}

void Communicator::reduce(const Tensor& input, Tensor& output, ReduceOp op, int root,
                          const CollectiveOptions& options) {
  // A non-root's output is ignored: it is neither staged nor checked.
  if (detail::HostStaging host{*transport_, input, rank() == root ? &output : nullptr}) {
    reduce(host.input(), host.output(), op, root, options);
    return host.finish();
  }
  const std::string what = fmt::format("reduce({}, {} elements, {}, root {})",
                                       input.defined() ? dtype_name(input.dtype()) : "null",
                                       input.defined() ? input.num_elements() : 0,
                                       reduce_op_name(op), root);
  const detail::Signature sig = make_signature(++sequence_, what, what);
  guarded(*transport_, sig, [&] {
    check_root("reduce", root, size());
    require_tensor(input, "reduce", "input");
    detail::check_reducible(input.dtype(), op);
    if (rank() == root) {
      require_tensor(output, "reduce", "output");
      if (!(output.shape() == input.shape()) || output.dtype() != input.dtype()) {
        detail::throw_invalid(kComm, "reduce: output {} {} does not match input {} {}",
                              dtype_name(output.dtype()), output.shape().to_string(),
                              dtype_name(input.dtype()), input.shape().to_string());
      }
    }
    if (auto* dev = detail::device_collectives_for(*transport_, input, "reduce")) {
      return detail::device_reduce(*dev, *transport_, input, output, op, root, sig, deadline_of(options));
    }
    const detail::CallContext ctx{&sig, deadline_of(options), host_scratch(), options.segment_bytes};
    if (transport_->shares_memory()) return detail::direct_reduce(*transport_, input, output, op, root, ctx);
    detail::p2p_reduce(*transport_, input, output, op, root, ctx);
  });
}

void Communicator::broadcast(Tensor& tensor, int root, const CollectiveOptions& options) {
  if (detail::HostStaging host{*transport_, tensor, &tensor}) {
    broadcast(host.output(), root, options);
    return host.finish();
  }
  const std::string what = fmt::format("broadcast({}, {} elements, root {})",
                                       tensor.defined() ? dtype_name(tensor.dtype()) : "null",
                                       tensor.defined() ? tensor.num_elements() : 0, root);
  const detail::Signature sig = make_signature(++sequence_, what, what);
  guarded(*transport_, sig, [&] {
    check_root("broadcast", root, size());
    require_tensor(tensor, "broadcast", "tensor");
    if (auto* dev = detail::device_collectives_for(*transport_, tensor, "broadcast")) {
      return detail::device_broadcast(*dev, *transport_, tensor, root, sig, deadline_of(options));
    }
    const detail::CallContext ctx{&sig, deadline_of(options), host_scratch(), options.segment_bytes};
    if (transport_->shares_memory()) return detail::direct_broadcast(*transport_, tensor, root, ctx);
    detail::p2p_broadcast(*transport_, tensor, root, ctx);
  });
}

Tensor Communicator::all_gather(const Tensor& input, int axis, const CollectiveOptions& options) {
  return gather_impl(input, -1, /*all=*/true, axis, options);
}

Tensor Communicator::gather(const Tensor& input, int root, int axis,
                            const CollectiveOptions& options) {
  return gather_impl(input, root, /*all=*/false, axis, options);
}

Tensor Communicator::gather_impl(const Tensor& input, int root, bool all, int axis,
                                 const CollectiveOptions& options) {
  if (detail::HostStaging host{*transport_, input, nullptr, /*device_version=*/all}) {
    return host.finish(gather_impl(host.input(), root, all, axis, options));
  }
  const std::string op = all ? "all_gather" : fmt::format("gather(root {})", root);
  const std::string agreed =
      input.defined() ? fmt::format("{}({}, {}, axis {})", op, dtype_name(input.dtype()),
                                    shape_without(input.shape(), axis < 0 ? axis + input.rank() : axis), axis)
                      : op + "(null)";
  const std::string mine =
      input.defined() ? fmt::format("{}({}, {}, axis {})", op, dtype_name(input.dtype()),
                                    input.shape().to_string(), axis)
                      : agreed;
  const detail::Signature sig = make_signature(++sequence_, agreed, mine);
  return guarded(*transport_, sig, [&] {
    require_tensor(input, op, "input");
    if (!all) check_root("gather", root, size());
    const int a = axis < 0 ? axis + input.rank() : axis;
    if (a < 0 || a >= input.rank()) {
      detail::throw_invalid(kComm, "{}: axis {} is outside a tensor of rank {}", op, axis, input.rank());
    }
    if (auto* dev = detail::device_collectives_for(*transport_, input, op)) {
      return detail::device_all_gather(*dev, *transport_, input, a, sig, deadline_of(options));
    }
    const detail::CallContext ctx{&sig, deadline_of(options), host_scratch(), options.segment_bytes};
    if (transport_->shares_memory()) return detail::direct_all_gather(*transport_, input, a, root, ctx);
    return detail::p2p_all_gather(*transport_, input, a, root, ctx);
  });
}

Tensor Communicator::reduce_scatter(const Tensor& input, ReduceOp op,
                                    const std::vector<int64_t>& counts,
                                    const CollectiveOptions& options) {
  if (detail::HostStaging host{*transport_, input}) {
    return host.finish(reduce_scatter(host.input(), op, counts, options));
  }
  const std::string what = fmt::format(
      "reduce_scatter({}, {}, {}, counts [{}])", input.defined() ? dtype_name(input.dtype()) : "null",
      input.defined() ? input.shape().to_string() : "[]", reduce_op_name(op), fmt::join(counts, ","));
  const detail::Signature sig = make_signature(++sequence_, what, what);
  return guarded(*transport_, sig, [&] {
    require_tensor(input, "reduce_scatter", "input");
    if (input.rank() == 0) detail::throw_invalid(kComm, "reduce_scatter: the input is a scalar");
    detail::check_reducible(input.dtype(), op);
    const std::vector<int64_t> rows = row_counts("reduce_scatter", input.shape()[0], size(), counts);
    if (auto* dev = detail::device_collectives_for(*transport_, input, "reduce_scatter")) {
      return detail::device_reduce_scatter(*dev, *transport_, input, op, rows, sig, deadline_of(options));
    }
    const detail::CallContext ctx{&sig, deadline_of(options), host_scratch(), options.segment_bytes};
    if (transport_->shares_memory()) return detail::direct_reduce_scatter(*transport_, input, op, rows, ctx);
    return detail::p2p_reduce_scatter(*transport_, input, op, rows, ctx);
  });
}

Tensor Communicator::all_to_all(const Tensor& input, const std::vector<int64_t>& send_counts,
                                const CollectiveOptions& options) {
  if (detail::HostStaging host{*transport_, input}) {
    return host.finish(all_to_all(host.input(), send_counts, options));
  }
  const std::string agreed = input.defined() ? fmt::format("all_to_all({}, {})", dtype_name(input.dtype()),
                                                           shape_without(input.shape(), 0))
                                             : "all_to_all(null)";
  const std::string mine = input.defined()
                               ? fmt::format("all_to_all({}, {}, send [{}])", dtype_name(input.dtype()),
                                             input.shape().to_string(), fmt::join(send_counts, ","))
                               : agreed;
  const detail::Signature sig = make_signature(++sequence_, agreed, mine);
  return guarded(*transport_, sig, [&] {
    require_tensor(input, "all_to_all", "input");
    if (input.rank() == 0) detail::throw_invalid(kComm, "all_to_all: the input is a scalar");
    const int64_t rows = input.shape()[0];
    std::vector<int64_t> counts = send_counts;
    if (counts.empty()) {
      if (rows % size() != 0) {
        detail::throw_invalid(kComm,
                              "all_to_all: {} rows do not split evenly over {} ranks; pass "
                              "send_counts",
                              rows, size());
      }
      counts.assign(size(), rows / size());
    }
    counts = row_counts("all_to_all", rows, size(), counts);
    if (auto* dev = detail::device_collectives_for(*transport_, input, "all_to_all")) {
      return detail::device_all_to_all(*dev, *transport_, input, counts, sig, deadline_of(options));
    }
    const detail::CallContext ctx{&sig, deadline_of(options), host_scratch(), options.segment_bytes};
    if (transport_->shares_memory()) return detail::direct_all_to_all(*transport_, input, counts, ctx);
    return detail::p2p_all_to_all(*transport_, input, counts, ctx);
  });
}

Tensor Communicator::scatter(const Tensor& input, int root, const std::vector<int64_t>& counts,
                             const CollectiveOptions& options) {
  if (detail::HostStaging host{*transport_, input, nullptr, /*device_version=*/false}) {
    return host.finish(scatter(host.input(), root, counts, options));
  }
  const bool is_root = rank() == root;
  const std::string what = fmt::format("scatter(root {}, counts [{}])", root, fmt::join(counts, ","));
  const detail::Signature sig = make_signature(++sequence_, what, what);
  return guarded(*transport_, sig, [&] {
    check_root("scatter", root, size());
    // Every rank learns the root's shape and dtype from the root's post.
    Shape row_shape;
    DType dtype = DType::kF32;
    int64_t rows = 0;
    if (is_root) {
      require_tensor(input, "scatter", "input");
      if (input.rank() == 0) detail::throw_invalid(kComm, "scatter: the input is a scalar");
      rows = input.shape()[0];
      row_shape = Shape(std::vector<int64_t>(input.shape().dims().begin() + 1, input.shape().dims().end()));
      dtype = input.dtype();
    }
    const detail::CallContext ctx{&sig, deadline_of(options), host_scratch(), options.segment_bytes};
    // First phase: every rank learns the root's description (rows, dtype, row shape).
    std::vector<int64_t> description = {rows, static_cast<int64_t>(dtype)};
    if (is_root) description.insert(description.end(), row_shape.dims().begin(), row_shape.dims().end());
    const bool shared = transport_->shares_memory();
    description = shared ? detail::direct_root_description(*transport_, description, root, ctx)
                         : detail::p2p_root_description(*transport_, description, root, ctx);
    rows = description[0];
    dtype = static_cast<DType>(description[1]);
    row_shape = Shape(std::vector<int64_t>(description.begin() + 2, description.end()));
    const std::vector<int64_t> per_rank = row_counts("scatter", rows, size(), counts);
    if (shared) return detail::direct_scatter(*transport_, input, root, per_rank, row_shape, dtype, ctx);
    return detail::p2p_scatter(*transport_, input, root, per_rank, row_shape, dtype, ctx);
  });
}

void Communicator::send(const Tensor& tensor, int peer, int tag, const CollectiveOptions& options) {
  if (detail::HostStaging host{*transport_, tensor}) return send(host.input(), peer, tag, options);
  const std::string what = fmt::format("send({} bytes to rank {}, tag {})",
                                       tensor.defined() ? tensor.nbytes() : 0, peer, tag);
  const detail::Signature sig = make_signature(sequence_, what, what);
  guarded(*transport_, sig, [&] {
    check_peer("send", peer, tag, rank(), size());
    require_tensor(tensor, "send", "tensor");
    if (auto* dev = detail::device_collectives_for(*transport_, tensor, "send")) {
      return dev->send(tensor.data_ptr(), tensor.num_elements(), tensor.dtype(), peer, sig,
                       deadline_of(options));
    }
    transport_->send(peer, tag, tensor.data(), tensor.nbytes(), sig, deadline_of(options));
  });
}

void Communicator::recv(Tensor& tensor, int peer, int tag, const CollectiveOptions& options) {
  if (detail::HostStaging host{*transport_, tensor, &tensor}) {
    recv(host.output(), peer, tag, options);
    return host.finish();
  }
  const std::string what = fmt::format("recv({} bytes from rank {}, tag {})",
                                       tensor.defined() ? tensor.nbytes() : 0, peer, tag);
  const detail::Signature sig = make_signature(sequence_, what, what);
  guarded(*transport_, sig, [&] {
    check_peer("recv", peer, tag, rank(), size());
    require_tensor(tensor, "recv", "tensor");
    if (auto* dev = detail::device_collectives_for(*transport_, tensor, "recv")) {
      return dev->recv(tensor.data_ptr(), tensor.num_elements(), tensor.dtype(), peer, sig,
                       deadline_of(options));
    }
    transport_->recv(peer, tag, tensor.data(), tensor.nbytes(), sig, deadline_of(options));
  });
}

void Communicator::barrier(const CollectiveOptions& options) {
  const detail::Signature sig = make_signature(++sequence_, "barrier()", "barrier()");
  guarded(*transport_, sig, [&] { transport_->barrier(sig, deadline_of(options)); });
}

std::vector<std::unique_ptr<Communicator>> make_in_process_communicators(
    int size, std::vector<std::string> names) {
  if (size < 1) detail::throw_invalid(kComm, "a group needs at least one rank, got {}", size);
  if (names.empty()) {
    for (int r = 0; r < size; ++r) names.push_back(fmt::format("rank {}", r));
  }
  if (static_cast<int>(names.size()) != size) {
    detail::throw_invalid(kComm, "{} names given for a group of {}", names.size(), size);
  }
  std::vector<std::unique_ptr<Communicator>> out;
  for (auto& transport : detail::make_in_process_transports(std::move(names))) {
    out.push_back(std::make_unique<Communicator>(std::move(transport)));
  }
  return out;
}

}  // namespace tessel
