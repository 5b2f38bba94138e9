// The NCCL communicator's stub (built without CUDA): every factory throws kUnavailable.
#include "core/built_without.h"
#include "tessel/comm/nccl.h"

namespace tessel {
namespace {
[[noreturn]] void unavailable(const char* what) {
  detail::throw_built_without(detail::Backend::kCuda, "NCCL", what);
}
}  // namespace

bool nccl_available() { return false; }
std::string nccl_version() { return ""; }

std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(const std::vector<Device*>&) {
  unavailable("make_nccl_communicators");
}

std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator>, Device&,
                                                     const CollectiveOptions&) {
  unavailable("make_nccl_communicator");
}

}  // namespace tessel
