#include "process_mesh.h"

#include <unistd.h>

#include <algorithm>
#include <exception>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tessel/core/error.h"
#include "tessel/mesh/mesh_spec.h"

namespace tessel::cli {

std::pair<int64_t, int64_t> parse_mesh_shape(const FlagParser& flags, const std::string& flag,
                                             const std::string& text, int64_t* stage) {
  Mesh mesh;
  try {
    mesh = parse_mesh(text, {"batch", "model"}, kMaxCpuDevices);
  } catch (const Error& e) {
    flags.fail(fmt::format("{}: {}", flag, e.what()));
  }
  for (const std::string& name : mesh.dim_names()) {
    if (name != "batch" && name != "model" && (stage == nullptr || name != "stage")) {
      flags.fail(fmt::format("{} dimensions are {}batch and model, got '{}' in '{}'", flag,
                             stage != nullptr ? "stage, " : "", name, text));
    }
  }
  if (stage != nullptr) {
    *stage = mesh.contains_dim("stage") ? mesh.dim_size("stage") : 0;
    if (*stage > 0 && mesh.dim_names().front() != "stage") {
      flags.fail(fmt::format("{}: the stage dimension comes first, got '{}'", flag, text));
    }
  }
  const auto size = [&](const char* name) {
    return mesh.contains_dim(name) ? mesh.dim_size(name) : int64_t{1};
  };
  return {size("batch"), size("model")};
}

bool redraw_progress(const ClientConfig& client) {
  return client.num_clients == 1 && isatty(STDOUT_FILENO) != 0;
}

ProcessMesh::ProcessMesh(std::string_view command, int64_t batch, int64_t model,
                         std::string_view device_type, int64_t stages)
    : client_(client_config()) {
  const int64_t devices = std::max<int64_t>(stages, 1) * batch * model;
  if (devices % client_.num_clients != 0) {
    throw Error(ErrorCode::kInvalidArgument, command,
                fmt::format("the {}x{} mesh's {} devices do not split evenly over {} processes",
                            batch, model, devices, client_.num_clients));
  }
  local_devices_ = static_cast<int>(devices / client_.num_clients);
  if (client_.num_clients > 1) mpi_ = std::make_unique<MpiEnvironment>();
  const bool gpu = device_type == "GPU";
  runtime_ = std::make_unique<Runtime>(RuntimeOptions{
      .num_cpu_devices = gpu ? 1 : local_devices_, .job = client_.job, .task = client_.client_id});
  if (gpu && static_cast<int>(runtime_->gpu_devices().size()) < local_devices_) {
    throw Error(ErrorCode::kInvalidArgument, command,
                fmt::format("the {}x{} mesh needs {} GPU devices in this process, but it has {} "
                            "(TESSEL_GPU_DEVICES lists a GPU once per device: \"0,0\" makes two "
                            "devices on GPU 0)",
                            batch, model, local_devices_, runtime_->gpu_devices().size()));
  }
  std::vector<std::string> local_names;
  for (int i = 0; i < local_devices_; ++i) {
    local_names.push_back(fmt::format("{}:{}", gpu ? "GPU" : "CPU", i));
  }
  std::vector<MeshDimension> dims{{"batch", batch}, {"model", model}};
  if (stages > 0) dims.insert(dims.begin(), {"stage", stages});
  mesh_ = create_distributed_mesh(dims, local_names, client_);
}

ProcessMesh::~ProcessMesh() {
  runtime_.reset();  // the devices first, as the members' order would
  if (std::uncaught_exceptions() > 0) static_cast<void>(mpi_.release());  // no MPI_Finalize
}

}  // namespace tessel::cli
