// EmbeddingConfiguration (TF's text and wire forms, validation) and TableSharding (TF's
// DIV_DEFAULT / MOD row assignment, the other placements).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "tessel/embedding/embedding_config.h"
#include "tessel/embedding/table_sharding.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

// As TF writes it (field names and numbers of tpu_embedding_configuration.proto).
constexpr const char* kTfText = R"(
  table_descriptor {
    name: "users" vocabulary_size: 13 dimension: 4
    optimization_parameters { learning_rate { constant: 0.5 } adam { beta1: 0.8 beta2: 0.9 epsilon: 0.001 } }
  }
  table_descriptor {
    name: "items" vocabulary_size: 7 dimension: 3
    optimization_parameters { learning_rate { constant: 0.1 } adagrad {} }
  }
  feature_descriptor { name: "user" table_id: 0 input_shape: 8 }
  feature_descriptor { name: "item" table_id: 1 }
  mode: TRAINING
  batch_size_per_tensor_core: 8
  sharding_strategy: MOD
)";

EmbeddingConfiguration two_tables() {
  EmbeddingConfiguration c;
  c.tables = {{.name = "users", .vocabulary_size = 13, .dimension = 4},
              {.name = "items", .vocabulary_size = 7, .dimension = 3}};
  c.features = {{.name = "user", .table_id = 0, .input_shape = {}},
                {.name = "item", .table_id = 1, .input_shape = {}}};
  c.batch_size_per_device = 8;
  return c;
}

TEST(EmbeddingConfig, ParsesTfText) {
  const EmbeddingConfiguration c = EmbeddingConfiguration::from_text(kTfText);
  ASSERT_EQ(c.tables.size(), 2u);
  EXPECT_EQ(c.tables[0].name, "users");
  EXPECT_EQ(c.tables[0].vocabulary_size, 13);
  EXPECT_EQ(c.tables[0].optimization_parameters.optimizer, EmbeddingOptimizer::kAdam);
  EXPECT_FLOAT_EQ(c.tables[0].optimization_parameters.beta1, 0.8f);
  EXPECT_FLOAT_EQ(c.tables[0].optimization_parameters.learning_rate, 0.5f);
  EXPECT_EQ(c.tables[1].optimization_parameters.optimizer, EmbeddingOptimizer::kAdagrad);
  EXPECT_FLOAT_EQ(c.tables[1].optimization_parameters.initial_accumulator, 0.1f);
  EXPECT_EQ(c.tables[1].combiner, EmbeddingCombiner::kMean);  // TF's default
  EXPECT_EQ(c.features[0].input_shape, std::vector<int32_t>{8});
  EXPECT_EQ(c.mode, EmbeddingMode::kTraining);
  EXPECT_EQ(c.sharding_strategy, ShardingStrategy::kMod);
  EXPECT_EQ(c.batch_size_per_device, 8);
  c.validate(1, 4);
}

TEST(EmbeddingConfig, ParsesTheFieldsTfsOwnToolsSet) {
  // As TF's TPUEmbedding mid-level API writes a table (defaults it sets spelled out).
  const EmbeddingConfiguration c = EmbeddingConfiguration::from_text(R"(
    table_descriptor { name: "t" vocabulary_size: 8 dimension: 2 num_features: 1
      optimization_parameters {
        learning_rate { constant: 0.1 } gradient_accumulation_status: ENABLED
        multiply_weight_decay_factor_by_learning_rate: true
        hot_id_replication_configuration { status: DISABLED } adagrad {} } }
    feature_descriptor { name: "f" table_id: 0 input_shape: 4 }
    mode: TRAINING batch_size_per_tensor_core: 4 num_hosts: 1 num_tensor_cores: 2
    pipeline_execution_with_tensor_core: false profile_data_directory: "/tmp/p"
    spmd_sharding { enabled: false })");
  EXPECT_EQ(c.tables[0].optimization_parameters.optimizer, EmbeddingOptimizer::kAdagrad);
  c.validate(1, 2);
  EXPECT_TRUE(c.tables[0].optimization_parameters.gradient_accumulation);
  // DISABLED: each device's gradient applied in turn (not on DATA_PARALLEL tables).
  EmbeddingConfiguration d = EmbeddingConfiguration::from_text(R"(
    table_descriptor { name: "t" vocabulary_size: 8 dimension: 2
      optimization_parameters { gradient_accumulation_status: DISABLED adagrad {} } }
    feature_descriptor { name: "f" table_id: 0 input_shape: 4 }
    mode: TRAINING batch_size_per_tensor_core: 4)");
  EXPECT_FALSE(d.tables[0].optimization_parameters.gradient_accumulation);
  d.validate(1, 2);
  EXPECT_EQ(EmbeddingConfiguration::from_text(d.to_text()), d);
  EXPECT_NE(d.to_text().find("gradient_accumulation_status: DISABLED"), std::string::npos);
  d.tables[0].placement = TablePlacement::kDataParallel;
  EXPECT_TESSEL_ERROR(d.validate(1, 2), ErrorCode::kUnimplemented,
                      "table 't': gradient_accumulation_status DISABLED on a DATA_PARALLEL table");
  EXPECT_TESSEL_ERROR(EmbeddingConfiguration::from_text("spmd_sharding { enabled: true }"),
                      ErrorCode::kUnimplemented, "spmd_sharding");
}

TEST(EmbeddingConfig, TextAndWireFormsRoundTrip) {
  EmbeddingConfiguration c = two_tables();
  c.tables[0].placement = TablePlacement::kColumnWise;
  c.tables[0].combiner = EmbeddingCombiner::kSqrtn;
  c.tables[1].optimization_parameters = {
      .optimizer = EmbeddingOptimizer::kAdam, .learning_rate = 0.25f, .use_sum_inside_sqrt = true};
  c.sharding_strategy = ShardingStrategy::kMod;
  c.mode = EmbeddingMode::kInference;
  EXPECT_EQ(EmbeddingConfiguration::from_text(c.to_text()), c);
  EXPECT_EQ(EmbeddingConfiguration::from_serialized(c.serialized()), c);
  EXPECT_NE(c.to_text().find("sharding_strategy: MOD"), std::string::npos) << c.to_text();
}

// TF's text of every optimizer and option (optimization_parameters.proto's field names).
TEST(EmbeddingConfig, ParsesEveryOptimizerAndOptionOfTf) {
  const auto params = [](const std::string& text) {
    return EmbeddingConfiguration::from_text(
               "table_descriptor { name: \"t\" optimization_parameters { " + text + " } }")
        .tables[0]
        .optimization_parameters;
  };
  OptimizationParameters o = params("momentum { momentum: 0.5 use_nesterov: true }");
  EXPECT_EQ(o.optimizer, EmbeddingOptimizer::kMomentum);
  EXPECT_FLOAT_EQ(o.momentum, 0.5f);
  EXPECT_TRUE(o.use_nesterov);
  o = params("rms_prop { rho: 0.8 momentum: 0.1 epsilon: 0.01 }");
  EXPECT_EQ(o.optimizer, EmbeddingOptimizer::kRmsProp);
  EXPECT_FLOAT_EQ(o.rho, 0.8f);
  EXPECT_FLOAT_EQ(o.epsilon, 0.01f);
  EXPECT_EQ(params("centered_rms_prop { rho: 0.8 }").optimizer,
            EmbeddingOptimizer::kCenteredRmsProp);
  o = params("ftrl { l1: 0.1 l2: 0.2 lr_power: -0.25 beta: 0.5 multiply_linear_by_lr: true }");
  EXPECT_EQ(o.optimizer, EmbeddingOptimizer::kFtrl);
  EXPECT_FLOAT_EQ(o.l1_regularization_strength, 0.1f);
  EXPECT_FLOAT_EQ(o.l2_regularization_strength, 0.2f);
  EXPECT_FLOAT_EQ(o.learning_rate_power, -0.25f);
  EXPECT_FLOAT_EQ(o.beta, 0.5f);
  EXPECT_TRUE(o.multiply_linear_by_learning_rate);
  EXPECT_FLOAT_EQ(o.initial_accumulator, 0.1f);  // TF's slot initializer default
  o = params("proximal_adagrad { l1: 0.3 }");
  EXPECT_EQ(o.optimizer, EmbeddingOptimizer::kProximalAdagrad);
  EXPECT_FLOAT_EQ(o.l1_regularization_strength, 0.3f);
  o = params("adadelta { rho: 0.95 epsilon: 0.001 }");
  EXPECT_EQ(o.optimizer, EmbeddingOptimizer::kAdadelta);
  o = params("proximal_yogi { l1: 0.1 l2: 0.2 beta1: 0.8 beta2: 0.95 epsilon: 0.001 }");
  EXPECT_EQ(o.optimizer, EmbeddingOptimizer::kProximalYogi);
  EXPECT_FLOAT_EQ(o.l1_regularization_strength, 0.1f);
  EXPECT_FLOAT_EQ(o.l2_regularization_strength, 0.2f);
  EXPECT_FLOAT_EQ(o.beta1, 0.8f);
  EXPECT_FLOAT_EQ(o.beta2, 0.95f);
  EXPECT_FLOAT_EQ(o.epsilon, 0.001f);
  EXPECT_FLOAT_EQ(o.initial_accumulator, 1e-6f);  // TF's ProximalYogi slot initializer
  EXPECT_FALSE(params("adam { use_non_lazy_adam: true }").lazy_adam);
  o = params(
      "learning_rate { dynamic { tag: 1 } } clipping_limits { lower { value: -1 } } "
      "gradient_clipping_limits { upper { value: 2 } } weight_decay_factor: 0.1 "
      "multiply_weight_decay_factor_by_learning_rate: true stochastic_gradient_descent {}");
  EXPECT_EQ(o.dynamic_learning_rate_tag, 1);
  EXPECT_FLOAT_EQ(o.clip_weight_min, -1.0f);
  EXPECT_TRUE(std::isinf(o.clip_weight_max));  // an absent limit: none
  EXPECT_TRUE(std::isinf(o.clip_gradient_min));
  EXPECT_FLOAT_EQ(o.clip_gradient_max, 2.0f);
  EXPECT_FLOAT_EQ(o.weight_decay_factor, 0.1f);
  EXPECT_TRUE(o.multiply_weight_decay_factor_by_learning_rate);

  // Every optimizer with its own fields and the options round-trips through both forms.
  using E = EmbeddingOptimizer;
  const std::vector<OptimizationParameters> every = {
      {.optimizer = E::kSgd, .learning_rate = 0.2f},
      {.optimizer = E::kAdagrad, .initial_accumulator = 0.5f},
      {.optimizer = E::kAdam,
       .beta1 = 0.7f,
       .beta2 = 0.8f,
       .epsilon = 0.01f,
       .use_sum_inside_sqrt = true,
       .lazy_adam = false},
      {.optimizer = E::kMomentum, .momentum = 0.3f, .use_nesterov = true},
      {.optimizer = E::kRmsProp, .epsilon = 0.01f, .momentum = 0.3f, .rho = 0.6f},
      {.optimizer = E::kCenteredRmsProp, .epsilon = 0.01f, .momentum = 0.3f, .rho = 0.6f},
      {.optimizer = E::kFtrl,
       .initial_accumulator = 0.5f,
       .learning_rate_power = -0.3f,
       .l1_regularization_strength = 0.01f,
       .l2_regularization_strength = 0.02f,
       .beta = 0.4f,
       .multiply_linear_by_learning_rate = true},
      {.optimizer = E::kProximalAdagrad,
       .initial_accumulator = 0.5f,
       .l1_regularization_strength = 0.01f,
       .l2_regularization_strength = 0.02f},
      {.optimizer = E::kAdadelta, .epsilon = 0.01f, .rho = 0.6f},
      {.optimizer = E::kProximalYogi,
       .initial_accumulator = 1e-6f,
       .beta1 = 0.7f,
       .beta2 = 0.9f,
       .epsilon = 0.01f,
       .l1_regularization_strength = 0.1f,
       .l2_regularization_strength = 0.2f},
  };
  EmbeddingConfiguration c = two_tables();
  for (OptimizationParameters o : every) {
    o.clip_gradient_min = -2;
    o.clip_weight_max = 3;
    o.weight_decay_factor = 0.05f;
    o.multiply_weight_decay_factor_by_learning_rate = true;
    c.tables[0].optimization_parameters = o;
    c.tables[1].optimization_parameters = {.optimizer = o.optimizer,
                                           .dynamic_learning_rate_tag = 0};
    c.tables[1].optimization_parameters.learning_rate = 0.01f;  // unused; TF does not write it
    EXPECT_EQ(EmbeddingConfiguration::from_text(c.to_text()), c) << optimizer_name(o.optimizer);
    EXPECT_EQ(EmbeddingConfiguration::from_serialized(c.serialized()), c);
    EXPECT_EQ(c.num_dynamic_learning_rates(), 1);
    c.validate(1, 4);
  }
}

TEST(EmbeddingConfig, MalformedAndUnsupportedInputIsInvalidArgument) {
  EXPECT_TESSEL_ERROR(EmbeddingConfiguration::from_text("table_descriptor { nme: \"x\" }"),
                      ErrorCode::kInvalidArgument, "nme");
  // A TF field tessel does not know.
  EXPECT_TESSEL_ERROR(EmbeddingConfiguration::from_text(
                          "table_descriptor { optimization_parameters { lion {} } }"),
                      ErrorCode::kInvalidArgument, "lion");
  EXPECT_TESSEL_ERROR(EmbeddingConfiguration::from_serialized("\xff\xff\xff"),
                      ErrorCode::kInvalidArgument, "not a TPUEmbeddingConfiguration");
  EXPECT_TESSEL_ERROR(combiner_from_name("max"), ErrorCode::kInvalidArgument, "'max'");
}

TEST(EmbeddingConfig, ValidationNamesTheOffendingValue) {
  const auto expect_invalid = [](auto change, const char* substring) {
    EmbeddingConfiguration c = two_tables();
    change(c);
    EXPECT_TESSEL_ERROR(c.validate(1, 4), ErrorCode::kInvalidArgument, substring);
  };
  expect_invalid([](auto& c) { c.tables[1].dimension = 0; }, "table 'items': dimension 0");
  expect_invalid([](auto& c) { c.tables[0].vocabulary_size = -3; }, "vocabulary_size -3");
  expect_invalid([](auto& c) { c.features[1].table_id = 5; }, "feature 'item': table_id 5");
  expect_invalid([](auto& c) { c.features[1].table_id = 0; }, "table 'items' has no feature");
  expect_invalid([](auto& c) { c.tables[1].name = "users"; }, "'users' is used twice");
  expect_invalid([](auto& c) { c.batch_size_per_device = 0; }, "batch_size_per_tensor_core 0");
  expect_invalid(
      [](auto& c) {
        c.features[0].input_shape = {3, 2};
      },
      "input_shape [3, 2] holds 6 bags, not the batch size per device 8");
  expect_invalid([](auto& c) { c.mode = EmbeddingMode::kUnspecified; }, "UNSPECIFIED");
  expect_invalid([](auto& c) { c.num_tensor_cores = 8; }, "num_tensor_cores 8");
  expect_invalid([](auto& c) { c.tables[0].optimization_parameters.learning_rate = -1; },
                 "(sgd): learning_rate (must be >= 0) -1");
  expect_invalid(
      [](auto& c) {
        c.tables[0].optimization_parameters.optimizer = EmbeddingOptimizer::kAdam;
        c.tables[0].optimization_parameters.beta2 = 1.0f;
      },
      "beta2");
  expect_invalid([](auto& c) { c.tables.clear(); }, "no table_descriptor");
}

// Each optimizer's hyper-parameters out of TF's ranges: InvalidArgument naming the table, the
// optimizer and the value (seed 102's validation error).
TEST(EmbeddingConfig, BadHyperParametersNameTheOptimizerAndValue) {
  using E = EmbeddingOptimizer;
  const auto expect_invalid = [](OptimizationParameters o, const char* substring) {
    EmbeddingConfiguration c = two_tables();
    c.tables[1].optimization_parameters = o;
    EXPECT_TESSEL_ERROR(c.validate(1, 4), ErrorCode::kInvalidArgument, substring);
  };
  expect_invalid({.optimizer = E::kMomentum, .momentum = -0.5f},
                 "table 'items' (momentum): momentum (must be >= 0) -0.5");
  expect_invalid({.optimizer = E::kRmsProp, .rho = 1.5f},
                 "table 'items' (rms_prop): rho (must be in [0, 1]) 1.5");
  expect_invalid({.optimizer = E::kCenteredRmsProp, .epsilon = 0.0f},
                 "(centered_rms_prop): epsilon (must be > 0) 0");
  expect_invalid({.optimizer = E::kFtrl, .learning_rate_power = 0.5f},
                 "(ftrl): learning_rate_power (must be <= 0) 0.5");
  expect_invalid({.optimizer = E::kFtrl, .learning_rate = 0.0f},
                 "(ftrl): learning_rate (must be > 0) 0");
  expect_invalid({.optimizer = E::kFtrl, .l1_regularization_strength = -1.0f},
                 "(ftrl): l1_regularization_strength (must be >= 0) -1");
  expect_invalid({.optimizer = E::kFtrl, .beta = -2.0f}, "(ftrl): beta (must be >= 0) -2");
  expect_invalid({.optimizer = E::kProximalAdagrad, .l2_regularization_strength = -1.0f},
                 "(proximal_adagrad): l2_regularization_strength (must be >= 0) -1");
  expect_invalid({.optimizer = E::kProximalAdagrad, .initial_accumulator = 0.0f},
                 "(proximal_adagrad): initial_accumulator (must be > 0) 0");
  expect_invalid({.optimizer = E::kAdadelta, .rho = -0.1f}, "(adadelta): rho");
  expect_invalid({.optimizer = E::kProximalYogi, .beta2 = 1.0f}, "(proximal_yogi): beta2");
  expect_invalid({.optimizer = E::kProximalYogi, .initial_accumulator = 0.0f},
                 "(proximal_yogi): initial_accumulator (must be > 0)");
  expect_invalid({.optimizer = E::kSgd, .clip_weight_min = 2, .clip_weight_max = 1},
                 "(sgd): clip_weight_min (above clip_weight_max 1) 2");
  expect_invalid({.optimizer = E::kAdam, .clip_gradient_min = 1, .clip_gradient_max = -1},
                 "(adam): clip_gradient_min (above clip_gradient_max -1) 1");
  expect_invalid({.optimizer = E::kAdagrad, .weight_decay_factor = -0.1f},
                 "(adagrad): weight_decay_factor (must be >= 0) -0.1");
  expect_invalid({.optimizer = E::kSgd, .dynamic_learning_rate_tag = 1},
                 "dynamic learning rate tag 0 is used by no table, but tag 1 is");
}

TEST(EmbeddingConfig, CorruptedBytesAreAnErrorNeverACrash) {
  // Bytes of a real configuration with a few flipped, and text with characters replaced: each
  // parses (then validates or throws tessel::Error) or throws tessel::Error.
  EmbeddingConfiguration c = EmbeddingConfiguration::from_text(kTfText);
  const std::string wire = c.serialized(), text = c.to_text();
  std::mt19937 rng(7);
  int parsed = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string bytes = i % 2 ? wire : text;
    for (int k = 0; k < 3; ++k) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    try {
      const EmbeddingConfiguration back = i % 2 ? EmbeddingConfiguration::from_serialized(bytes)
                                                : EmbeddingConfiguration::from_text(bytes);
      ++parsed;
      back.validate(1, 4);
    } catch (const Error&) {
    }
  }
  EXPECT_GT(parsed, 0);
}

// The rows of each device, in local order.
std::vector<std::vector<int64_t>> rows_by_device(const TableSharding& s, int64_t vocab) {
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(s.num_devices()));
  std::vector<RowPiece> pieces;
  for (int64_t r = 0; r < vocab; ++r) {
    pieces.clear();
    s.owners(r, pieces);
    EXPECT_EQ(pieces.size(), 1u);
    EXPECT_EQ(s.global_row(pieces[0].device, pieces[0].local_row), r);
    out[static_cast<size_t>(pieces[0].device)].push_back(r);
  }
  return out;
}

TEST(TableSharding, DivAndModAreTfsExample) {
  // tpu_embedding_configuration.proto: 13 ids over 5 hosts.
  const TableDescriptor t{.name = "t", .vocabulary_size = 13, .dimension = 2};
  const TableSharding div(t, ShardingStrategy::kDivDefault, 5);
  const TableSharding mod(t, ShardingStrategy::kMod, 5);
  EXPECT_EQ(rows_by_device(div, 13), (std::vector<std::vector<int64_t>>{
                                         {0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9, 10}, {11, 12}}));
  EXPECT_EQ(rows_by_device(mod, 13), (std::vector<std::vector<int64_t>>{
                                         {0, 5, 10}, {1, 6, 11}, {2, 7, 12}, {3, 8}, {4, 9}}));
  for (int d = 0; d < 5; ++d) EXPECT_EQ(div.local_rows(d), d < 3 ? 3 : 2);
  // Fewer rows than devices: trailing devices hold nothing.
  const TableSharding tiny({.name = "t", .vocabulary_size = 2, .dimension = 2},
                           ShardingStrategy::kDivDefault, 4);
  EXPECT_EQ(tiny.local_rows(3), 0);
  EXPECT_EQ(tiny.local_cols(3), 0);
}

TEST(TableSharding, ColumnAndTableWise) {
  const TableDescriptor t{
      .name = "t", .vocabulary_size = 5, .dimension = 7, .placement = TablePlacement::kColumnWise};
  const TableSharding cols(t, ShardingStrategy::kDivDefault, 3);
  std::vector<RowPiece> pieces;
  cols.owners(4, pieces);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].col_begin, 0);
  EXPECT_EQ(pieces[0].col_end, 3);
  EXPECT_EQ(pieces[2].col_begin, 5);
  EXPECT_EQ(pieces[2].col_end, 7);
  EXPECT_EQ(cols.local_rows(1), 5);

  TableDescriptor w = t;
  w.placement = TablePlacement::kTableWise;
  const TableSharding whole(w, ShardingStrategy::kDivDefault, 3, /*table_device=*/2);
  EXPECT_EQ(whole.local_rows(2), 5);
  EXPECT_EQ(whole.local_rows(0), 0);
  EXPECT_TESSEL_ERROR(TableSharding(w, ShardingStrategy::kMod, 3, 3), ErrorCode::kInvalidArgument,
                      "device 3");
}

}  // namespace
}  // namespace tessel
