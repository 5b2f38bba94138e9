// Checkpoints: save on every small mesh and layout, restore onto every other (bit-exact), the
// plain values, the file format, and the faults (bit flip, truncation, missing file, corrupt
// manifest, unwritable directory, a save killed at each step).
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "tessel/checkpoint/checkpoint.h"
#include "tessel/checkpoint/checkpoint_manager.h"
#include "tessel/checkpoint/safetensors.h"
#include "tessel/core/crc32c.h"
#include "tessel/dtensor/dtensor_api.h"
#include "testing/expect_error.h"
#include "testing/temp_dir.h"

namespace tessel::checkpoint {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

Tensor host_tensor(const Shape& shape, DType dtype, uint64_t seed) {
  return Tensor::random_uniform(shape, DType::kF64, seed, -50.0, 50.0).astype(dtype);
}

// The tensors every layout case saves: uneven (7 over 2 and 4, 65 over 2, 6 over 4, 1 over 4),
// zero-size, several dtypes.
std::map<std::string, Tensor> case_tensors() {
  return {{"a", host_tensor(Shape({7, 5}), DType::kF32, 1)},
          {"opt/b", host_tensor(Shape({65, 3}), DType::kI32, 2)},
          {"c", host_tensor(Shape({6, 4}), DType::kF64, 3)},
          {"d", host_tensor(Shape({1, 1}), DType::kI64, 4)},
          {"empty", host_tensor(Shape({0, 3}), DType::kF32, 5)}};
}

std::vector<Mesh> meshes() {
  return {Mesh::create({{"x", 1}, {"y", 1}}), Mesh::create({{"x", 2}, {"y", 1}}),
          Mesh::create({{"x", 1}, {"y", 2}}), Mesh::create({{"x", 2}, {"y", 2}})};
}

// Rank-2 layouts of a mesh with dims x, y: replicated, each dim, both dims (either order and
// together on one tensor dim), and a Partial(sum over y).
std::vector<Layout> layouts(const Mesh& mesh) {
  return {Layout({"unsharded", "unsharded"}, mesh),
          Layout({"x", "y"}, mesh),
          Layout({"y", "x"}, mesh),
          Layout({"x+y", "unsharded"}, mesh),
          Layout({"unsharded", "x+y"}, mesh),
          Layout({"x", "unsharded"}, mesh).with_partial({{"y", ReduceOp::kSum}})};
}

TEST(Crc32c, StandardCheckValueAndExtension) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  EXPECT_EQ(crc32c_extend(crc32c("12345", 5), "6789", 4), 0xE3069283u);
  // Long inputs take the 8-byte path: the same as extending byte by byte.
  std::string text(1000, 'q');
  uint32_t bytewise = 0;
  for (char c : text) bytewise = crc32c_extend(bytewise, &c, 1);
  EXPECT_EQ(crc32c(text.data(), text.size()), bytewise);
  for (size_t split : {0, 1, 7, 8, 500, 999, 1000}) {
    EXPECT_EQ(crc32c_combine(crc32c(text.data(), split), crc32c(text.data() + split, 1000 - split),
                             1000 - split),
              bytewise)
        << split;
  }
}

TEST(Crc32c, LongInputsOnThreeStreamsEqualByteByByte) {
  // Two rounds of three 8 KiB blocks, one of three 256-byte blocks, then words and bytes.
  std::string text(2 * 3 * 8192 + 3 * 256 + 13, '\0');
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>((i * 2654435761u) >> 13);
  uint32_t bytewise = 0;
  for (char c : text) bytewise = crc32c_extend(bytewise, &c, 1);
  EXPECT_EQ(crc32c(text.data(), text.size()), bytewise);
  for (size_t split : {size_t{1}, size_t{8191}, size_t{3 * 8192}, text.size() - 700}) {
    EXPECT_EQ(crc32c_combine(crc32c(text.data(), split),
                             crc32c(text.data() + split, text.size() - split), text.size() - split),
              bytewise)
        << split;
  }
}

TEST(Checkpoint, SaveStatsCountTheFilesAndTimeEveryPhase) {
  Runtime rt({.num_cpu_devices = 2});
  TempDir dir("tessel-ckpt");
  const Mesh mesh = Mesh::create({{"x", 2}});
  const Tensor host = host_tensor(Shape({1000, 300}), DType::kF32, 3);  // several 256 KiB chunks
  SaveStats stats;
  SaveOptions options;
  options.stats = &stats;
  save(dir / "c", {{"w", copy_to_mesh(host, Layout({"x", "unsharded"}, mesh), rt)}}, options);
  int64_t bytes = 0;
  for (const auto& e : fs::directory_iterator(dir / "c")) {
    if (e.path().extension() == ".safetensors") bytes += static_cast<int64_t>(e.file_size());
  }
  EXPECT_EQ(stats.files, 2);
  EXPECT_EQ(stats.bytes_written, bytes);
  EXPECT_GT(stats.bytes_written, static_cast<int64_t>(host.nbytes()));  // the shards and headers
  EXPECT_EQ(stats.stage_seconds, 0.0);
  EXPECT_GT(stats.write_seconds, 0.0);
  EXPECT_GT(stats.checksum_seconds, 0.0);
  EXPECT_GT(stats.sync_seconds, 0.0);
  const double phases = stats.plan_seconds + stats.header_seconds + stats.write_seconds +
                        stats.checksum_seconds + stats.sync_seconds + stats.manifest_seconds +
                        stats.rename_seconds;
  EXPECT_LE(phases, stats.total_seconds * (1 + 1e-9));  // disjoint spans within the save
}

TEST(Checkpoint, EveryMeshAndLayoutRestoresOntoEveryOther) {
  Runtime rt({.num_cpu_devices = 4});
  TempDir dir("tessel-ckpt");
  const std::map<std::string, Tensor> host = case_tensors();
  int saved = 0;
  for (const Mesh& from_mesh : meshes()) {
    for (const Layout& from : layouts(from_mesh)) {
      State state{{"step", int64_t{saved}}};
      for (const auto& [name, t] : host) state[name] = copy_to_mesh(t, from, rt);
      const std::string path = dir / ("ckpt-" + std::to_string(saved++));
      save(path, state);
      for (const Mesh& to_mesh : meshes()) {
        for (const Layout& to : layouts(to_mesh)) {
          Target target;
          for (const auto& [name, t] : host) target[name] = to;
          const State back = restore(path, target, {.runtime = &rt});
          for (const auto& [name, t] : host) {
            const DTensor& d = std::get<DTensor>(back.at(name));
            EXPECT_EQ(d.layout(), to);
            EXPECT_TRUE(same_bytes(to_host(d), t))
                << name << " saved as " << from.to_string() << " restored as " << to.to_string();
          }
          EXPECT_EQ(std::get<int64_t>(back.at("step")), saved - 1);
        }
      }
    }
  }
}

TEST(Checkpoint, OneDimensionalUnevenShards) {
  // 6 over 4 (chunks 2, 2, 2, 0), 1 over 4, 0 over 4, and a scalar.
  Runtime rt({.num_cpu_devices = 4});
  TempDir dir("tessel-ckpt");
  const Mesh four = Mesh::create({{"x", 4}});
  const std::map<std::string, Tensor> host = {{"six", host_tensor(Shape({6}), DType::kF32, 1)},
                                              {"one", host_tensor(Shape({1}), DType::kI64, 2)},
                                              {"none", host_tensor(Shape({0}), DType::kF64, 3)}};
  State state{{"scalar", copy_to_mesh(host_tensor(Shape({}), DType::kF32, 4),
                                      Layout::replicated(four, 0), rt)}};
  for (const auto& [name, t] : host) state[name] = copy_to_mesh(t, Layout({"x"}, four), rt);
  save(dir / "c", state);
  const Mesh two = Mesh::create_on_devices({{"y", 2}}, {"CPU:1", "CPU:3"});
  Target target{{"scalar", Layout::replicated(two, 0)}};
  for (const auto& [name, t] : host) target[name] = Layout({"y"}, two);
  const State back = restore(dir / "c", target, {.runtime = &rt});
  for (const auto& [name, t] : host) {
    EXPECT_TRUE(same_bytes(to_host(std::get<DTensor>(back.at(name))), t)) << name;
  }
  EXPECT_TRUE(same_bytes(to_host(std::get<DTensor>(back.at("scalar"))),
                         to_host(std::get<DTensor>(state.at("scalar")))));
}

TEST(Checkpoint, EveryDTypeAndPlainValueRoundTrips) {
  Runtime rt({.num_cpu_devices = 2});
  TempDir dir("tessel-ckpt");
  const Mesh mesh = Mesh::create({{"x", 2}});
  State state{{"step", int64_t{-12345678901234}},
              {"lr", 0.1},
              {"resume", true},
              {"config/name", std::string("gpt \"tiny\"")}};
  std::map<std::string, Tensor> host;
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kI32, DType::kI64,
                      DType::kU8, DType::kBool}) {
    const std::string name = "t_" + std::string(dtype_name(dtype));
    host[name] = host_tensor(Shape({5, 3}), dtype, 9);
    state[name] = copy_to_mesh(host[name], Layout({"x", "unsharded"}, mesh), rt);
  }
  save(dir / "c", state);
  const State back = restore(dir / "c", state);  // the state itself as the template
  for (const auto& [name, t] : host) {
    EXPECT_TRUE(same_bytes(to_host(std::get<DTensor>(back.at(name))), t)) << name;
  }
  EXPECT_EQ(std::get<int64_t>(back.at("step")), -12345678901234);
  EXPECT_EQ(std::get<double>(back.at("lr")), 0.1);
  EXPECT_EQ(std::get<bool>(back.at("resume")), true);
  EXPECT_EQ(std::get<std::string>(back.at("config/name")), "gpt \"tiny\"");
  const CheckpointInfo info = metadata(dir / "c");
  EXPECT_EQ(info.tensors.at("t_bf16").dtype, DType::kBF16);
  EXPECT_EQ(info.tensors.at("t_bf16").shape, Shape({5, 3}));
  EXPECT_EQ(info.values.size(), 4u);
  verify(dir / "c");
}

TEST(Checkpoint, FilesAreShardedSafetensorsWithDcpOffsets) {
  // Replicated over y: each block is written once, by one of its two holders.
  Runtime rt({.num_cpu_devices = 4});
  TempDir dir("tessel-ckpt");
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Tensor host = host_tensor(Shape({7, 5}), DType::kF32, 1);
  save(dir / "c", {{"w", copy_to_mesh(host, Layout({"x", "unsharded"}, mesh), rt)}});
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir / "c")) files.push_back(e.path().filename());
  std::sort(files.begin(), files.end());
  ASSERT_EQ(files.size(), 3u) << "two data files and the manifest";
  EXPECT_EQ(files[2], "tessel.json");
  int64_t rows = 0;
  for (int i = 0; i < 2; ++i) {
    const SafetensorsHeader h = SafetensorsHeader::read(dir / "c" + "/" + files[i]);
    ASSERT_EQ(h.entries.size(), 1u);
    EXPECT_EQ(h.data_start % 8, 0u);
    EXPECT_EQ(h.metadata.at("format"), "pt");
    const std::string expected_offsets = rows == 0 ? "[0,0]" : "[4,0]";
    EXPECT_EQ(h.metadata.at("DCP_SHARDING_INFO"),
              "{\"w\":{\"saved_offsets\":" + expected_offsets + "}}");
    rows += h.entries[0].shape.dims()[0];
  }
  EXPECT_EQ(rows, 7);
}

TEST(Checkpoint, BadInputIsRefusedByName) {
  Runtime rt({.num_cpu_devices = 2});
  TempDir dir("tessel-ckpt");
  const Mesh mesh = Mesh::create({{"x", 2}});
  const DTensor w = copy_to_mesh(host_tensor(Shape({4}), DType::kF32, 1), Layout({"x"}, mesh), rt);
  EXPECT_TESSEL_ERROR(save(dir / "c", {{"a//b", w}}), ErrorCode::kInvalidArgument, "a//b");
  EXPECT_TESSEL_ERROR(save(dir / "c", {{"__metadata__", w}}), ErrorCode::kInvalidArgument,
                      "__metadata__");
  EXPECT_TESSEL_ERROR(save(dir / "c", {{"lr", std::nan("")}}), ErrorCode::kInvalidArgument, "lr");
  EXPECT_TESSEL_ERROR(save(dir / "c", {{"w", DTensor()}}), ErrorCode::kInvalidArgument, "null");
  EXPECT_TESSEL_ERROR(save(dir / "no/such/parent", {{"w", w}}), ErrorCode::kNotFound, "parent");
  save(dir / "c", {{"w", w}});
  EXPECT_TESSEL_ERROR(save(dir / "c", {{"w", w}}), ErrorCode::kAlreadyExists, "c");
  EXPECT_TESSEL_ERROR(restore(dir / "c", Target{{"v", Layout({"x"}, mesh)}}), ErrorCode::kNotFound,
                      "'v'");
  EXPECT_TESSEL_ERROR(restore(dir / "c", Target{{"w", Layout({"x", "unsharded"}, mesh)}}),
                      ErrorCode::kInvalidArgument, "rank 2");
  const DTensor wrong =
      copy_to_mesh(host_tensor(Shape({5}), DType::kF32, 1), Layout({"x"}, mesh), rt);
  EXPECT_TESSEL_ERROR(restore(dir / "c", State{{"w", wrong}}), ErrorCode::kInvalidArgument, "[5]");
  EXPECT_TESSEL_ERROR(restore(dir / "none", Target{}), ErrorCode::kNotFound, "none");
}

// A saved checkpoint of one tensor "w" split over two devices, for the fault tests.
struct SavedCase {
  Runtime rt{{.num_cpu_devices = 2}};
  TempDir dir{"tessel-ckpt"};
  Mesh mesh = Mesh::create({{"x", 2}});
  Tensor host = host_tensor(Shape({64, 8}), DType::kF32, 1);
  std::string path = dir / "c";
  SavedCase() { save(path, {{"w", copy_to_mesh(host, Layout({"x", "unsharded"}, mesh), rt)}}); }
  std::string file(int device) const {
    return path + "/process-00000-device-0000" + std::to_string(device) + ".safetensors";
  }
  State load() const {
    return restore(path, Target{{"w", Layout({"x", "unsharded"}, mesh)}},
                   {.runtime = const_cast<Runtime*>(&rt)});
  }
};

TEST(CheckpointFaults, BitFlipIsDataLossNamingFileAndTensor) {
  SavedCase c;
  {
    std::fstream f(c.file(1), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-5, std::ios::end);
    char byte = 0;
    f.read(&byte, 1);
    byte ^= 0x10;
    f.seekp(-5, std::ios::end);
    f.write(&byte, 1);
  }
  EXPECT_TESSEL_ERROR(c.load(), ErrorCode::kDataLoss, "device-00001.safetensors': tensor 'w'");
  EXPECT_TESSEL_ERROR(verify(c.path), ErrorCode::kDataLoss,
                      "device-00001.safetensors' (holding tensors 'w') has crc32c");
}

TEST(CheckpointFaults, TruncatedFileIsDataLoss) {
  SavedCase c;
  fs::resize_file(c.file(0), fs::file_size(c.file(0)) - 1);
  EXPECT_TESSEL_ERROR(c.load(), ErrorCode::kDataLoss,
                      "device-00000.safetensors' (holding tensor 'w')");
}

TEST(CheckpointFaults, MissingFileIsNotFound) {
  SavedCase c;
  fs::remove(c.file(1));
  EXPECT_TESSEL_ERROR(c.load(), ErrorCode::kNotFound,
                      "device-00001.safetensors' (holding tensor 'w') is missing");
}

TEST(CheckpointFaults, CorruptManifestIsDataLoss) {
  SavedCase c;
  std::ofstream(c.path + "/tessel.json") << "{\"format\": \"tessel-checkpoint\", \"vers";
  EXPECT_TESSEL_ERROR(c.load(), ErrorCode::kDataLoss, "tessel.json' is not a valid manifest");
}

TEST(CheckpointFaults, UnwritableDirectoryFailsCleanly) {
  SavedCase c;
  // /proc refuses new directories even to root.
  const DTensor w = std::get<DTensor>(c.load().at("w"));
  EXPECT_TESSEL_ERROR(save("/proc/tessel-checkpoint", {{"w", w}}), ErrorCode::kUnavailable,
                      "/proc/.tessel-checkpoint.tmp");
  EXPECT_FALSE(fs::exists("/proc/.tessel-checkpoint.tmp"));
  EXPECT_TRUE(same_bytes(to_host(std::get<DTensor>(c.load().at("w"))), c.host));
}

// A save killed (SIGKILL) at each step of the protocol leaves the previous checkpoint loadable,
// nothing under the new name, and a temporary directory the manager removes later. The killed
// save runs in a forked child (gtest's "fast" death test) on a runtime it makes itself: the
// parent's device threads do not exist there.
TEST(CheckpointFaults, SaveKilledAtAnyStepLeavesThePreviousCheckpoint) {
  GTEST_FLAG_SET(death_test_style, "fast");
  const Mesh mesh = Mesh::create({{"x", 2}});
  const Layout rows({"x", "unsharded"}, mesh);
  const Tensor host = host_tensor(Shape({16, 4}), DType::kF32, 1);
  for (const std::string step : {"prepared", "written", "manifest"}) {
    TempDir dir("tessel-ckpt");
    Runtime rt({.num_cpu_devices = 2});
    CheckpointManager manager(dir.path().string(), {.max_to_keep = 2, .save = {}});
    State state{{"w", copy_to_mesh(host, rows, rt)}, {"step", int64_t{1}}};
    manager.save(1, state);
    EXPECT_EXIT(
        {
          Runtime child({.num_cpu_devices = 2});
          CheckpointManager killed(dir.path().string(),
                                   {.save = {.on_step = [&](std::string_view s) {
                                      if (s == step) std::raise(SIGKILL);
                                    }}});
          killed.save(2, {{"w", copy_to_mesh(host, rows, child)}, {"step", int64_t{2}}});
          std::exit(0);
        },
        ::testing::KilledBySignal(SIGKILL), "")
        << step;
    EXPECT_EQ(manager.all_steps(), std::vector<int64_t>{1}) << step;
    EXPECT_FALSE(fs::exists(manager.step_directory(2))) << step;
    std::string listing;
    for (const auto& e : fs::directory_iterator(dir.path()))
      listing += e.path().filename().string() + " ";
    EXPECT_TRUE(fs::exists(dir / ".step-00000002.tmp")) << step << ": " << listing;
    const State back = manager.restore(*manager.latest_step(), state);
    EXPECT_TRUE(same_bytes(to_host(std::get<DTensor>(back.at("w"))), host)) << step;
    EXPECT_EQ(std::get<int64_t>(back.at("step")), 1);
    manager.save(3, back);  // cleans up the crashed save's directory
    EXPECT_FALSE(fs::exists(dir / ".step-00000002.tmp")) << step;
    EXPECT_EQ(manager.all_steps(), (std::vector<int64_t>{1, 3}));
  }
}

TEST(CheckpointManager, KeepsTheNewestStepsAndPointsLatestAtTheNewest) {
  Runtime rt({.num_cpu_devices = 2});
  TempDir dir("tessel-ckpt");
  const Mesh mesh = Mesh::create({{"x", 2}});
  CheckpointManager manager(dir.path().string(), {.max_to_keep = 2, .save = {}});
  EXPECT_FALSE(manager.latest_step().has_value());
  for (int64_t step : {10, 20, 30}) {
    const Tensor host = host_tensor(Shape({3, 2}), DType::kF32, static_cast<uint64_t>(step));
    manager.save(step, {{"w", copy_to_mesh(host, Layout({"x", "unsharded"}, mesh), rt)}});
  }
  EXPECT_EQ(manager.all_steps(), (std::vector<int64_t>{20, 30}));
  EXPECT_EQ(manager.latest_step(), 30);
  std::ifstream latest(dir / "latest");
  std::string pointed;
  latest >> pointed;
  EXPECT_EQ(pointed, "step-00000030");
  const State back =
      manager.restore(30, Target{{"w", Layout::replicated(mesh, 2)}}, {.runtime = &rt});
  EXPECT_TRUE(same_bytes(to_host(std::get<DTensor>(back.at("w"))),
                         host_tensor(Shape({3, 2}), DType::kF32, 30)));
  EXPECT_TESSEL_ERROR(manager.restore(10, Target{}), ErrorCode::kNotFound, "step 10");
  EXPECT_TESSEL_ERROR(manager.save(30, {}), ErrorCode::kAlreadyExists, "step-00000030");
}

}  // namespace
}  // namespace tessel::checkpoint
