// Where each row and column of an embedding table lives: pure arithmetic over N devices (shards,
// numbered by mesh offset), no memory. See embedding_config.h for the placements and TF's
// DIV_DEFAULT / MOD strategies.
//
//   TableSharding s(table, ShardingStrategy::kMod, /*num_devices=*/5, /*table_device=*/0);
//   s.owners(12) == {{.device = 2, .local_row = 2, .col_begin = 0, .col_end = dim}}
//   s.local_rows(3) == 2;  s.global_row(2, 2) == 12
#pragma once

#include <cstdint>
#include <vector>

#include "tessel/embedding/embedding_config.h"

namespace tessel {

// One device's part of one row: local row `local_row` of its shard, columns [col_begin, col_end).
struct RowPiece {
  int device = 0;
  int64_t local_row = 0;
  int32_t col_begin = 0;
  int32_t col_end = 0;
};

class TableSharding {
 public:
  // `table_device` is the device of a table-wise table (ignored otherwise). num_devices >= 1,
  // table_device in [0, num_devices): kInvalidArgument otherwise.
  TableSharding(const TableDescriptor& table, ShardingStrategy strategy, int num_devices,
                int table_device = 0);

  TablePlacement placement() const { return placement_; }
  int num_devices() const { return num_devices_; }
  // Shape of device d's shard: local_rows(d) x local_cols(d) (0 x 0 where it holds nothing).
  int64_t local_rows(int device) const;
  int32_t local_cols(int device) const;
  int32_t col_begin(int device) const;
  // Devices that hold a piece of every row (column-wise: those with columns; data-parallel: all).
  const std::vector<int>& row_devices() const { return row_devices_; }
  // The pieces of global row `row` (0 <= row < vocabulary_size; unchecked). Row-wise and
  // table-wise: one piece; column-wise: one per device with columns; data-parallel: one per
  // device.
  void owners(int64_t row, std::vector<RowPiece>& out) const;
  // The global row of device d's local row `local` (row-wise: by the strategy; else itself).
  int64_t global_row(int device, int64_t local) const;

 private:
  TablePlacement placement_;
  ShardingStrategy strategy_;
  int num_devices_;
  int table_device_;
  int64_t rows_;
  int32_t dim_;
  std::vector<int> row_devices_;
};

}  // namespace tessel
