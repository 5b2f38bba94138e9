// Multi-client configuration from the environment (see clients.h). It lives in the runtime layer:
// Runtime::global() names its devices after this client.
#include "tessel/runtime/clients.h"

#include <limits>
#include <numeric>
#include <utility>

#include "core/env.h"
#include "core/errors.h"
#include "core/text.h"
#include "tessel/core/device_name.h"

namespace tessel {
namespace {

constexpr std::string_view kComponent = "clients";

// The first of `names` set (and not empty) in the environment, as an int.
std::optional<int> first_env_int(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (const auto value = detail::env_int(name, {std::numeric_limits<int>::min(),
                                                  std::numeric_limits<int>::max()},
                                           kComponent, "an integer")) {
      return static_cast<int>(*value);
    }
  }
  return std::nullopt;
}

}  // namespace

std::vector<std::string> jobs() {
  const std::optional<std::string> text = detail::env_string("DTENSOR_JOBS");
  return text ? detail::split(*text, ',') : std::vector<std::string>{};
}

int num_clients() {
  if (auto n = first_env_int({"TESSEL_NUM_CLIENTS", "DTENSOR_NUM_CLIENTS"})) {
    if (*n < 1) detail::throw_invalid(kComponent, "the number of clients must be >= 1, got {}", *n);
    return *n;
  }
  if (const auto j = jobs(); !j.empty()) return static_cast<int>(j.size());
  if (auto n = first_env_int({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})) return std::max(*n, 1);
  return 1;
}

int client_id() {
  const int id = first_env_int({"TESSEL_CLIENT_ID", "DTENSOR_CLIENT_ID",
                                "OMPI_COMM_WORLD_RANK", "PMI_RANK"})
                     .value_or(0);
  const int n = num_clients();
  if (id < 0 || id >= n) {
    detail::throw_invalid(kComponent, "Client ID {} is out of range [0, {})", id, n);
  }
  return id;
}

std::string job_name() {
  for (const char* name : {"TESSEL_JOB_NAME", "DTENSOR_JOB_NAME"}) {
    if (std::optional<std::string> job = detail::env_string(name)) return *std::move(job);
  }
  return num_clients() == 1 ? "localhost" : "worker";
}

std::string full_job_name(std::optional<int> task_id) {
  const int task = task_id.value_or(client_id());
  if (num_clients() == 1 && task != 0) {
    detail::throw_invalid(kComponent, "Unexpected task ID {} in local runs", task);
  }
  return fmt::format("{}/replica:0/task:{}", job_name(), task);
}

ClientConfig client_config() { return ClientConfig{num_clients(), client_id(), job_name()}; }

Mesh create_distributed_mesh(const std::vector<MeshDimension>& dims,
                             const std::vector<std::string>& local_devices,
                             const std::string& mesh_name, bool use_xla_spmd) {
  return create_distributed_mesh(dims, local_devices, client_config(), mesh_name, use_xla_spmd);
}

Mesh create_distributed_mesh(const std::vector<MeshDimension>& dims,
                             const std::vector<std::string>& local_devices,
                             const ClientConfig& client, const std::string& mesh_name,
                             bool use_xla_spmd) {
  if (local_devices.empty()) detail::throw_invalid(kComponent, "no local devices given");
  const int clients = client.num_clients;
  const int me = client.client_id;
  if (clients < 1 || me < 0 || me >= clients) {
    detail::throw_invalid(kComponent, "Client ID {} is out of range [0, {})", me, clients);
  }
  const int64_t per_client = static_cast<int64_t>(local_devices.size());
  int64_t wanted = 1;
  std::vector<std::string> names;
  std::vector<int64_t> shape;
  for (const MeshDimension& d : dims) {
    wanted *= d.size;
    names.push_back(d.name);
    shape.push_back(d.size);
  }
  if (wanted != per_client * clients) {
    detail::throw_invalid(kComponent,
                          "Global number of devices ({} per client * {} clients) does not match "
                          "requested mesh of {} devices",
                          per_client, clients, wanted);
  }
  const std::string& first = local_devices.front();
  const std::string type =
      DeviceName::parse(first.find('/') == 0
                            ? first
                            : fmt::format("/job:localhost/replica:0/task:0/device:{}", first))
          .type.value_or("CPU");
  const std::string& job = client.job;
  std::vector<int64_t> global_ids(static_cast<size_t>(wanted));
  std::iota(global_ids.begin(), global_ids.end(), 0);
  std::vector<int64_t> local_ids;
  std::vector<std::string> local_names, global_names;
  for (int c = 0; c < clients; ++c) {
    for (int64_t i = 0; i < per_client; ++i) {
      global_names.push_back(fmt::format("/job:{}/replica:0/task:{}/device:{}:{}", job, c, type, i));
    }
  }
  for (int64_t i = 0; i < per_client; ++i) {
    local_ids.push_back(me * per_client + i);
    local_names.push_back(global_names[static_cast<size_t>(me * per_client + i)]);
  }
  return Mesh(names, shape, global_ids, local_ids, local_names, mesh_name,
              clients > 1 ? global_names : std::vector<std::string>{}, use_xla_spmd);
}

}  // namespace tessel
