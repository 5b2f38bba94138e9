// ShardedEmbedding against a dense single-device reference written here (plain loops over the
// gathered table): every placement and strategy, uneven tables, empty bags, repeated ids,
// weights, 1 / 2 / 4 devices, the three optimizers; and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <future>
#include <map>
#include <random>
#include <thread>

#include "tessel/embedding/sharded_embedding.h"
#include "tessel/mesh/mesh.h"
#include "tessel/runtime/device.h"
#include "tessel/runtime/runtime.h"
#include "testing/expect_error.h"
#include "testing/simulated_clients.h"

namespace tessel {
namespace {

using Table = std::vector<float>;  // row-major [vocab, dim]

// Two features on one table of 13 rows (uneven over 2 and 4 devices) and one on a table of 5.
EmbeddingConfiguration config_for(TablePlacement placement, ShardingStrategy strategy,
                                  EmbeddingOptimizer optimizer) {
  EmbeddingConfiguration c;
  const OptimizationParameters opt{.optimizer = optimizer,
                                   .learning_rate = 0.3f,
                                   .beta1 = 0.8f,
                                   .beta2 = 0.9f,
                                   .epsilon = 1e-3f};
  c.tables = {{.name = "big",
               .vocabulary_size = 13,
               .dimension = 5,
               .optimization_parameters = opt,
               .placement = placement,
               .combiner = EmbeddingCombiner::kMean},
              {.name = "small",
               .vocabulary_size = 5,
               .dimension = 3,
               .optimization_parameters = opt,
               .placement = placement,
               .combiner = EmbeddingCombiner::kSqrtn}};
  c.features = {{.name = "a", .table_id = 0, .input_shape = {}},
                {.name = "b", .table_id = 1, .input_shape = {}},
                {.name = "c", .table_id = 0, .input_shape = {}}};
  c.tables[0].combiner = EmbeddingCombiner::kMean;
  c.batch_size_per_device = 4;
  c.sharding_strategy = strategy;
  return c;
}

struct Bags {
  std::vector<int64_t> ids, splits;
  std::vector<float> weights;
};

// Random bags (0..3 ids each, repeats likely, the first bag empty), weights when `weighted`.
Bags random_bags(std::mt19937& rng, int64_t vocab, int bags, bool weighted) {
  Bags b;
  b.splits.push_back(0);
  for (int i = 0; i < bags; ++i) {
    const int n = i == 0 ? 0 : static_cast<int>(rng() % 4);
    for (int k = 0; k < n; ++k) {
      b.ids.push_back(static_cast<int64_t>(rng() % static_cast<uint32_t>(vocab)));
      if (weighted) b.weights.push_back(0.25f + static_cast<float>(rng() % 8) * 0.25f);
    }
    b.splits.push_back(static_cast<int64_t>(b.ids.size()));
  }
  return b;
}

RaggedIds ragged(const Bags& b) {
  RaggedIds r;
  r.values = Tensor::from_vector(b.ids, Shape{static_cast<int64_t>(b.ids.size())});
  r.row_splits = Tensor::from_vector(b.splits, Shape{static_cast<int64_t>(b.splits.size())});
  if (!b.weights.empty()) {
    r.weights = Tensor::from_vector(b.weights, Shape{static_cast<int64_t>(b.weights.size())});
  }
  return r;
}

// Each id's factor in its bag (weight / combiner denominator).
std::vector<float> factors(const Bags& b, EmbeddingCombiner combiner) {
  std::vector<float> out(b.ids.size());
  for (size_t i = 0; i + 1 < b.splits.size(); ++i) {
    double sum = 0, sq = 0;
    for (int64_t k = b.splits[i]; k < b.splits[i + 1]; ++k) {
      const double w = b.weights.empty() ? 1 : b.weights[static_cast<size_t>(k)];
      sum += w;
      sq += w * w;
    }
    const double denom = combiner == EmbeddingCombiner::kSum    ? 1.0
                         : combiner == EmbeddingCombiner::kMean ? sum
                                                                : std::sqrt(sq);
    for (int64_t k = b.splits[i]; k < b.splits[i + 1]; ++k) {
      const double w = b.weights.empty() ? 1 : b.weights[static_cast<size_t>(k)];
      out[static_cast<size_t>(k)] = denom == 0 ? 0.0f : static_cast<float>(w / denom);
    }
  }
  return out;
}

Table to_table(const Tensor& t) { return t.to_vector<float>(); }

void expect_near(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5) << what << " [" << i << "]";
}

struct Case {
  int devices;
  TablePlacement placement;
  ShardingStrategy strategy;
  EmbeddingOptimizer optimizer;
  bool weighted;
};

void run_case(const Case& k) {
  Runtime runtime({.num_cpu_devices = k.devices});
  const Mesh mesh = Mesh::create({{"x", k.devices}});
  const EmbeddingConfiguration config = config_for(k.placement, k.strategy, k.optimizer);
  ShardedEmbedding emb(config, mesh, runtime, {.timeout = std::chrono::seconds(30), .seed = 7});

  // Table memory: every device's part adds up to the tables and their slots.
  int64_t held = 0, want = 0;
  for (int i = 0; i < k.devices; ++i) held += emb.memory_bytes(i);
  const int copies = k.placement == TablePlacement::kDataParallel ? k.devices : 1;
  const int slots = k.optimizer == EmbeddingOptimizer::kAdam      ? 3
                    : k.optimizer == EmbeddingOptimizer::kAdagrad ? 2
                                                                  : 1;
  for (const auto& t : config.tables) want += t.vocabulary_size * t.dimension * 4 * slots * copies;
  EXPECT_EQ(held, want);

  std::vector<Table> tables = {to_table(emb.get_table("big")), to_table(emb.get_table("small"))};
  std::vector<Table> slot0(2), slot1(2);
  for (int t = 0; t < 2; ++t) {
    const size_t n = tables[static_cast<size_t>(t)].size();
    slot0[static_cast<size_t>(t)].assign(n,
                                         k.optimizer == EmbeddingOptimizer::kAdagrad ? 0.1f : 0.0f);
    slot1[static_cast<size_t>(t)].assign(n, 0.0f);
  }
  std::mt19937 rng(static_cast<uint32_t>(k.devices * 131 + static_cast<int>(k.placement) * 7 +
                                         static_cast<int>(k.strategy) * 3 +
                                         static_cast<int>(k.optimizer)));
  for (int step = 0; step < 3; ++step) {
    std::vector<std::vector<Bags>> bags(3);
    std::vector<std::vector<RaggedIds>> inputs(3);
    for (int f = 0; f < 3; ++f) {
      const auto& table =
          config.tables[static_cast<size_t>(config.features[static_cast<size_t>(f)].table_id)];
      for (int d = 0; d < k.devices; ++d) {
        bags[static_cast<size_t>(f)].push_back(
            random_bags(rng, table.vocabulary_size, 4, k.weighted));
        inputs[static_cast<size_t>(f)].push_back(ragged(bags[static_cast<size_t>(f)].back()));
      }
    }
    const auto act = emb.lookup(inputs);
    // Reference lookup and the per-row gradients of loss = sum(act * g), g = 1 + position.
    std::vector<std::map<int64_t, std::vector<float>>> row_grads(2);
    std::vector<std::vector<Tensor>> grads(3);
    for (int f = 0; f < 3; ++f) {
      const auto fs = static_cast<size_t>(f);
      const int t = config.features[fs].table_id;
      const auto& desc = config.tables[static_cast<size_t>(t)];
      const int64_t dim = desc.dimension;
      for (int d = 0; d < k.devices; ++d) {
        const Bags& b = bags[fs][static_cast<size_t>(d)];
        const std::vector<float> s = factors(b, desc.combiner);
        std::vector<float> want_act(static_cast<size_t>(4 * dim), 0.0f), g(want_act.size());
        for (size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * static_cast<float>(i + 1 + d);
        for (int bag = 0; bag < 4; ++bag) {
          for (int64_t q = b.splits[static_cast<size_t>(bag)];
               q < b.splits[static_cast<size_t>(bag) + 1]; ++q) {
            const int64_t id = b.ids[static_cast<size_t>(q)];
            auto& rg = row_grads[static_cast<size_t>(t)][id];
            rg.resize(static_cast<size_t>(dim), 0.0f);
            for (int64_t c = 0; c < dim; ++c) {
              want_act[static_cast<size_t>(bag * dim + c)] +=
                  s[static_cast<size_t>(q)] *
                  tables[static_cast<size_t>(t)][static_cast<size_t>(id * dim + c)];
              rg[static_cast<size_t>(c)] +=
                  s[static_cast<size_t>(q)] * g[static_cast<size_t>(bag * dim + c)];
            }
          }
        }
        expect_near(act[fs][static_cast<size_t>(d)].to_vector<float>(), want_act, "activations");
        grads[fs].push_back(Tensor::from_vector(g, Shape{4, dim}));
      }
    }
    emb.apply_gradients(grads);
    // Reference update of the touched rows.
    for (int t = 0; t < 2; ++t) {
      const auto ts = static_cast<size_t>(t);
      const int64_t dim = config.tables[ts].dimension;
      const OptimizationParameters& o = config.tables[ts].optimization_parameters;
      for (const auto& [row, g] : row_grads[ts]) {
        for (int64_t c = 0; c < dim; ++c) {
          const auto i = static_cast<size_t>(row * dim + c);
          const float gc = g[static_cast<size_t>(c)];
          if (k.placement == TablePlacement::kDataParallel &&
              std::all_of(g.begin(), g.end(), [](float v) { return v == 0; }))
            continue;
          if (o.optimizer == EmbeddingOptimizer::kSgd) {
            tables[ts][i] -= o.learning_rate * gc;
          } else if (o.optimizer == EmbeddingOptimizer::kAdagrad) {
            slot0[ts][i] += gc * gc;
            tables[ts][i] -= o.learning_rate * gc / std::sqrt(slot0[ts][i]);
          } else {
            slot0[ts][i] = o.beta1 * slot0[ts][i] + (1 - o.beta1) * gc;
            slot1[ts][i] = o.beta2 * slot1[ts][i] + (1 - o.beta2) * gc * gc;
            tables[ts][i] -= o.learning_rate * slot0[ts][i] / (std::sqrt(slot1[ts][i]) + o.epsilon);
          }
        }
      }
    }
    expect_near(to_table(emb.get_table("big")), tables[0], "table big");
    expect_near(to_table(emb.get_table("small")), tables[1], "table small");
    if (k.optimizer == EmbeddingOptimizer::kAdagrad) {
      expect_near(to_table(emb.get_slot("big", "accumulators")), slot0[0], "accumulators");
    }
    if (k.optimizer == EmbeddingOptimizer::kAdam) {
      expect_near(to_table(emb.get_slot("small", "velocities")), slot1[1], "velocities");
    }
  }
  EXPECT_GT(emb.last_step_stats().ids, 0);
}

TEST(ShardedEmbedding, RowWiseDivAndModEqualTheDenseReference) {
  for (int devices : {1, 2, 4}) {
    for (ShardingStrategy s : {ShardingStrategy::kDivDefault, ShardingStrategy::kMod}) {
      SCOPED_TRACE(::testing::Message() << devices << " devices, " << sharding_strategy_name(s));
      run_case({devices, TablePlacement::kRowWise, s, EmbeddingOptimizer::kSgd, devices == 2});
    }
  }
}

TEST(ShardedEmbedding, EveryPlacementAndOptimizerEqualsTheDenseReference) {
  for (TablePlacement p : {TablePlacement::kRowWise, TablePlacement::kTableWise,
                           TablePlacement::kColumnWise, TablePlacement::kDataParallel}) {
    for (EmbeddingOptimizer o :
         {EmbeddingOptimizer::kSgd, EmbeddingOptimizer::kAdagrad, EmbeddingOptimizer::kAdam}) {
      SCOPED_TRACE(::testing::Message() << table_placement_name(p) << ", " << optimizer_name(o));
      run_case({4, p, ShardingStrategy::kMod, o, true});
    }
  }
}

// TF's dynamic learning rate (a value per tag with each step's gradients) and the options
// around the update: row 2, looked up once per device (sum combiner, gradient 1 per column),
// gets g = 2, clipped to 1.5; decayed by 10 %; SGD at the step's rate; clipped to [-0.2, 0.25].
TEST(ShardedEmbedding, PerStepLearningRateAndOptionsOnTheOwner) {
  Runtime runtime({.num_cpu_devices = 2});
  const Mesh mesh = Mesh::create({{"x", 2}});
  EmbeddingConfiguration config;
  config.tables = {{.name = "t",
                    .vocabulary_size = 4,
                    .dimension = 3,
                    .optimization_parameters = {.optimizer = EmbeddingOptimizer::kSgd,
                                                .clip_gradient_max = 1.5f,
                                                .clip_weight_min = -0.2f,
                                                .clip_weight_max = 0.25f,
                                                .weight_decay_factor = 0.1f,
                                                .dynamic_learning_rate_tag = 0},
                    .combiner = EmbeddingCombiner::kSum}};
  config.features = {{.name = "f", .table_id = 0, .input_shape = {}}};
  config.batch_size_per_device = 1;
  ShardedEmbedding emb(config, mesh, runtime, {.seed = 4});
  Table want = to_table(emb.get_table("t"));
  const std::vector<std::vector<RaggedIds>> inputs = {
      {ragged({{2}, {0, 1}, {}}), ragged({{2}, {0, 1}, {}})}};
  const std::vector<std::vector<Tensor>> grads = {
      {Tensor::full(Shape{1, 3}, DType::kF32, 1.0), Tensor::full(Shape{1, 3}, DType::kF32, 1.0)}};
  for (float lr : {0.01f, 0.1f, 0.3f}) {
    emb.lookup(inputs);
    EXPECT_TESSEL_ERROR(emb.apply_gradients(grads), ErrorCode::kInvalidArgument,
                        "0 learning rates given, but the tables' dynamic learning rate tags "
                        "need 1");
    EXPECT_TESSEL_ERROR(emb.apply_gradients(grads, {-lr}), ErrorCode::kInvalidArgument,
                        "of tag 0 (table 't', sgd) must be finite and >= 0");
    emb.apply_gradients(grads, {lr});
    for (size_t c = 6; c < 9; ++c) {
      want[c] = std::clamp(want[c] * 0.9f - lr * 1.5f, -0.2f, 0.25f);
    }
    expect_near(to_table(emb.get_table("t")), want, "table t");
  }
}

// BACKWARD_PASS_ONLY (TF: "just the backward_pass"): lookup returns no activations and moves
// no rows, and apply_gradients updates the tables and slots exactly as TRAINING does (which
// run_case checks against the dense reference).
TEST(ShardedEmbedding, BackwardPassOnlyUpdatesAsTrainingWithoutAForwardPass) {
  Runtime runtime({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  for (TablePlacement p : {TablePlacement::kRowWise, TablePlacement::kTableWise,
                           TablePlacement::kColumnWise, TablePlacement::kDataParallel}) {
    SCOPED_TRACE(table_placement_name(p));
    EmbeddingConfiguration config =
        config_for(p, ShardingStrategy::kMod, EmbeddingOptimizer::kAdagrad);
    ShardedEmbedding training(config, mesh, runtime, {.seed = 3});
    config.mode = EmbeddingMode::kBackwardPassOnly;
    ShardedEmbedding backward(config, mesh, runtime, {.seed = 3});
    std::mt19937 rng(11);
    for (int step = 0; step < 2; ++step) {
      std::vector<std::vector<RaggedIds>> inputs(3);
      std::vector<std::vector<Tensor>> grads(3);
      for (size_t f = 0; f < 3; ++f) {
        const auto& table = config.tables[static_cast<size_t>(config.features[f].table_id)];
        for (int d = 0; d < 4; ++d) {
          inputs[f].push_back(ragged(random_bags(rng, table.vocabulary_size, 4, true)));
          grads[f].push_back(Tensor::random_uniform(Shape{4, table.dimension}, DType::kF32,
                                                    static_cast<uint64_t>(step * 10 + d), -1, 1));
        }
      }
      EXPECT_EQ(training.lookup(inputs).size(), 3u);
      EXPECT_TRUE(backward.lookup(inputs).empty());
      const EmbeddingStepStats forward = training.last_step_stats();
      const EmbeddingStepStats requests_only = backward.last_step_stats();
      EXPECT_EQ(requests_only.ids, forward.ids);
      EXPECT_EQ(requests_only.collectives, forward.collectives - 1);  // no rows sent back
      if (p != TablePlacement::kDataParallel) {
        EXPECT_LT(requests_only.bytes_sent, forward.bytes_sent);
      }
      training.apply_gradients(grads);
      backward.apply_gradients(grads);
      for (const char* t : {"big", "small"}) {
        EXPECT_EQ(to_table(backward.get_table(t)), to_table(training.get_table(t))) << t;
        EXPECT_EQ(to_table(backward.get_slot(t, "accumulators")),
                  to_table(training.get_slot(t, "accumulators")))
            << t;
      }
    }
  }
}

TEST(ShardedEmbedding, TwoSimulatedClientsLookUpAcrossTheirDevices) {
  // Two clients of 2 devices each (in-process cluster): a mesh of 4 spanning both, every
  // placement; each client checks its devices' activations against the gathered table.
  for (TablePlacement p :
       {TablePlacement::kRowWise, TablePlacement::kColumnWise, TablePlacement::kTableWise}) {
    SCOPED_TRACE(table_placement_name(p));
    testing::SimulatedClients clients(2, 2);
    const auto errors = clients.run([p](testing::SimulatedClient& c) {
      const EmbeddingConfiguration config =
          config_for(p, ShardingStrategy::kDivDefault, EmbeddingOptimizer::kSgd);
      ShardedEmbedding emb(config, c.mesh({{"x", 4}}), c.runtime(),
                           {.timeout = std::chrono::seconds(30), .seed = 5});
      const Table big = to_table(emb.get_table("big"));
      std::vector<std::vector<RaggedIds>> inputs(3);
      std::vector<Bags> mine;
      for (int f = 0; f < 3; ++f) {
        const int64_t vocab = f == 1 ? 5 : 13;
        for (int i = 0; i < 2; ++i) {
          std::mt19937 rng(static_cast<uint32_t>(10 * f + 2 * c.id() + i));
          Bags b = random_bags(rng, vocab, 4, true);
          inputs[static_cast<size_t>(f)].push_back(ragged(b));
          if (f == 0) mine.push_back(b);
        }
      }
      const auto act = emb.lookup(inputs);
      for (int i = 0; i < 2; ++i) {
        const Bags& b = mine[static_cast<size_t>(i)];
        const std::vector<float> s = factors(b, EmbeddingCombiner::kMean);
        std::vector<float> want(4 * 5, 0.0f);
        for (int bag = 0; bag < 4; ++bag) {
          for (int64_t q = b.splits[static_cast<size_t>(bag)];
               q < b.splits[static_cast<size_t>(bag) + 1]; ++q) {
            for (int col = 0; col < 5; ++col) {
              want[static_cast<size_t>(bag * 5 + col)] +=
                  s[static_cast<size_t>(q)] *
                  big[static_cast<size_t>(b.ids[static_cast<size_t>(q)] * 5 + col)];
            }
          }
        }
        expect_near(act[0][static_cast<size_t>(i)].to_vector<float>(), want, "activations");
      }
    });
    for (const auto& e : errors) {
      if (e) std::rethrow_exception(e);
    }
  }
}

TEST(ShardedEmbedding, ClientsWithDifferentConfigurationsAreToldSo) {
  testing::SimulatedClients clients(2, 1);
  const auto errors = clients.run([](testing::SimulatedClient& c) {
    EmbeddingConfiguration config =
        config_for(TablePlacement::kRowWise, ShardingStrategy::kMod, EmbeddingOptimizer::kSgd);
    if (c.id() == 1) config.tables[0].vocabulary_size = 14;
    ShardedEmbedding emb(config, c.mesh({{"x", 2}}), c.runtime(),
                         {.timeout = std::chrono::seconds(30)});
  });
  for (const auto& e : errors) {
    ASSERT_TRUE(e);
    EXPECT_TESSEL_ERROR(std::rethrow_exception(e), ErrorCode::kInvalidArgument,
                        "differs from this device's");
  }
}

class ShardedEmbeddingErrors : public ::testing::Test {
 protected:
  Runtime runtime_{RuntimeOptions{.num_cpu_devices = 2}};
  Mesh mesh_ = Mesh::create({{"x", 2}});
  EmbeddingConfiguration config_ =
      config_for(TablePlacement::kRowWise, ShardingStrategy::kDivDefault, EmbeddingOptimizer::kSgd);
  std::vector<std::vector<RaggedIds>> inputs(int64_t bad_id = -1) {
    Bags b{{1, 2, 3, 4}, {0, 1, 2, 3, 4}, {}};
    Bags bad = b;
    if (bad_id >= 0) bad.ids[2] = bad_id;
    return {{ragged(b), ragged(b)}, {ragged(b), ragged(b)}, {ragged(b), ragged(bad)}};
  }
};

TEST_F(ShardedEmbeddingErrors, BadInputsNameFeatureDeviceAndValue) {
  ShardedEmbedding emb(config_, mesh_, runtime_);
  EXPECT_TESSEL_ERROR(emb.lookup(inputs(13)), ErrorCode::kInvalidArgument,
                      "feature 'c' on /job:localhost/replica:0/task:0/device:CPU:1: id 13 "
                      "(position 2) is outside table 'big' of 13 rows");
  auto in = inputs();
  in[1][0].row_splits = Tensor::from_vector(std::vector<int64_t>{0, 2, 1, 3, 4}, Shape{5});
  EXPECT_TESSEL_ERROR(emb.lookup(in), ErrorCode::kInvalidArgument, "row_splits go down at bag 1");
  in = inputs();
  in[0][1].row_splits = Tensor::from_vector(std::vector<int64_t>{0, 4}, Shape{2});
  EXPECT_TESSEL_ERROR(emb.lookup(in), ErrorCode::kInvalidArgument, "not bags + 1 = 5");
  in = inputs();
  in[0][0].values = Tensor::zeros(Shape{4}, DType::kF32);
  EXPECT_TESSEL_ERROR(emb.lookup(in), ErrorCode::kInvalidArgument, "int64 or int32");
  in = inputs();
  in[0][0].weights = Tensor::zeros(Shape{3}, DType::kF32);
  EXPECT_TESSEL_ERROR(emb.lookup(in), ErrorCode::kInvalidArgument, "weights must be float32 [4]");
  in = inputs();
  in.pop_back();
  EXPECT_TESSEL_ERROR(emb.lookup(in), ErrorCode::kInvalidArgument, "2 features given");
  EXPECT_TESSEL_ERROR(emb.get_table("nope"), ErrorCode::kInvalidArgument, "no table named 'nope'");
  EXPECT_TESSEL_ERROR(emb.get_slot("big", "momenta"), ErrorCode::kInvalidArgument,
                      "no slot 'momenta'");
  EXPECT_TESSEL_ERROR(emb.set_table("big", Tensor::zeros(Shape{13, 4}, DType::kF32)),
                      ErrorCode::kInvalidArgument, "float32 [13, 5]");
}

TEST_F(ShardedEmbeddingErrors, GradientsNeedALookupAndTrainingMode) {
  ShardedEmbedding emb(config_, mesh_, runtime_);
  std::vector<std::vector<Tensor>> grads(3);
  for (int f = 0; f < 3; ++f) {
    const int64_t dim = f == 1 ? 3 : 5;
    grads[static_cast<size_t>(f)] = {Tensor::zeros(Shape{4, dim}, DType::kF32),
                                     Tensor::zeros(Shape{4, dim}, DType::kF32)};
  }
  EXPECT_TESSEL_ERROR(emb.apply_gradients(grads), ErrorCode::kFailedPrecondition,
                      "needs a lookup first");
  emb.lookup(inputs());
  auto wrong = grads;
  wrong[1][1] = Tensor::zeros(Shape{4, 5}, DType::kF32);
  EXPECT_TESSEL_ERROR(
      emb.apply_gradients(wrong), ErrorCode::kInvalidArgument,
      "feature 'b' on /job:localhost/replica:0/task:0/device:CPU:1 needs float32 [4, 3]");
  emb.apply_gradients(grads);
  EXPECT_TESSEL_ERROR(emb.apply_gradients(grads), ErrorCode::kFailedPrecondition,
                      "needs a lookup first");

  EmbeddingConfiguration inference = config_;
  inference.mode = EmbeddingMode::kInference;
  ShardedEmbedding frozen(inference, mesh_, runtime_);
  frozen.lookup(inputs());
  EXPECT_TESSEL_ERROR(frozen.apply_gradients(grads), ErrorCode::kFailedPrecondition, "INFERENCE");
}

TEST_F(ShardedEmbeddingErrors, ReleaseFreesTheDevicesMemory) {
  const int64_t before = runtime_.device(0).memory_stats().live_bytes;
  auto emb = std::make_unique<ShardedEmbedding>(config_, mesh_, runtime_);
  EXPECT_EQ(runtime_.device(0).memory_stats().live_bytes - before, emb->memory_bytes(0));
  EXPECT_GT(emb->memory_bytes(0), 0);
  emb->release("test");
  EXPECT_EQ(runtime_.device(0).memory_stats().live_bytes, before);
  EXPECT_TESSEL_ERROR(emb->lookup(inputs()), ErrorCode::kFailedPrecondition, "released (test)");
}

TEST_F(ShardedEmbeddingErrors, ABusyDeviceEndsTheStepByTheTimeout) {
  ShardedEmbedding emb(config_, mesh_, runtime_, {.timeout = std::chrono::milliseconds(200)});
  std::promise<void> go;
  std::shared_future<void> released = go.get_future().share();
  runtime_.device(1).stream().enqueue("busy",
                                      [released] { released.wait_for(std::chrono::seconds(10)); });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TESSEL_ERROR(emb.lookup(inputs()), ErrorCode::kDeadlineExceeded, "CPU:1");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  go.set_value();
  // The late task fails on its aborted group; once that is reported, the next step works.
  try {
    runtime_.device(1).stream().synchronize();
  } catch (const Error&) {
  }
  const auto act = emb.lookup(inputs());
  EXPECT_EQ(act[0][0].shape(), (Shape{4, 5}));
}

TEST_F(ShardedEmbeddingErrors, ConcurrentEmbeddingsOnTheSameDevicesAgree) {
  // Two embeddings over the same mesh share its communicator group; steps from two threads
  // interleave on the streams in launch order and each gets its own rows.
  ShardedEmbedding a(config_, mesh_, runtime_, {.seed = 1});
  ShardedEmbedding b(config_, mesh_, runtime_, {.seed = 2});
  const auto want_a = a.lookup(inputs()), want_b = b.lookup(inputs());
  std::vector<std::thread> threads;
  std::vector<int> same(2, 0);
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      ShardedEmbedding& emb = t == 0 ? a : b;
      const auto& want = t == 0 ? want_a : want_b;
      for (int i = 0; i < 20; ++i) {
        const auto got = emb.lookup(inputs());
        same[static_cast<size_t>(t)] +=
            got[2][1].to_vector<float>() == want[2][1].to_vector<float>();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(same, (std::vector<int>{20, 20}));
  EXPECT_NE(want_a[0][0].to_vector<float>(), want_b[0][0].to_vector<float>());
}

TEST_F(ShardedEmbeddingErrors, SetTableThenLookupSeesIt) {
  ShardedEmbedding emb(config_, mesh_, runtime_);
  std::vector<float> values(13 * 5);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  emb.set_table("big", Tensor::from_vector(values, Shape{13, 5}));
  EXPECT_EQ(emb.get_table("big").to_vector<float>(), values);
}

}  // namespace
}  // namespace tessel
