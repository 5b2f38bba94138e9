#include "process_mesh.h"

#include <string>
#include <vector>

#include <fmt/format.h>

#include "tessel/core/error.h"

namespace tessel::cli {

ProcessMesh::ProcessMesh(std::string_view command, int64_t batch, int64_t model)
    : client_(client_config()) {
  const int64_t devices = batch * model;
  if (devices % client_.num_clients != 0) {
    throw Error(ErrorCode::kInvalidArgument, command,
                fmt::format("the {}x{} mesh's {} devices do not split evenly over {} processes",
                            batch, model, devices, client_.num_clients));
  }
  local_devices_ = static_cast<int>(devices / client_.num_clients);
  if (client_.num_clients > 1) mpi_.emplace();
  runtime_ = std::make_unique<Runtime>(RuntimeOptions{
      .num_cpu_devices = local_devices_, .job = client_.job, .task = client_.client_id});
  std::vector<std::string> local_names;
  for (int i = 0; i < local_devices_; ++i) local_names.push_back(fmt::format("CPU:{}", i));
  mesh_ = create_distributed_mesh({{"batch", batch}, {"model", model}}, local_names, client_);
}

}  // namespace tessel::cli
