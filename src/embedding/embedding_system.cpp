// configure_embedding: step 6 of the system lifecycle; the tables of each host, released by its
// disconnect.
#include "tessel/embedding/embedding_system.h"

#include <map>
#include <mutex>

#include "core/errors.h"
#include "tessel/runtime/clients.h"
#include "tessel/runtime/device.h"
#include "tessel/runtime/runtime.h"
#include "tessel/system/accelerator_system.h"

namespace tessel {
namespace {

constexpr const char* kComponent = "configure_embedding";
constexpr const char* kListenerKey = "embedding";

// The tables of one host, with the host's epoch when they were configured (the same host after
// a disconnect does not see them). The host owns its entry, through the disconnect listener it
// keeps, so the entry dies with the host; the registry only points at it (a later Host at the
// same address finds it expired).
struct Configured {
  uint64_t epoch = 0;
  std::shared_ptr<ShardedEmbedding> embedding;
};
std::mutex g_mu;
std::map<const Host*, std::weak_ptr<Configured>> g_tables;

// The tables of `host` if they are live, else null. Under g_mu.
std::shared_ptr<ShardedEmbedding> live_tables(const Host& host) {
  const auto it = g_tables.find(&host);
  const std::shared_ptr<Configured> entry = it == g_tables.end() ? nullptr : it->second.lock();
  if (!entry || entry->epoch != host.epoch() || host.state() != HostState::kRunning ||
      entry->embedding->is_released()) {
    return nullptr;
  }
  return entry->embedding;
}

void check_order(const Host& host) {
  switch (host.state()) {
    case HostState::kRunning:
      return;
    case HostState::kNew:
    case HostState::kDisconnected:
      detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                          "host {} has not run initialize_host (step 3) and set_global_topology "
                          "(step 5) of the system lifecycle",
                          host.task());
    case HostState::kInitialized:
      detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                          "host {} has not run set_global_topology (step 5) of the system "
                          "lifecycle",
                          host.task());
    case HostState::kFailed:
      detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                          "host {} failed a step of the system lifecycle; run disconnect_host "
                          "and the steps again",
                          host.task());
  }
}

// The one-dimensional mesh "embedding" over every device of the system, this host's local.
Mesh system_mesh(const Host& host) {
  const Topology topology = *host.topology();
  std::vector<std::string> local;
  for (const Device* d : host.runtime().devices()) local.push_back(d->name());
  const ClientConfig client{topology.num_tasks(), host.task(), host.runtime().options().job};
  return create_distributed_mesh({{"embedding", topology.num_tasks() * static_cast<int64_t>(
                                                    topology.num_devices_per_task())}},
                                 local, client, "embedding");
}

}  // namespace

std::shared_ptr<ShardedEmbedding> configure_embedding(Host& host,
                                                      const EmbeddingConfiguration& config,
                                                      const EmbeddingOptions& options) {
  check_order(host);
  const uint64_t epoch = host.epoch();
  auto tables = std::make_shared<ShardedEmbedding>(config, system_mesh(host), host.runtime(),
                                                   options);
  auto entry = std::make_shared<Configured>(Configured{epoch, tables});
  std::shared_ptr<Configured> previous;
  {
    std::lock_guard lock(g_mu);
    std::erase_if(g_tables, [](const auto& kv) { return kv.second.expired(); });  // dead hosts
    std::weak_ptr<Configured>& slot = g_tables[&host];
    previous = slot.lock();
    slot = entry;
  }
  if (previous) previous->embedding->release("replaced by a later configure_embedding");
  const int task = host.task();
  // Replaces the previous entry's listener (same key): the host now owns this entry.
  host.on_disconnect(kListenerKey, [entry, task] {
    entry->embedding->release(fmt::format("host {} ran disconnect_host (system shutdown)", task));
  });
  return tables;
}

bool is_embedding_initialized(const Host& host) {
  std::lock_guard lock(g_mu);
  return live_tables(host) != nullptr;
}

std::shared_ptr<ShardedEmbedding> host_embedding(const Host& host) {
  std::lock_guard lock(g_mu);
  auto tables = live_tables(host);
  if (!tables) {
    detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                        "the embedding of host {} is not initialized: call configure_embedding "
                        "after the system's steps",
                        host.task());
  }
  return tables;
}

std::shared_ptr<ShardedEmbedding> configure_embedding(const EmbeddingConfiguration& config,
                                                      const EmbeddingOptions& options) {
  return configure_embedding(*accelerator_system_host(), config, options);
}

bool is_embedding_initialized() {
  if (!is_accelerator_system_initialized()) return false;
  return is_embedding_initialized(*accelerator_system_host());
}

std::shared_ptr<ShardedEmbedding> embedding() { return host_embedding(*accelerator_system_host()); }

}  // namespace tessel
