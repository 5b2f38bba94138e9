// Multi-client configuration from the environment (TF's config.py rules).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessel/runtime/clients.h"
#include "testing/expect_error.h"
#include "testing/scoped_env.h"

namespace tessel {
namespace {

// The variables that say which client this process is: every test starts with none of them set.
constexpr const char* kClientVariables[] = {
    "TESSEL_NUM_CLIENTS", "DTENSOR_NUM_CLIENTS", "DTENSOR_JOBS",      "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",           "TESSEL_CLIENT_ID",    "DTENSOR_CLIENT_ID", "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",           "TESSEL_JOB_NAME",     "DTENSOR_JOB_NAME"};

// Sets `vars` for one test, every other client variable unset, and restores them all.
class Env {
 public:
  Env(std::initializer_list<std::pair<const char*, const char*>> vars) : scoped_(settings(vars)) {}

 private:
  static std::vector<std::pair<std::string, testing::ScopedEnv::Value>> settings(
      std::initializer_list<std::pair<const char*, const char*>> vars) {
    std::vector<std::pair<std::string, testing::ScopedEnv::Value>> out;
    for (const char* name : kClientVariables) out.emplace_back(name, std::nullopt);
    for (const auto& [name, value] : vars) out.emplace_back(name, value);
    return out;
  }

  testing::ScopedEnv scoped_;
};

TEST(Clients, DefaultsAreOneLocalClient) {
  Env env({});
  EXPECT_EQ(num_clients(), 1);
  EXPECT_EQ(client_id(), 0);
  EXPECT_EQ(job_name(), "localhost");
  EXPECT_EQ(full_job_name(), "localhost/replica:0/task:0");
  EXPECT_TESSEL_ERROR(full_job_name(1), ErrorCode::kInvalidArgument, "Unexpected task ID 1 in local runs");
}

TEST(Clients, MpirunEnvironmentGivesTheClients) {
  Env env({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"}});
  EXPECT_EQ(num_clients(), 2);
  EXPECT_EQ(client_id(), 1);
  EXPECT_EQ(job_name(), "worker");
  EXPECT_EQ(full_job_name(), "worker/replica:0/task:1");
}

TEST(Clients, DtensorJobsCountTheClientsAndExplicitValuesWin) {
  Env env({{"DTENSOR_JOBS", "a:1,b:2,c:3"}, {"DTENSOR_CLIENT_ID", "2"}, {"TESSEL_JOB_NAME", "trainer"}});
  EXPECT_EQ(jobs(), (std::vector<std::string>{"a:1", "b:2", "c:3"}));
  EXPECT_EQ(num_clients(), 3);
  EXPECT_EQ(client_id(), 2);
  EXPECT_EQ(job_name(), "trainer");
}

TEST(Clients, BadValuesAreErrors) {
  {
    Env env({{"TESSEL_NUM_CLIENTS", "two"}});
    EXPECT_TESSEL_ERROR(num_clients(), ErrorCode::kInvalidArgument, "TESSEL_NUM_CLIENTS='two' is not an integer");
  }
  {
    Env env({{"TESSEL_NUM_CLIENTS", "2"}, {"TESSEL_CLIENT_ID", "2"}});
    EXPECT_TESSEL_ERROR(client_id(), ErrorCode::kInvalidArgument, "Client ID 2 is out of range [0, 2)");
  }
}

TEST(Clients, DistributedMeshSpansEveryClientsDevices) {
  Env env({{"TESSEL_NUM_CLIENTS", "2"}, {"TESSEL_CLIENT_ID", "1"}});
  const Mesh mesh = create_distributed_mesh({{"x", 2}, {"y", 2}}, {"CPU:0", "CPU:1"});
  EXPECT_EQ(mesh.global_device_ids(), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(mesh.local_device_ids(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(mesh.local_devices(), (std::vector<std::string>{"/job:worker/replica:0/task:1/device:CPU:0",
                                                            "/job:worker/replica:0/task:1/device:CPU:1"}));
  EXPECT_EQ(mesh.global_devices().size(), 4u);
  EXPECT_EQ(mesh.global_devices()[0], "/job:worker/replica:0/task:0/device:CPU:0");
  EXPECT_TESSEL_ERROR(create_distributed_mesh({{"x", 3}}, {"CPU:0", "CPU:1"}),
                      ErrorCode::kInvalidArgument,
                      "Global number of devices (2 per client * 2 clients) does not match requested mesh of 3 devices");
}

TEST(Clients, SingleClientDistributedMeshIsALocalMesh) {
  Env env({});
  const Mesh mesh = create_distributed_mesh({{"x", 2}}, {"CPU:0", "CPU:1"});
  EXPECT_EQ(mesh.local_device_ids(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(mesh.num_local_devices(), mesh.size());
  EXPECT_EQ(mesh.local_devices()[1], "/job:localhost/replica:0/task:0/device:CPU:1");
}

}  // namespace
}  // namespace tessel
