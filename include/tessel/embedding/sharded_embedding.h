// ShardedEmbedding: the tables of an EmbeddingConfiguration sharded over the devices of a mesh,
// looked up with ragged ids and updated sparsely on the shards that own the rows (TF's
// TPUEmbedding: enqueue + dequeue = lookup, apply_gradients).
//
//   Mesh mesh = Mesh::create({{"x", 4}});
//   ShardedEmbedding emb(config, mesh);                 // tables initialised, slots too
//   // inputs[f][i]: feature f's ids on the mesh's i-th local device (CSR: values, row_splits)
//   auto act = emb.lookup(inputs);                       // act[f][i]: [bags, dim] float32
//   emb.apply_gradients(grads);                          // grads[f][i]: d loss / d act[f][i]
//   Tensor users = emb.get_table("users");               // [vocabulary_size, dim], gathered
//
// The devices are the mesh's, numbered by mesh offset (every mesh dimension together); each
// device looks up its own batch (batch_size_per_device bags per feature). A lookup, on every
// local device at once (one stream task each):
//   1. ids deduplicated per device (one request per distinct (table, row));
//   2. the requests sent to the devices owning the rows with ONE all-to-all-v (a column-wise
//      row goes to every device holding columns of it);
//   3. the owners gather the rows and send them back with ONE all-to-all-v;
//   4. every bag combined: sum, mean (sum / sum of weights) or sqrtn (sum / sqrt of the sum of
//      squared weights) of weight * row; an empty bag (or zero denominator) gives zeros.
// Data-parallel tables are looked up locally. apply_gradients turns each bag's gradient into
// one gradient per distinct row on the device (duplicates summed), sends the pieces to their
// owners with ONE all-to-all-v (the lookup's routing, reversed), and each owner sums what it got
// per row (SGD, linear: applies each piece as it comes) and applies the table's optimizer to the
// touched rows only, with its slot variables
// (slot_names) sharded like the table: TF's TPU embedding formulas and options
// (optimization_parameters.h). Adam has no bias correction (TF's TPU embedding semantics); only
// non-lazy Adam updates untouched rows. A data-parallel table's gradient is made dense and
// all-reduced; rows with a nonzero gradient are the touched ones.
//
// Memory: every shard and slot is allocated from its device (Device::memory_stats counts it;
// memory_bytes() reports the embedding's part).
//
// Errors: inputs of the wrong count, dtype or shape, row_splits that do not start at 0, go
// down or end at the number of ids, weights of another length: kInvalidArgument naming the
// feature and device. An id outside [0, vocabulary_size): kInvalidArgument naming the feature,
// the id and its position. apply_gradients before a lookup, twice for one lookup, or in
// INFERENCE mode: kFailedPrecondition. After release(): kFailedPrecondition. Every collective
// ends by options.timeout (kDeadlineExceeded naming the late device).
//
// Under mpirun every process builds the ShardedEmbedding over the same distributed mesh and
// calls every method in the same order (they are collective), with the inputs of its own
// devices. Errors found in one process's inputs are thrown there before anything is sent; the
// other processes then fail by their timeout.
//
// Thread safety: calls on one object are serialized.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/core/tensor.h"
#include "tessel/embedding/embedding_config.h"
#include "tessel/embedding/table_sharding.h"
#include "tessel/mesh/mesh.h"

namespace tessel {

class Runtime;

// One feature's ids on one device, as CSR: bag b holds values[row_splits[b]:row_splits[b+1]].
struct RaggedIds {
  Tensor values;      // int64 or int32 [nnz]
  Tensor row_splits;  // int64 or int32 [bags + 1]
  Tensor weights;     // optional float32 [nnz] (undefined: every weight 1)
};

struct EmbeddingOptions {
  // Bounds every collective of every call.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // Initial values: uniform in [-1/sqrt(dim), 1/sqrt(dim)), a hash of (seed, table, row,
  // column): the same numbers whatever the placement and device count.
  uint64_t seed = 0;
};

// What the last lookup + apply_gradients moved, summed over this process's devices.
struct EmbeddingStepStats {
  int64_t ids = 0;          // ids looked up
  int64_t unique_ids = 0;   // after deduplication per device
  int64_t bytes_sent = 0;   // to other devices: requests, rows, gradients, all-reduces
  int64_t collectives = 0;  // collective calls per device
};

class ShardedEmbedding {
 public:
  // Validates `config` for the mesh (validate(num_hosts, mesh.size()), num_hosts: the mesh's
  // clients), allocates and initialises every local shard, then checks that every device of the
  // mesh has the same configuration (a collective: its checksums are all-gathered; a difference,
  // e.g. another process configured otherwise, is kInvalidArgument naming the device). The mesh
  // must be a tile mesh whose local devices `runtime` has (kInvalidArgument otherwise).
  // `runtime` must outlive this.
  ShardedEmbedding(EmbeddingConfiguration config, Mesh mesh, Runtime& runtime,
                   EmbeddingOptions options = {});
  ShardedEmbedding(EmbeddingConfiguration config, Mesh mesh, EmbeddingOptions options = {});
  ~ShardedEmbedding();
  ShardedEmbedding(const ShardedEmbedding&) = delete;
  ShardedEmbedding& operator=(const ShardedEmbedding&) = delete;

  const EmbeddingConfiguration& config() const;
  const Mesh& mesh() const;
  int num_devices() const;  // the mesh's size
  // The index of a table / feature by name; unknown: kInvalidArgument naming it.
  int table_index(std::string_view table) const;
  int feature_index(std::string_view feature) const;
  const TableSharding& sharding(int table) const;

  // inputs[f][i] for every feature f (config order) and local device i (mesh local order).
  // In BACKWARD_PASS_ONLY mode (TF: the program runs "just the backward_pass") the ids are
  // checked, deduplicated and sent to the owners for apply_gradients, but no row is gathered or
  // sent and no activation computed: the result is empty.
  std::vector<std::vector<Tensor>> lookup(const std::vector<std::vector<RaggedIds>>& inputs);
  // gradients[f][i]: float32 [bags, dim] of feature f on local device i, for the last lookup.
  // learning_rates[tag]: this step's value of each dynamic learning rate tag (TF's
  // SendTPUEmbeddingGradients learning_rates; config().num_dynamic_learning_rates() of them,
  // none when every table's rate is constant); another count, or a value not finite or < 0
  // (<= 0 for FTRL): kInvalidArgument naming the tag and table.
  void apply_gradients(const std::vector<std::vector<Tensor>>& gradients,
                       const std::vector<float>& learning_rates = {});

  // The whole table (or slot: see slot_names), float32
  // [vocabulary_size, dimension], all-gathered from the shards (collective).
  Tensor get_table(std::string_view table);
  Tensor get_slot(std::string_view table, std::string_view slot);
  // The table's slot names, TF's (Adagrad: accumulators; Adam: momenta, velocities; momentum:
  // momenta; RMSProp: ms, mom (centered: and mg); FTRL: accumulators, linears; ProximalAdagrad:
  // accumulators; Adadelta: accumulators, updates; SGD: none).
  std::vector<std::string> slot_names(std::string_view table) const;
  // Sets a whole table (every process passes the same [vocabulary_size, dimension] values; each
  // device keeps its part). Local: no communication. Resets nothing else.
  void set_table(std::string_view table, const Tensor& values);

  // Bytes of tables and slots on the mesh's i-th local device.
  int64_t memory_bytes(int local_device) const;
  EmbeddingStepStats last_step_stats() const;

  // Frees every shard and slot (shutdown); later calls are kFailedPrecondition.
  void release(const std::string& reason = "released");
  bool is_released() const;

  struct State;  // sharded_embedding.cpp

 private:
  std::unique_ptr<State> state_;
};

}  // namespace tessel
