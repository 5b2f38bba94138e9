// Restore's copies (checkpoint/saved_shard_reader.h): a shard part that is one run of bytes is
// checksummed in the same pass that copies it, on every core; any other part slab by slab. Both
// still find a corrupt chunk, naming the file, the tensor and the chunk's byte range, including
// a corrupt byte in the part of a chunk the restore checks but does not copy. RestoreStats times
// every phase.
#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>

#include "checkpoint/flip_data_byte.h"
#include "core/parallel_all_cores.h"
#include "tessel/checkpoint/checkpoint.h"
#include "tessel/core/parallel.h"
#include "tessel/dtensor/dtensor_api.h"
#include "testing/expect_error.h"
#include "testing/temp_dir.h"

namespace tessel::checkpoint {
namespace {

namespace fs = std::filesystem;

// w: f32 [4096, 256] (4 MiB) saved (x, unsharded) over 2 devices: two 2 MiB shards of 8 chunks.
struct RestoreCase {
  Runtime rt{{.num_cpu_devices = 2}};
  testing::TempDir tmp{"tessel-restore-copy"};
  std::string dir = (fs::path(tmp.path()) / "c").string();
  Tensor host = Tensor::random_uniform(Shape({4096, 256}), DType::kF32, 11, -1.0, 1.0);
  Mesh mesh = Mesh::create_on_devices({{"x", 2}}, {rt.devices()[0]->name(), rt.devices()[1]->name()});
  RestoreCase() { save(dir, {{"w", copy_to_mesh(host, Layout({"x", "unsharded"}, mesh), rt)}}); }

  State restore_onto(const Layout& layout, RestoreStats* stats = nullptr, bool check = true) {
    return restore(dir, Target{{"w", layout}}, {.verify = check, .runtime = &rt, .stats = stats});
  }
  // Rows [0, 1366) of w (process 0 of 3): its part of the first shard ends inside a chunk.
  State restore_first_third(RestoreStats* stats = nullptr) {
    const Mesh third({"x"}, {3}, {0, 1, 2}, {0}, {rt.devices()[0]->name()});
    return restore_onto(Layout({"x", "unsharded"}, third), stats);
  }
  bool restored_whole(const State& back) const {
    const Tensor got = to_host(std::get<DTensor>(back.at("w")));
    return std::memcmp(got.data(), host.data(), host.nbytes()) == 0;
  }
  // Flips one bit of the byte at data offset `at` of device `device`'s file.
  void flip(int device, uint64_t at) const {
    testing::flip_data_byte(
        dir + "/process-00000-device-0000" + std::to_string(device) + ".safetensors", at, 0x08);
  }
};

TEST(CheckpointRestoreCopy, WholeShardsAndStridedPartsAreBitExact) {
  RestoreCase c;
  EXPECT_TRUE(c.restored_whole(c.restore_onto(Layout({"x", "unsharded"}, c.mesh))));  // one run
  EXPECT_TRUE(c.restored_whole(c.restore_onto(Layout({"unsharded", "x"}, c.mesh))));  // strided
  EXPECT_TRUE(c.restored_whole(c.restore_onto(Layout({"unsharded", "x"}, c.mesh), nullptr,
                                              /*check=*/false)));
  const State third = c.restore_first_third();
  const Tensor got = unpack(std::get<DTensor>(third.at("w"))).front();
  ASSERT_EQ(got.shape(), Shape({1366, 256}));
  EXPECT_EQ(std::memcmp(got.data(), c.host.data(), got.nbytes()), 0);
}

TEST(CheckpointRestoreCopy, ACorruptChunkIsFoundByTheCopyThatChecksumsIt) {
  RestoreCase c;
  c.flip(1, (5u << 18) + 1000);  // chunk 5 of device 1's shard: [1310720, 1572864)
  const std::string where =
      "device-00001.safetensors': tensor 'w' shard [2048:4096, 0:256] has crc32c";
  EXPECT_TESSEL_ERROR(c.restore_onto(Layout({"x", "unsharded"}, c.mesh)), ErrorCode::kDataLoss,
                      where);
  EXPECT_TESSEL_ERROR(c.restore_onto(Layout({"x", "unsharded"}, c.mesh)), ErrorCode::kDataLoss,
                      "in bytes [1310720, 1572864)");
  // The strided path (slabs) finds it too.
  EXPECT_TESSEL_ERROR(c.restore_onto(Layout({"unsharded", "x"}, c.mesh)), ErrorCode::kDataLoss,
                      "in bytes [1310720, 1572864)");
  // Without verify the corrupt bytes are restored as they are (nothing is checked).
  EXPECT_NO_THROW(c.restore_onto(Layout({"x", "unsharded"}, c.mesh), nullptr, /*check=*/false));
}

TEST(CheckpointRestoreCopy, ACorruptByteOutsideTheCopiedPartOfAChunkIsFound) {
  RestoreCase c;
  // Process 0 of 3 copies bytes [0, 1398784) of device 0's shard: chunk 5, [1310720, 1572864),
  // only in part. A byte after the part, in that chunk, is checked, not copied.
  c.flip(0, 1500000);
  EXPECT_TESSEL_ERROR(c.restore_first_third(), ErrorCode::kDataLoss,
                      "device-00000.safetensors': tensor 'w' shard [0:2048, 0:256] has crc32c");
  EXPECT_TESSEL_ERROR(c.restore_first_third(), ErrorCode::kDataLoss,
                      "in bytes [1310720, 1572864)");
  // The first corrupt chunk in order is the one named, whichever thread checked it.
  c.flip(0, 300000);  // chunk 1
  EXPECT_TESSEL_ERROR(c.restore_first_third(), ErrorCode::kDataLoss, "in bytes [262144, 524288)");
}

TEST(CheckpointRestoreCopy, ACorruptChunkIsFoundOnOneThreadAndOnSeveral) {
  for (int threads : {1, 3}) {
    set_intra_op_threads(threads);
    EXPECT_EQ(detail::all_cores_threads(), threads);
    RestoreCase c;
    EXPECT_TRUE(c.restored_whole(c.restore_onto(Layout({"x", "unsharded"}, c.mesh))));
    c.flip(0, 7u << 18);  // the first byte of chunk 7, the shard's last
    EXPECT_TESSEL_ERROR(c.restore_onto(Layout({"x", "unsharded"}, c.mesh)), ErrorCode::kDataLoss,
                        "in bytes [1835008, 2097152)");
  }
  set_intra_op_threads(0);
  EXPECT_EQ(detail::all_cores_threads(), machine_cores());
}

TEST(CheckpointRestoreCopy, StatsTimeEveryPhase) {
  RestoreCase c;
  RestoreStats one_run, strided;
  c.restore_onto(Layout({"x", "unsharded"}, c.mesh), &one_run);
  c.restore_onto(Layout({"unsharded", "x"}, c.mesh), &strided);
  for (const RestoreStats* s : {&one_run, &strided}) {
    EXPECT_EQ(s->bytes_read, 4 << 20);
    EXPECT_EQ(s->bytes_needed, 4 << 20);
    EXPECT_GT(s->open_seconds, 0);
    EXPECT_GT(s->copy_seconds, 0);
    EXPECT_EQ(s->relayout_seconds, 0);  // no Partial target
    const double phases = s->open_seconds + s->read_seconds + s->allocate_seconds +
                          s->crc_seconds + s->copy_seconds + s->relayout_seconds;
    EXPECT_LE(phases, s->total_seconds * (1 + 1e-9));
  }
  EXPECT_GT(one_run.read_seconds, 0);  // a run's pages are brought in before the copy
  EXPECT_EQ(one_run.crc_seconds, 0);   // ... and checksummed by it
  EXPECT_GT(strided.crc_seconds, 0);   // slabs: checked, then copied

  // A Partial target is restored replicated and split into terms: the relayout phase.
  const Mesh two = Mesh::create_on_devices({{"x", 1}, {"y", 2}},
                                           {c.rt.devices()[0]->name(), c.rt.devices()[1]->name()});
  RestoreStats partial;
  const State back = c.restore_onto(
      Layout({"x", "unsharded"}, two).with_partial({{"y", ReduceOp::kSum}}), &partial);
  EXPECT_GT(partial.relayout_seconds, 0);
  EXPECT_TRUE(c.restored_whole(back));
}

}  // namespace
}  // namespace tessel::checkpoint
