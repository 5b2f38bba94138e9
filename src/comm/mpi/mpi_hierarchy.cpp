// Hierarchical groups across MPI processes (make_hierarchical_communicators, tessel/comm/mpi.h).
//
// Every process drives L local participants. Their transports share one in-process hub (the
// process's devices) and one MPI transport (one rank per process). Global rank of local device
// d on process p is p * L + d.
// - exchange/barrier: the local ranks meet in the hub (local signatures compared), device 0
//   exchanges its process's posts with the other processes over MPI (signatures compared across
//   processes), and the local ranks meet again to read the result, or the error device 0 got.
//   Posts of ranks on other processes carry count and aux only.
// - send/recv: within the process through the hub; across processes over MPI, the tag carrying
//   both local device indices.
// - all_reduce kHierarchical (and kAuto): process_hierarchy_all_reduce below. Where processes
//   share a host (and TESSEL_SHM is not 0): every device of the host's processes through the
//   host's shared-memory segment, the hosts' leaders over MPI (host_shm.h, shm_all_reduce.cpp).
//   Otherwise: reduce within the process onto device 0's output (chunk-parallel), MPI's
//   all-reduce among the devices 0 (one per process), copy back within the process. Only device
//   0 talks to MPI. The MPI transport's own groups (make_mpi_communicator) take the same
//   shared-memory path under kHierarchical (kAuto picks it where processes share a host).
// - the other collectives: with more than one process shares_memory() is false, so they run
//   point to point over all the ranks (p2p_collectives.h); share() only refuses (kUnimplemented)
//   should an algorithm still ask to read peers' buffers.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <optional>

#include "comm/algorithms.h"
#include "comm/in_process_hub.h"
#include "comm/mpi/host_shm.h"
#include "comm/mpi/mpi_hierarchy.h"
#include "comm/reduce_kernels.h"
#include "core/errors.h"
#include "tessel/mesh/shard_range.h"

namespace tessel {
namespace detail {
namespace {

constexpr std::string_view kComm = "Communicator";
// Local ranks waiting for device 0's cross-process result wait this much past the collective's
// deadline, so that device 0's own deadline error (naming the remote ranks) reaches them first.
constexpr auto kLeaderGrace = std::chrono::milliseconds(250);

// State shared by the local transports of one process. Members are in group rank order; each
// belongs to one process (an MPI rank of `mpi`) and has an index among that process's members.
struct ProcessGroup {
  std::vector<std::string> members;
  std::vector<int> process_of;             // per rank: its process
  std::vector<int> local_index;            // per rank: its index among its process's members
  std::vector<std::vector<int>> ranks_of;  // per process: its members' ranks, ascending
  int process = 0;                         // this process (mpi->rank())
  int max_local = 1;                       // the most members one process has (MPI tag space)
  std::shared_ptr<MpiTransport> mpi;
  std::vector<std::shared_ptr<Transport>> hub;  // this process's members' in-process endpoints

  int processes() const { return static_cast<int>(ranks_of.size()); }
  int local() const { return static_cast<int>(ranks_of[static_cast<size_t>(process)].size()); }

  // What device 0 learned in the current exchange (written by it between the two local
  // phases, read by the others after the second).
  std::vector<Post> posts;
  std::optional<Error> error;

  // The shared-memory level between this host's processes (host_shm.h): made by device 0 in
  // the first all-reduce; shm_tried is set before the local ranks next meet.
  std::shared_ptr<HostShm> shm;
  std::atomic<bool> shm_tried{false};
};

class HierarchicalTransport : public Transport {
 public:
  HierarchicalTransport(std::shared_ptr<ProcessGroup> group, int device)
      : g_(std::move(group)), d_(device) {}

  int rank() const override { return g_->ranks_of[static_cast<size_t>(g_->process)][static_cast<size_t>(d_)]; }
  int size() const override { return static_cast<int>(g_->members.size()); }
  const std::vector<std::string>& members() const override { return g_->members; }
  bool shares_memory() const override { return g_->processes() == 1; }
  Staging& staging() override { return hub().staging(); }

  Transport& hub() { return *g_->hub[static_cast<size_t>(d_)]; }
  ProcessGroup& group() { return *g_; }
  int device() const { return d_; }

  std::vector<Post> exchange(const Signature& signature, const Post& mine, Deadline deadline) override {
    const std::vector<Post> local = hub().exchange(signature, mine, deadline);
    return cross_process(signature, local, deadline);
  }

  std::vector<Post> share(const Signature& signature, const Post& mine, Deadline deadline) override {
    if (g_->processes() == 1) return hub().share(signature, mine, deadline);
    exchange(signature, mine, deadline);
    unsupported_ = true;
    throw_error(ErrorCode::kUnimplemented, kComm,
                "{} asked to read peers' buffers, which ranks on other processes do not share "
                "(every collective runs point to point across processes)",
                signature.text);
  }

  void barrier(const Signature& signature, Deadline deadline) override {
    exchange(signature, Post{}, deadline);
  }

  void send(int peer, int tag, const void* data, size_t bytes, const Signature& signature,
            Deadline deadline) override {
    const int q = g_->process_of[static_cast<size_t>(peer)], e = g_->local_index[static_cast<size_t>(peer)];
    if (q == g_->process) return hub().send(e, tag, data, bytes, signature, deadline);
    g_->mpi->send_tagged(q, mpi_tag(tag, d_, e), data, bytes, signature, deadline);
  }

  void recv(int peer, int tag, void* data, size_t bytes, const Signature& signature,
            Deadline deadline) override {
    const int q = g_->process_of[static_cast<size_t>(peer)], e = g_->local_index[static_cast<size_t>(peer)];
    if (q == g_->process) return hub().recv(e, tag, data, bytes, signature, deadline);
    g_->mpi->recv_tagged(q, mpi_tag(tag, e, d_), data, bytes, signature, deadline, std::to_string(tag));
  }

  void abort(const std::string& reason) override {
    hub().abort(reason);
    g_->mpi->abort(reason);
  }

  void fail(const std::string& reason) override {
    if (unsupported_) {
      unsupported_ = false;
      return;
    }
    hub().fail(reason);
    g_->mpi->abort(reason);
  }

  // Device 0's part of a rendezvous across processes, then the local ranks read its outcome.
  std::vector<Post> cross_process(const Signature& signature, const std::vector<Post>& local,
                                  Deadline deadline) {
    const int L = g_->local();
    if (d_ == 0) {
      try {
        std::string payload(static_cast<size_t>(L) * 2 * sizeof(int64_t), '\0');
        for (int e = 0; e < L; ++e) {
          const int64_t fields[2] = {local[e].count, local[e].aux};
          std::memcpy(payload.data() + e * sizeof fields, fields, sizeof fields);
        }
        const auto records = g_->mpi->exchange_records(signature, Post{}, payload, deadline);
        g_->posts.assign(g_->members.size(), Post{});
        for (int q = 0; q < g_->processes(); ++q) {
          const std::vector<int>& ranks = g_->ranks_of[static_cast<size_t>(q)];
          for (size_t e = 0; e < ranks.size(); ++e) {
            int64_t fields[2] = {0, 0};
            if (records[q].payload.size() >= (e + 1) * sizeof fields) {
              std::memcpy(fields, records[q].payload.data() + e * sizeof fields, sizeof fields);
            }
            g_->posts[static_cast<size_t>(ranks[e])].count = fields[0];
            g_->posts[static_cast<size_t>(ranks[e])].aux = fields[1];
          }
        }
      } catch (const Error& e) {
        g_->error = e;
      }
    }
    // Second local phase: device 0 has written posts or error.
    hub().barrier(signature, d_ == 0 ? deadline : deadline + kLeaderGrace);
    if (g_->error) throw *g_->error;
    std::vector<Post> posts = g_->posts;
    for (int e = 0; e < L; ++e) posts[static_cast<size_t>(rank_of_local(e))] = local[e];
    return posts;
  }

 private:
  int rank_of_local(int e) const {
    return g_->ranks_of[static_cast<size_t>(g_->process)][static_cast<size_t>(e)];
  }

  // MPI tag of transport tag `tag` from local device `from` to local device `to`.
  int mpi_tag(int tag, int from, int to) const {
    const int64_t L = g_->max_local;
    const int64_t index = static_cast<int64_t>(tag) + 8;  // algorithm tags -1..-7 included
    const int64_t t = mpi_tags::kFirstFree + (index * L + from) * L + to;
    if (index < 1 || t > g_->mpi->tag_upper_bound()) {
      throw_invalid(kComm, "tag {} is outside what this MPI allows with {} devices per process", tag, L);
    }
    return static_cast<int>(t);
  }

  std::shared_ptr<ProcessGroup> g_;
  int d_;
  bool unsupported_ = false;
};

}  // namespace

bool is_process_hierarchy(const Transport& t) {
  return dynamic_cast<const HierarchicalTransport*>(&t) != nullptr;
}

namespace {

// The MPI transport's group (one rank per process) through shared memory within each host, MPI
// across hosts; MPI's all-reduce where no two processes share a host (or TESSEL_SHM=0).
void mpi_group_all_reduce(MpiTransport& m, const AllReduceArgs& a) {
  if (!m.host_shm_tried && HostShm::enabled()) {
    std::vector<std::vector<int>> participants_of(static_cast<size_t>(m.size()));
    for (int q = 0; q < m.size(); ++q) participants_of[static_cast<size_t>(q)] = {q};
    std::string why_not;
    m.host_shm = HostShm::create(m, participants_of, m.members(), *a.signature, a.deadline, &why_not);
  }
  m.host_shm_tried = true;
  if (m.host_shm == nullptr) {
    m.barrier(*a.signature, a.deadline);
    return mpi_all_reduce(m, a);
  }
  // An abort the group heard of over MPI ends the call here (and the host's other
  // participants' through the segment). Across hosts the ranks first meet over MPI, which
  // compares their calls.
  try {
    m.poll_aborts();
    if (m.host_shm->multi_host()) m.barrier(*a.signature, a.deadline);
  } catch (const Error& e) {
    m.host_shm->abort(e.message());
    throw;
  }
  host_shm_all_reduce(*m.host_shm, m.host_shm->index_of_rank(m.rank()), a, m.size(), m);
}

// A hierarchical group's all-reduce through shared memory (device 0 makes the segment in the
// first call, while the local ranks wait). False when the group has no shared-memory level.
bool hierarchy_shm_all_reduce(HierarchicalTransport& h, const AllReduceArgs& a) {
  ProcessGroup& g = h.group();
  const int d = h.device();
  if (!g.shm_tried.load()) {
    if (!HostShm::enabled()) return false;
    h.hub().barrier(*a.signature, a.deadline);
    if (d == 0) {
      try {
        std::string why_not;
        g.shm = HostShm::create(*g.mpi, g.ranks_of, g.members, *a.signature, a.deadline, &why_not);
      } catch (const Error& e) {
        g.error = e;
      }
      g.shm_tried.store(true);
    }
    h.hub().barrier(*a.signature, d == 0 ? a.deadline : a.deadline + kLeaderGrace);
    if (g.error) throw *g.error;
  }
  if (g.shm == nullptr) return false;
  if (d == 0) {  // as in mpi_group_all_reduce
    try {
      g.mpi->poll_aborts();
      if (g.shm->multi_host()) g.mpi->barrier(*a.signature, a.deadline);
    } catch (const Error& e) {
      g.shm->abort(e.message());
      throw;
    }
  }
  host_shm_all_reduce(*g.shm, g.shm->index_of_rank(h.rank()), a,
                      static_cast<int64_t>(g.members.size()), *g.mpi);
  return true;
}

}  // namespace

bool uses_host_shm(Transport& t) {
  if (auto* m = dynamic_cast<MpiTransport*>(&t)) return m->host_shm != nullptr;
  auto* h = dynamic_cast<HierarchicalTransport*>(&t);
  return h != nullptr && h->group().shm != nullptr;
}

bool process_hierarchy_all_reduce(Transport& t, const AllReduceArgs& a) {
  if (auto* m = dynamic_cast<MpiTransport*>(&t)) {
    mpi_group_all_reduce(*m, a);
    return true;
  }
  auto* h = dynamic_cast<HierarchicalTransport*>(&t);
  if (h == nullptr) return false;
  if (hierarchy_shm_all_reduce(*h, a)) return true;
  ProcessGroup& g = h->group();
  Transport& hub = h->hub();
  const int d = h->device();
  const int L = g.local();
  // 1. Within the process: chunk d of every local input, reduced into device 0's output.
  const auto posts = hub.share(*a.signature, Post{a.input, a.output, a.count}, a.deadline);
  std::vector<const void*> inputs;
  for (int e = 0; e < L; ++e) inputs.push_back(posts[e].send);
  void* leader_out = posts[0].recv;
  const ShardRange chunk = shard_range(a.count, L, d);
  const ReduceOp partial = a.op == ReduceOp::kMean ? ReduceOp::kSum : a.op;
  if (chunk.extent > 0) {
    reduce_buffers(a.dtype, partial, inputs.data(), L, &leader_out, 1, chunk.offset,
                   chunk.offset + chunk.extent, 1);
  }
  hub.barrier(*a.signature, a.deadline);
  // 2. Across processes: device 0 of every process, MPI's all-reduce (after the rendezvous that
  // compares the signatures across processes).
  if (d == 0) {
    try {
      g.mpi->barrier(*a.signature, a.deadline);
      AllReduceArgs across = a;
      across.input = a.output;
      across.op = partial;
      if (g.processes() > 1) mpi_all_reduce(*g.mpi, across);
      finish_mean(a.dtype, a.op, a.output, a.count, static_cast<int64_t>(g.members.size()));
    } catch (const Error& e) {
      g.error = e;
    }
  }
  hub.barrier(*a.signature, d == 0 ? a.deadline : a.deadline + kLeaderGrace);
  if (g.error) throw *g.error;
  // 3. Within the process: everyone copies device 0's result.
  if (d != 0 && a.count > 0) {
    std::memcpy(a.output, leader_out, static_cast<size_t>(a.count) * dtype_size(a.dtype));
  }
  hub.barrier(*a.signature, a.deadline);
  return true;
}

std::vector<std::unique_ptr<Communicator>> make_process_group(std::shared_ptr<MpiTransport> mpi,
                                                             std::vector<std::string> members,
                                                             const std::vector<int>& process_of) {
  auto g = std::make_shared<ProcessGroup>();
  g->process = mpi->rank();
  g->ranks_of.resize(static_cast<size_t>(mpi->size()));
  for (size_t r = 0; r < members.size(); ++r) {
    std::vector<int>& ranks = g->ranks_of[static_cast<size_t>(process_of[r])];
    g->local_index.push_back(static_cast<int>(ranks.size()));
    ranks.push_back(static_cast<int>(r));
    g->max_local = std::max(g->max_local, static_cast<int>(ranks.size()));
  }
  std::vector<std::string> local_names;
  for (int r : g->ranks_of[static_cast<size_t>(g->process)]) local_names.push_back(members[r]);
  g->hub = make_in_process_transports(std::move(local_names));
  // The MPI level's messages (a late, lost or aborting process) name each process by the group
  // ranks it holds, which is what the group's callers know (devices), not by its process name.
  std::vector<std::string> process_names;
  for (int q = 0; q < mpi->size(); ++q) {
    std::vector<std::string> held;
    for (int r : g->ranks_of[static_cast<size_t>(q)]) {
      held.push_back(fmt::format("{} ({})", r, members[r]));
    }
    process_names.push_back(
        fmt::format("{}: group ranks {}", mpi->members()[q], fmt::join(held, ", ")));
  }
  mpi->name_ranks(std::move(process_names));
  g->process_of = process_of;
  g->members = std::move(members);
  g->mpi = std::move(mpi);
  std::vector<std::unique_ptr<Communicator>> out(g->members.size());
  for (int e = 0; e < g->local(); ++e) {
    out[static_cast<size_t>(g->ranks_of[static_cast<size_t>(g->process)][static_cast<size_t>(e)])] =
        std::make_unique<Communicator>(std::make_shared<HierarchicalTransport>(g, e));
  }
  return out;
}

}  // namespace detail

std::vector<std::unique_ptr<Communicator>> make_hierarchical_communicators(
    int local_devices, const MpiCommunicatorOptions& options) {
  detail::require_mpi_initialized("make_hierarchical_communicators");
  if (local_devices < 1) {
    detail::throw_invalid(detail::kComm, "make_hierarchical_communicators: {} local devices; need at least 1",
                          local_devices);
  }
  MpiCommunicatorOptions mpi_options = options;
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  if (mpi_options.name.empty()) mpi_options.name = fmt::format("/job:worker/replica:0/task:{}", world_rank);
  auto mpi = detail::MpiTransport::create(MPI_COMM_WORLD, mpi_options, local_devices);
  std::vector<std::string> differ;
  for (int q = 0; q < mpi->size(); ++q) {
    const int64_t l = mpi->peers()[q].extra;
    if (l != local_devices) differ.push_back(fmt::format("process {} has {}", q, l));
  }
  if (!differ.empty()) {
    detail::throw_invalid(detail::kComm,
                          "make_hierarchical_communicators: process {} has {} local devices but {}; "
                          "every process needs the same number",
                          mpi->rank(), local_devices, fmt::join(differ, ", "));
  }
  std::vector<std::string> members;
  std::vector<int> process_of;
  for (int q = 0; q < mpi->size(); ++q) {
    for (int e = 0; e < local_devices; ++e) {
      members.push_back(fmt::format("/job:worker/replica:0/task:{}/device:CPU:{}", q, e));
      process_of.push_back(q);
    }
  }
  const int first = mpi->rank() * local_devices;
  auto all = detail::make_process_group(std::move(mpi), std::move(members), process_of);
  return {std::make_move_iterator(all.begin() + first),
          std::make_move_iterator(all.begin() + first + local_devices)};
}

}  // namespace tessel
