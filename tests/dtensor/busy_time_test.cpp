// Busy time per device (tessel/runtime/busy_time.h): the op launcher counts every kernel on its
// device, on the stream and inline; a relayout's collectives count on every device taking part,
// the wait for a late peer included; devices not involved count nothing.
#include "tessel/runtime/busy_time.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/relayout.h"

namespace tessel {
namespace {

using namespace std::chrono_literals;

TEST(BusyTime, CountsEachKernelOnItsDevice) {
  Runtime rt({.num_cpu_devices = 3});
  const Mesh mesh = Mesh::create_on_devices({{"x", 2}}, {rt.device(0).name(), rt.device(1).name()});
  const DTensor a = copy_to_mesh(Tensor::full(Shape{256, 256}, DType::kF32, 1.0),
                                 Layout({"x", "unsharded"}, mesh), rt);
  const DTensor tiny = copy_to_mesh(Tensor::full(Shape{4, 4}, DType::kF32, 1.0),
                                    Layout({"x", "unsharded"}, mesh), rt);
  rt.synchronize(10s);
  const BusyTime before0 = busy_time(rt.device(0)), before1 = busy_time(rt.device(1));
  const BusyTime before2 = busy_time(rt.device(2));
  const DTensor w = copy_to_mesh(Tensor::full(Shape{256, 256}, DType::kF32, 0.01),
                                 Layout::replicated(mesh, 2), rt);
  rt.synchronize(10s);
  const BusyTime start0 = busy_time(rt.device(0));
  EXPECT_EQ(start0.kernels, before0.kernels);  // copying onto the mesh runs no op kernel
  DTensor b = a;
  for (int i = 0; i < 5; ++i) b = matmul(b, w);  // [128, 256] x [256, 256] on each device
  const DTensor c = add(tiny, tiny);             // small enough to run inline on this thread
  to_host(b);
  to_host(c);
  const BusyTime after0 = busy_time(rt.device(0)), after1 = busy_time(rt.device(1));
  for (const auto& [before, after] : {std::pair{before0, after0}, std::pair{before1, after1}}) {
    EXPECT_EQ(after.kernels - before.kernels, 6);
    EXPECT_GT(after.kernel_seconds - before.kernel_seconds, 0.0);
    EXPECT_EQ(after.collectives, before.collectives);
  }
  const BusyTime after2 = busy_time(rt.device(2));
  EXPECT_EQ(after2.kernels, before2.kernels);
  EXPECT_EQ(after2.kernel_seconds, before2.kernel_seconds);
}

TEST(BusyTime, ARelayoutsCollectivesCountOnEveryDeviceWithTheWaitForALatePeer) {
  Runtime rt({.num_cpu_devices = 2});
  const Mesh m0 = Mesh::create_on_devices({{"x", 1}}, {rt.device(0).name()});
  const Mesh m1 = Mesh::create_on_devices({{"x", 1}}, {rt.device(1).name()});
  const DTensor x = copy_to_mesh(Tensor::full(Shape{64, 64}, DType::kF32, 1.0),
                                 Layout({"unsharded", "unsharded"}, m0), rt);
  rt.synchronize(10s);
  const BusyTime before0 = busy_time(rt.device(0)), before1 = busy_time(rt.device(1));
  // Device 0 is late by 100 ms: device 1 waits for it inside the send_recv.
  rt.device(0).stream().enqueue("late", [] { std::this_thread::sleep_for(100ms); });
  const DTensor y = relayout(x, Layout({"unsharded", "unsharded"}, m1), RelayoutOptions{10s});
  const BusyTime after0 = busy_time(rt.device(0)), after1 = busy_time(rt.device(1));
  EXPECT_EQ(after0.collectives - before0.collectives, 1);
  EXPECT_EQ(after1.collectives - before1.collectives, 1);
  EXPECT_GE(after1.communication_seconds - before1.communication_seconds, 0.09);
  EXPECT_LT(after0.communication_seconds - before0.communication_seconds,
            after1.communication_seconds - before1.communication_seconds);
  // The sleep is no kernel.
  EXPECT_EQ(after0.kernel_seconds, before0.kernel_seconds);
  EXPECT_EQ(to_host(y).to_doubles().at(0), 1.0);
}

}  // namespace
}  // namespace tessel
