// Hierarchical all-reduce: reduce within each host onto its leader (shared memory, chunk-
// parallel), all-reduce across hosts among the leaders (ring over send/recv, the only traffic
// that would cross the network), then copy the result back within each host. A rank's host is
// the job and task of its member name (/job:worker/task:1/...); with one host this is the
// direct algorithm.
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

#include "comm/algorithms.h"
#include "comm/leader_transport.h"
#include "comm/reduce_kernels.h"
#include "core/errors.h"
#include "tessel/core/device_name.h"
#include "tessel/mesh/shard_range.h"

namespace tessel::detail {
namespace {

// Host key of every rank, in rank order.
std::vector<std::string> hosts_of(const std::vector<std::string>& members) {
  std::vector<std::string> hosts;
  for (const std::string& m : members) {
    std::optional<DeviceName> d = DeviceName::try_parse(m);
    hosts.push_back(d ? d->job.value_or("") + "/" + std::to_string(d->task.value_or(0)) : "");
  }
  return hosts;
}

}  // namespace

void hierarchical_all_reduce(Transport& t, const AllReduceArgs& a) {
  if (process_hierarchy_all_reduce(t, a)) return;  // hosts are MPI processes (mpi/mpi_hierarchy.cpp)
  const std::vector<std::string> hosts = hosts_of(t.members());
  std::map<std::string, std::vector<int>> by_host;
  for (int r = 0; r < t.size(); ++r) by_host[hosts[r]].push_back(r);
  if (by_host.size() == 1) return direct_all_reduce(t, a);
  if (!t.shares_memory()) {
    throw_error(ErrorCode::kUnimplemented, "Communicator",
                "hierarchical all-reduce needs ranks that share memory within a host");
  }
  const auto posts = t.share(*a.signature, Post{a.input, a.output, a.count}, a.deadline);
  const std::vector<int>& local = by_host[hosts[t.rank()]];
  const int leader = local[0];
  const int index = static_cast<int>(std::find(local.begin(), local.end(), t.rank()) - local.begin());

  // 1. Within the host: chunk `index` of every local input, reduced into the leader's output.
  std::vector<const void*> inputs;
  for (int r : local) inputs.push_back(posts[r].send);
  void* leader_out = posts[leader].recv;
  const ShardRange chunk = shard_range(a.count, static_cast<int64_t>(local.size()), index);
  const ReduceOp partial_op = a.op == ReduceOp::kMean ? ReduceOp::kSum : a.op;
  if (chunk.extent > 0) {
    reduce_buffers(a.dtype, partial_op, inputs.data(), static_cast<int>(inputs.size()),
                   &leader_out, 1, chunk.offset, chunk.offset + chunk.extent, 1);
  }
  t.barrier(*a.signature, a.deadline);

  // 2. Across hosts: the leaders all-reduce their host sums.
  if (t.rank() == leader) {
    std::vector<int> leaders;
    for (const auto& [host, ranks] : by_host) leaders.push_back(ranks[0]);
    const int me = static_cast<int>(std::find(leaders.begin(), leaders.end(), leader) - leaders.begin());
    LeaderTransport cross(t, leaders, me);
    AllReduceArgs across = a;
    across.input = a.output;
    across.op = partial_op;
    ring_all_reduce(cross, across);
    finish_mean(a.dtype, a.op, a.output, a.count, t.size());
  }
  t.barrier(*a.signature, a.deadline);

  // 3. Within the host: everyone copies the leader's result.
  if (t.rank() != leader && a.count > 0) {
    std::memcpy(a.output, leader_out, static_cast<size_t>(a.count) * dtype_size(a.dtype));
  }
  t.barrier(*a.signature, a.deadline);
}

}  // namespace tessel::detail
