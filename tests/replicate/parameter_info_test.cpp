// ParameterInfo (parameter_info.h): _TPUReplicate's host-side argument layout, checked against
// the example of TF's rewrite-pass header (2 replicas; per-replica A B C, distributed E F,
// broadcast X Y, variables V W: host inputs A0 B0 C0 A1 B1 C1 E F X Y V W).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessel/replicate/parameter_info.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

using Kind = ParameterInfo::Kind;

TEST(ParameterInfo, TfsExampleLayout) {
  const ParameterInfo p(2, 3, 2, 2, 2, 0, 1);
  EXPECT_EQ(p.num_inputs_from_host(), 12);
  EXPECT_EQ(p.num_inputs_to_each_replica(), 9);
  EXPECT_EQ(p.num_outputs_to_host(), 2);
  EXPECT_EQ(p.first_broadcast_arg_from_host(), 8);
  const std::vector<std::string> host = {"A0", "B0", "C0", "A1", "B1", "C1",
                                         "E",  "F",  "X",  "Y",  "V",  "W"};
  const std::vector<std::string> each = {"A", "B", "C", "E", "F", "X", "Y", "V", "W"};
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t a = 0; a < 9; ++a) {
      std::string expected = each[static_cast<size_t>(a)];
      if (a < 3) expected += std::to_string(r);
      EXPECT_EQ(host[static_cast<size_t>(p.host_input_index(r, a))], expected)
          << "replica " << r << " argument " << a;
    }
  }
  const std::vector<Kind> kinds = {Kind::kPerReplica, Kind::kPerReplica,  Kind::kPerReplica,
                                   Kind::kDistributed, Kind::kDistributed, Kind::kBroadcast,
                                   Kind::kBroadcast,   Kind::kVariable,    Kind::kVariable};
  for (int64_t a = 0; a < 9; ++a) EXPECT_EQ(p.kind(a), kinds[static_cast<size_t>(a)]) << a;
}

TEST(ParameterInfo, ConstantsAndOutputsAreReplicaMajor) {
  const ParameterInfo p(3, 1, 0, 1, 0, 2, 2);
  EXPECT_EQ(p.num_inputs_from_host(), 3 + 1 + 2);
  EXPECT_EQ(p.kind(2), Kind::kGuaranteedConstant);
  EXPECT_EQ(p.host_input_index(2, 0), 2);
  EXPECT_EQ(p.host_input_index(2, 3), 5);  // the second constant, shared
  EXPECT_EQ(p.num_outputs_to_host(), 6);
  EXPECT_EQ(p.host_output_index(1, 1), 3);
  EXPECT_EQ(parameter_kind_name(Kind::kGuaranteedConstant), "guaranteed_constant");
  EXPECT_EQ(p.to_string(),
            "ParameterInfo(num_replicas=3, per_replica=1, distributed=0, broadcast=1, "
            "variables=0, guaranteed_constants=2, retvals_per_replica=2)");
}

TEST(ParameterInfo, BadCountsAndIndicesNameTheValue) {
  EXPECT_TESSEL_ERROR(ParameterInfo(0, 1, 0, 0, 0, 0, 0), ErrorCode::kInvalidArgument,
                      "ParameterInfo: num_replicas must be >= 1; got 0");
  EXPECT_TESSEL_ERROR(ParameterInfo(1, 1, -1, 0, 0, 0, 0), ErrorCode::kInvalidArgument,
                      "num_distributed_args must be >= 0; got -1");
  const ParameterInfo p(2, 1, 0, 0, 0, 0, 1);
  EXPECT_TESSEL_ERROR(p.kind(1), ErrorCode::kInvalidArgument, "argument 1 is out of range [0, 1)");
  EXPECT_TESSEL_ERROR(p.host_input_index(2, 0), ErrorCode::kInvalidArgument,
                      "replica 2 is out of range [0, 2)");
  EXPECT_TESSEL_ERROR(p.host_output_index(0, -1), ErrorCode::kInvalidArgument,
                      "return value -1 is out of range [0, 1)");
}

}  // namespace
}  // namespace tessel
