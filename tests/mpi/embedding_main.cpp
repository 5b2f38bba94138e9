// tessel_mpi_embedding: ShardedEmbedding across processes (ctest mpi.embedding_np2).
//
//   mpirun -np N tessel_mpi_embedding tables      every placement over a mesh spanning the
//                                                 processes, against a dense reference
//   mpirun -np N tessel_mpi_embedding lifecycle   configure_embedding on the accelerator system
//
// tables: each process has 2 devices; the mesh is x = 2 x processes. Every process knows every
// device's ids (generated from the device's global index), so each computes the dense reference
// of the whole step itself (weighted mean bags over the table gathered at the start, SGD on the
// summed row gradients) and checks its own devices' activations and the gathered table after
// the update. Each process prints "rank R: PASS" and exits 0, or prints the error and exits 1.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "mpi_client.h"
#include "tessel/comm/mpi.h"
#include "tessel/core/error.h"
#include "tessel/embedding/embedding_system.h"
#include "tessel/embedding/sharded_embedding.h"
#include "tessel/system/accelerator_system.h"

namespace {

using namespace tessel;

constexpr int kBags = 3;
constexpr float kLearningRate = 0.5f;

struct DeviceIds {
  std::vector<int64_t> ids, splits;
  std::vector<float> weights;
};

EmbeddingConfiguration config(TablePlacement placement, ShardingStrategy strategy) {
  EmbeddingConfiguration c;
  c.tables = {{.name = "t", .vocabulary_size = 11, .dimension = 3,
               .optimization_parameters = {.optimizer = EmbeddingOptimizer::kSgd,
                                           .learning_rate = kLearningRate},
               .placement = placement}};
  c.features = {{.name = "f", .table_id = 0, .input_shape = {}}};
  c.batch_size_per_device = kBags;
  c.sharding_strategy = strategy;
  return c;
}

// Global device d's ids at `step`: bag 0 empty, then 1..3 ids each (repeats likely).
DeviceIds ids_of(int d, int step) {
  std::mt19937 rng(static_cast<uint32_t>(1000 * step + d));
  DeviceIds out{{}, {0}, {}};
  for (int b = 0; b < kBags; ++b) {
    const int n = b == 0 ? 0 : 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < n; ++k) {
      out.ids.push_back(static_cast<int64_t>(rng() % 11));
      out.weights.push_back(0.5f + static_cast<float>(rng() % 4) * 0.5f);
    }
    out.splits.push_back(static_cast<int64_t>(out.ids.size()));
  }
  return out;
}

void expect_close(float got, double want, const std::string& what) {
  if (std::fabs(got - want) > 1e-5) {
    throw Error(ErrorCode::kInternal, "tessel_mpi_embedding",
                what + ": got " + std::to_string(got) + ", want " + std::to_string(want));
  }
}

void check_tables(TablePlacement placement, ShardingStrategy strategy) {
  const int devices = testing::kClientDevices * mpi_size();
  const Mesh mesh = testing::client_mesh({{"x", devices}});
  ShardedEmbedding emb(config(placement, strategy), mesh, testing::client_runtime(),
                       {.timeout = std::chrono::seconds(30), .seed = 3});
  std::vector<float> table = emb.get_table("t").to_vector<float>();
  const std::string name = std::string(table_placement_name(placement)) + "/" +
                           std::string(sharding_strategy_name(strategy));
  for (int step = 0; step < 2; ++step) {
    std::vector<std::vector<RaggedIds>> inputs(1);
    for (int64_t id : mesh.local_device_ids()) {
      const DeviceIds d = ids_of(static_cast<int>(id), step);
      inputs[0].push_back({Tensor::from_vector(d.ids, Shape{static_cast<int64_t>(d.ids.size())}),
                           Tensor::from_vector(d.splits, Shape{kBags + 1}),
                           Tensor::from_vector(d.weights, Shape{static_cast<int64_t>(d.weights.size())})});
    }
    const auto act = emb.lookup(inputs);
    std::vector<double> grad_rows(table.size(), 0.0);
    std::vector<std::vector<Tensor>> grads(1);
    for (int d = 0; d < devices; ++d) {
      const DeviceIds in = ids_of(d, step);
      const int local = d - testing::kClientDevices * mpi_rank();
      const bool mine = local >= 0 && local < testing::kClientDevices;
      std::vector<float> g(kBags * 3);
      for (size_t i = 0; i < g.size(); ++i) g[i] = 0.1f * static_cast<float>(i + 1 + d);
      for (int b = 0; b < kBags; ++b) {
        double sum = 0;
        for (int64_t k = in.splits[b]; k < in.splits[b + 1]; ++k) sum += in.weights[k];
        for (int c = 0; c < 3; ++c) {
          double want = 0;
          for (int64_t k = in.splits[b]; k < in.splits[b + 1]; ++k) {
            const double f = in.weights[k] / sum;
            want += f * table[in.ids[k] * 3 + c];
            grad_rows[in.ids[k] * 3 + c] += f * g[b * 3 + c];
          }
          if (mine) {
            expect_close(act[0][local].to_vector<float>()[b * 3 + c], want,
                         name + " activation of device " + std::to_string(d));
          }
        }
      }
      if (mine) grads[0].push_back(Tensor::from_vector(g, Shape{kBags, 3}));
    }
    emb.apply_gradients(grads);
    for (size_t i = 0; i < table.size(); ++i) {
      table[i] -= kLearningRate * static_cast<float>(grad_rows[i]);
    }
    const std::vector<float> got = emb.get_table("t").to_vector<float>();
    for (size_t i = 0; i < table.size(); ++i) expect_close(got[i], table[i], name + " table");
  }
}

void check_lifecycle() {
  initialize_accelerator_system();
  auto emb = configure_embedding(config(TablePlacement::kRowWise, ShardingStrategy::kMod));
  if (!is_embedding_initialized() || emb->num_devices() != accelerator_system_info().num_devices) {
    throw Error(ErrorCode::kInternal, "tessel_mpi_embedding", "configure_embedding did not span "
                                                              "the system");
  }
  emb->get_table("t");  // a collective over every process
  shutdown_accelerator_system();
  if (is_embedding_initialized() || !emb->is_released()) {
    throw Error(ErrorCode::kInternal, "tessel_mpi_embedding", "shutdown kept the tables");
  }
}

}  // namespace

int main(int argc, char** argv) {
  tessel::MpiEnvironment mpi(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "tables") {
      for (TablePlacement p : {TablePlacement::kRowWise, TablePlacement::kTableWise,
                               TablePlacement::kColumnWise, TablePlacement::kDataParallel}) {
        check_tables(p, ShardingStrategy::kMod);
      }
      check_tables(TablePlacement::kRowWise, ShardingStrategy::kDivDefault);
    } else if (mode == "lifecycle") {
      check_lifecycle();
    } else {
      std::fprintf(stderr, "usage: tessel_mpi_embedding tables|lifecycle\n");
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", tessel::mpi_rank(), e.what());
    return 1;
  }
  std::printf("rank %d: PASS\n", tessel::mpi_rank());
  return 0;
}
