// configure_embedding / is_embedding_initialized: seed 102's step 6 and its rules (order of the
// steps, re-configuration, shutdown releasing the tables), on a simulated host and on the
// process's accelerator system.
#include <gtest/gtest.h>

#include "system/system_test_util.h"
#include "tessel/embedding/embedding_system.h"
#include "tessel/system/accelerator_system.h"

namespace tessel {
namespace {

EmbeddingConfiguration small_config() {
  return EmbeddingConfiguration::from_text(R"(
    table_descriptor { name: "t" vocabulary_size: 10 dimension: 4
                       optimization_parameters { learning_rate { constant: 0.1 }
                                                 stochastic_gradient_descent {} } }
    feature_descriptor { name: "f" table_id: 0 }
    mode: TRAINING batch_size_per_tensor_core: 2)");
}

TEST(Seed102Embedding, ConfigureNeedsTheSystemStepsInOrder) {
  testing::SimulatedSystem system(1, 2);
  Host& host = system.host(0);
  EXPECT_TESSEL_ERROR(configure_embedding(host, small_config()), ErrorCode::kFailedPrecondition,
                      "host 0 has not run initialize_host (step 3)");
  host.disconnect_host();
  const HostConfiguration config = system.coordinator().configure_distributed_system(std::vector<int>{2});
  host.initialize_host(config);
  EXPECT_TESSEL_ERROR(configure_embedding(host, small_config()), ErrorCode::kFailedPrecondition,
                      "host 0 has not run set_global_topology (step 5)");
  EXPECT_FALSE(is_embedding_initialized(host));
  host.set_global_topology(system.coordinator().wait_for_distributed_system(
      testing::kNoIds, testing::kGenerous));
  auto emb = configure_embedding(host, small_config());
  EXPECT_TRUE(is_embedding_initialized(host));
  EXPECT_EQ(host_embedding(host), emb);
  EXPECT_EQ(emb->num_devices(), 2);
  EXPECT_EQ(emb->mesh().dim_names(), std::vector<std::string>{"embedding"});
}

TEST(Seed102Embedding, ConfigurationIsValidatedAgainstTheSystem) {
  testing::SimulatedSystem system(1, 2);
  system.bring_up();
  EmbeddingConfiguration c = small_config();
  c.num_tensor_cores = 4;
  EXPECT_TESSEL_ERROR(configure_embedding(system.host(0), c), ErrorCode::kInvalidArgument,
                      "num_tensor_cores 4 but the system has 2 devices");
  EXPECT_FALSE(is_embedding_initialized(system.host(0)));
}

TEST(Seed102Embedding, ReconfigurationReplacesTheTables) {
  testing::SimulatedSystem system(1, 2);
  system.bring_up();
  auto first = configure_embedding(system.host(0), small_config());
  auto second = configure_embedding(system.host(0), small_config());
  EXPECT_TRUE(first->is_released());
  EXPECT_FALSE(second->is_released());
  EXPECT_EQ(host_embedding(system.host(0)), second);
  EXPECT_TESSEL_ERROR(first->get_table("t"), ErrorCode::kFailedPrecondition,
                      "replaced by a later configure_embedding");
}

TEST(Seed102Embedding, DisconnectReleasesTheTables) {
  testing::SimulatedSystem system(1, 2);
  system.bring_up();
  const int64_t before = system.runtime(0).device(0).memory_stats().live_bytes;
  auto emb = configure_embedding(system.host(0), small_config());
  EXPECT_GT(system.runtime(0).device(0).memory_stats().live_bytes, before);
  system.host(0).disconnect_host();
  EXPECT_FALSE(is_embedding_initialized(system.host(0)));
  EXPECT_TRUE(emb->is_released());
  EXPECT_EQ(system.runtime(0).device(0).memory_stats().live_bytes, before);
  EXPECT_TESSEL_ERROR(emb->get_table("t"), ErrorCode::kFailedPrecondition,
                      "host 0 ran disconnect_host");
  EXPECT_TESSEL_ERROR(host_embedding(system.host(0)), ErrorCode::kFailedPrecondition,
                      "not initialized");
}

TEST(Seed102Embedding, AcceleratorSystemForm) {
  EXPECT_FALSE(is_embedding_initialized());
  EXPECT_TESSEL_ERROR(configure_embedding(small_config()), ErrorCode::kFailedPrecondition,
                      "initialize_accelerator_system");
  initialize_accelerator_system({.num_logical_cpu_devices = 3});
  auto emb = configure_embedding(small_config());
  EXPECT_TRUE(is_embedding_initialized());
  EXPECT_EQ(embedding(), emb);
  EXPECT_EQ(emb->num_devices(), 3);
  shutdown_accelerator_system();
  EXPECT_FALSE(is_embedding_initialized());
  EXPECT_TRUE(emb->is_released());
}

}  // namespace
}  // namespace tessel
