#include "process_mesh.h"

#include <algorithm>
#include <exception>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tessel/core/error.h"

namespace tessel::cli {

std::pair<int64_t, int64_t> parse_mesh_shape(const FlagParser& flags, const std::string& flag,
                                             const std::string& text) {
  const auto size = [&](const std::string& v) {
    return flags.parse_integer(flag, v, 1, kMaxCpuDevices);
  };
  const size_t x = text.find('x');
  if (x != std::string::npos && text.find('=') == std::string::npos) {
    return {size(text.substr(0, x)), size(text.substr(x + 1))};
  }
  if (text.find('=') == std::string::npos) {
    flags.fail(fmt::format("{} needs BxM (e.g. 2x2) or batch=B,model=M, got '{}'", flag, text));
  }
  std::pair<int64_t, int64_t> shape{1, 1};
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    const size_t eq = item.find('=');
    const std::string name = item.substr(0, eq);
    if (eq == std::string::npos || (name != "batch" && name != "model")) {
      flags.fail(fmt::format("{} dimensions are batch and model, got '{}'", flag, name));
    }
    (name == "batch" ? shape.first : shape.second) = size(item.substr(eq + 1));
    start = comma + 1;
  }
  return shape;
}

ProcessMesh::ProcessMesh(std::string_view command, int64_t batch, int64_t model)
    : client_(client_config()) {
  const int64_t devices = batch * model;
  if (devices % client_.num_clients != 0) {
    throw Error(ErrorCode::kInvalidArgument, command,
                fmt::format("the {}x{} mesh's {} devices do not split evenly over {} processes",
                            batch, model, devices, client_.num_clients));
  }
  local_devices_ = static_cast<int>(devices / client_.num_clients);
  if (client_.num_clients > 1) mpi_ = std::make_unique<MpiEnvironment>();
  runtime_ = std::make_unique<Runtime>(RuntimeOptions{
      .num_cpu_devices = local_devices_, .job = client_.job, .task = client_.client_id});
  std::vector<std::string> local_names;
  for (int i = 0; i < local_devices_; ++i) local_names.push_back(fmt::format("CPU:{}", i));
  mesh_ = create_distributed_mesh({{"batch", batch}, {"model", model}}, local_names, client_);
}

ProcessMesh::~ProcessMesh() {
  runtime_.reset();  // the devices first, as the members' order would
  if (std::uncaught_exceptions() > 0) static_cast<void>(mpi_.release());  // no MPI_Finalize
}

}  // namespace tessel::cli
