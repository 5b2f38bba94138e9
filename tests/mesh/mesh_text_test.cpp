// Mesh text form and parser checks (tf-dtensor-semantics.md §1.3, §1.5).
#include <gtest/gtest.h>

#include "mesh/mesh_helpers.h"
#include "tessel/mesh/layout.h"
#include "tessel/mesh/mesh.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

constexpr ErrorCode kInvalid = ErrorCode::kInvalidArgument;

const char* const kRoundTrips[] = {
    "|batch=2,x=2|0,1,2,3|0,1,2,3|/job:localhost/replica:0/task:0/device:TPU:0,/job:localhost/"
    "replica:0/task:0/device:TPU:1,/job:localhost/replica:0/task:0/device:TPU:2,/job:localhost/"
    "replica:0/task:0/device:TPU:3",
    "name|x=2,y=2|0,1,2,3|0,1,2,3|/job:localhost/task:0/device:CPU:0,/job:localhost/task:0/"
    "device:CPU:1,/job:localhost/task:0/device:CPU:2,/job:localhost/task:0/device:CPU:3",
    "|batch=2|0,1|0,1|/job:localhost/replica:0/task:0/device:TPU:0,/job:localhost/replica:0/"
    "task:0/device:TPU:1|use_xla_spmd",
    "|batch=2|0,1|0|/job:localhost/replica:0/task:0/device:TPU:0|/job:localhost/replica:0/task:0/"
    "device:TPU:0,/job:localhost/replica:0/task:0/device:TPU:1|use_xla_spmd",
    "|x=2|0,1|||/job:localhost/task:0/device:CPU:0,/job:localhost/task:0/device:CPU:1",
    "/job:localhost/task:0/device:CPU:0",
    "empty_mesh",
};

TEST(MeshText, ReferenceExamplesRoundTripByteForByte) {
  for (const char* text : kRoundTrips) {
    Mesh m = Mesh::from_string(text);
    EXPECT_EQ(m.to_string(), text);
    EXPECT_EQ(Mesh::from_string(m.to_string()), m);
  }
}

TEST(MeshText, Shorthand) {
  Mesh m = Mesh::from_string("|x=2,y=2|*CPU");
  EXPECT_EQ(m.to_string(),
            "|x=2,y=2|0,1,2,3|0,1,2,3|/job:localhost/task:0/device:CPU:0,/job:localhost/task:0/"
            "device:CPU:1,/job:localhost/task:0/device:CPU:2,/job:localhost/task:0/device:CPU:3");
  EXPECT_TESSEL_ERROR(Mesh::from_string("|x=2|CPU"), kInvalid, "Expected '*<DEVICE_TYPE>'");
}

TEST(MeshText, RemoteMesh) {
  Mesh m = Mesh::from_string(kRoundTrips[4]);
  EXPECT_TRUE(m.is_remote());
  EXPECT_EQ(m.num_local_devices(), 0);
  EXPECT_EQ(m.global_devices().size(), 2u);
}

TEST(MeshText, XlaFlagForms) {
  Mesh six = Mesh::from_string(kRoundTrips[2]);
  EXPECT_TRUE(six.use_xla_spmd());
  EXPECT_TRUE(six.global_devices().empty());
  Mesh seven = Mesh::from_string(kRoundTrips[3]);
  EXPECT_TRUE(seven.use_xla_spmd());
  EXPECT_EQ(seven.global_devices().size(), 2u);
}

TEST(MeshText, PartCount) {
  EXPECT_TESSEL_ERROR(Mesh::from_string("|x=2|0,1|0,1"), kInvalid,
                      "Expected either 5, 6, 7 or 3 mesh parts but found4");
  EXPECT_TESSEL_ERROR(Mesh::from_string("a|b|c|d|e|f|g|h"), kInvalid, "but found8");
}

TEST(MeshText, SeventhPartMustBeXlaFlag) {
  EXPECT_TESSEL_ERROR(
      Mesh::from_string("|x=1|0|0|/job:a/task:0/device:TPU:0|/job:a/task:0/device:TPU:0|bogus"),
      kInvalid, "Expected string use_xla_spmdas the 7th argument but got: bogus");
}

TEST(MeshText, SingleDeviceStrings) {
  EXPECT_TRUE(Mesh::from_string("/job:localhost/replica:0/task:0/device:TPU:0").is_single_device());
  EXPECT_TESSEL_ERROR(Mesh::from_string("/job:localhost/device:CPU:0"), kInvalid,
                      "Input string is invalid");
  EXPECT_TESSEL_ERROR(Mesh::from_string(""), kInvalid, "Input string is invalid");
}

TEST(MeshText, ParserRule_CountsNotMeetingRequirements) {
  EXPECT_TESSEL_ERROR(Mesh::from_string("|x=2|0,1|0,1|/job:a/task:0/device:CPU:0"), kInvalid,
                      "local_devices ids 2 and local devices 1not meeting requirements");
}

TEST(MeshText, ParserRule_SizeMismatch) {
  EXPECT_TESSEL_ERROR(Mesh::from_string("|x=3|0,1|0,1|/job:a/task:0/device:CPU:0,/job:a/task:0/device:CPU:1"),
                      kInvalid, "mesh size doesn't match number of devices");
}

TEST(MeshText, ParserRule_RepeatedAndReservedNames) {
  EXPECT_TESSEL_ERROR(Mesh::from_string("|x=1,x=1|*CPU"), kInvalid, "repeated mesh dimension");
  EXPECT_TESSEL_ERROR(Mesh::from_string("|match=2|*CPU"), kInvalid,
                      "mesh dimension name match is reserved");
}

TEST(MeshText, ParserRule_DeviceNames) {
  EXPECT_TESSEL_ERROR(Mesh::from_string("|x=1|0|0|not a device"), kInvalid,
                      "Failed to parse local_devices");
  EXPECT_TESSEL_ERROR(Mesh::from_string("|x=1|0|0|/device:CPU:0"), kInvalid,
                      "Failed to either identify host or device type");
  EXPECT_TESSEL_ERROR(
      Mesh::from_string("|x=2|0,1|0,1|/job:a/task:0/device:CPU:0,/job:a/task:0/device:GPU:0"),
      kInvalid, "More than one device type per mesh not supported. Found 2");
}

TEST(MeshText, MalformedPiecesAreNamed) {
  EXPECT_TESSEL_ERROR(Mesh::from_string("|x2|*CPU"), kInvalid,
                      "Failed to parse mesh dimension 'x2'");
  EXPECT_TESSEL_ERROR(Mesh::from_string("|x=2|0,a|0|/job:a/task:0/device:CPU:0"), kInvalid,
                      "Failed to parse global_device_ids: 'a'");
}

TEST(MeshText, Quirk_ZeroIdsWithDimsIsAnErrorNotTheEmptyMesh) {
  EXPECT_TESSEL_ERROR(Mesh::from_string("|x=2|||"), kInvalid, "has dimensions or devices but no");
  EXPECT_TRUE(Mesh::from_string("||||").is_empty());
}

TEST(MeshText, Quirk_MeshPrefixIsStripped) {
  Mesh m = Mesh::from_string("mesh:|x=2|*CPU");
  EXPECT_EQ(m.name(), "");
  EXPECT_EQ(m, Mesh::from_string("|x=2|*CPU"));
}

TEST(MeshText, MergedValidation_ParserAlsoRunsConstructorChecks) {
  EXPECT_TESSEL_ERROR(Mesh::from_string("|x=2|0,2|0,2|/job:a/task:0/device:CPU:0,/job:a/task:0/device:CPU:1"),
                      kInvalid, "global_device_ids must sequentially increase");
  EXPECT_TESSEL_ERROR(Mesh::from_string("|x=2|0,1|||"), kInvalid,
                      "Empty list of devices not allowed.");
  EXPECT_TESSEL_ERROR(
      Mesh::from_string("|x=2|0,1|0,1|/job:a/task:0/device:GPU:0,/job:a/task:0/device:GPU:0"),
      kInvalid, "Duplicate devices found");
}

TEST(MeshProtoForm, RoundTripsEveryKind) {
  for (const char* text : kRoundTrips) {
    Mesh m = Mesh::from_string(text);
    EXPECT_EQ(Mesh::from_proto(m.as_proto()), m) << text;
  }
  EXPECT_TESSEL_ERROR(Mesh::from_proto("\xff\xff garbage"), kInvalid, "not a MeshProto");
}

}  // namespace
}  // namespace tessel

namespace tessel {
namespace {

// Fuzzer findings: sizes whose product overflows or would allocate ids for 10^14 devices.
TEST(MeshText, HugeOrOverflowingSizesAreRejectedBeforeAllocating) {
  EXPECT_TESSEL_ERROR(Mesh::from_string("|x=5909973711006582556,y=2|*CPU"),
                      ErrorCode::kInvalidArgument, "makes the mesh larger than");
  EXPECT_TESSEL_ERROR(Mesh::from_string("|x=400000000000002|*CPU"), ErrorCode::kInvalidArgument,
                      "mesh dimension x=400000000000002 makes the mesh larger than 65536");
  EXPECT_TESSEL_ERROR(Layout::from_string("sharding_specs:x,y, mesh:|x=2,y=777777777777777777|*CPU"),
                      ErrorCode::kInvalidArgument, "makes the mesh larger than");
  EXPECT_TESSEL_ERROR(Mesh::from_string("|x=4611686018427387904,y=4|0|0|/job:a/task:0/device:CPU:0"),
                      ErrorCode::kInvalidArgument, "makes the mesh larger than");
}

}  // namespace
}  // namespace tessel
