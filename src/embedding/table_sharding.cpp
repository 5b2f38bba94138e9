// TableSharding: TF's DIV_DEFAULT / MOD row arithmetic, and the other placements.
#include "tessel/embedding/table_sharding.h"

#include "core/errors.h"

namespace tessel {
namespace {

// Items [0, n) split over `parts` like TF's div strategy: the first n % parts get one more.
int64_t div_count(int64_t n, int parts, int part) {
  return n / parts + (part < n % parts ? 1 : 0);
}
int64_t div_begin(int64_t n, int parts, int part) {
  return part * (n / parts) + std::min<int64_t>(part, n % parts);
}
int div_owner(int64_t n, int parts, int64_t item) {
  const int64_t q = n / parts, r = n % parts;
  const int64_t big = r * (q + 1);  // items held by the first r parts
  return static_cast<int>(item < big ? item / (q + 1) : r + (item - big) / q);
}

}  // namespace

TableSharding::TableSharding(const TableDescriptor& table, ShardingStrategy strategy,
                             int num_devices, int table_device)
    : placement_(table.placement), strategy_(strategy), num_devices_(num_devices),
      table_device_(table_device), rows_(table.vocabulary_size), dim_(table.dimension) {
  if (num_devices < 1) {
    detail::throw_invalid("TableSharding", "table '{}': {} devices (at least 1)", table.name,
                          num_devices);
  }
  if (table_device < 0 || table_device >= num_devices) {
    detail::throw_invalid("TableSharding", "table '{}': device {} is not one of {}", table.name,
                          table_device, num_devices);
  }
  for (int d = 0; d < num_devices; ++d) {
    if (placement_ == TablePlacement::kDataParallel ||
        (placement_ == TablePlacement::kColumnWise && local_cols(d) > 0)) {
      row_devices_.push_back(d);
    }
  }
}

int64_t TableSharding::local_rows(int device) const {
  switch (placement_) {
    case TablePlacement::kRowWise:
      return div_count(rows_, num_devices_, device);  // MOD holds the same counts
    case TablePlacement::kTableWise:
      return device == table_device_ ? rows_ : 0;
    case TablePlacement::kColumnWise:
      return local_cols(device) > 0 ? rows_ : 0;
    case TablePlacement::kDataParallel:
      return rows_;
  }
  return 0;
}

int32_t TableSharding::local_cols(int device) const {
  if (placement_ == TablePlacement::kColumnWise) {
    return static_cast<int32_t>(div_count(dim_, num_devices_, device));
  }
  return local_rows(device) > 0 ? dim_ : 0;
}

int32_t TableSharding::col_begin(int device) const {
  return placement_ == TablePlacement::kColumnWise
             ? static_cast<int32_t>(div_begin(dim_, num_devices_, device))
             : 0;
}

void TableSharding::owners(int64_t row, std::vector<RowPiece>& out) const {
  switch (placement_) {
    case TablePlacement::kRowWise:
      if (strategy_ == ShardingStrategy::kMod) {
        out.push_back({static_cast<int>(row % num_devices_), row / num_devices_, 0, dim_});
      } else {
        const int d = div_owner(rows_, num_devices_, row);
        out.push_back({d, row - div_begin(rows_, num_devices_, d), 0, dim_});
      }
      return;
    case TablePlacement::kTableWise:
      out.push_back({table_device_, row, 0, dim_});
      return;
    case TablePlacement::kColumnWise:
    case TablePlacement::kDataParallel:
      for (int d : row_devices_) {
        out.push_back({d, row, col_begin(d), col_begin(d) + local_cols(d)});
      }
      return;
  }
}

int64_t TableSharding::global_row(int device, int64_t local) const {
  if (placement_ != TablePlacement::kRowWise) return local;
  return strategy_ == ShardingStrategy::kMod ? local * num_devices_ + device
                                             : div_begin(rows_, num_devices_, device) + local;
}

}  // namespace tessel
