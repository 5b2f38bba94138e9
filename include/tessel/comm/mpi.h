// MPI: tessel's multi-process transport. Processes started by `mpirun` form one group; a
// Communicator over it runs the same collectives as an in-process group, with the same
// deadlines and errors, and Open MPI's own MPI_Allreduce as one more algorithm (Algorithm::kMpi).
//
//   int main() {
//     tessel::MpiEnvironment mpi;                        // MPI_Init_thread ... MPI_Finalize
//     auto comm = tessel::make_mpi_communicator();       // rank mpi_rank() of mpi_size()
//     Tensor x = Tensor::full({1 << 20}, DType::kF32, comm->rank());
//     comm->all_reduce(x, x, ReduceOp::kSum);            // every process: 0 + 1 + ... + (N-1)
//   }
//   $ mpirun -np 2 ./app
//
// The API is the same whether or not tessel was built with MPI (CMake option TESSEL_WITH_MPI):
// without it, mpi_available() is false and every other call throws kUnavailable ("tessel was
// built without MPI").
//
// The transport (one per Communicator) runs over its own duplicate of MPI_COMM_WORLD, so its
// messages never match the application's, with MPI's error handler set to MPI_ERRORS_RETURN:
// an MPI error becomes a tessel::Error, it never aborts the job. Every wait is non-blocking
// MPI polled against the collective's deadline:
// - exchange and barrier are an all-to-all of small records (sequence number and signature);
//   ranks calling different collectives all throw kFailedPrecondition naming both calls; a rank
//   that does not arrive is named in every other rank's kDeadlineExceeded.
// - send is buffered (the bytes are copied, then MPI_Isend), recv is MPI_Irecv, so the ring,
//   halving_doubling and reduce_to_one algorithms run over it unchanged. shares_memory() is
//   false, so the other collectives (broadcast, reduce, all_gather, gather, reduce_scatter,
//   all_to_all, scatter, reduce_scatter_boxes, transfer_boxes) run their point-to-point
//   versions: one rendezvous, then buffered messages between the ranks, with the results of the
//   in-process versions (reductions bit for bit). Every Communicator collective works over MPI.
// - abort() (and any failing collective) sends an abort record to every peer; their current
//   and later waits throw kAborted carrying the reason, which names the failed rank.
// - Peers on the same host are watched while waiting: when one has exited (killed, crashed),
//   the wait throws kAborted naming it within about 100 ms, instead of waiting out the deadline.
//   (Peers on other hosts are caught by the deadline.) Under mpirun, a process that dies by a
//   signal makes mpirun terminate the job about one second later (odls_base_sigkill_timeout)
//   and exit non-zero.
//
// All-reduce between processes of one host (kAuto, or kHierarchical) goes through shared memory
// instead of MPI wherever two of the group's processes share a host (src/comm/mpi/host_shm.h):
// the first all-reduce makes one POSIX shared-memory segment per host (collective; the name is
// unlinked as soon as every process has mapped it, so nothing is left in /dev/shm after a
// crash, and segments of gone creators are removed at the next creation); every participant of
// the host copies its input into its slot, reduces its part of every slot with the in-process
// kernels (one host's result equals the in-process result bit for bit) and copies the result
// out, chunk by chunk; across hosts the hosts' leaders all-reduce over MPI. Its waits (a futex
// barrier) keep the collective's deadline and watch the host's other processes: a killed one
// ends every survivor's all-reduce with kAborted naming its ranks and pid within milliseconds.
// The environment variable TESSEL_SHM=0 (on every process) keeps MPI (kAuto is then kMpi).
//
// Thread safety: MpiEnvironment requests MPI_THREAD_MULTIPLE. When MPI provides it, tessel makes
// MPI calls from any thread without locking (one thread at a time per Communicator, as always).
// When it provides MPI_THREAD_SERIALIZED, every MPI call tessel makes goes through one
// process-wide mutex, so communicators may still be used from several threads. With
// MPI_THREAD_FUNNELED or MPI_THREAD_SINGLE (MPI initialised by someone else), only the thread
// that initialised MPI may use MPI communicators (others get kFailedPrecondition).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tessel/comm/cluster.h"
#include "tessel/comm/communicator.h"

namespace tessel {

// True when this build contains the MPI transport.
bool mpi_available();
// The MPI library's version line ("Open MPI v4.1.4, package: ..."), callable before MPI is
// initialised; "" when built without MPI.
std::string mpi_library_version();

// MPI's thread support levels, in increasing order.
enum class MpiThreadLevel { kSingle, kFunneled, kSerialized, kMultiple };
std::string_view mpi_thread_level_name(MpiThreadLevel level);  // "single", ..., "multiple"

// Initialises MPI for its lifetime (MPI_Init_thread requesting MPI_THREAD_MULTIPLE) and
// finalizes it at the end. If MPI is already initialised (by the application or another
// MpiEnvironment), it only records the provided level and leaves finalizing to its owner.
// MPI_Finalize waits for every process of the job: when a communicator of this process lost a
// peer (its process exited, see the top of this file), the destructor does not call it, and
// mpirun reports the job as failed. After a kDeadlineExceeded that may mean a process on
// another host is gone, leave with std::_Exit or MPI_Abort instead of returning from main.
// Destroy every MPI communicator before the owning MpiEnvironment: one used after it throws
// kFailedPrecondition ("used after MPI was finalized"), as MPI may not be called any more
// (destroying it then is fine; it frees nothing). MPI cannot be initialised
// again once finalized: that is kFailedPrecondition. Without MPI: kUnavailable.
class MpiEnvironment {
 public:
  MpiEnvironment();
  // Passes the program's arguments to MPI_Init_thread.
  MpiEnvironment(int* argc, char*** argv);
  ~MpiEnvironment();
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;

  // The thread level MPI provides.
  MpiThreadLevel thread_level() const { return level_; }
  // True when this object initialised MPI (and so finalizes it).
  bool owns_mpi() const { return owns_; }

 private:
  void init(int* argc, char*** argv);
  bool owns_ = false;
  MpiThreadLevel level_ = MpiThreadLevel::kSingle;
};

// Rank and size of MPI_COMM_WORLD. MPI not initialised: kFailedPrecondition.
int mpi_rank();
int mpi_size();

struct MpiCommunicatorOptions {
  // This process's name in errors and members(); every process passes its own. Empty:
  // "<host>:<pid>". (Hierarchical communicators name devices instead, see below.)
  std::string name;
  // Bounds the construction (MPI_Comm_idup and the exchange of names), which is collective:
  // every process of MPI_COMM_WORLD must make its communicators in the same order. Zero:
  // default_collective_timeout().
  std::chrono::milliseconds timeout{0};
  // Watch the processes of peers on this host while waiting (see the top of this file).
  bool watch_local_peers = true;
  // A wait whose MPI call has not returned this long after the wait's deadline ends the process
  // with status 70, after printing "tessel: <rank> is stuck inside the MPI library ..." to
  // stderr: the library no longer gives control back (Open MPI 4.1's TCP transport deadlocks
  // inside MPI_Test/MPI_Improbe after losing a peer), so no error could ever be raised. As
  // PyTorch's NCCL watchdog does. Zero turns it off.
  std::chrono::milliseconds stuck_exit_after{5000};
};

// A Communicator whose ranks are the processes of MPI_COMM_WORLD (rank == mpi_rank()), over a
// duplicate of it. Collective over MPI_COMM_WORLD. Throws kFailedPrecondition when MPI is not
// initialised, kDeadlineExceeded naming the processes that did not join in time.
std::unique_ptr<Communicator> make_mpi_communicator(const MpiCommunicatorOptions& options = {});

// Hierarchical groups across processes: every process drives `local_devices` participants (one
// thread each, as with make_in_process_communicators), and gets their communicators in local
// order. Global rank of local device d on process p is p * local_devices + d; members are
// "/job:worker/replica:0/task:<p>/device:CPU:<d>" (options.name, default that task's name,
// names the process in MPI-level errors). Every process must pass the same local_devices (else
// kInvalidArgument naming the processes that differ, on every process).
// all_reduce with kAuto or kHierarchical: every device of the processes of one host meets in
// the host's shared memory (see the top of this file), the hosts' leaders over MPI; with
// TESSEL_SHM=0 or one process per host, the devices of a process reduce into device 0's output
// (each device one chunk), devices 0 all-reduce across processes with MPI's all-reduce (kMpi),
// and the other devices copy the result: one participant per process talks to MPI. kRing, kHalvingDoubling and kReduceToOne run over all P * local_devices ranks (pairs
// within a process in memory, others over MPI). kDirect and kMpi: kInvalidArgument. The other
// collectives run point to point over all P * local_devices ranks, as on make_mpi_communicator;
// barrier and send/recv work too. With one process the group is an in-process group.
// Collective over MPI_COMM_WORLD.
std::vector<std::unique_ptr<Communicator>> make_hierarchical_communicators(
    int local_devices, const MpiCommunicatorOptions& options = {});

// The processes of MPI_COMM_WORLD as a Cluster (tessel/comm/cluster.h): client c is MPI rank c, and
// the devices of client c are named ".../task:<c>/...". A group spanning processes meets in shared
// memory within each process and over MPI between them (one MPI communicator per group, made
// once by MPI_Comm_create_group after a deadline-bounded meeting of its processes). Collective
// over MPI_COMM_WORLD. MPI not initialised: kFailedPrecondition.
std::shared_ptr<Cluster> make_mpi_cluster(const MpiCommunicatorOptions& options = {});

}  // namespace tessel
