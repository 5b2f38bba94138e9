// The TF attributes tessel accepts and cannot act on (docs/compatibility.md, "Attributes accepted
// and inert"): set to anything but their defaults they are kept and warned about, once each, on
// stderr; at their defaults nothing is said.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/inert_attribute.h"
#include "replicate/replicate_testing.h"
#include "system/system_test_util.h"
#include "tessel/mesh/mesh.h"
#include "tessel/system/system.h"

namespace tessel {
namespace {

bool warned(const std::string& key) {
  const std::vector<std::string> keys = detail::inert_attribute_warnings();
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

std::vector<std::string> tpu_devices(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i)
    out.push_back("/job:localhost/replica:0/task:0/device:TPU:" + std::to_string(i));
  return out;
}

TEST(InertAttributes, EachIsWarnedAboutOnceWhenSet) {
  detail::reset_inert_attribute_warnings();  // other tests of this process may have set some
  ::testing::internal::CaptureStderr();
  // ReplicateMetadata: read when replicate() places its replicas.
  ReplicateOptions options = testing::replicate_options(1);
  options.metadata.step_marker_location = "STEP_MARK_NONE";
  options.metadata.use_shardy_partitioner = true;
  options.metadata.tpu_compile_options_proto = "opaque";
  for (int call = 0; call < 2; ++call) {
    replicate([](ReplicaContext&, const std::vector<DTensor>& in) { return in; },
              {{Tensor::from_vector<float>({1}, Shape{1})}}, {}, {}, {}, options);
  }
  // Mesh: use_xla_spmd on a TPU mesh (elsewhere TF's error, BR-74-04).
  const Mesh tpu({"x"}, {2}, {0, 1}, {0, 1}, tpu_devices(2), "", {}, /*use_xla_spmd=*/true);
  EXPECT_TRUE(tpu.use_xla_spmd());  // kept
  // The system: enable_whole_mesh_compilations (BR-102-05) and tpu_cancellation_closes_chips.
  testing::SimulatedSystem sys(1, 1);
  const HostConfiguration config = sys.coordinator().configure_distributed_system(
      sys.disconnect_all(), {.enable_whole_mesh_compilations = true});
  sys.host(0).initialize_host(config, {.cancellation_closes_devices = 1});
  const std::string err = ::testing::internal::GetCapturedStderr();
  for (const std::string key :
       {"ReplicateMetadata.step_marker_location", "ReplicateMetadata.use_shardy_partitioner",
        "ReplicateMetadata.tpu_compile_options_proto", "Mesh.use_xla_spmd",
        "SystemCoordinator.enable_whole_mesh_compilations", "Host.tpu_cancellation_closes_chips"}) {
    EXPECT_TRUE(warned(key)) << key;
  }
  EXPECT_NE(err.find("tessel: warning: ReplicateMetadata: step_marker_location=STEP_MARK_NONE "
                     "changes nothing in tessel: tessel compiles no XLA program"),
            std::string::npos)
      << err;
  // Once each, though replicate() ran twice.
  size_t count = 0;
  for (size_t at = err.find("step_marker_location="); at != std::string::npos;
       at = err.find("step_marker_location=", at + 1)) {
    ++count;
  }
  EXPECT_EQ(count, 1u);
  EXPECT_FALSE(warned("ReplicateMetadata.host_compute_core"));  // left at its default
}

}  // namespace
}  // namespace tessel
