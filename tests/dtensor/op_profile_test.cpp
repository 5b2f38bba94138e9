// op_profile.h: kernels counted per op and phase (one call per device block), allocations,
// collectives, nesting of phases, and nothing recorded while off.
#include "tessel/dtensor/op_profile.h"

#include <gtest/gtest.h>

#include <thread>

#include "tessel/core/error.h"
#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/mesh/layout.h"
#include "tessel/mesh/mesh.h"

namespace tessel {
namespace {

const OpProfileRow* find_row(const OpProfile& p, std::string_view phase, std::string_view op) {
  for (const OpProfileRow& row : p.rows) {
    if (row.phase == phase && row.op == op) return &row;
  }
  return nullptr;
}

TEST(OpProfile, CountsEachDevicesKernelUnderItsPhase) {
  Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}}, "CPU", "", 4);
  const Layout rows({"x", "unsharded"}, mesh);
  DTensor a = copy_to_mesh(Tensor::full(Shape{256, 256}, DType::kF32, 1.0), rows);
  DTensor b =
      copy_to_mesh(Tensor::full(Shape{256, 256}, DType::kF32, 1.0), Layout::replicated(mesh, 2));
  start_op_profile();
  {
    ProfilePhase forward("forward");
    DTensor c = matmul(a, b);
    {
      ProfilePhase inner("backward");
      c = exp(multiply(c, 1e-3));
    }
    c = relayout(c, Layout::replicated(mesh, 2));  // a collective
    to_host(c);
  }
  const OpProfile p = stop_op_profile();
  const OpProfileRow* mm = find_row(p, "forward", "matmul");
  ASSERT_NE(mm, nullptr) << p.table();
  EXPECT_EQ(mm->calls, 4);  // one block per device
  EXPECT_GT(mm->seconds, 0);
  const OpProfileRow* e = find_row(p, "backward", "exp");
  ASSERT_NE(e, nullptr) << p.table();
  EXPECT_EQ(e->calls, 4);
  EXPECT_NE(find_row(p, "forward", "(allocate outputs)"), nullptr) << p.table();
  EXPECT_EQ(find_row(p, "forward", "exp"), nullptr);
  EXPECT_GE(p.collectives, 1);
  // The relayout's collective, under the phase that launched it.
  EXPECT_GT(p.phase_collective_seconds("forward"), 0) << p.table();
  EXPECT_EQ(p.phase_collective_seconds("backward"), 0) << p.table();
  EXPECT_GT(p.wall_seconds, 0);
  EXPECT_GT(p.phase_seconds("forward"), 0);
  const std::string table = p.table(2);
  EXPECT_NE(table.find("matmul"), std::string::npos) << table;
  EXPECT_NE(table.find("wall clock"), std::string::npos) << table;
}

// A worker thread handed the phase of the thread that gave it work counts toward that phase
// (a pipeline's stage threads), and its own afterwards.
TEST(OpProfile, AWorkerThreadInheritsTheHandersPhase) {
  Mesh mesh = Mesh::create({{"x", 1}}, "CPU", "", 1);
  DTensor a = copy_to_mesh(Tensor::full(Shape{64}, DType::kF32, 1.0), Layout::replicated(mesh, 1));
  start_op_profile();
  {
    ProfilePhase pipeline("pipeline");
    const int phase = detail::current_profile_phase();
    std::thread([&] {
      {
        const detail::InheritedProfilePhase inherit(phase);
        to_host(exp(a));
      }
      to_host(sqrt(a));  // back to this thread's own phase: "other"
    }).join();
  }
  const OpProfile p = stop_op_profile();
  EXPECT_NE(find_row(p, "pipeline", "exp"), nullptr) << p.table();
  EXPECT_EQ(find_row(p, "other", "exp"), nullptr) << p.table();
  EXPECT_NE(find_row(p, "other", "sqrt"), nullptr) << p.table();
}

const OpProfileRow* find_collective(const OpProfile& p, std::string_view phase,
                                    std::string_view step) {
  for (const OpProfileRow& row : p.collective_rows) {
    if (row.phase == phase && row.op == step) return &row;
  }
  return nullptr;
}

// A relayout's collective counts toward the phase that launched it, apart from the kernels; a
// tape's final reduction of its sources' gradients runs in the phase "gradient reduction".
TEST(OpProfile, CountsCollectivesUnderTheLaunchingPhase) {
  Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}}, "CPU", "", 4);
  DTensor w =
      copy_to_mesh(Tensor::full(Shape{16, 8}, DType::kF32, 0.5), Layout::replicated(mesh, 2));
  DTensor x =
      copy_to_mesh(Tensor::full(Shape{32, 16}, DType::kF32, 1.0), Layout({"x", "unsharded"}, mesh));
  start_op_profile();
  {
    ProfilePhase step("step");
    auto [loss, grads] = value_and_grad(
        [&](const std::vector<DTensor>& p) { return reduce_sum(matmul(x, p[0])); }, {w});
    to_host(grads[0]);
    ASSERT_TRUE(grads[0].layout().is_fully_replicated());
  }
  const OpProfile p = stop_op_profile();
  // w's gradient is a sum over the batch shards: one fused all-reduce over x on each device.
  const OpProfileRow* reduce = find_collective(p, "gradient reduction", "fused all_reduce");
  ASSERT_NE(reduce, nullptr) << p.table();
  EXPECT_EQ(reduce->calls, 4);
  EXPECT_GT(reduce->seconds, 0);
  EXPECT_GT(p.phase_collective_seconds("gradient reduction"), 0);
  EXPECT_EQ(find_row(p, "gradient reduction", "matmul"), nullptr) << p.table();
  EXPECT_NE(find_row(p, "step", "matmul"), nullptr) << p.table();
  EXPECT_EQ(p.phase_collective_seconds("nowhere"), 0);
  const std::string table = p.table();
  EXPECT_NE(table.find("(collective) fused all_reduce"), std::string::npos) << table;
}

TEST(OpProfile, RecordsNothingWhileOff) {
  Mesh mesh = Mesh::create({{"x", 1}}, "CPU", "", 1);
  DTensor a = copy_to_mesh(Tensor::full(Shape{64}, DType::kF32, 1.0), Layout::replicated(mesh, 1));
  EXPECT_FALSE(op_profile_enabled());
  to_host(exp(a));
  const OpProfile p = stop_op_profile();
  EXPECT_TRUE(p.rows.empty());
  EXPECT_TRUE(p.collective_rows.empty());
  EXPECT_EQ(p.wall_seconds, 0);
}

TEST(OpProfile, AnEmptyPhaseNameIsRefused) {
  try {
    ProfilePhase phase("");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("ProfilePhase"), std::string::npos);
  }
}

}  // namespace
}  // namespace tessel
