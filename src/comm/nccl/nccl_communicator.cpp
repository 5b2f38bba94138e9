// The NCCL communicator factories (tessel/comm/nccl.h).
#include <cstring>
#include <set>
#include <thread>

#include <nccl.h>

#include "comm/communicator_internal.h"
#include "comm/in_process_hub.h"
#include "comm/nccl/nccl_transport.h"
#include "core/errors.h"
#include "runtime/cuda/cuda_check.h"
#include "tessel/comm/nccl.h"
#include "tessel/runtime/device.h"

namespace tessel {
namespace {
constexpr std::string_view kNccl = "NCCL";

void require_gpu_device(const Device* d, size_t position) {
  if (d == nullptr) detail::throw_invalid(kNccl, "device {} is null", position);
  if (d->cuda_stream() == nullptr) {
    detail::throw_invalid(kNccl, "device {} ({}) is not a GPU device on a CUDA GPU", position,
                          d->name());
  }
}

[[noreturn]] void throw_nccl(ncclResult_t result, std::string_view what) {
  detail::throw_error(ErrorCode::kInternal, kNccl, "{} failed: {} ({})", what,
                      ncclGetErrorString(result), ncclGetLastError(nullptr));
}

}  // namespace

bool nccl_available() { return true; }

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "";
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
}

std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(
    const std::vector<Device*>& gpus) {
  if (gpus.empty()) detail::throw_invalid(kNccl, "make_nccl_communicators needs at least one GPU device");
  std::vector<int> ordinals;
  std::vector<std::string> names;
  std::set<int> seen;
  for (size_t i = 0; i < gpus.size(); ++i) {
    require_gpu_device(gpus[i], i);
    if (!seen.insert(gpus[i]->gpu_ordinal()).second) {
      detail::throw_invalid(kNccl,
                            "{} is on CUDA GPU {}, which an earlier device of the group already "
                            "uses (NCCL allows one rank per GPU)",
                            gpus[i]->name(), gpus[i]->gpu_ordinal());
    }
    ordinals.push_back(gpus[i]->gpu_ordinal());
    names.push_back(gpus[i]->name());
  }
  std::vector<ncclComm_t> comms(gpus.size(), nullptr);
  const ncclResult_t result =
      ncclCommInitAll(comms.data(), static_cast<int>(comms.size()), ordinals.data());
  if (result != ncclSuccess) throw_nccl(result, fmt::format("ncclCommInitAll over [{}]", fmt::join(names, ", ")));
  std::vector<std::shared_ptr<detail::Transport>> hosts = detail::make_in_process_transports(names);
  std::vector<std::unique_ptr<Communicator>> out;
  for (size_t i = 0; i < gpus.size(); ++i) {
    out.push_back(std::make_unique<Communicator>(
        std::make_shared<detail::NcclTransport>(std::move(hosts[i]), comms[i], *gpus[i])));
  }
  return out;
}

std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> host,
                                                     Device& gpu,
                                                     const CollectiveOptions& options) {
  if (!host) detail::throw_invalid(kNccl, "make_nccl_communicator needs a host communicator");
  require_gpu_device(&gpu, 0);
  const detail::Deadline deadline = detail::deadline_of(options);
  CollectiveOptions timed = options;
  timed.deadline = deadline;
  // Rank 0's unique id reaches every rank over the host group.
  ncclUniqueId id{};
  if (host->rank() == 0) {
    const ncclResult_t made = ncclGetUniqueId(&id);
    if (made != ncclSuccess) throw_nccl(made, "ncclGetUniqueId");
  }
  Tensor id_bytes = Tensor::from_bytes(&id, sizeof(id), Shape{static_cast<int64_t>(sizeof(id))},
                                       DType::kU8);
  host->broadcast(id_bytes, 0, timed);
  std::memcpy(&id, id_bytes.data(), sizeof(id));

  detail::ScopedCudaDevice on(gpu.gpu_ordinal());
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a missing rank cannot hold this call past its deadline
  ncclComm_t comm = nullptr;
  ncclResult_t state =
      ncclCommInitRankConfig(&comm, host->size(), id, host->rank(), &config);
  while (state == ncclInProgress) {
    if (detail::Clock::now() >= deadline) {
      (void)ncclCommAbort(comm);
      detail::throw_error(ErrorCode::kDeadlineExceeded, kNccl,
                          "rank {} ({}) could not join the NCCL group [{}] by its deadline",
                          host->rank(), gpu.name(), fmt::join(host->members(), ", "));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    (void)ncclCommGetAsyncError(comm, &state);
  }
  if (state != ncclSuccess) {
    if (comm != nullptr) (void)ncclCommAbort(comm);
    throw_nccl(state, fmt::format("ncclCommInitRank of rank {} on {}", host->rank(), gpu.name()));
  }
  auto out = std::make_unique<Communicator>(
      std::make_shared<detail::NcclTransport>(host->shared_transport(), comm, gpu));
  out->continue_sequence_from(*host);
  return out;
}

}  // namespace tessel
