// parse_mesh: the one mesh grammar of the CLI and Python (mesh_spec.h).
#include <gtest/gtest.h>

#include "tessel/mesh/mesh.h"
#include "tessel/mesh/mesh_spec.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

constexpr ErrorCode kInvalid = ErrorCode::kInvalidArgument;

TEST(ParseMesh, ShortFormIsCreateOverCpuDevices) {
  EXPECT_EQ(parse_mesh("x=2,y=2"), Mesh::create({{"x", 2}, {"y", 2}}, "CPU"));
  EXPECT_EQ(parse_mesh("batch=4"), Mesh::create({{"batch", 4}}, "CPU"));
}

TEST(ParseMesh, TensorFlowFormsAreMeshFromString) {
  for (const char* text : {"|x=2,y=2|*CPU",
                           "|x=2|0,1|0,1|/job:localhost/task:0/device:CPU:0,"
                           "/job:localhost/task:0/device:CPU:1"}) {
    EXPECT_EQ(parse_mesh(text), Mesh::from_string(text)) << text;
  }
  // The short TF form and the named form describe the same mesh.
  EXPECT_EQ(parse_mesh("|x=2,y=2|*CPU").dim_names(), parse_mesh("x=2,y=2").dim_names());
}

TEST(ParseMesh, SizesOnlyTakeTheCallersNames) {
  EXPECT_EQ(parse_mesh("2x2", {"batch", "model"}), parse_mesh("batch=2,model=2"));
  EXPECT_EQ(parse_mesh("4x1", {"batch", "model"}), parse_mesh("batch=4,model=1"));
  EXPECT_TESSEL_ERROR(parse_mesh("2x2"), kInvalid, "'2x2' needs dimension names");
  EXPECT_TESSEL_ERROR(parse_mesh("2x2x2", {"batch", "model"}), kInvalid,
                      "'2x2x2' has 3 sizes for the 2 dimensions batch,model (e.g. 2x2)");
  EXPECT_TESSEL_ERROR(parse_mesh("4", {"batch", "model"}), kInvalid, "'4' has 1 size for the 2");
}

TEST(ParseMesh, BadTextNamesTheOffendingPiece) {
  EXPECT_TESSEL_ERROR(parse_mesh(""), kInvalid, "empty mesh text");
  EXPECT_TESSEL_ERROR(parse_mesh("x=2,y"), kInvalid, "'y' in 'x=2,y' is not <name>=<size>");
  EXPECT_TESSEL_ERROR(parse_mesh("=2"), kInvalid, "'=2' in '=2' is not <name>=<size>");
  EXPECT_TESSEL_ERROR(parse_mesh("x=0"), kInvalid, "'0' in 'x=0' is not a dimension size");
  EXPECT_TESSEL_ERROR(parse_mesh("x=two"), kInvalid, "'two' in 'x=two' is not a dimension size");
  EXPECT_TESSEL_ERROR(parse_mesh("ax2", {"batch", "model"}), kInvalid, "'a' in 'ax2'");
  EXPECT_TESSEL_ERROR(parse_mesh("x=2,x=2"), kInvalid, "x");  // Mesh's own duplicate-name check
}

TEST(ParseMesh, DeviceCountIsBoundedBeforeAnyDeviceIsListed) {
  EXPECT_TESSEL_ERROR(parse_mesh("x=65536,y=65536"), kInvalid, "has more than 65536 devices");
  EXPECT_TESSEL_ERROR(parse_mesh("x=99999999999"), kInvalid, "from 1 to 65536");
  EXPECT_TESSEL_ERROR(parse_mesh("x=4,y=4", {}, 8), kInvalid, "'x=4,y=4' has more than 8 devices");
  EXPECT_EQ(parse_mesh("x=4,y=2", {}, 8).size(), 8);
}

}  // namespace
}  // namespace tessel
