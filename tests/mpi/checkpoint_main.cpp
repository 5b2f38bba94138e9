// tessel_mpi_checkpoint: a checkpoint saved by one process count and restored by another
// (checkpoint_test.sh runs it).
//
//   mpirun -np N tessel_mpi_checkpoint save DIR      every process writes its devices' shards
//   mpirun -np N tessel_mpi_checkpoint save-async DIR  the same through an AsyncCheckpointer,
//                                                    with relayouts on the same devices while the
//                                                    files are written, then wait_until_finished
//   mpirun -np N tessel_mpi_checkpoint over-budget DIR  an asynchronous save whose last process
//                                                    has a staging budget of 0 bytes: that one
//                                                    fails with ResourceExhausted, the others
//                                                    with Aborted naming it, nothing is written
//   mpirun -np M tessel_mpi_checkpoint restore DIR   any M (1 without mpirun), other layouts
//
// Every process has 2 CPU devices; the meshes are x = 2 x processes and batch = processes x
// model = 2, spanning the processes. The saved state has uneven, replicated, Partial and empty
// tensors (the same host values on every process, from fixed seeds). restore lays them out
// differently and checks every local component against the host value's block, byte for byte;
// each process prints "rank R: restored T tensors, B bytes checked" and exits 0, or prints the
// error and exits 1.
#include <cstdio>
#include <cstring>
#include <string>

#include "mpi_client.h"
#include "tessel/checkpoint/async_checkpointer.h"
#include "tessel/checkpoint/checkpoint.h"
#include "tessel/comm/mpi.h"
#include "tessel/core/error.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/mesh/shard_map.h"
#include "tessel/runtime/clients.h"

namespace {

using namespace tessel;

constexpr int kLocalDevices = testing::kClientDevices;
using testing::client_mesh;
using testing::client_runtime;

std::map<std::string, Tensor> host_values() {
  auto value = [](Shape shape, DType dtype, uint64_t seed) {
    return Tensor::random_uniform(shape, DType::kF64, seed, -50.0, 50.0).astype(dtype);
  };
  return {{"rows", value(Shape({7, 5}), DType::kF32, 1)},
          {"six", value(Shape({6}), DType::kF64, 2)},
          {"part", value(Shape({5, 4}), DType::kF32, 3)},
          {"rep", value(Shape({3, 3}), DType::kI64, 4)},
          {"empty", value(Shape({0, 4}), DType::kF32, 5)}};
}

// The layouts of the save (`save` true) or of the restore.
std::map<std::string, Layout> layouts(bool save) {
  const Mesh line = client_mesh({{"x", kLocalDevices * mpi_size()}});
  const Mesh grid = client_mesh({{"batch", mpi_size()}, {"model", kLocalDevices}});
  if (save) {
    return {
        {"rows", Layout({"x", "unsharded"}, line)},
        {"six", Layout({"x"}, line)},
        {"part", Layout({"batch", "unsharded"}, grid).with_partial({{"model", ReduceOp::kSum}})},
        {"rep", Layout::replicated(grid, 2)},
        {"empty", Layout({"x", "unsharded"}, line)}};
  }
  return {{"rows", Layout({"unsharded", "x"}, line)},
          {"six", Layout::replicated(grid, 1)},
          {"part", Layout({"model", "batch"}, grid)},
          {"rep", Layout({"batch", "model"}, grid)},
          {"empty", Layout({"unsharded", "x"}, line)}};
}

Layout chosen_restore_rows() { return layouts(false).at("rows"); }

// Bytes checked; a mismatch throws naming the tensor and the component.
size_t check(const std::string& name, const DTensor& d, const Tensor& host) {
  const ShardMap map(d.layout(), d.shape());
  const Mesh& mesh = d.layout().mesh();
  const std::vector<Tensor> components = unpack(d);
  size_t bytes = 0;
  for (int i = 0; i < mesh.num_local_devices(); ++i) {
    const ShardBlock& block = map.block(mesh.offset_of_device_id(mesh.local_device_ids()[i]));
    Tensor expected = Tensor::zeros(Shape(block.extents), host.dtype());
    const Box box{block.offsets, block.extents};
    copy_box(host, std::vector<int64_t>(host.shape().dims().size(), 0), expected, box.offsets, box);
    const Tensor& got = components[static_cast<size_t>(i)];
    if (got.shape() != expected.shape() ||
        std::memcmp(got.data(), expected.data(), got.nbytes()) != 0) {
      throw Error(ErrorCode::kInternal, "tessel_mpi_checkpoint",
                  "tensor '" + name + "' component " + std::to_string(i) + " differs");
    }
    bytes += got.nbytes();
  }
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  MpiEnvironment mpi(&argc, &argv);
  const std::string mode = argc == 3 ? argv[1] : "";
  if (mode != "save" && mode != "save-async" && mode != "over-budget" && mode != "restore") {
    std::fprintf(stderr, "usage: tessel_mpi_checkpoint save|save-async|over-budget|restore DIR\n");
    return 2;
  }
  const bool save = mode != "restore";
  const std::string dir = argv[2];
  try {
    const std::map<std::string, Tensor> host = host_values();
    const std::map<std::string, Layout> chosen = layouts(save);
    if (save) {
      checkpoint::State state{{"processes", int64_t{mpi_size()}}};
      for (const auto& [name, t] : host)
        state[name] = copy_to_mesh(t, chosen.at(name), client_runtime());
      if (mode == "save") {
        checkpoint::save(dir, state);
      } else if (mode == "over-budget") {
        const bool last = mpi_rank() == mpi_size() - 1;
        checkpoint::AsyncCheckpointer saver({.staging_bytes = last ? 0 : 1 << 20, .save = {}});
        try {
          saver.save(dir, state);
          std::printf("rank %d: the save was not refused\n", mpi_rank());
          return 1;
        } catch (const Error& e) {
          const ErrorCode want = last ? ErrorCode::kResourceExhausted : ErrorCode::kAborted;
          std::printf("rank %d: %s: %s\n", mpi_rank(), e.code() == want ? "refused" : "wrong error",
                      e.what());
          return e.code() == want ? 0 : 1;
        }
      } else {
        checkpoint::AsyncCheckpointer saver({.staging_bytes = 1 << 20, .save = {}});
        saver.save(dir, state);
        // The caller's own collectives while the writer writes: never interleaved with the
        // save's agreement, which runs here, in wait_until_finished.
        const DTensor& rows = std::get<DTensor>(state.at("rows"));
        for (int i = 0; i < 3; ++i) relayout(relayout(rows, chosen_restore_rows()), rows.layout());
        saver.wait_until_finished(std::chrono::milliseconds(60000));
      }
      std::printf("rank %d: saved %zu tensors\n", mpi_rank(), host.size());
    } else {
      const checkpoint::State back = checkpoint::restore(
          dir, checkpoint::Target(chosen.begin(), chosen.end()), {.runtime = &client_runtime()});
      size_t bytes = 0;
      for (const auto& [name, t] : host) bytes += check(name, std::get<DTensor>(back.at(name)), t);
      std::printf("rank %d: restored %zu tensors, %zu bytes checked (saved by %lld processes)\n",
                  mpi_rank(), host.size(), bytes,
                  static_cast<long long>(std::get<int64_t>(back.at("processes"))));
    }
  } catch (const std::exception& e) {
    std::printf("rank %d: %s\n", mpi_rank(), e.what());
    return 1;
  }
  return 0;
}
