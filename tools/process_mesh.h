// Internal to the CLI: this process's share of a batch x model mesh of devices (virtual CPU
// devices, or GPU devices). Alone,
// the process holds the whole mesh; as one of P clients under mpirun it holds B*M/P devices
// (batch across processes, model within), with MPI initialised while the object lives.
//
//   ProcessMesh pm("train", 2, 2);          // under `mpirun -np 2`: 2 devices here
//   GptTrainer trainer(config, pm.mesh(), data, &pm.runtime());
//   if (pm.prints()) std::cout << ...;      // only client 0 reports
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "flags.h"
#include "tessel/comm/mpi.h"
#include "tessel/mesh/mesh.h"
#include "tessel/runtime/clients.h"
#include "tessel/runtime/runtime.h"

namespace tessel::cli {

// A batch x model mesh shape written "BxM" (2x2) or "batch=B,model=M" (a missing dimension is 1),
// as (B, M); sizes 1..kMaxCpuDevices. Anything else fails through `flags`, naming `flag`. Given
// `stage`, a `stage` dimension is accepted too (pipeline stages: "stage=2,batch=1,model=2") and
// its size written there (0 when the text has none).
std::pair<int64_t, int64_t> parse_mesh_shape(const FlagParser& flags, const std::string& flag,
                                             const std::string& text, int64_t* stage = nullptr);

// Whether progress output may redraw one line with carriage returns: stdout is a terminal and
// this is the only process. Open MPI gives each rank a pseudo-terminal even when mpirun's own
// output is piped, so a run over several processes prints one line per report.
bool redraw_progress(const ClientConfig& client);

class ProcessMesh {
 public:
  // B*M devices that do not split evenly over the processes: kInvalidArgument from `command`.
  // Several processes in a build without MPI: kUnavailable. device_type "GPU": the mesh is this
  // process's GPU devices (as many as it holds of the mesh; TESSEL_SIMULATED_GPUS for simulated
  // ones), fewer than that: kInvalidArgument naming the counts.
  // stages > 0: the mesh is stage x batch x model (stage first; gpt_pipeline.h).
  ProcessMesh(std::string_view command, int64_t batch, int64_t model,
              std::string_view device_type = "CPU", int64_t stages = 0);
  // Destroyed by an exception (e.g. a collective that lost a process), it leaves MPI as it is:
  // MPI_Finalize could wait forever for a process that is gone, and main() reports the error.
  ~ProcessMesh();
  ProcessMesh(const ProcessMesh&) = delete;
  ProcessMesh& operator=(const ProcessMesh&) = delete;

  const ClientConfig& client() const { return client_; }
  int local_devices() const { return local_devices_; }
  Runtime& runtime() const { return *runtime_; }
  const Mesh& mesh() const { return mesh_; }
  bool prints() const { return client_.client_id == 0; }

 private:
  ClientConfig client_;
  std::unique_ptr<MpiEnvironment> mpi_;  // before the runtime: MPI outlives its devices
  int local_devices_ = 1;
  std::unique_ptr<Runtime> runtime_;
  Mesh mesh_;
};

}  // namespace tessel::cli
