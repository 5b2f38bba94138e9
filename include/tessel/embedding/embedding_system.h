// configure_embedding / is_embedding_initialized: seed 102's optional step 6
// (ConfigureTPUEmbedding, IsTPUEmbeddingInitialized) on top of the system lifecycle (system.h).
//
//   initialize_accelerator_system();                        // steps 1-5 on this process's host
//   auto emb = configure_embedding(config);                 // step 6: tables over every device
//   is_embedding_initialized() == true
//   emb->lookup(...); emb->apply_gradients(...);            // training
//   shutdown_accelerator_system();                          // disconnect releases the tables
//   is_embedding_initialized() == false; emb->lookup(...) -> kFailedPrecondition
//
// Rules (seed 102, BR-102-01 and the flow chart's step 6):
//   - configure_embedding runs after initialize_host (step 3) and set_global_topology (step 5)
//     of its host: before, kFailedPrecondition naming the missing step; on a failed host,
//     kFailedPrecondition saying to run disconnect_host.
//   - the configuration is validated against the system (its hosts and devices): kInvalidArgument.
//   - configuring again replaces the tables: the previous ShardedEmbedding is released.
//   - disconnect_host (and so stop_system / shutdown_accelerator_system) releases the tables:
//     is_embedding_initialized() is false and the ShardedEmbedding's calls fail with
//     kFailedPrecondition naming the disconnect.
// The tables are sharded over every device of the system: a one-dimensional mesh "embedding"
// over the system's devices in global id order (task by task), this host's devices local. Under
// mpirun every process calls configure_embedding (a collective, in the same order).
#pragma once

#include <memory>

#include "tessel/embedding/embedding_config.h"
#include "tessel/embedding/sharded_embedding.h"
#include "tessel/system/system.h"

namespace tessel {

// Step 6 on `host` (whose runtime holds the local devices).
std::shared_ptr<ShardedEmbedding> configure_embedding(Host& host,
                                                      const EmbeddingConfiguration& config,
                                                      const EmbeddingOptions& options = {});
// True once configure_embedding succeeded on `host`, until its next disconnect_host.
bool is_embedding_initialized(const Host& host);
// The tables configure_embedding made on `host`; none: kFailedPrecondition.
std::shared_ptr<ShardedEmbedding> host_embedding(const Host& host);

// The same on the accelerator system's host (accelerator_system.h); not initialized:
// kFailedPrecondition (is_embedding_initialized() is then false).
std::shared_ptr<ShardedEmbedding> configure_embedding(const EmbeddingConfiguration& config,
                                                      const EmbeddingOptions& options = {});
bool is_embedding_initialized();
std::shared_ptr<ShardedEmbedding> embedding();

}  // namespace tessel
