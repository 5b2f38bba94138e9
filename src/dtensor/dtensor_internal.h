// Internal helpers of the DTensor layer: which runtime device and which mesh offset each local
// device of a mesh is, and the checks that pack, copy_to_mesh and the DTensor constructor share.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessel/dtensor/op_profile.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/mesh/layout.h"
#include "tessel/runtime/device.h"
#include "tessel/runtime/runtime.h"

namespace tessel {
struct OpDef;
}  // namespace tessel

namespace tessel::detail {

// kInvalidArgument (from `component`) unless `layout` can place a tensor: a tile mesh (not the
// empty or single-device layout) and no match/any specs.
void check_tensor_layout(const Layout& layout, std::string_view component);
// The runtime's device for each local device of `mesh`, in local order. A name the runtime does
// not have (a TPU mesh's devices, say): kInvalidArgument with TF's "<name> unknown device.".
std::vector<Device*> resolve_local_devices(const Mesh& mesh, Runtime& runtime,
                                           std::string_view component);
// The mesh offset of each local device, in local order.
std::vector<int64_t> local_offsets(const Mesh& mesh);
// Waits for every stream of `devices`, then throws the first failure (a sync point).
void synchronize_devices(const std::vector<Device*>& devices);
// "[0:3, 0:4]": a block as global index ranges.
std::string block_string(const std::vector<int64_t>& offsets, const std::vector<int64_t>& extents);
// "/job:<job>/replica:<r>/task:<t>/device:CUSTOM:0" for `runtime`'s options.
std::string dtensor_device_name(const Runtime& runtime);
// relayout() without recording on gradient tapes: the relayouts call_op makes of its inputs
// (their gradients flow through the op's record) and those of the tape itself.
DTensor relayout_untracked(const DTensor& tensor, const Layout& layout,
                           const RelayoutOptions& options = {});
// Records `out`, the relayout of `in`, on the gradient tapes that watch `in` (as relayout() does):
// an op whose gradient is the output's gradient, relaid out to `in`'s layout by the tape.
void record_relayout(const DTensor& in, const DTensor& out);
// The op relayouts are recorded as (its name is "relayout").
const OpDef& relayout_op();
// Counts one relayout collective sending `bytes` in relayout_stats() (relayout.h).
void count_collective(int64_t bytes);
// Adds one device's time inside a relayout collective to relayout_stats().seconds.
void count_collective_time(std::chrono::steady_clock::duration time);
// Times one device's part of a relayout collective: made on the launching thread, whose profile
// phase it keeps (op_profile.h), and called on the device's stream with the collective.
class CollectiveTimer {
 public:
  // `step` names the collective in the op profile ("all_reduce", "fused all_reduce").
  explicit CollectiveTimer(std::string step)
      : step_(std::move(step)), phase_(current_profile_phase()) {}
  // Runs `call` and counts its time in relayout_stats() and in the op profile.
  template <typename F>
  void operator()(F&& call) const {
    const double profiled = profile_clock();
    const auto start = std::chrono::steady_clock::now();
    call();
    count_collective_time(std::chrono::steady_clock::now() - start);
    record_collective_profile(phase_, step_, profiled);
  }

 private:
  std::string step_;
  int phase_;
};

}  // namespace tessel::detail
