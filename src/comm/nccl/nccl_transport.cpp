// NcclTransport: NCCL collectives on a GPU device's stream, waited for with a deadline.
#include "comm/nccl/nccl_transport.h"

#include <algorithm>
#include <thread>

#include "core/errors.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/poll_until.h"
#include "tessel/runtime/device.h"

namespace tessel::detail {
namespace {
constexpr std::string_view kNccl = "NCCL";

size_t count_of(int64_t n) { return static_cast<size_t>(n); }

// Pointer arithmetic in elements on device addresses (never dereferenced here).
const void* at(const void* base, int64_t offset, DType dtype) {
  return static_cast<const char*>(base) + offset * static_cast<int64_t>(dtype_size(dtype));
}
void* at(void* base, int64_t offset, DType dtype) {
  return static_cast<char*>(base) + offset * static_cast<int64_t>(dtype_size(dtype));
}
}  // namespace

ncclDataType_t nccl_dtype(DType dtype, std::string_view op) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kF64: return ncclFloat64;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    case DType::kU8: return ncclUint8;
    case DType::kBool: return ncclUint8;
    case DType::kU32: return ncclUint32;
    case DType::kI8: return ncclInt8;
    case DType::kC128: break;
  }
  throw_invalid(kNccl, "{}: NCCL has no {} datatype", op, dtype_name(dtype));
}

ncclRedOp_t nccl_op(ReduceOp op, DType dtype, std::string_view what) {
  if (dtype == DType::kBool) {
    if (op == ReduceOp::kSum || op == ReduceOp::kMax) return ncclMax;  // logical or
    if (op == ReduceOp::kProd || op == ReduceOp::kMin) return ncclMin;  // logical and
    throw_invalid(kNccl, "{}: {} of bool", what, reduce_op_name(op));
  }
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kProd: return ncclProd;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMean:
      if (is_floating(dtype)) return ncclAvg;
      throw_invalid(kNccl, "{}: mean of {} (NCCL averages floating dtypes only)", what,
                    dtype_name(dtype));
  }
  throw_invalid(kNccl, "{}: unknown reduce op", what);
}

NcclTransport::NcclTransport(std::shared_ptr<Transport> host, ncclComm_t comm, Device& gpu)
    : host_(std::move(host)),
      comm_(comm),
      device_name_(gpu.name()),
      ordinal_(gpu.gpu_ordinal()),
      stream_(static_cast<cudaStream_t>(gpu.cuda_stream())) {
  ScopedCudaDevice on(ordinal_);
  check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), kNccl,
             fmt::format("cudaEventCreate on {}", device_name_));
}

NcclTransport::~NcclTransport() {
  ScopedCudaDevice on(ordinal_);
  if (abort_requested_.load()) {
    abort_nccl();
  } else if (!nccl_aborted_) {
    // Finalize flushes pending work. On a non-blocking communicator (make_nccl_communicator's)
    // it returns ncclInProgress: destroying it before it completes corrupts NCCL's state, so
    // wait (boundedly: a group that does not finish in 10 s is aborted instead).
    ncclResult_t state = ncclCommFinalize(comm_);
    poll_until(Clock::now() + std::chrono::seconds(10), [&] {
      if (state == ncclInProgress) (void)ncclCommGetAsyncError(comm_, &state);
      return state != ncclInProgress;
    });
    if (state == ncclSuccess) {
      (void)ncclCommDestroy(comm_);
    } else {
      abort_nccl();
    }
  }
  (void)cudaEventDestroy(done_);
}

MemorySpace NcclTransport::memory_space() const { return MemorySpace::cuda(ordinal_); }

void NcclTransport::abort_nccl() {
  if (nccl_aborted_) return;
  nccl_aborted_ = true;
  // ncclCommAbort cancels NCCL's kernels, but it may still wait for work queued before them on
  // the stream (a stalled stream never finishes): it runs on a thread of its own, so that the
  // caller returns at its deadline. It touches nothing of this object.
  std::thread([comm = comm_] { (void)ncclCommAbort(comm); }).detach();
}

void NcclTransport::abort(const std::string& reason) {
  // Any thread may call this; the NCCL communicator is aborted by the rank's own thread (its
  // wait sees the flag) or by the destructor, never beside a call in flight on it.
  abort_requested_.store(true);
  host_->abort(reason);
}

void NcclTransport::fail(const std::string& reason) {
  abort_requested_.store(true);
  host_->fail(reason);
}

void NcclTransport::check(ncclResult_t result, const Signature& sig, std::string_view what) {
  if (result == ncclSuccess || result == ncclInProgress) return;
  throw_error(ErrorCode::kInternal, kNccl, "{} on {} ({}) failed: {} ({})", what, device_name_,
              sig.describe(members()), ncclGetErrorString(result), ncclGetLastError(comm_));
}

void NcclTransport::wait(const Signature& sig, Deadline deadline) {
  check_cuda(cudaEventRecord(done_, stream_), kNccl,
             fmt::format("cudaEventRecord on {}", device_name_));
  // Polls the event (poll_until: spins first, then sleeps), and between polls the group's abort
  // flag and NCCL's asynchronous errors, either of which ends the wait at once.
  const bool finished = poll_until(deadline, [&] {
    const cudaError_t status = cudaEventQuery(done_);
    if (status == cudaSuccess) return true;
    if (status != cudaErrorNotReady) check_cuda(status, kNccl, sig.describe(members()));
    if (abort_requested_.load()) {
      abort_nccl();
      throw_error(ErrorCode::kAborted, kNccl, "{} (sequence {}) on {}: the group was aborted",
                  sig.describe(members()), sig.sequence, device_name_);
    }
    ncclResult_t async = ncclSuccess;
    (void)ncclCommGetAsyncError(comm_, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      abort_requested_.store(true);
      abort_nccl();
      throw_error(ErrorCode::kInternal, kNccl, "{} on {} (rank {}, sequence {}) failed: {} ({})",
                  sig.describe(members()), device_name_, rank(), sig.sequence,
                  ncclGetErrorString(async), ncclGetLastError(comm_));
    }
    return false;
  });
  if (!finished) {
    abort_requested_.store(true);
    abort_nccl();
    throw_error(ErrorCode::kDeadlineExceeded, kNccl,
                "{} (sequence {}) did not finish on {} (rank {} of {}) by its deadline; the "
                "NCCL communicator was aborted (a stalled rank or GPU)",
                sig.describe(members()), sig.sequence, device_name_, rank(), size());
  }
}

void NcclTransport::all_reduce(const void* in, void* out, int64_t count, DType dtype, ReduceOp op,
                               const Signature& sig, Deadline deadline) {
  ScopedCudaDevice on(ordinal_);
  check(ncclAllReduce(in, out, count_of(count), nccl_dtype(dtype, "all_reduce"),
                      nccl_op(op, dtype, "all_reduce"), comm_, stream_),
        sig, "ncclAllReduce");
  wait(sig, deadline);
}

void NcclTransport::reduce(const void* in, void* out, int64_t count, DType dtype, ReduceOp op,
                           int root, const Signature& sig, Deadline deadline) {
  ScopedCudaDevice on(ordinal_);
  check(ncclReduce(in, out, count_of(count), nccl_dtype(dtype, "reduce"),
                   nccl_op(op, dtype, "reduce"), root, comm_, stream_),
        sig, "ncclReduce");
  wait(sig, deadline);
}

void NcclTransport::broadcast(void* buffer, int64_t count, DType dtype, int root,
                              const Signature& sig, Deadline deadline) {
  ScopedCudaDevice on(ordinal_);
  check(ncclBroadcast(buffer, buffer, count_of(count), nccl_dtype(dtype, "broadcast"), root, comm_,
                      stream_),
        sig, "ncclBroadcast");
  wait(sig, deadline);
}

void NcclTransport::all_gather(const void* in, void* out, const std::vector<int64_t>& counts,
                               DType dtype, const Signature& sig, Deadline deadline) {
  ScopedCudaDevice on(ordinal_);
  const ncclDataType_t type = nccl_dtype(dtype, "all_gather");
  const bool equal = std::all_of(counts.begin(), counts.end(),
                                 [&](int64_t c) { return c == counts.front(); });
  if (equal) {
    check(ncclAllGather(in, out, count_of(counts.front()), type, comm_, stream_), sig,
          "ncclAllGather");
  } else {
    // Uneven blocks: every rank broadcasts its own block into place, in one NCCL group.
    check(ncclGroupStart(), sig, "ncclGroupStart");
    int64_t offset = 0;
    for (int r = 0; r < size(); ++r) {
      const void* send = r == rank() ? in : nullptr;
      check(ncclBroadcast(send, at(out, offset, dtype), count_of(counts[r]), type, r, comm_,
                          stream_),
            sig, "ncclBroadcast");
      offset += counts[r];
    }
    check(ncclGroupEnd(), sig, "ncclGroupEnd");
  }
  wait(sig, deadline);
}

void NcclTransport::reduce_scatter(const void* in, void* out, const std::vector<int64_t>& counts,
                                   DType dtype, ReduceOp op, const Signature& sig,
                                   Deadline deadline) {
  ScopedCudaDevice on(ordinal_);
  const ncclDataType_t type = nccl_dtype(dtype, "reduce_scatter");
  const ncclRedOp_t red = nccl_op(op, dtype, "reduce_scatter");
  const bool equal = std::all_of(counts.begin(), counts.end(),
                                 [&](int64_t c) { return c == counts.front(); });
  if (equal) {
    check(ncclReduceScatter(in, out, count_of(counts.front()), type, red, comm_, stream_), sig,
          "ncclReduceScatter");
  } else {
    // Uneven blocks: one reduce per block, to the rank that keeps it, in one NCCL group.
    check(ncclGroupStart(), sig, "ncclGroupStart");
    int64_t offset = 0;
    for (int r = 0; r < size(); ++r) {
      check(ncclReduce(at(in, offset, dtype), r == rank() ? out : nullptr, count_of(counts[r]),
                       type, red, r, comm_, stream_),
            sig, "ncclReduce");
      offset += counts[r];
    }
    check(ncclGroupEnd(), sig, "ncclGroupEnd");
  }
  wait(sig, deadline);
}

void NcclTransport::all_to_all(const void* in, const std::vector<int64_t>& send_counts,
                               const std::vector<int64_t>& send_offsets, void* out,
                               const std::vector<int64_t>& recv_counts,
                               const std::vector<int64_t>& recv_offsets, DType dtype,
                               const Signature& sig, Deadline deadline) {
  ScopedCudaDevice on(ordinal_);
  const ncclDataType_t type = nccl_dtype(dtype, "all_to_all");
  check(ncclGroupStart(), sig, "ncclGroupStart");
  for (int r = 0; r < size(); ++r) {
    if (send_counts[r] > 0) {
      check(ncclSend(at(in, send_offsets[r], dtype), count_of(send_counts[r]), type, r, comm_,
                     stream_),
            sig, "ncclSend");
    }
    if (recv_counts[r] > 0) {
      check(ncclRecv(at(out, recv_offsets[r], dtype), count_of(recv_counts[r]), type, r, comm_,
                     stream_),
            sig, "ncclRecv");
    }
  }
  check(ncclGroupEnd(), sig, "ncclGroupEnd");
  wait(sig, deadline);
}

void NcclTransport::send(const void* data, int64_t count, DType dtype, int peer,
                         const Signature& sig, Deadline deadline) {
  ScopedCudaDevice on(ordinal_);
  check(ncclSend(data, count_of(count), nccl_dtype(dtype, "send"), peer, comm_, stream_), sig,
        "ncclSend");
  wait(sig, deadline);
}

void NcclTransport::recv(void* data, int64_t count, DType dtype, int peer, const Signature& sig,
                         Deadline deadline) {
  ScopedCudaDevice on(ordinal_);
  check(ncclRecv(data, count_of(count), nccl_dtype(dtype, "recv"), peer, comm_, stream_), sig,
        "ncclRecv");
  wait(sig, deadline);
}

}  // namespace tessel::detail
