// Restore reads (and checks the crc32c of) only the 256 KiB chunks of a saved shard around the
// part a process needs: here "process 0 of 4", whose mesh has one local device of four.
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>

#include "checkpoint/flip_data_byte.h"
#include "tessel/checkpoint/checkpoint.h"
#include "tessel/dtensor/dtensor_api.h"
#include "testing/expect_error.h"
#include "testing/temp_dir.h"

namespace tessel::checkpoint {
namespace {

namespace fs = std::filesystem;

struct PartialCase {
  Runtime rt{{.num_cpu_devices = 2}};
  testing::TempDir tmp{"tessel-partial"};
  fs::path dir = tmp.path();
  Tensor host = Tensor::random_uniform(Shape({4096, 256}), DType::kF32, 3, -1.0, 1.0);  // 4 MiB
  PartialCase() {
    const Mesh mesh = Mesh::create({{"x", 2}});
    save((dir / "c").string(), {{"w", copy_to_mesh(host, Layout({"x", "unsharded"}, mesh), rt)}});
  }

  // Rows [0, 1024) of w, as device 0 of a 4-device mesh of which only it is this process's.
  State restore_first_quarter(RestoreStats* stats) {
    const Mesh quarter({"x"}, {4}, {0, 1, 2, 3}, {0}, {rt.devices()[0]->name()});
    return restore((dir / "c").string(), Target{{"w", Layout({"x", "unsharded"}, quarter)}},
                   {.runtime = &rt, .stats = stats});
  }
  // Flips one byte of the first data file at data offset `at`.
  void flip(uint64_t at) {
    testing::flip_data_byte((dir / "c" / "process-00000-device-00000.safetensors").string(), at,
                            0x40);
  }
};

TEST(CheckpointPartialRead, ReadsOnlyTheChunksOfTheNeededRows) {
  PartialCase c;
  RestoreStats stats;
  const State back = c.restore_first_quarter(&stats);
  const Tensor got = unpack(std::get<DTensor>(back.at("w"))).front();
  ASSERT_EQ(got.shape(), Shape({1024, 256}));
  EXPECT_EQ(std::memcmp(got.data(), c.host.data(), got.nbytes()), 0);
  EXPECT_EQ(stats.bytes_needed, 1 << 20);
  EXPECT_EQ(stats.bytes_read, 1 << 20);  // 4 of the shard's 8 chunks

  c.flip(3u << 20);  // in rows this process does not need: not read, not reported
  EXPECT_NO_THROW(c.restore_first_quarter(nullptr));
  c.flip(100);  // in the rows it needs
  EXPECT_TESSEL_ERROR(c.restore_first_quarter(nullptr), ErrorCode::kDataLoss, "bytes [0, 262144)");
  EXPECT_TESSEL_ERROR(verify((c.dir / "c").string()), ErrorCode::kDataLoss,
                      "process-00000-device-00000");
}

}  // namespace
}  // namespace tessel::checkpoint
