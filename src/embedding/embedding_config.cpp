// EmbeddingConfiguration: names, validation, and the conversions to and from TF's proto forms.
#include "tessel/embedding/embedding_config.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/errors.h"
#include "embedding/optimization_proto.h"
#include "tessel/proto/embedding.pb.h"

namespace tessel {
namespace {

constexpr const char* kComponent = "EmbeddingConfiguration";
using ConfigProto = proto::TPUEmbeddingConfigurationProto;
using TableProto = ConfigProto::TableDescriptor;

template <typename Enum, size_t N>
std::string_view name_of(Enum value, const std::string_view (&names)[N]) {
  const auto i = static_cast<size_t>(value);
  return i < N ? names[i] : std::string_view("?");
}

constexpr std::string_view kModeNames[] = {"UNSPECIFIED", "INFERENCE", "TRAINING",
                                           "BACKWARD_PASS_ONLY"};
constexpr std::string_view kStrategyNames[] = {"DIV_DEFAULT", "MOD"};
constexpr std::string_view kPlacementNames[] = {"ROW_WISE", "TABLE_WISE", "COLUMN_WISE",
                                                "DATA_PARALLEL"};
constexpr std::string_view kCombinerNames[] = {"sum", "mean", "sqrtn"};

// Collects the text parser's first error, "line:column: message".
class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (text.empty()) text = fmt::format("{}:{}: {}", line + 1, column + 1, message);
  }
  std::string text;
};

ConfigProto to_proto(const EmbeddingConfiguration& c) {
  ConfigProto p;
  for (const TableDescriptor& t : c.tables) {
    TableProto* tp = p.add_table_descriptor();
    tp->set_name(t.name);
    tp->set_vocabulary_size(t.vocabulary_size);
    tp->set_dimension(t.dimension);
    detail::optimization_to_proto(t.optimization_parameters,
                                  *tp->mutable_optimization_parameters());
    tp->set_placement(static_cast<TableProto::Placement>(t.placement));
    tp->set_combiner(std::string(combiner_name(t.combiner)));
  }
  for (const FeatureDescriptor& f : c.features) {
    auto* fp = p.add_feature_descriptor();
    fp->set_name(f.name);
    fp->set_table_id(f.table_id);
    for (int32_t d : f.input_shape) fp->add_input_shape(d);
  }
  p.set_mode(static_cast<ConfigProto::Mode>(c.mode));
  p.set_batch_size_per_tensor_core(c.batch_size_per_device);
  p.set_sharding_strategy(static_cast<ConfigProto::ShardingStrategy>(c.sharding_strategy));
  p.set_num_hosts(c.num_hosts);
  p.set_num_tensor_cores(c.num_tensor_cores);
  return p;
}

EmbeddingConfiguration from_proto(const ConfigProto& p) {
  if (p.spmd_sharding().enabled()) {
    detail::throw_error(ErrorCode::kUnimplemented, kComponent, "spmd_sharding is not supported");
  }
  EmbeddingConfiguration c;
  for (const TableProto& tp : p.table_descriptor()) {
    TableDescriptor t;
    t.name = tp.name();
    t.vocabulary_size = tp.vocabulary_size();
    t.dimension = tp.dimension();
    t.optimization_parameters =
        detail::optimization_from_proto(tp.optimization_parameters(), tp.name());
    const int placement = tp.placement();
    if (placement < 0 || placement > static_cast<int>(TablePlacement::kDataParallel)) {
      detail::throw_invalid(kComponent, "table '{}': unknown placement {}", t.name, placement);
    }
    t.placement = static_cast<TablePlacement>(placement);
    t.combiner =
        tp.combiner().empty() ? EmbeddingCombiner::kMean : combiner_from_name(tp.combiner());
    c.tables.push_back(std::move(t));
  }
  for (const auto& fp : p.feature_descriptor()) {
    c.features.push_back(
        {fp.name(), fp.table_id(), {fp.input_shape().begin(), fp.input_shape().end()}});
  }
  const int mode = p.mode(), strategy = p.sharding_strategy();
  if (mode < 0 || mode > static_cast<int>(EmbeddingMode::kBackwardPassOnly)) {
    detail::throw_invalid(kComponent, "unknown mode {}", mode);
  }
  if (strategy < 0 || strategy > static_cast<int>(ShardingStrategy::kMod)) {
    detail::throw_invalid(kComponent, "unknown sharding_strategy {}", strategy);
  }
  c.mode = static_cast<EmbeddingMode>(mode);
  c.sharding_strategy = static_cast<ShardingStrategy>(strategy);
  c.batch_size_per_device = p.batch_size_per_tensor_core();
  c.num_hosts = p.num_hosts();
  c.num_tensor_cores = p.num_tensor_cores();
  return c;
}

}  // namespace

std::string_view embedding_mode_name(EmbeddingMode mode) { return name_of(mode, kModeNames); }
std::string_view sharding_strategy_name(ShardingStrategy s) { return name_of(s, kStrategyNames); }
std::string_view table_placement_name(TablePlacement p) { return name_of(p, kPlacementNames); }
std::string_view combiner_name(EmbeddingCombiner c) { return name_of(c, kCombinerNames); }

EmbeddingCombiner combiner_from_name(std::string_view name) {
  for (size_t i = 0; i < std::size(kCombinerNames); ++i) {
    if (kCombinerNames[i] == name) return static_cast<EmbeddingCombiner>(i);
  }
  detail::throw_invalid(kComponent, "unknown combiner '{}' (sum, mean or sqrtn)", name);
}

int64_t EmbeddingConfiguration::bags_per_device(int feature) const {
  const FeatureDescriptor& f = features.at(static_cast<size_t>(feature));
  if (f.input_shape.empty()) return batch_size_per_device;
  int64_t bags = 1;
  for (int32_t d : f.input_shape) bags *= d;
  return bags;
}

void EmbeddingConfiguration::validate(int system_hosts, int system_devices) const {
  if (tables.empty()) detail::throw_invalid(kComponent, "no table_descriptor");
  if (features.empty()) detail::throw_invalid(kComponent, "no feature_descriptor");
  if (mode == EmbeddingMode::kUnspecified) {
    detail::throw_invalid(kComponent,
                          "mode is UNSPECIFIED (INFERENCE, TRAINING or "
                          "BACKWARD_PASS_ONLY)");
  }
  if (batch_size_per_device <= 0) {
    detail::throw_invalid(kComponent, "batch_size_per_tensor_core {} must be > 0",
                          batch_size_per_device);
  }
  if (num_hosts != 0 && num_hosts != system_hosts) {
    detail::throw_invalid(kComponent, "num_hosts {} but the system has {} hosts", num_hosts,
                          system_hosts);
  }
  if (num_tensor_cores != 0 && num_tensor_cores != system_devices) {
    detail::throw_invalid(kComponent, "num_tensor_cores {} but the system has {} devices",
                          num_tensor_cores, system_devices);
  }
  std::set<std::string> names;
  for (const TableDescriptor& t : tables) {
    if (t.name.empty()) detail::throw_invalid(kComponent, "a table has an empty name");
    if (!names.insert(t.name).second) {
      detail::throw_invalid(kComponent, "table name '{}' is used twice", t.name);
    }
    if (t.vocabulary_size <= 0) {
      detail::throw_invalid(kComponent, "table '{}': vocabulary_size {} must be > 0", t.name,
                            t.vocabulary_size);
    }
    if (t.dimension <= 0) {
      detail::throw_invalid(kComponent, "table '{}': dimension {} must be > 0", t.name,
                            t.dimension);
    }
    detail::check_optimization_parameters(t.optimization_parameters, t.name);
    if (!t.optimization_parameters.gradient_accumulation &&
        t.placement == TablePlacement::kDataParallel) {
      detail::throw_error(ErrorCode::kUnimplemented, kComponent,
                          "table '{}': gradient_accumulation_status DISABLED on a DATA_PARALLEL "
                          "table (its gradient is all-reduced: no device's gradient is applied "
                          "alone)",
                          t.name);
    }
  }
  std::vector<bool> used(tables.size(), false);
  std::set<std::string> feature_names;
  for (size_t i = 0; i < features.size(); ++i) {
    const FeatureDescriptor& f = features[i];
    if (f.name.empty()) detail::throw_invalid(kComponent, "feature {} has an empty name", i);
    if (!feature_names.insert(f.name).second) {
      detail::throw_invalid(kComponent, "feature name '{}' is used twice", f.name);
    }
    if (f.table_id < 0 || static_cast<size_t>(f.table_id) >= tables.size()) {
      detail::throw_invalid(kComponent, "feature '{}': table_id {} is not one of the {} tables",
                            f.name, f.table_id, tables.size());
    }
    used[static_cast<size_t>(f.table_id)] = true;
    if (!f.input_shape.empty() && bags_per_device(static_cast<int>(i)) != batch_size_per_device) {
      detail::throw_invalid(kComponent,
                            "feature '{}': input_shape [{}] holds {} bags, not the batch size "
                            "per device {}",
                            f.name, fmt::join(f.input_shape, ", "),
                            bags_per_device(static_cast<int>(i)), batch_size_per_device);
    }
  }
  for (size_t t = 0; t < tables.size(); ++t) {
    if (!used[t]) detail::throw_invalid(kComponent, "table '{}' has no feature", tables[t].name);
  }
  // TF: every tag in [0, number of distinct tags) is used (none skipped).
  std::vector<bool> tag_used(static_cast<size_t>(num_dynamic_learning_rates()), false);
  for (const TableDescriptor& t : tables) {
    const int32_t tag = t.optimization_parameters.dynamic_learning_rate_tag;
    if (tag >= 0) tag_used[static_cast<size_t>(tag)] = true;
  }
  for (size_t tag = 0; tag < tag_used.size(); ++tag) {
    if (!tag_used[tag]) {
      detail::throw_invalid(kComponent,
                            "dynamic learning rate tag {} is used by no table, but "
                            "tag {} is (the tags must be 0, 1, ... without a gap)",
                            tag, tag_used.size() - 1);
    }
  }
}

int EmbeddingConfiguration::num_dynamic_learning_rates() const {
  int n = 0;
  for (const TableDescriptor& t : tables) {
    n = std::max(n, t.optimization_parameters.dynamic_learning_rate_tag + 1);
  }
  return n;
}

std::string EmbeddingConfiguration::to_text() const {
  std::string text;
  google::protobuf::TextFormat::PrintToString(to_proto(*this), &text);
  return text;
}

EmbeddingConfiguration EmbeddingConfiguration::from_text(std::string_view text) {
  ConfigProto p;
  FirstError errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &p)) {
    detail::throw_invalid(kComponent, "from_text: not a TPUEmbeddingConfiguration: {}",
                          errors.text);
  }
  return from_proto(p);
}

std::string EmbeddingConfiguration::serialized() const {
  return to_proto(*this).SerializeAsString();
}

EmbeddingConfiguration EmbeddingConfiguration::from_serialized(std::string_view bytes) {
  ConfigProto p;
  if (!p.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    detail::throw_invalid(kComponent,
                          "from_serialized: {} bytes are not a "
                          "TPUEmbeddingConfiguration",
                          bytes.size());
  }
  return from_proto(p);
}

}  // namespace tessel
