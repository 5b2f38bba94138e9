// ShardedEmbedding: checks the caller's inputs, then runs each step as one stream task per local
// device (DeviceShards), over the communicator group of every mesh device.
#include "tessel/embedding/sharded_embedding.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>

#include "comm/group_service.h"
#include "comm/group_step.h"
#include "core/errors.h"
#include "embedding/device_shards.h"
#include "runtime/launch.h"
#include "tessel/comm/mesh_groups.h"
#include "tessel/core/crc32c.h"
#include "tessel/runtime/device.h"
#include "tessel/runtime/runtime.h"

namespace tessel {
namespace {

constexpr const char* kComponent = "ShardedEmbedding";

// Table-wise tables go to the least loaded device so far (by bytes), in table order.
std::vector<TableSharding> make_shardings(const EmbeddingConfiguration& config, int devices) {
  std::vector<int64_t> load(static_cast<size_t>(devices), 0);
  std::vector<TableSharding> out;
  for (const TableDescriptor& t : config.tables) {
    int device = 0;
    if (t.placement == TablePlacement::kTableWise) {
      device = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    }
    out.emplace_back(t, config.sharding_strategy, devices, device);
    for (int d = 0; d < devices; ++d) {
      load[static_cast<size_t>(d)] += out.back().local_rows(d) * out.back().local_cols(d);
    }
  }
  return out;
}

// The integers of a 1-D int32 or int64 tensor.
std::vector<int64_t> integers(const Tensor& t, const std::string& what) {
  if (!t.defined() || t.rank() != 1 || (t.dtype() != DType::kI64 && t.dtype() != DType::kI32)) {
    detail::throw_invalid(kComponent, "{} must be a 1-D int64 or int32 tensor, got {}", what,
                          t.defined()
                              ? fmt::format("{} {}", dtype_name(t.dtype()), t.shape().to_string())
                              : std::string("an undefined tensor"));
  }
  if (t.dtype() == DType::kI64) return t.to_vector<int64_t>();
  const std::vector<int32_t> v = t.to_vector<int32_t>();
  return {v.begin(), v.end()};
}

// One learning rate per dynamic learning rate tag (TF's SendTPUEmbeddingGradients'
// learning_rates: in tag order, empty when every table's rate is constant), each finite and
// >= 0 (> 0 for an FTRL table, which divides by it).
void check_learning_rates(const EmbeddingConfiguration& config,
                          const std::vector<float>& learning_rates) {
  const int want = config.num_dynamic_learning_rates();
  if (static_cast<int>(learning_rates.size()) != want) {
    detail::throw_invalid(kComponent,
                          "apply_gradients: {} learning rates given, but the tables' "
                          "dynamic learning rate tags need {} (one per tag)",
                          learning_rates.size(), want);
  }
  for (const TableDescriptor& t : config.tables) {
    const OptimizationParameters& o = t.optimization_parameters;
    if (o.dynamic_learning_rate_tag < 0) continue;
    const float rate = learning_rates[static_cast<size_t>(o.dynamic_learning_rate_tag)];
    const bool ftrl = o.optimizer == EmbeddingOptimizer::kFtrl;
    if (!std::isfinite(rate) || rate < 0 || (ftrl && rate == 0)) {
      detail::throw_invalid(kComponent,
                            "apply_gradients: learning rate {} of tag {} (table '{}', "
                            "{}) must be finite and {}",
                            rate, o.dynamic_learning_rate_tag, t.name, optimizer_name(o.optimizer),
                            ftrl ? "> 0" : ">= 0");
    }
  }
}

}  // namespace

struct ShardedEmbedding::State {
  Runtime& runtime;
  Mesh mesh;
  EmbeddingOptions options;
  // Shared with every device's shards (a task still on a stream after a failed step keeps them).
  std::shared_ptr<detail::EmbeddingLayout> shared_layout =
      std::make_shared<detail::EmbeddingLayout>();
  detail::EmbeddingLayout& layout = *shared_layout;
  std::vector<Device*> devices;  // local, mesh local order
  std::vector<int> ranks;        // mesh offset of each local device
  // By local device; empty once released. The stream tasks hold their own references, so
  // dropping these never frees shards under a task still running after a failed step.
  std::vector<std::shared_ptr<detail::DeviceShards>> shards;
  mutable std::mutex mu;  // serializes calls
  std::string released;   // why, once released
  EmbeddingStepStats stats;

  State(Runtime& rt, Mesh m, EmbeddingOptions o) : runtime(rt), mesh(std::move(m)), options(o) {}

  void check_live() const {
    if (!released.empty()) {
      detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                          "the embedding tables were released ({})", released);
    }
  }

  // Runs fn(local index, shards, communicator) on every local device's stream at once, within
  // options.timeout, over the group of every mesh device (group_step.h).
  void run(const std::string& step,
           std::function<void(size_t, detail::DeviceShards&, Communicator&)> fn) {
    auto service = detail::GroupService::of(runtime);
    std::shared_ptr<CommunicatorPool> pool = service->pool();
    detail::GroupStep group_step(kComponent, service, pool, detail::GroupStep::Scratch::kDevice);
    // One copy of fn (and of what it captured: every device's ids) shared by the tasks.
    const auto shared_fn =
        std::make_shared<std::function<void(size_t, detail::DeviceShards&, Communicator&)>>(
            std::move(fn));
    for (size_t i = 0; i < devices.size(); ++i) {
      Communicator* comm = &pool->get(mesh, mesh.dim_names(), ranks[i], options.timeout);
      std::shared_ptr<detail::DeviceShards> shard = shards[i];
      group_step.add(*devices[i], comm,
                     [i, shard, comm, shared_fn] { (*shared_fn)(i, *shard, *comm); });
    }
    group_step.run(step, detail::CallDeadline::after(options.timeout));
  }

  CollectiveOptions collective() const {
    CollectiveOptions c;
    c.timeout = options.timeout;
    return c;
  }

  int table(std::string_view name) const {
    for (size_t t = 0; t < layout.config.tables.size(); ++t) {
      if (layout.config.tables[t].name == name) return static_cast<int>(t);
    }
    detail::throw_invalid(kComponent, "no table named '{}'", name);
  }

  // Feature f's ids on local device i, checked against the configuration.
  detail::FeatureIds check_ids(size_t f, size_t i, const RaggedIds& in) const {
    const FeatureDescriptor& feature = layout.config.features[f];
    const TableDescriptor& table = layout.config.tables[static_cast<size_t>(feature.table_id)];
    const std::string where = fmt::format("feature '{}' on {}", feature.name, devices[i]->name());
    detail::FeatureIds out;
    out.ids = integers(in.values, where + ": values");
    out.row_splits = integers(in.row_splits, where + ": row_splits");
    const int64_t bags = layout.config.bags_per_device(static_cast<int>(f));
    const auto nnz = static_cast<int64_t>(out.ids.size());
    if (static_cast<int64_t>(out.row_splits.size()) != bags + 1) {
      detail::throw_invalid(kComponent, "{}: row_splits has {} entries, not bags + 1 = {}", where,
                            out.row_splits.size(), bags + 1);
    }
    if (out.row_splits.front() != 0 || out.row_splits.back() != nnz) {
      detail::throw_invalid(kComponent,
                            "{}: row_splits must start at 0 and end at {} (the "
                            "number of ids), got {} and {}",
                            where, nnz, out.row_splits.front(), out.row_splits.back());
    }
    for (size_t b = 0; b + 1 < out.row_splits.size(); ++b) {
      if (out.row_splits[b + 1] < out.row_splits[b]) {
        detail::throw_invalid(kComponent, "{}: row_splits go down at bag {} ({} then {})", where, b,
                              out.row_splits[b], out.row_splits[b + 1]);
      }
    }
    for (size_t k = 0; k < out.ids.size(); ++k) {
      if (out.ids[k] < 0 || out.ids[k] >= table.vocabulary_size) {
        detail::throw_invalid(kComponent,
                              "{}: id {} (position {}) is outside table '{}' of {} rows", where,
                              out.ids[k], k, table.name, table.vocabulary_size);
      }
    }
    if (in.weights.defined()) {
      if (in.weights.dtype() != DType::kF32 || in.weights.rank() != 1 ||
          in.weights.shape()[0] != nnz) {
        detail::throw_invalid(kComponent, "{}: weights must be float32 [{}], got {} {}", where, nnz,
                              dtype_name(in.weights.dtype()), in.weights.shape().to_string());
      }
      out.weights = in.weights.to_vector<float>();
    }
    return out;
  }

  // inputs[f][i] must have one entry per feature and local device.
  template <typename T>
  void check_counts(const std::vector<std::vector<T>>& inputs, const char* what) const {
    const size_t features = layout.config.features.size();
    if (inputs.size() != features) {
      detail::throw_invalid(kComponent, "{}: {} features given, the configuration has {}", what,
                            inputs.size(), features);
    }
    for (size_t f = 0; f < features; ++f) {
      if (inputs[f].size() != devices.size()) {
        detail::throw_invalid(kComponent,
                              "{}: feature '{}' has {} entries, one per local "
                              "device ({}) expected",
                              what, layout.config.features[f].name, inputs[f].size(),
                              devices.size());
      }
    }
  }

  void count(const std::vector<detail::DeviceStepCounts>& counts, bool fresh_step) {
    if (fresh_step) stats = {};
    for (const detail::DeviceStepCounts& c : counts) {
      stats.ids += c.ids;
      stats.unique_ids += c.unique_ids;
      stats.bytes_sent += c.bytes_sent;
    }
    if (!counts.empty()) stats.collectives += counts.front().collectives;
  }

  // Every device of the mesh (every process, under mpirun) must hold the same configuration:
  // their checksums are all-gathered; a difference is kInvalidArgument naming the device.
  void agree() {
    const std::string bytes = layout.config.serialized();
    const auto mine = static_cast<int64_t>(crc32c(bytes.data(), bytes.size()));
    const Mesh& m = mesh;
    const CollectiveOptions copts = collective();
    run("agree", [mine, copts, &m](size_t, detail::DeviceShards&, Communicator& comm) {
      const Tensor all =
          comm.all_gather(Tensor::from_vector(std::vector<int64_t>{mine}, Shape{1}), 0, copts);
      const std::vector<int64_t> sums = all.to_vector<int64_t>();
      for (size_t d = 0; d < sums.size(); ++d) {
        if (sums[d] != mine) {
          detail::throw_invalid(kComponent,
                                "the embedding configuration of device {} ({}) "
                                "differs from this device's (checksum {:08x} vs "
                                "{:08x}): every process must configure the same",
                                d,
                                m.global_device_ids().size() > d
                                    ? fmt::format("global id {}", m.global_device_ids()[d])
                                    : std::string("?"),
                                static_cast<uint32_t>(sums[d]), static_cast<uint32_t>(mine));
        }
      }
    });
  }

  // The whole [rows, dim] table (slot < 0) or slot, all-gathered from every device's shard.
  Tensor gather(int t, int slot) {
    const TableSharding& s = layout.shardings[static_cast<size_t>(t)];
    const TableDescriptor& desc = layout.config.tables[static_cast<size_t>(t)];
    auto gathered = std::make_shared<Tensor>();
    const CollectiveOptions copts = collective();
    run("get_table",
        [t, slot, gathered, copts](size_t i, detail::DeviceShards& shards, Communicator& comm) {
          const detail::TableShard& shard = shards.shard(t);
          const Tensor& part = slot < 0 ? shard.values : shard.slots[static_cast<size_t>(slot)];
          Tensor all = comm.all_gather(part.reshape(Shape{part.num_elements()}), 0, copts);
          if (i == 0) *gathered = all;
        });
    // Reassemble: the blocks arrive in device order.
    Tensor out = Tensor::zeros(Shape{desc.vocabulary_size, desc.dimension}, DType::kF32);
    float* o = out.data<float>();
    const float* in = gathered->data<float>();
    for (int d = 0; d < s.num_devices(); ++d) {
      const int64_t cols = s.local_cols(d), begin = s.col_begin(d);
      for (int64_t r = 0; r < s.local_rows(d); ++r, in += cols) {
        std::copy(in, in + cols, o + s.global_row(d, r) * desc.dimension + begin);
      }
      // A data-parallel table's copies are equal: the first one is the table.
      if (s.placement() == TablePlacement::kDataParallel) break;
    }
    return out;
  }
};

ShardedEmbedding::ShardedEmbedding(EmbeddingConfiguration config, Mesh mesh,
                                   EmbeddingOptions options)
    : ShardedEmbedding(std::move(config), std::move(mesh), Runtime::global(), options) {}

ShardedEmbedding::ShardedEmbedding(EmbeddingConfiguration config, Mesh mesh, Runtime& runtime,
                                   EmbeddingOptions options)
    : state_(std::make_unique<State>(runtime, std::move(mesh), options)) {
  State& s = *state_;
  if (s.mesh.is_empty() || s.mesh.is_single_device() || s.mesh.rank() == 0) {
    detail::throw_invalid(kComponent, "needs a mesh of devices with dimensions, got '{}'",
                          s.mesh.to_string());
  }
  if (options.timeout <= std::chrono::milliseconds(0)) {
    detail::throw_invalid(kComponent, "timeout {} ms must be > 0", options.timeout.count());
  }
  const auto devices = static_cast<int>(s.mesh.size());
  const int clients = static_cast<int>(devices / std::max<int64_t>(1, s.mesh.num_local_devices()));
  config.validate(clients, devices);
  s.layout.config = std::move(config);
  s.layout.num_devices = devices;
  s.layout.shardings = make_shardings(s.layout.config, devices);
  for (size_t i = 0; i < s.mesh.local_devices().size(); ++i) {
    Device& device = runtime.device(s.mesh.local_devices()[i]);
    const int rank = static_cast<int>(s.mesh.offset_of_device_id(s.mesh.local_device_ids()[i]));
    s.devices.push_back(&device);
    s.ranks.push_back(rank);
    s.shards.push_back(
        std::make_shared<detail::DeviceShards>(s.shared_layout, rank, device, options.seed));
  }
  s.agree();
}

ShardedEmbedding::~ShardedEmbedding() = default;

const EmbeddingConfiguration& ShardedEmbedding::config() const { return state_->layout.config; }
const Mesh& ShardedEmbedding::mesh() const { return state_->mesh; }
int ShardedEmbedding::num_devices() const { return state_->layout.num_devices; }
int ShardedEmbedding::table_index(std::string_view table) const { return state_->table(table); }

int ShardedEmbedding::feature_index(std::string_view feature) const {
  const auto& features = state_->layout.config.features;
  for (size_t f = 0; f < features.size(); ++f) {
    if (features[f].name == feature) return static_cast<int>(f);
  }
  detail::throw_invalid(kComponent, "no feature named '{}'", feature);
}

const TableSharding& ShardedEmbedding::sharding(int table) const {
  const auto& shardings = state_->layout.shardings;
  if (table < 0 || static_cast<size_t>(table) >= shardings.size()) {
    detail::throw_invalid(kComponent, "table index {} is not one of the {} tables", table,
                          shardings.size());
  }
  return shardings[static_cast<size_t>(table)];
}

std::vector<std::vector<Tensor>> ShardedEmbedding::lookup(
    const std::vector<std::vector<RaggedIds>>& inputs) {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  s.check_live();
  s.check_counts(inputs, "lookup");
  // Per local device: every feature's checked ids.
  std::vector<std::vector<detail::FeatureIds>> ids(s.devices.size());
  for (size_t f = 0; f < inputs.size(); ++f) {
    for (size_t i = 0; i < s.devices.size(); ++i) ids[i].push_back(s.check_ids(f, i, inputs[f][i]));
  }
  auto results = std::make_shared<std::vector<std::vector<Tensor>>>(s.devices.size());
  auto counts = std::make_shared<std::vector<detail::DeviceStepCounts>>(s.devices.size());
  const CollectiveOptions copts = s.collective();
  const bool forward = s.layout.config.mode != EmbeddingMode::kBackwardPassOnly;
  s.run("lookup", [results, counts, copts, forward, ids = std::move(ids)](
                      size_t i, detail::DeviceShards& shards, Communicator& comm) {
    (*results)[i] = shards.lookup(ids[i], comm, copts, forward, (*counts)[i]);
  });
  s.count(*counts, /*fresh_step=*/true);
  if (!forward) return {};  // TF: "just the backward_pass"
  // [device][feature] -> [feature][device]
  std::vector<std::vector<Tensor>> out(inputs.size());
  for (size_t f = 0; f < inputs.size(); ++f) {
    for (size_t i = 0; i < s.devices.size(); ++i) out[f].push_back((*results)[i][f]);
  }
  return out;
}

void ShardedEmbedding::apply_gradients(const std::vector<std::vector<Tensor>>& gradients,
                                       const std::vector<float>& learning_rates) {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  s.check_live();
  if (s.layout.config.mode == EmbeddingMode::kInference) {
    detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                        "apply_gradients in INFERENCE mode (the configuration's mode)");
  }
  if (!s.shards.empty() && !s.shards.front()->has_lookup()) {
    detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                        "apply_gradients needs a lookup first (each lookup's gradients are "
                        "applied once)");
  }
  s.check_counts(gradients, "apply_gradients");
  check_learning_rates(s.layout.config, learning_rates);
  std::vector<std::vector<Tensor>> per_device(s.devices.size());
  for (size_t f = 0; f < gradients.size(); ++f) {
    const int64_t dim =
        s.layout.config.tables[static_cast<size_t>(s.layout.config.features[f].table_id)].dimension;
    const int64_t bags = s.layout.config.bags_per_device(static_cast<int>(f));
    for (size_t i = 0; i < s.devices.size(); ++i) {
      const Tensor& g = gradients[f][i];
      if (!g.defined() || g.dtype() != DType::kF32 || g.shape() != Shape{bags, dim}) {
        detail::throw_invalid(
            kComponent,
            "apply_gradients: feature '{}' on {} needs float32 "
            "[{}, {}], got {}",
            s.layout.config.features[f].name, s.devices[i]->name(), bags, dim,
            g.defined() ? fmt::format("{} {}", dtype_name(g.dtype()), g.shape().to_string())
                        : std::string("an undefined tensor"));
      }
      per_device[i].push_back(g);
    }
  }
  auto counts = std::make_shared<std::vector<detail::DeviceStepCounts>>(s.devices.size());
  const CollectiveOptions copts = s.collective();
  s.run("apply_gradients", [counts, copts, learning_rates, per_device = std::move(per_device)](
                               size_t i, detail::DeviceShards& shards, Communicator& comm) {
    shards.apply_gradients(per_device[i], learning_rates, comm, copts, (*counts)[i]);
  });
  s.count(*counts, /*fresh_step=*/false);
}

Tensor ShardedEmbedding::get_table(std::string_view table) {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  s.check_live();
  return s.gather(s.table(table), -1);
}

Tensor ShardedEmbedding::get_slot(std::string_view table, std::string_view slot) {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  s.check_live();
  const int t = s.table(table);
  const std::vector<std::string> names = detail::embedding_slot_names(
      s.layout.config.tables[static_cast<size_t>(t)].optimization_parameters.optimizer);
  const auto it = std::find(names.begin(), names.end(), slot);
  if (it == names.end()) {
    detail::throw_invalid(kComponent, "table '{}' has no slot '{}' (its slots: [{}])", table, slot,
                          fmt::join(names, ", "));
  }
  return s.gather(t, static_cast<int>(it - names.begin()));
}

std::vector<std::string> ShardedEmbedding::slot_names(std::string_view table) const {
  const int t = state_->table(table);
  return detail::embedding_slot_names(
      state_->layout.config.tables[static_cast<size_t>(t)].optimization_parameters.optimizer);
}

void ShardedEmbedding::set_table(std::string_view table, const Tensor& values) {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  s.check_live();
  const int t = s.table(table);
  const TableDescriptor& desc = s.layout.config.tables[static_cast<size_t>(t)];
  const TableSharding& sharding = s.layout.shardings[static_cast<size_t>(t)];
  if (!values.defined() || values.dtype() != DType::kF32 ||
      values.shape() != Shape{desc.vocabulary_size, desc.dimension}) {
    detail::throw_invalid(kComponent, "set_table('{}') needs float32 [{}, {}], got {}", table,
                          desc.vocabulary_size, desc.dimension,
                          values.defined() ? fmt::format("{} {}", dtype_name(values.dtype()),
                                                         values.shape().to_string())
                                           : std::string("an undefined tensor"));
  }
  const Tensor full = values.contiguous();
  const float* in = full.data<float>();
  for (size_t i = 0; i < s.devices.size(); ++i) {
    // Written while no step runs (calls are serialized and every step waits for its tasks).
    const int d = s.ranks[i];
    Tensor& shard = s.shards[i]->shard(t).values;
    float* out = shard.data<float>();
    const int64_t cols = sharding.local_cols(d), begin = sharding.col_begin(d);
    for (int64_t r = 0; r < sharding.local_rows(d); ++r) {
      const float* row = in + sharding.global_row(d, r) * desc.dimension + begin;
      std::copy(row, row + cols, out + r * cols);
    }
  }
}

int64_t ShardedEmbedding::memory_bytes(int local_device) const {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  if (local_device < 0 || static_cast<size_t>(local_device) >= s.devices.size()) {
    detail::throw_invalid(kComponent, "local device {} is not one of the {} local devices",
                          local_device, s.devices.size());
  }
  return s.released.empty() ? s.shards[static_cast<size_t>(local_device)]->memory_bytes() : 0;
}

EmbeddingStepStats ShardedEmbedding::last_step_stats() const {
  std::lock_guard lock(state_->mu);
  return state_->stats;
}

void ShardedEmbedding::release(const std::string& reason) {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  if (!s.released.empty()) return;
  s.released = reason.empty() ? "released" : reason;
  s.shards.clear();
}

bool ShardedEmbedding::is_released() const {
  std::lock_guard lock(state_->mu);
  return !state_->released.empty();
}

}  // namespace tessel
