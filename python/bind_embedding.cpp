// Bindings of the embedding layer: the configuration (TF's TPUEmbeddingConfiguration fields and
// names), TableSharding, ShardedEmbedding and the lifecycle step configure_embedding.
//
// Ids come as RaggedIds(values, row_splits, weights=None) of array-likes; activations and
// tables come back as tessel.Tensor (np.asarray works). Timeouts are seconds. Calls that run
// collectives release the GIL.
#include <limits>
#include <optional>

#include "casters.h"
#include "tessel/embedding/embedding_config.h"
#include "tessel/embedding/embedding_system.h"
#include "tessel/embedding/sharded_embedding.h"
#include "tessel/embedding/table_sharding.h"
#include "tessel/runtime/runtime.h"
#include "tessel/system/system.h"

namespace tessel::python {
namespace {

using Release = py::call_guard<py::gil_scoped_release>;

EmbeddingOptions embedding_options(double timeout, uint64_t seed) {
  return {seconds_arg(timeout, "timeout", "ShardedEmbedding"), seed};
}

// [[array-like]] -> [[Tensor]] (inputs and gradients per feature and local device).
std::vector<std::vector<Tensor>> tensor_lists(const std::vector<std::vector<py::object>>& in) {
  std::vector<std::vector<Tensor>> out;
  for (const auto& row : in) {
    auto& r = out.emplace_back();
    for (const py::object& o : row) r.push_back(to_tensor(o));
  }
  return out;
}

void bind_config(py::module_& m) {
  py::enum_<EmbeddingMode>(m, "EmbeddingMode")
      .value("UNSPECIFIED", EmbeddingMode::kUnspecified)
      .value("INFERENCE", EmbeddingMode::kInference)
      .value("TRAINING", EmbeddingMode::kTraining)
      .value("BACKWARD_PASS_ONLY", EmbeddingMode::kBackwardPassOnly);
  py::enum_<ShardingStrategy>(m, "ShardingStrategy")
      .value("DIV_DEFAULT", ShardingStrategy::kDivDefault)
      .value("MOD", ShardingStrategy::kMod);
  py::enum_<TablePlacement>(m, "TablePlacement")
      .value("ROW_WISE", TablePlacement::kRowWise)
      .value("TABLE_WISE", TablePlacement::kTableWise)
      .value("COLUMN_WISE", TablePlacement::kColumnWise)
      .value("DATA_PARALLEL", TablePlacement::kDataParallel);
  py::enum_<EmbeddingCombiner>(m, "EmbeddingCombiner")
      .value("SUM", EmbeddingCombiner::kSum)
      .value("MEAN", EmbeddingCombiner::kMean)
      .value("SQRTN", EmbeddingCombiner::kSqrtn);
  py::enum_<EmbeddingOptimizer>(m, "EmbeddingOptimizer")
      .value("SGD", EmbeddingOptimizer::kSgd)
      .value("ADAGRAD", EmbeddingOptimizer::kAdagrad)
      .value("ADAM", EmbeddingOptimizer::kAdam)
      .value("MOMENTUM", EmbeddingOptimizer::kMomentum)
      .value("RMS_PROP", EmbeddingOptimizer::kRmsProp)
      .value("CENTERED_RMS_PROP", EmbeddingOptimizer::kCenteredRmsProp)
      .value("FTRL", EmbeddingOptimizer::kFtrl)
      .value("PROXIMAL_ADAGRAD", EmbeddingOptimizer::kProximalAdagrad)
      .value("ADADELTA", EmbeddingOptimizer::kAdadelta)
      .value("PROXIMAL_YOGI", EmbeddingOptimizer::kProximalYogi);
  m.def("embedding_mode_name", &embedding_mode_name, py::arg("mode"));
  m.def("sharding_strategy_name", &sharding_strategy_name, py::arg("strategy"));
  m.def("table_placement_name", &table_placement_name, py::arg("placement"));
  m.def("combiner_name", &combiner_name, py::arg("combiner"));
  m.def("optimizer_name", &optimizer_name, py::arg("optimizer"));
  m.def("combiner_from_name", &combiner_from_name, py::arg("name"));

  py::class_<OptimizationParameters> params(m, "OptimizationParameters", R"doc(
TF's OptimizationParameters: the optimizer (EmbeddingOptimizer) and its hyper-parameters under
TF's names, and the options of every optimizer (clip_gradient_min/max, clip_weight_min/max,
weight_decay_factor, multiply_weight_decay_factor_by_learning_rate, dynamic_learning_rate_tag).
See include/tessel/embedding/optimization_parameters.h.)doc");
  // Every field, by keyword (the first seven also by position, as before).
  constexpr float kInf = std::numeric_limits<float>::infinity();
  params.def(
      py::init([](EmbeddingOptimizer optimizer, float learning_rate, float initial_accumulator,
                  float beta1, float beta2, float epsilon, bool use_sum_inside_sqrt, bool lazy_adam,
                  float momentum, bool use_nesterov, float rho, float learning_rate_power,
                  float l1_regularization_strength, float l2_regularization_strength, float beta,
                  bool multiply_linear_by_learning_rate, float clip_gradient_min,
                  float clip_gradient_max, float clip_weight_min, float clip_weight_max,
                  float weight_decay_factor, bool multiply_weight_decay_factor_by_learning_rate,
                  int32_t dynamic_learning_rate_tag, bool gradient_accumulation) {
        return OptimizationParameters{optimizer,
                                      learning_rate,
                                      initial_accumulator,
                                      beta1,
                                      beta2,
                                      epsilon,
                                      use_sum_inside_sqrt,
                                      lazy_adam,
                                      momentum,
                                      use_nesterov,
                                      rho,
                                      learning_rate_power,
                                      l1_regularization_strength,
                                      l2_regularization_strength,
                                      beta,
                                      multiply_linear_by_learning_rate,
                                      clip_gradient_min,
                                      clip_gradient_max,
                                      clip_weight_min,
                                      clip_weight_max,
                                      weight_decay_factor,
                                      multiply_weight_decay_factor_by_learning_rate,
                                      dynamic_learning_rate_tag,
                                      gradient_accumulation};
      }),
      py::arg("optimizer") = EmbeddingOptimizer::kSgd, py::arg("learning_rate") = 0.01f,
      py::arg("initial_accumulator") = 0.1f, py::arg("beta1") = 0.9f, py::arg("beta2") = 0.999f,
      py::arg("epsilon") = 1e-8f, py::arg("use_sum_inside_sqrt") = false,
      py::arg("lazy_adam") = true, py::arg("momentum") = 0.0f, py::arg("use_nesterov") = false,
      py::arg("rho") = 0.9f, py::arg("learning_rate_power") = -0.5f,
      py::arg("l1_regularization_strength") = 0.0f, py::arg("l2_regularization_strength") = 0.0f,
      py::arg("beta") = 0.0f, py::arg("multiply_linear_by_learning_rate") = false,
      py::arg("clip_gradient_min") = -kInf, py::arg("clip_gradient_max") = kInf,
      py::arg("clip_weight_min") = -kInf, py::arg("clip_weight_max") = kInf,
      py::arg("weight_decay_factor") = 0.0f,
      py::arg("multiply_weight_decay_factor_by_learning_rate") = false,
      py::arg("dynamic_learning_rate_tag") = -1, py::arg("gradient_accumulation") = true);
#define TESSEL_FIELD(name) params.def_readwrite(#name, &OptimizationParameters::name)
  TESSEL_FIELD(optimizer);
  TESSEL_FIELD(learning_rate);
  TESSEL_FIELD(initial_accumulator);
  TESSEL_FIELD(beta1);
  TESSEL_FIELD(beta2);
  TESSEL_FIELD(epsilon);
  TESSEL_FIELD(use_sum_inside_sqrt);
  TESSEL_FIELD(lazy_adam);
  TESSEL_FIELD(momentum);
  TESSEL_FIELD(use_nesterov);
  TESSEL_FIELD(rho);
  TESSEL_FIELD(learning_rate_power);
  TESSEL_FIELD(l1_regularization_strength);
  TESSEL_FIELD(l2_regularization_strength);
  TESSEL_FIELD(beta);
  TESSEL_FIELD(multiply_linear_by_learning_rate);
  TESSEL_FIELD(clip_gradient_min);
  TESSEL_FIELD(clip_gradient_max);
  TESSEL_FIELD(clip_weight_min);
  TESSEL_FIELD(clip_weight_max);
  TESSEL_FIELD(weight_decay_factor);
  TESSEL_FIELD(multiply_weight_decay_factor_by_learning_rate);
  TESSEL_FIELD(dynamic_learning_rate_tag);
  TESSEL_FIELD(gradient_accumulation);
#undef TESSEL_FIELD
  params.def(py::self == py::self);

  py::class_<TableDescriptor>(m, "TableDescriptor")
      .def(py::init([](std::string name, int64_t vocabulary_size, int32_t dimension,
                       OptimizationParameters optimization_parameters, TablePlacement placement,
                       EmbeddingCombiner combiner) {
             return TableDescriptor{std::move(name),         vocabulary_size, dimension,
                                    optimization_parameters, placement,       combiner};
           }),
           py::arg("name"), py::arg("vocabulary_size"), py::arg("dimension"),
           py::arg("optimization_parameters") = OptimizationParameters{},
           py::arg("placement") = TablePlacement::kRowWise,
           py::arg("combiner") = EmbeddingCombiner::kMean)
      .def_readwrite("name", &TableDescriptor::name)
      .def_readwrite("vocabulary_size", &TableDescriptor::vocabulary_size)
      .def_readwrite("dimension", &TableDescriptor::dimension)
      .def_readwrite("optimization_parameters", &TableDescriptor::optimization_parameters)
      .def_readwrite("placement", &TableDescriptor::placement)
      .def_readwrite("combiner", &TableDescriptor::combiner)
      .def(py::self == py::self);

  py::class_<FeatureDescriptor>(m, "FeatureDescriptor")
      .def(py::init([](std::string name, int32_t table_id, std::vector<int32_t> input_shape) {
             return FeatureDescriptor{std::move(name), table_id, std::move(input_shape)};
           }),
           py::arg("name"), py::arg("table_id"), py::arg("input_shape") = std::vector<int32_t>{})
      .def_readwrite("name", &FeatureDescriptor::name)
      .def_readwrite("table_id", &FeatureDescriptor::table_id)
      .def_readwrite("input_shape", &FeatureDescriptor::input_shape)
      .def(py::self == py::self);

  py::class_<EmbeddingConfiguration>(m, "EmbeddingConfiguration", R"doc(
TF's TPUEmbeddingConfiguration (the fields tessel implements): tables, features, mode,
batch_size_per_device (TF: batch_size_per_tensor_core), sharding_strategy. from_text / to_text
are TF's text proto form, serialized / from_serialized its wire form.)doc")
      .def(py::init([](std::vector<TableDescriptor> tables, std::vector<FeatureDescriptor> features,
                       EmbeddingMode mode, int32_t batch_size_per_device,
                       ShardingStrategy sharding_strategy, int32_t num_hosts,
                       int32_t num_tensor_cores) {
             return EmbeddingConfiguration{std::move(tables),     std::move(features), mode,
                                           batch_size_per_device, sharding_strategy,   num_hosts,
                                           num_tensor_cores};
           }),
           py::arg("tables") = std::vector<TableDescriptor>{},
           py::arg("features") = std::vector<FeatureDescriptor>{},
           py::arg("mode") = EmbeddingMode::kTraining, py::arg("batch_size_per_device") = 0,
           py::arg("sharding_strategy") = ShardingStrategy::kDivDefault, py::arg("num_hosts") = 0,
           py::arg("num_tensor_cores") = 0)
      .def_readwrite("tables", &EmbeddingConfiguration::tables)
      .def_readwrite("features", &EmbeddingConfiguration::features)
      .def_readwrite("mode", &EmbeddingConfiguration::mode)
      .def_readwrite("batch_size_per_device", &EmbeddingConfiguration::batch_size_per_device)
      .def_readwrite("sharding_strategy", &EmbeddingConfiguration::sharding_strategy)
      .def_readwrite("num_hosts", &EmbeddingConfiguration::num_hosts)
      .def_readwrite("num_tensor_cores", &EmbeddingConfiguration::num_tensor_cores)
      .def("bags_per_device", &EmbeddingConfiguration::bags_per_device, py::arg("feature"))
      .def("num_dynamic_learning_rates", &EmbeddingConfiguration::num_dynamic_learning_rates)
      .def("validate", &EmbeddingConfiguration::validate, py::arg("num_hosts"),
           py::arg("num_devices"))
      .def("to_text", &EmbeddingConfiguration::to_text)
      .def_static(
          "from_text",
          [](const std::string& text) { return EmbeddingConfiguration::from_text(text); },
          py::arg("text"))
      .def("serialized", [](const EmbeddingConfiguration& c) { return py::bytes(c.serialized()); })
      .def_static(
          "from_serialized",
          [](const py::bytes& b) {
            return EmbeddingConfiguration::from_serialized(std::string(b));
          },
          py::arg("data"))
      .def(py::self == py::self)
      .def("__repr__", [](const EmbeddingConfiguration& c) { return c.to_text(); });

  py::class_<RowPiece>(m, "RowPiece")
      .def_readonly("device", &RowPiece::device)
      .def_readonly("local_row", &RowPiece::local_row)
      .def_readonly("col_begin", &RowPiece::col_begin)
      .def_readonly("col_end", &RowPiece::col_end);
  py::class_<TableSharding>(m, "TableSharding")
      .def(py::init<const TableDescriptor&, ShardingStrategy, int, int>(), py::arg("table"),
           py::arg("strategy"), py::arg("num_devices"), py::arg("table_device") = 0)
      .def_property_readonly("placement", &TableSharding::placement)
      .def_property_readonly("num_devices", &TableSharding::num_devices)
      .def("local_rows", &TableSharding::local_rows, py::arg("device"))
      .def("local_cols", &TableSharding::local_cols, py::arg("device"))
      .def("col_begin", &TableSharding::col_begin, py::arg("device"))
      .def("global_row", &TableSharding::global_row, py::arg("device"), py::arg("local_row"))
      .def(
          "owners",
          [](const TableSharding& s, int64_t row) {
            std::vector<RowPiece> out;
            s.owners(row, out);
            return out;
          },
          py::arg("row"));
}

void bind_sharded(py::module_& m) {
  py::class_<RaggedIds>(m, "RaggedIds", "One feature's ids on one device, as CSR.")
      .def(py::init([](const py::object& values, const py::object& row_splits,
                       const py::object& weights) {
             return RaggedIds{to_tensor(values), to_tensor(row_splits),
                              weights.is_none() ? Tensor() : to_tensor(weights)};
           }),
           py::arg("values"), py::arg("row_splits"), py::arg("weights") = py::none())
      .def_readonly("values", &RaggedIds::values)
      .def_readonly("row_splits", &RaggedIds::row_splits)
      .def_readonly("weights", &RaggedIds::weights);

  py::class_<EmbeddingStepStats>(m, "EmbeddingStepStats")
      .def_readonly("ids", &EmbeddingStepStats::ids)
      .def_readonly("unique_ids", &EmbeddingStepStats::unique_ids)
      .def_readonly("bytes_sent", &EmbeddingStepStats::bytes_sent)
      .def_readonly("collectives", &EmbeddingStepStats::collectives);

  py::class_<ShardedEmbedding, std::shared_ptr<ShardedEmbedding>>(m, "ShardedEmbedding", R"doc(
The tables of an EmbeddingConfiguration sharded over a mesh's devices. lookup(inputs) takes
inputs[f][i] (RaggedIds of feature f on the mesh's i-th local device) and returns activations
[f][i] of shape [bags, dim] (in BACKWARD_PASS_ONLY mode: [], no forward pass);
apply_gradients(gradients, learning_rates=[]) applies the tables' optimizers to the rows the last
lookup touched (learning_rates[tag]: the step's dynamic learning rates).
See include/tessel/embedding/sharded_embedding.h.)doc")
      .def(py::init([](const EmbeddingConfiguration& config, const Mesh& mesh, Runtime* runtime,
                       double timeout, uint64_t seed) {
             Runtime& rt = runtime ? *runtime : Runtime::global();
             return std::make_shared<ShardedEmbedding>(config, mesh, rt,
                                                       embedding_options(timeout, seed));
           }),
           py::arg("config"), py::arg("mesh"), py::arg("runtime") = nullptr,
           py::arg("timeout") = 60.0, py::arg("seed") = 0, py::keep_alive<1, 4>())
      .def_property_readonly("config", &ShardedEmbedding::config)
      .def_property_readonly("mesh", &ShardedEmbedding::mesh)
      .def_property_readonly("num_devices", &ShardedEmbedding::num_devices)
      .def("table_index", &ShardedEmbedding::table_index, py::arg("table"))
      .def("feature_index", &ShardedEmbedding::feature_index, py::arg("feature"))
      .def("sharding", &ShardedEmbedding::sharding, py::arg("table"), py::return_value_policy::copy)
      .def("lookup", &ShardedEmbedding::lookup, py::arg("inputs"), Release())
      .def(
          "apply_gradients",
          [](ShardedEmbedding& e, const std::vector<std::vector<py::object>>& gradients,
             const std::vector<float>& learning_rates) {
            const auto grads = tensor_lists(gradients);
            py::gil_scoped_release release;
            e.apply_gradients(grads, learning_rates);
          },
          py::arg("gradients"), py::arg("learning_rates") = std::vector<float>{})
      .def("get_table", &ShardedEmbedding::get_table, py::arg("table"), Release())
      .def("get_slot", &ShardedEmbedding::get_slot, py::arg("table"), py::arg("slot"), Release())
      .def("slot_names", &ShardedEmbedding::slot_names, py::arg("table"))
      .def(
          "set_table",
          [](ShardedEmbedding& e, const std::string& table, const py::object& values) {
            const Tensor t = to_tensor(values);
            py::gil_scoped_release release;
            e.set_table(table, t);
          },
          py::arg("table"), py::arg("values"))
      .def("memory_bytes", &ShardedEmbedding::memory_bytes, py::arg("local_device"))
      .def("last_step_stats", &ShardedEmbedding::last_step_stats)
      .def("release", &ShardedEmbedding::release, py::arg("reason") = "released")
      .def_property_readonly("is_released", &ShardedEmbedding::is_released);
}

void bind_lifecycle(py::module_& m) {
  m.def(
      "configure_embedding",
      [](const EmbeddingConfiguration& config, Host* host, double timeout, uint64_t seed) {
        const EmbeddingOptions options = embedding_options(timeout, seed);
        py::gil_scoped_release release;
        return host ? configure_embedding(*host, config, options)
                    : configure_embedding(config, options);
      },
      py::arg("config"), py::arg("host") = nullptr, py::arg("timeout") = 60.0, py::arg("seed") = 0,
      py::keep_alive<0, 2>(),  // the tables use the host's runtime
      "Step 6 of the system lifecycle (TF's ConfigureTPUEmbedding) on `host`, or on the "
      "accelerator system's host; returns the ShardedEmbedding.");
  m.def(
      "is_embedding_initialized",
      [](const Host* host) {
        return host ? is_embedding_initialized(*host) : is_embedding_initialized();
      },
      py::arg("host") = nullptr, "TF's IsTPUEmbeddingInitialized.");
  m.def(
      "embedding", [](const Host* host) { return host ? host_embedding(*host) : embedding(); },
      py::arg("host") = nullptr, "The ShardedEmbedding configure_embedding made.");
  m.def("host_embedding", &host_embedding, py::arg("host"), py::keep_alive<0, 1>(),
        "The ShardedEmbedding configure_embedding made on `host`.");
}

}  // namespace

void bind_embedding(py::module_& m) {
  bind_config(m);
  bind_sharded(m);
  bind_lifecycle(m);
}

}  // namespace tessel::python
