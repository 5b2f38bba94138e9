// The embedding configuration: what ConfigureTPUEmbedding (seed 102, step 6) takes. The fields
// of TF's TPUEmbeddingConfiguration and OptimizationParameters that apply to tessel, as values,
// with TF's text and binary proto forms (proto/embedding.proto keeps TF's field numbers).
//
//   EmbeddingConfiguration config = EmbeddingConfiguration::from_text(R"(
//     table_descriptor { name: "users" vocabulary_size: 1000 dimension: 16
//                        optimization_parameters { learning_rate { constant: 0.1 }
//                                                  adagrad {} } }
//     feature_descriptor { name: "user_id" table_id: 0 input_shape: 32 }
//     mode: TRAINING batch_size_per_tensor_core: 32 sharding_strategy: MOD)");
//   config.validate(/*num_devices=*/4);
//   config.to_text() round-trips; config.serialized() is TF's wire form of the same fields.
//
// Sharding strategies (TF's definition, tf.nn.embedding_lookup's partition strategies): a table
// of V rows over N devices gives each of the first V % N devices one row more than V / N.
//   kDivDefault: device s holds a contiguous range of rows (13 rows on 5: [0,1,2] [3,4,5] [6,7,8]
//                [9,10] [11,12]);
//   kMod:        row r is on device r % N, at local row r / N (13 on 5: [0,5,10] [1,6,11] ...).
// Placements (tessel's, per table; TF shards every table row-wise): row-wise (by the strategy),
// table-wise (the whole table on one device: the least loaded so far, in table order),
// column-wise (columns split like DIV rows over every device), data-parallel (a full copy on
// every device, the gradient all-reduced densely: TorchRec's data_parallel, the benchmark's
// baseline).
//
// Differences from TF: batch_size_per_tensor_core is the number of bags each device looks up
// per feature (TF: per TensorCore); num_hosts / num_tensor_cores, when set, must match the
// system; TF fields tessel accepts but does not implement with a non-default value (SPMD
// sharding; gradient accumulation DISABLED on a DATA_PARALLEL table) are kUnimplemented naming
// them, and any other TF field
// (ProximalYogi, ...) does not parse (kInvalidArgument naming it). docs/embedding.md has the list.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/embedding/optimization_parameters.h"

namespace tessel {

enum class EmbeddingMode { kUnspecified, kInference, kTraining, kBackwardPassOnly };
enum class ShardingStrategy { kDivDefault, kMod };
enum class TablePlacement { kRowWise, kTableWise, kColumnWise, kDataParallel };
enum class EmbeddingCombiner { kSum, kMean, kSqrtn };

// TF's names: "TRAINING", "DIV_DEFAULT", "ROW_WISE", "mean", "adagrad", ...
std::string_view embedding_mode_name(EmbeddingMode mode);
std::string_view sharding_strategy_name(ShardingStrategy strategy);
std::string_view table_placement_name(TablePlacement placement);
std::string_view combiner_name(EmbeddingCombiner combiner);
// The inverse of combiner_name; anything else: kInvalidArgument naming it.
EmbeddingCombiner combiner_from_name(std::string_view name);

struct TableDescriptor {
  std::string name;
  int64_t vocabulary_size = 0;
  int32_t dimension = 0;
  OptimizationParameters optimization_parameters{};
  TablePlacement placement = TablePlacement::kRowWise;
  EmbeddingCombiner combiner = EmbeddingCombiner::kMean;

  friend bool operator==(const TableDescriptor&, const TableDescriptor&) = default;
};

struct FeatureDescriptor {
  std::string name;
  int32_t table_id = 0;              // index into EmbeddingConfiguration::tables
  std::vector<int32_t> input_shape;  // bags per device (product); empty: the batch size

  friend bool operator==(const FeatureDescriptor&, const FeatureDescriptor&) = default;
};

struct EmbeddingConfiguration {
  std::vector<TableDescriptor> tables;
  std::vector<FeatureDescriptor> features;
  EmbeddingMode mode = EmbeddingMode::kTraining;
  int32_t batch_size_per_device = 0;  // TF: batch_size_per_tensor_core
  ShardingStrategy sharding_strategy = ShardingStrategy::kDivDefault;
  int32_t num_hosts = 0;         // 0: any; else must equal the system's host count
  int32_t num_tensor_cores = 0;  // 0: any; else must equal the number of devices

  // Bags each device looks up for `feature` per step (see FeatureDescriptor::input_shape).
  int64_t bags_per_device(int feature) const;
  // The learning rates apply_gradients takes per step: 1 + the largest table's
  // dynamic_learning_rate_tag (0: every table's learning rate is constant).
  int num_dynamic_learning_rates() const;

  // Checks the configuration for a system of `num_hosts` hosts and `num_devices` devices:
  // kInvalidArgument naming the table or feature and the offending value (no tables, an empty
  // or repeated name, vocabulary_size or dimension <= 0, an unknown table_id, a table no
  // feature uses, a batch size <= 0, an input_shape whose product is not the batch size, mode
  // UNSPECIFIED, num_hosts / num_tensor_cores other than the system's; an optimizer's parameter
  // out of range or dynamic learning rate tags that skip one: naming the table, the optimizer
  // and the value).
  void validate(int num_hosts, int num_devices) const;

  // TF's text form (TextFormat of TPUEmbeddingConfiguration) and wire form. Malformed input or
  // a field tessel does not know: kInvalidArgument quoting the parser; a known TF field set to
  // what tessel does not implement: kUnimplemented naming it. Parsing does not validate.
  std::string to_text() const;
  static EmbeddingConfiguration from_text(std::string_view text);
  std::string serialized() const;
  static EmbeddingConfiguration from_serialized(std::string_view bytes);

  friend bool operator==(const EmbeddingConfiguration&, const EmbeddingConfiguration&) = default;
};

}  // namespace tessel
