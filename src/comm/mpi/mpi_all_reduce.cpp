// MPI all-reduce (Algorithm::kMpi): the MPI library's own MPI_Iallreduce on the transport's
// communicator, polled against the deadline like every other wait. bf16 and f16, which MPI has
// no types for, are widened to f32 in a scratch buffer, reduced, and rounded once. kMean is
// MPI_SUM divided by N afterwards (integers truncate); bool sum/max are MPI_LOR, prod/min MPI_LAND.
#include <climits>
#include <cstring>
#include <set>
#include <string>

#include "comm/algorithms.h"
#include "comm/mpi/host_shm.h"
#include "comm/mpi/mpi_hierarchy.h"
#include "comm/mpi/mpi_transport.h"
#include "comm/reduce_kernels.h"
#include "comm/scratch.h"
#include "core/errors.h"
#include "tessel/core/float16.h"

namespace tessel::detail {
namespace {

// Elements per MPI call (MPI counts are int).
constexpr int64_t kMaxCount = int64_t{1} << 30;

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::kF64: return MPI_DOUBLE;
    case DType::kI32: return MPI_INT32_T;
    case DType::kI64: return MPI_INT64_T;
    case DType::kU8: return MPI_UINT8_T;
    case DType::kBool: return MPI_C_BOOL;
    case DType::kU32: return MPI_UINT32_T;
    case DType::kI8: return MPI_INT8_T;
    case DType::kC128: return MPI_C_DOUBLE_COMPLEX;  // MPI_SUM and MPI_PROD are defined for it
    default: return MPI_FLOAT;  // f32, and bf16/f16 widened to f32
  }
}

MPI_Op mpi_op(DType dtype, ReduceOp op) {
  if (dtype == DType::kBool) {
    return op == ReduceOp::kProd || op == ReduceOp::kMin ? MPI_LAND : MPI_LOR;
  }
  switch (op) {
    case ReduceOp::kProd: return MPI_PROD;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kMin: return MPI_MIN;
    default: return MPI_SUM;
  }
}

// Open MPI's non-blocking collectives (coll/libnbc) pick the binomial algorithm (reduce to one
// rank, then broadcast) for all groups of fewer than 4 processes, which makes MPI_Iallreduce
// 1.7x (1 MiB) to 5.5x (4 MiB) slower than MPI_Allreduce between 2 processes here; its ring
// (reduce-scatter then all-gather) is bandwidth-optimal and measured faster than MPI_Allreduce
// at every size from 1 MiB (docs/benchmarks-history.md, "tessel over MPI"). Where the library has
// the control variable coll_libnbc_iallreduce_algorithm (MPI_T), large calls ask for the ring and
// put the previous value back right after MPI_Iallreduce has built its schedule; elsewhere (other
// MPIs) the library chooses.
class LibnbcRing {
 public:
  static LibnbcRing& get() {
    static LibnbcRing instance;
    return instance;
  }
  // Runs `start` (which calls MPI_Iallreduce) with the ring selected, if the variable exists.
  template <typename F>
  void with_ring(F&& start) {
    if (handle_ == MPI_T_CVAR_HANDLE_NULL) return start();
    int previous = 0;
    int ring = 1;
    MPI_T_cvar_read(handle_, &previous);
    MPI_T_cvar_write(handle_, &ring);
    try {
      start();
    } catch (...) {
      MPI_T_cvar_write(handle_, &previous);
      throw;
    }
    MPI_T_cvar_write(handle_, &previous);
  }

 private:
  LibnbcRing() {
    MpiCallLock lock;
    int provided = 0;
    if (MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return;
    int index = -1, count = 0;
    if (MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &index) != MPI_SUCCESS) return;
    MPI_T_cvar_handle handle = MPI_T_CVAR_HANDLE_NULL;
    if (MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) != MPI_SUCCESS || count != 1) return;
    int value = 0;
    if (MPI_T_cvar_read(handle, &value) != MPI_SUCCESS || MPI_T_cvar_write(handle, &value) != MPI_SUCCESS) {
      MPI_T_cvar_handle_free(&handle);
      return;
    }
    handle_ = handle;
  }
  MPI_T_cvar_handle handle_ = MPI_T_CVAR_HANDLE_NULL;
};

// From this size on, MPI_Iallreduce runs libnbc's ring (where available).
constexpr int64_t kRingBytes = 64 << 10;

// Whole-buffer all-reduce of `count` elements of `type` (send may be MPI_IN_PLACE).
void run(MpiTransport& m, const void* send, void* recv, int64_t count, MPI_Datatype type,
         size_t item, MPI_Op op, const AllReduceArgs& a) {
  for (int64_t done = 0; done < count; done += kMaxCount) {
    const int piece = static_cast<int>(std::min(kMaxCount, count - done));
    const void* s = send == MPI_IN_PLACE ? MPI_IN_PLACE : static_cast<const uint8_t*>(send) + done * item;
    void* r = static_cast<uint8_t*>(recv) + done * item;
    MPI_Request request = MPI_REQUEST_NULL;
    const bool ring = static_cast<int64_t>(piece) * static_cast<int64_t>(item) >= kRingBytes && piece >= m.size();
    LibnbcRing* libnbc = ring ? &LibnbcRing::get() : nullptr;  // (its first use takes the lock)
    const auto watch = m.watch_stuck(*a.signature, a.deadline);  // starting it is an MPI call too
    {
      MpiCallLock lock;
      auto start = [&] {
        check_mpi(MPI_Iallreduce(s, r, piece, type, op, m.comm(), &request), "MPI_Iallreduce");
      };
      if (libnbc != nullptr) {
        libnbc->with_ring(start);
      } else {
        start();
      }
    }
    m.wait_collective(request, "MPI_Iallreduce", *a.signature, a.deadline);
  }
}

template <typename Half>
void widened_all_reduce(MpiTransport& m, const AllReduceArgs& a) {
  ScratchBuffer wide(a.scratch, static_cast<size_t>(a.count) * sizeof(float));
  auto* f = reinterpret_cast<float*>(wide.data());
  const auto* in = static_cast<const Half*>(a.input);
  for (int64_t i = 0; i < a.count; ++i) f[i] = static_cast<float>(in[i]);
  run(m, MPI_IN_PLACE, f, a.count, MPI_FLOAT, sizeof(float), mpi_op(a.dtype, a.op), a);
  auto* out = static_cast<Half*>(a.output);
  if (a.op == ReduceOp::kMean) {
    const float n = static_cast<float>(m.size());
    for (int64_t i = 0; i < a.count; ++i) out[i] = Half(f[i] / n);
  } else {
    for (int64_t i = 0; i < a.count; ++i) out[i] = Half(f[i]);
  }
}

}  // namespace

void mpi_all_reduce(Transport& t, const AllReduceArgs& a) {
  auto* m = dynamic_cast<MpiTransport*>(&t);
  if (m == nullptr) {
    throw_invalid("Communicator",
                  "the mpi algorithm needs a communicator over MPI (make_mpi_communicator); this "
                  "group is not one");
  }
  if (a.count == 0) return;
  if (a.dtype == DType::kBF16) return widened_all_reduce<bfloat16>(*m, a);
  if (a.dtype == DType::kF16) return widened_all_reduce<float16>(*m, a);
  const size_t item = dtype_size(a.dtype);
  const void* send = a.input == a.output ? MPI_IN_PLACE : a.input;
  run(*m, send, a.output, a.count, mpi_type(a.dtype), item, mpi_op(a.dtype, a.op), a);
  finish_mean(a.dtype, a.op, a.output, a.count, m->size());
}

Algorithm auto_all_reduce_algorithm(const Transport& t, size_t /*bytes*/) {
  if (const auto* m = dynamic_cast<const MpiTransport*>(&t)) {
    // Where any two processes share a host (every process sees the same peers, so all choose
    // alike), they meet in shared memory (mpi_hierarchy.cpp, host_shm.h).
    std::set<std::string> hosts;
    for (const auto& peer : m->peers()) hosts.insert(peer.host);
    return HostShm::enabled() && hosts.size() < m->peers().size() ? Algorithm::kHierarchical
                                                                 : Algorithm::kMpi;
  }
  if (is_process_hierarchy(t)) return Algorithm::kHierarchical;
  return Algorithm::kRing;
}

}  // namespace tessel::detail
