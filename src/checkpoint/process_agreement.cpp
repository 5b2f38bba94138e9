// The agreement is a relayout of a Partial(min) value to replicated: the one collective the
// dtensor layer already runs, in process and over MPI alike, with its deadline.
#include "checkpoint/process_agreement.h"

#include <exception>

#include "core/errors.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/relayout.h"

namespace tessel::checkpoint::detail {
namespace {

constexpr float kOk = 1e9f;  // above every process index

}  // namespace

ProcessAgreement::ProcessAgreement(Mesh mesh, Runtime* runtime, int process,
                                   std::chrono::milliseconds timeout)
    : mesh_(std::move(mesh)), runtime_(runtime), process_(process), timeout_(timeout) {}

int ProcessAgreement::first_failed(bool ok) {
  // Nothing to exchange when every device of the mesh is this process's (or none is).
  if (mesh_.is_empty() || mesh_.is_single_device() || mesh_.size() <= 1 ||
      mesh_.num_local_devices() == 0 || mesh_.num_local_devices() == mesh_.size()) {
    return ok ? -1 : process_;
  }
  std::vector<PartialDim> partial;
  for (const std::string& dim : mesh_.dim_names()) partial.push_back({dim, ReduceOp::kMin});
  const Layout replicated = Layout::replicated(mesh_, 1);
  const float mine = ok ? kOk : static_cast<float>(process_);
  const std::vector<Tensor> terms(static_cast<size_t>(mesh_.num_local_devices()),
                                  Tensor::from_vector<float>({mine}, Shape({1})));
  const DTensor votes = pack(terms, replicated.with_partial(partial), *runtime_);
  const DTensor agreed = relayout(votes, replicated, RelayoutOptions{timeout_});
  const float lowest = unpack(agreed).front().data<float>()[0];
  return lowest >= kOk ? -1 : static_cast<int>(lowest);
}

void ProcessAgreement::run_step(std::string_view step, const std::function<void()>& work) {
  std::exception_ptr failure;
  try {
    work();
  } catch (...) {
    failure = std::current_exception();
  }
  const int failed = first_failed(failure == nullptr);
  if (failure) std::rethrow_exception(failure);
  if (failed >= 0) {
    tessel::detail::throw_error(ErrorCode::kAborted, "checkpoint",
                                "process {} failed at step '{}'; this process stops too", failed,
                                step);
  }
}

}  // namespace tessel::checkpoint::detail
