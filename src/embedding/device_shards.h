// Internal: one device's part of a ShardedEmbedding (its shards and slots, the record of its
// last lookup) and the per-device steps of lookup and apply_gradients, each run as one stream
// task on that device (sharded_embedding.cpp launches them on every local device at once).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "embedding/flat_index.h"
#include "embedding/row_update.h"
#include "tessel/comm/communicator.h"
#include "tessel/core/tensor.h"
#include "tessel/embedding/embedding_config.h"
#include "tessel/embedding/sharded_embedding.h"
#include "tessel/embedding/table_sharding.h"

namespace tessel {
class Device;
}

namespace tessel::detail {

// One feature's checked ids on one device (sharded_embedding.cpp converts and checks them).
struct FeatureIds {
  std::vector<int64_t> ids;
  std::vector<int64_t> row_splits;  // bags + 1
  std::vector<float> weights;       // empty: every weight 1
};

// The embedding's fixed description, shared read-only by every device's task.
struct EmbeddingLayout {
  EmbeddingConfiguration config;
  std::vector<TableSharding> shardings;  // by table
  int num_devices = 0;
};

// One table's shard on one device: [local_rows, local_cols] values and the optimizer's slots.
struct TableShard {
  Tensor values;
  std::vector<Tensor> slots;  // slot_names order
  float* data = nullptr;      // values' floats, row-major (the steps' row loops use these)
  int64_t cols = 0;
};

// The rows an apply_gradients step touches on their owner, each with its summed gradient.
struct TouchedRows {
  std::vector<std::pair<int, int64_t>> rows;  // (table, local row), first-received order
  std::vector<int64_t> offset;                // by row: its gradient in `summed`
  std::vector<float> summed;
  // Rows updated piece by piece (gradient accumulation DISABLED), and a piece's copy (the
  // update clips it in place).
  std::vector<std::pair<int, int64_t>> updated_per_piece;
  std::vector<float> piece;
  std::vector<float*> piece_slots;  // the row's place in each optimizer slot
  // By table, by local row: the row's index in `rows`, -1 when untouched. Allocated on a
  // table's first touch; forget_slots() resets only the touched entries.
  std::vector<std::vector<int32_t>> slots;

  void forget_slots();
};

// What a device's last lookup did, kept for apply_gradients.
struct LookupRecord {
  bool valid = false;  // a lookup happened and its gradients were not applied yet
  // Distinct (table, global row) looked up on this device, and where its row sits in `rows`.
  std::vector<std::pair<int, int64_t>> unique;
  // By unique index: where its floats are in a flat buffer of row_floats (see plan()); the
  // first sent_floats are the requests' pieces in send order.
  std::vector<int64_t> row_offset;
  int64_t row_floats = 0, sent_floats = 0;
  // Per feature: each id's unique index and its factor (weight / combiner denominator).
  std::vector<std::vector<int64_t>> id_unique;
  std::vector<std::vector<float>> id_scale;
  std::vector<std::vector<int64_t>> row_splits;
  // Requests this device sent, in send order (by destination), and per destination counts.
  std::vector<std::pair<int64_t, RowPiece>> sent;  // (unique index, piece)
  std::vector<int64_t> send_counts;
  // Requests this device received and served, in receive order: (table, local row).
  std::vector<std::pair<int, int64_t>> served;
  std::vector<int64_t> served_counts;  // by source device
};

// Counters of one step on one device.
struct DeviceStepCounts {
  int64_t ids = 0, unique_ids = 0, bytes_sent = 0, collectives = 0;
};

class DeviceShards {
 public:
  // Allocates and initialises device `rank`'s shards (rank = mesh offset) from `device`.
  DeviceShards(std::shared_ptr<const EmbeddingLayout> layout, int rank, Device& device,
               uint64_t seed);

  int rank() const { return rank_; }
  int64_t memory_bytes() const;
  TableShard& shard(int table) { return shards_[static_cast<size_t>(table)]; }

  // The per-device steps (on the device's stream; `comm` is the group over every device).
  // lookup without `forward` (BACKWARD_PASS_ONLY) only sends the requests to the owners, for
  // apply_gradients, and returns no activations.
  std::vector<Tensor> lookup(const std::vector<FeatureIds>& features, Communicator& comm,
                             const CollectiveOptions& options, bool forward,
                             DeviceStepCounts& counts);
  // learning_rates[tag]: the step's value of each dynamic learning rate tag (checked by the
  // caller).
  void apply_gradients(const std::vector<Tensor>& gradients,
                       const std::vector<float>& learning_rates, Communicator& comm,
                       const CollectiveOptions& options, DeviceStepCounts& counts);
  bool has_lookup() const { return record_.valid; }

 private:
  // Fills the unique rows of the record and the per-id factors.
  void plan(const std::vector<FeatureIds>& features);
  // Whether a table's update is linear in the gradient and has no per-step option (plain SGD:
  // no clipping, no weight decay), so that each received piece can be applied as it comes.
  bool applies_per_piece(int table) const { return per_piece_[static_cast<size_t>(table)]; }
  // Whether a table sums a row's pieces before its update (gradient accumulation ENABLED), or
  // updates the row with each piece as it comes (DISABLED: one device's gradient each).
  bool accumulates(int table) const { return accumulates_[static_cast<size_t>(table)]; }
  // Updates a row with one device's piece of its gradient (gradient accumulation DISABLED).
  void update_row_with_piece(int table, int64_t local_row, const float* piece,
                             TouchedRows& touched);
  // The floats of distinct row `unique` of the last lookup (its table's dimension).
  int64_t row_width(int64_t unique) const {
    const int table = record_.unique[static_cast<size_t>(unique)].first;
    return layout_.config.tables[static_cast<size_t>(table)].dimension;
  }
  // Updates every touched row with its summed gradient (the table's optimizer), then, for
  // non-lazy Adam, every other row with a zero gradient.
  void update_rows(TouchedRows& touched);
  void update_untouched_rows(int table, const TouchedRows& touched);

  const std::shared_ptr<const EmbeddingLayout> layout_holder_;
  const EmbeddingLayout& layout_;
  int rank_;
  Device& device_;
  std::vector<TableShard> shards_;
  std::vector<bool> per_piece_;    // by table: applies_per_piece
  std::vector<bool> accumulates_;  // by table: accumulates
  std::vector<float> step_lr_;     // by table: the learning rate of the step being applied
  LookupRecord record_;
  // Buffers kept from step to step (no fresh pages, no zeroing each step).
  struct Buffers {
    Tensor requests, reply;            // all-to-all inputs (reply: rows, then gradients)
    std::vector<float> split;          // column-wise rows, assembled
    std::vector<const float*> row_at;  // where each distinct row is, in a lookup
    FlatIndex index;                   // the distinct rows of a lookup / of what was served
    std::vector<std::pair<int64_t, RowPiece>> pending;  // a lookup's requests, in id order
    TouchedRows touched;                                // apply_gradients on the owner
  } buffers_;
};

// A [shape] view of `cache`, grown (not zeroed) when it is too small.
Tensor reuse_buffer(Tensor& cache, const Shape& shape, DType dtype);

}  // namespace tessel::detail
