// EmbeddingConfiguration: names, validation, and the conversions to and from TF's proto forms.
#include "tessel/embedding/embedding_config.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <cmath>
#include <set>

#include "core/errors.h"
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
constexpr std::string_view kOptimizerNames[] = {"sgd", "adagrad", "adam"};

// Collects the text parser's first error, "line:column: message".
class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (text.empty()) text = fmt::format("{}:{}: {}", line + 1, column + 1, message);
  }
  std::string text;
};

void to_proto(const OptimizationParameters& o, proto::OptimizationParametersProto& p) {
  p.mutable_learning_rate()->set_constant(o.learning_rate);
  switch (o.optimizer) {
    case EmbeddingOptimizer::kSgd:
      p.mutable_stochastic_gradient_descent();
      break;
    case EmbeddingOptimizer::kAdagrad:
      p.mutable_adagrad()->set_initial_accumulator(o.initial_accumulator);
      break;
    case EmbeddingOptimizer::kAdam: {
      auto* a = p.mutable_adam();
      a->set_beta1(o.beta1);
      a->set_beta2(o.beta2);
      a->set_epsilon(o.epsilon);
      a->set_use_sum_inside_sqrt(o.use_sum_inside_sqrt);
      break;
    }
  }
}

[[noreturn]] void unimplemented(const std::string& table, std::string_view what) {
  detail::throw_error(ErrorCode::kUnimplemented, kComponent, "table '{}': {} is not supported",
                      table, what);
}

OptimizationParameters from_proto(const proto::OptimizationParametersProto& p,
                                  const std::string& table) {
  if (p.has_clipping_limits()) unimplemented(table, "clipping_limits");
  if (p.has_gradient_clipping_limits()) unimplemented(table, "gradient_clipping_limits");
  if (p.weight_decay_factor() != 0) unimplemented(table, "weight_decay_factor");
  if (p.learning_rate().has_dynamic()) unimplemented(table, "a dynamic learning_rate");
  if (p.gradient_accumulation_status() == proto::GradientAccumulationStatusProto::DISABLED) {
    unimplemented(table, "gradient_accumulation_status DISABLED (tessel sums a row's gradients "
                         "first)");
  }
  OptimizationParameters o;
  if (p.has_learning_rate()) o.learning_rate = p.learning_rate().constant();
  switch (p.parameters_case()) {
    case proto::OptimizationParametersProto::kAdagrad:
      o.optimizer = EmbeddingOptimizer::kAdagrad;
      // proto3 cannot tell 0 from unset: 0 means TF's default.
      if (p.adagrad().initial_accumulator() != 0) {
        o.initial_accumulator = p.adagrad().initial_accumulator();
      }
      break;
    case proto::OptimizationParametersProto::kAdam:
      o.optimizer = EmbeddingOptimizer::kAdam;
      o.beta1 = p.adam().beta1();
      o.beta2 = p.adam().beta2();
      o.epsilon = p.adam().epsilon();
      o.use_sum_inside_sqrt = p.adam().use_sum_inside_sqrt();
      if (p.adam().use_non_lazy_adam()) {
        unimplemented(table, "use_non_lazy_adam (tessel's Adam updates only the rows a step "
                             "touched, TF's default)");
      }
      break;
    default:
      o.optimizer = EmbeddingOptimizer::kSgd;
  }
  return o;
}

ConfigProto to_proto(const EmbeddingConfiguration& c) {
  ConfigProto p;
  for (const TableDescriptor& t : c.tables) {
    TableProto* tp = p.add_table_descriptor();
    tp->set_name(t.name);
    tp->set_vocabulary_size(t.vocabulary_size);
    tp->set_dimension(t.dimension);
    to_proto(t.optimization_parameters, *tp->mutable_optimization_parameters());
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
    t.optimization_parameters = from_proto(tp.optimization_parameters(), tp.name());
    const int placement = tp.placement();
    if (placement < 0 || placement > static_cast<int>(TablePlacement::kDataParallel)) {
      detail::throw_invalid(kComponent, "table '{}': unknown placement {}", t.name, placement);
    }
    t.placement = static_cast<TablePlacement>(placement);
    t.combiner = tp.combiner().empty() ? EmbeddingCombiner::kMean
                                       : combiner_from_name(tp.combiner());
    c.tables.push_back(std::move(t));
  }
  for (const auto& fp : p.feature_descriptor()) {
    c.features.push_back({fp.name(), fp.table_id(), {fp.input_shape().begin(),
                                                     fp.input_shape().end()}});
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

void check_optimizer(const TableDescriptor& t) {
  const OptimizationParameters& o = t.optimization_parameters;
  const auto bad = [&](std::string_view what, float value) {
    detail::throw_invalid(kComponent, "table '{}': {} {} is out of range", t.name, what, value);
  };
  if (!std::isfinite(o.learning_rate) || o.learning_rate < 0) bad("learning_rate", o.learning_rate);
  if (o.optimizer == EmbeddingOptimizer::kAdagrad && !(o.initial_accumulator > 0)) {
    bad("initial_accumulator (must be > 0)", o.initial_accumulator);
  }
  if (o.optimizer == EmbeddingOptimizer::kAdam) {
    if (!(o.beta1 >= 0 && o.beta1 < 1)) bad("beta1 (must be in [0, 1))", o.beta1);
    if (!(o.beta2 >= 0 && o.beta2 < 1)) bad("beta2 (must be in [0, 1))", o.beta2);
    if (!(o.epsilon > 0)) bad("epsilon (must be > 0)", o.epsilon);
  }
}

}  // namespace

std::string_view embedding_mode_name(EmbeddingMode mode) { return name_of(mode, kModeNames); }
std::string_view sharding_strategy_name(ShardingStrategy s) { return name_of(s, kStrategyNames); }
std::string_view table_placement_name(TablePlacement p) { return name_of(p, kPlacementNames); }
std::string_view combiner_name(EmbeddingCombiner c) { return name_of(c, kCombinerNames); }
std::string_view optimizer_name(EmbeddingOptimizer o) { return name_of(o, kOptimizerNames); }

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
    detail::throw_invalid(kComponent, "mode is UNSPECIFIED (INFERENCE, TRAINING or "
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
    check_optimizer(t);
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
    detail::throw_invalid(kComponent, "from_serialized: {} bytes are not a "
                                      "TPUEmbeddingConfiguration", bytes.size());
  }
  return from_proto(p);
}

}  // namespace tessel
