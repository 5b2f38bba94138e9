// DeviceShards: one device's shards, and its side of a lookup and of apply_gradients (two
// all-to-all-v forward, one back; see sharded_embedding.h).
#include "embedding/device_shards.h"

#include <algorithm>
#include <cmath>

#include "core/errors.h"
#include "embedding/flat_index.h"
#include "tessel/runtime/device.h"

namespace tessel::detail {
namespace {

// Key of a (table, row) pair in hash maps.
uint64_t row_key(int table, int64_t row) {
  return (static_cast<uint64_t>(table) << 48) ^ static_cast<uint64_t>(row);
}

// Rows of a step are scattered over the shards (power-law ids, hashed to devices): each one a
// cache miss. The row loops ask for the row kPrefetchAhead places on while they work on this one.
constexpr size_t kPrefetchAhead = 8;

void prefetch_row(const float* row, int64_t floats) {
  constexpr int64_t kLine = 64 / sizeof(float);
  for (int64_t c = 0; c < floats; c += kLine) __builtin_prefetch(row + c);
}

// Bytes of an all-to-all-v this rank sends to the other ranks.
int64_t bytes_to_others(const std::vector<int64_t>& counts, int self, int64_t unit_bytes) {
  int64_t n = 0;
  for (size_t j = 0; j < counts.size(); ++j) {
    if (static_cast<int>(j) != self) n += counts[j];
  }
  return n * unit_bytes;
}

// Initial values of rows [row0, row0 + rows) x columns [col0, col0 + cols) of table `t`:
// random_uniform of the whole table, block by block (the same numbers for every placement).
Tensor initial_block(const TableDescriptor& table, int t, uint64_t seed, int64_t row0, int64_t rows,
                     int64_t col0, int64_t cols) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(table.dimension));
  return Tensor::random_uniform_block(Shape{table.vocabulary_size, table.dimension}, {row0, col0},
                                      {rows, cols}, DType::kF32, seed + static_cast<uint64_t>(t),
                                      -bound, bound);
}

}  // namespace

Tensor reuse_buffer(Tensor& cache, const Shape& shape, DType dtype) {
  const int64_t n = shape.num_elements();
  if (!cache.defined() || cache.dtype() != dtype || cache.num_elements() < n) {
    // Grown by half again, so that steps of slowly growing size do not reallocate each time.
    cache = Tensor::empty(Shape{std::max<int64_t>(n + n / 2, 64)}, dtype, nullptr,
                          /*zero_fill=*/false);
  }
  return cache.slice(0, 0, n).reshape(shape);
}

DeviceShards::DeviceShards(std::shared_ptr<const EmbeddingLayout> layout, int rank, Device& device,
                           uint64_t seed)
    : layout_holder_(std::move(layout)), layout_(*layout_holder_), rank_(rank), device_(device) {
  const auto& tables = layout_.config.tables;
  for (size_t t = 0; t < tables.size(); ++t) {
    const TableSharding& s = layout_.shardings[t];
    const int64_t rows = s.local_rows(rank), cols = s.local_cols(rank);
    TableShard shard;
    try {
      shard.values = device.allocate(Shape{rows, cols}, DType::kF32, /*zero_fill=*/false);
    } catch (const Error& e) {  // too large: name the table and the shard
      throw Error(e.code(), "ShardedEmbedding",
                  fmt::format("table '{}': the shard of {} x {} on {}: {}", tables[t].name, rows,
                              cols, device.name(), e.what()));
    }
    float* out = shard.values.data<float>();
    const int ti = static_cast<int>(t);
    if (rows == 0) {
      // Nothing here.
    } else if (s.placement() != TablePlacement::kRowWise ||
               s.global_row(rank, rows - 1) - s.global_row(rank, 0) == rows - 1) {
      // Contiguous global rows: one block.
      shard.values.copy_from(
          initial_block(tables[t], ti, seed, s.global_row(rank, 0), rows, s.col_begin(rank), cols));
    } else {
      // MOD: strided rows, one block each.
      for (int64_t r = 0; r < rows; ++r) {
        const Tensor block = initial_block(tables[t], ti, seed, s.global_row(rank, r), 1, 0, cols);
        std::copy_n(block.data<float>(), cols, out + r * cols);
      }
    }
    const OptimizationParameters& o = tables[t].optimization_parameters;
    for (const std::string& name : embedding_slot_names(o.optimizer)) {
      Tensor slot = device.allocate(Shape{rows, cols}, DType::kF32, /*zero_fill=*/true);
      const float initial = slot_initial_value(o, name);
      if (initial != 0.0f) slot.fill(initial);
      shard.slots.push_back(slot);
    }
    accumulates_.push_back(o.gradient_accumulation);
    per_piece_.push_back(o.optimizer == EmbeddingOptimizer::kSgd &&
                         !std::isfinite(o.clip_gradient_min) &&
                         !std::isfinite(o.clip_gradient_max) && !std::isfinite(o.clip_weight_min) &&
                         !std::isfinite(o.clip_weight_max) && o.weight_decay_factor == 0);
    shard.data = shard.values.data<float>();
    shard.cols = cols;
    shards_.push_back(std::move(shard));
  }
}

int64_t DeviceShards::memory_bytes() const {
  int64_t n = 0;
  for (const TableShard& s : shards_) {
    n += static_cast<int64_t>(s.values.nbytes());
    for (const Tensor& slot : s.slots) n += static_cast<int64_t>(slot.nbytes());
  }
  return n;
}

void DeviceShards::plan(const std::vector<FeatureIds>& features) {
  // The record's vectors are reused from step to step (cleared, capacity kept).
  LookupRecord& r = record_;
  r.valid = false;
  r.unique.clear();
  r.row_offset.clear();
  r.row_floats = 0;
  r.id_unique.resize(features.size());
  r.id_scale.resize(features.size());
  r.row_splits.resize(features.size());
  r.send_counts.assign(static_cast<size_t>(layout_.num_devices), 0);
  FlatIndex& index = buffers_.index;  // row_key -> unique index
  size_t total = 0;
  for (const FeatureIds& in : features) total += in.ids.size();
  index.clear(total);
  std::vector<std::pair<int64_t, RowPiece>>& pending = buffers_.pending;  // in id order
  pending.clear();
  std::vector<RowPiece> pieces;
  for (size_t f = 0; f < features.size(); ++f) {
    const FeatureIds& in = features[f];
    const int table = layout_.config.features[f].table_id;
    const TableDescriptor& desc = layout_.config.tables[static_cast<size_t>(table)];
    const TableSharding& s = layout_.shardings[static_cast<size_t>(table)];
    std::vector<int64_t>& uid = r.id_unique[f];
    std::vector<float>& scale = r.id_scale[f];
    uid.resize(in.ids.size());
    scale.resize(in.ids.size());
    r.row_splits[f] = in.row_splits;
    for (size_t b = 0; b + 1 < in.row_splits.size(); ++b) {
      double sum = 0, sum_sq = 0;
      for (int64_t k = in.row_splits[b]; k < in.row_splits[b + 1]; ++k) {
        const double w = in.weights.empty() ? 1.0 : in.weights[static_cast<size_t>(k)];
        sum += w;
        sum_sq += w * w;
      }
      double denom = 1.0;
      if (desc.combiner == EmbeddingCombiner::kMean) denom = sum;
      if (desc.combiner == EmbeddingCombiner::kSqrtn) denom = std::sqrt(sum_sq);
      for (int64_t k = in.row_splits[b]; k < in.row_splits[b + 1]; ++k) {
        const auto ks = static_cast<size_t>(k);
        const double w = in.weights.empty() ? 1.0 : in.weights[ks];
        scale[ks] = denom == 0.0 ? 0.0f : static_cast<float>(w / denom);
      }
    }
    for (size_t k = 0; k < in.ids.size(); ++k) {
      if (k + kPrefetchAhead < in.ids.size()) {
        index.prefetch(row_key(table, in.ids[k + kPrefetchAhead]));
      }
      const auto [u, fresh] = index.insert(row_key(table, in.ids[k]));
      uid[k] = u;
      if (!fresh) continue;
      r.unique.emplace_back(table, in.ids[k]);
      if (s.placement() == TablePlacement::kDataParallel) continue;  // local copy
      pieces.clear();
      s.owners(in.ids[k], pieces);
      for (const RowPiece& p : pieces) {
        pending.emplace_back(u, p);
        ++r.send_counts[static_cast<size_t>(p.device)];
      }
    }
  }
  // The requests by destination (a stable counting sort: id order within each).
  std::vector<int64_t> next(r.send_counts.size(), 0);
  for (size_t d = 1; d < next.size(); ++d) next[d] = next[d - 1] + r.send_counts[d - 1];
  r.sent.resize(pending.size());
  for (const auto& request : pending) {
    r.sent[static_cast<size_t>(next[static_cast<size_t>(request.second.device)]++)] = request;
  }
  // Where each distinct row's floats go in a flat buffer (the lookup's assembly of column
  // pieces; apply_gradients' sums). A row sent whole to one owner sits at its request's place
  // in send order, so that apply_gradients sends the sums where they are; rows sent in pieces
  // (column-wise) and rows held here (data-parallel) follow.
  r.row_offset.assign(r.unique.size(), -1);
  r.sent_floats = 0;
  for (const auto& [u, piece] : r.sent) {
    const int64_t width = piece.col_end - piece.col_begin;
    if (width == row_width(u)) r.row_offset[static_cast<size_t>(u)] = r.sent_floats;
    r.sent_floats += width;
  }
  r.row_floats = r.sent_floats;
  for (size_t u = 0; u < r.unique.size(); ++u) {
    if (r.row_offset[u] >= 0) continue;
    r.row_offset[u] = r.row_floats;
    r.row_floats += row_width(static_cast<int64_t>(u));
  }
  r.valid = true;
}

std::vector<Tensor> DeviceShards::lookup(const std::vector<FeatureIds>& features,
                                         Communicator& comm, const CollectiveOptions& options,
                                         bool forward, DeviceStepCounts& counts) {
  plan(features);
  LookupRecord& r = record_;
  const int n = layout_.num_devices;

  // 1. Requests to the owners: (table, local row, source) per piece, by destination.
  Tensor requests =
      reuse_buffer(buffers_.requests, Shape{static_cast<int64_t>(r.sent.size()), 3}, DType::kI64);
  int64_t* q = requests.data<int64_t>();
  for (const auto& [u, piece] : r.sent) {
    *q++ = r.unique[static_cast<size_t>(u)].first;
    *q++ = piece.local_row;
    *q++ = rank_;
  }
  const Tensor received = comm.all_to_all(requests, r.send_counts, options);
  counts.bytes_sent += bytes_to_others(r.send_counts, rank_, 3 * sizeof(int64_t));

  // 2. The owner's answer: its columns of each requested row, in request order.
  r.served.clear();
  r.served_counts.assign(static_cast<size_t>(n), 0);
  const int64_t* in = received.data<int64_t>();
  std::vector<int64_t> reply_counts(static_cast<size_t>(n), 0);
  int64_t reply_floats = 0;
  for (int64_t i = 0; i < received.shape()[0]; ++i) {
    const int table = static_cast<int>(in[3 * i]);
    const auto source = static_cast<size_t>(in[3 * i + 2]);
    r.served.emplace_back(table, in[3 * i + 1]);
    ++r.served_counts[source];
    const int64_t cols = shards_[static_cast<size_t>(table)].cols;
    reply_counts[source] += cols;
    reply_floats += cols;
  }
  for (const FeatureIds& f : features) counts.ids += static_cast<int64_t>(f.ids.size());
  counts.unique_ids += static_cast<int64_t>(r.unique.size());
  if (!forward) {  // BACKWARD_PASS_ONLY: the owners know the rows; no rows, no activations
    ++counts.collectives;
    return {};
  }
  Tensor reply = reuse_buffer(buffers_.reply, Shape{reply_floats}, DType::kF32);
  float* out = reply.data<float>();
  for (size_t i = 0; i < r.served.size(); ++i) {
    if (i + kPrefetchAhead < r.served.size()) {
      const auto [t, row] = r.served[i + kPrefetchAhead];
      const TableShard& ahead = shards_[static_cast<size_t>(t)];
      prefetch_row(ahead.data + row * ahead.cols, ahead.cols);
    }
    const auto [table, local_row] = r.served[i];
    const TableShard& shard = shards_[static_cast<size_t>(table)];
    const float* row = shard.data + local_row * shard.cols;
    out = std::copy(row, row + shard.cols, out);
  }
  const Tensor answered = comm.all_to_all(reply, reply_counts, options);
  counts.bytes_sent += bytes_to_others(reply_counts, rank_, sizeof(float));
  counts.collectives += 2;

  // 3. Where each distinct row is: in the answers (a whole row), in the local data-parallel
  // table, or assembled from its column pieces in `split`.
  std::vector<const float*>& row_at = buffers_.row_at;
  row_at.assign(r.unique.size(), nullptr);
  std::vector<float>& split = buffers_.split;
  split.resize(static_cast<size_t>(r.row_floats));
  const float* a = answered.data<float>();
  for (const auto& [u, piece] : r.sent) {
    const auto us = static_cast<size_t>(u);
    const int64_t width = piece.col_end - piece.col_begin;
    const int32_t dim = layout_.config.tables[static_cast<size_t>(r.unique[us].first)].dimension;
    if (width == dim) {
      row_at[us] = a;
    } else {
      std::copy(a, a + width, split.begin() + r.row_offset[us] + piece.col_begin);
      row_at[us] = split.data() + r.row_offset[us];
    }
    a += width;
  }
  for (size_t u = 0; u < r.unique.size(); ++u) {
    if (row_at[u] != nullptr) continue;  // data-parallel: the local copy
    const auto [table, row] = r.unique[u];
    const TableShard& shard = shards_[static_cast<size_t>(table)];
    row_at[u] = shard.data + row * shard.cols;
  }

  // 4. Combine each bag.
  std::vector<Tensor> activations;
  for (size_t f = 0; f < features.size(); ++f) {
    const int64_t dim =
        layout_.config.tables[static_cast<size_t>(layout_.config.features[f].table_id)].dimension;
    const std::vector<int64_t>& splits = r.row_splits[f];
    const auto bags = static_cast<int64_t>(splits.size()) - 1;
    // Written in full below (an empty bag gets zeros), so not zero-filled first.
    Tensor act = device_.allocate(Shape{bags, dim}, DType::kF32, /*zero_fill=*/false);
    float* o = act.data<float>();
    const std::vector<float>& scale = r.id_scale[f];
    const std::vector<int64_t>& uid = r.id_unique[f];
    for (int64_t b = 0; b < bags; ++b) {
      float* out = o + b * dim;
      const auto begin = static_cast<size_t>(splits[static_cast<size_t>(b)]);
      const auto end = static_cast<size_t>(splits[static_cast<size_t>(b) + 1]);
      if (begin == end) std::fill(out, out + dim, 0.0f);
      for (size_t k = begin; k < end; ++k) {
        if (k + kPrefetchAhead < uid.size()) {
          prefetch_row(row_at[static_cast<size_t>(uid[k + kPrefetchAhead])], dim);
        }
        const float s = scale[k];
        const float* src = row_at[static_cast<size_t>(uid[k])];
        if (k == begin) {  // the bag's first row initialises it (no zero fill, no extra pass)
          for (int64_t c = 0; c < dim; ++c) out[c] = s * src[c];
        } else {
          for (int64_t c = 0; c < dim; ++c) out[c] += s * src[c];
        }
      }
    }
    activations.push_back(act);
  }
  return activations;
}

void DeviceShards::apply_gradients(const std::vector<Tensor>& gradients,
                                   const std::vector<float>& learning_rates, Communicator& comm,
                                   const CollectiveOptions& options, DeviceStepCounts& counts) {
  LookupRecord& r = record_;
  r.valid = false;
  step_lr_.clear();
  for (const TableDescriptor& t : layout_.config.tables) {
    const OptimizationParameters& o = t.optimization_parameters;
    step_lr_.push_back(o.dynamic_learning_rate_tag < 0
                           ? o.learning_rate
                           : learning_rates[static_cast<size_t>(o.dynamic_learning_rate_tag)]);
  }
  const int n = layout_.num_devices;

  // 1. One gradient per distinct row: the bags' gradients times each id's factor, summed.
  // The ids are visited in the lookup's order, in which each distinct row got the next unique
  // index at its first id: that id initialises the row's sum (no zero fill first).
  Tensor sums = reuse_buffer(buffers_.reply, Shape{r.row_floats}, DType::kF32);
  float* const grads = sums.data<float>();
  int64_t first_unseen = 0;
  for (size_t f = 0; f < gradients.size(); ++f) {
    const Tensor g = gradients[f].contiguous();
    const int64_t dim = g.shape()[1];
    const float* gp = g.data<float>();
    const std::vector<int64_t>& splits = r.row_splits[f];
    const std::vector<int64_t>& uid = r.id_unique[f];
    const std::vector<float>& scale = r.id_scale[f];
    for (size_t b = 0; b + 1 < splits.size(); ++b) {
      const float* bag = gp + static_cast<int64_t>(b) * dim;
      for (auto k = static_cast<size_t>(splits[b]); k < static_cast<size_t>(splits[b + 1]); ++k) {
        if (k + kPrefetchAhead < uid.size()) {
          prefetch_row(grads + r.row_offset[static_cast<size_t>(uid[k + kPrefetchAhead])], dim);
        }
        const float s = scale[k];
        float* dst = grads + r.row_offset[static_cast<size_t>(uid[k])];
        if (uid[k] == first_unseen) {
          ++first_unseen;
          for (int64_t c = 0; c < dim; ++c) dst[c] = s * bag[c];
        } else {
          for (int64_t c = 0; c < dim; ++c) dst[c] += s * bag[c];
        }
      }
    }
  }

  // 2. Each piece's gradient to its owner, in the lookup's request order (ONE all-to-all-v).
  // Whole rows are in place already (plan); only the column pieces are copied to theirs.
  std::vector<int64_t> send_floats(static_cast<size_t>(n), 0);
  float* out = grads;
  for (const auto& [u, piece] : r.sent) {
    const int64_t width = piece.col_end - piece.col_begin;
    send_floats[static_cast<size_t>(piece.device)] += width;
    if (width != row_width(u)) {
      const float* src = grads + r.row_offset[static_cast<size_t>(u)];
      std::copy(src + piece.col_begin, src + piece.col_end, out);
    }
    out += width;
  }
  const Tensor send = sums.slice(0, 0, r.sent_floats);
  const Tensor received = comm.all_to_all(send, send_floats, options);
  counts.bytes_sent += bytes_to_others(send_floats, rank_, sizeof(float));
  ++counts.collectives;

  // 3. The owner sums the gradients of each of its rows (one request per device that looked it
  // up) and updates each touched row once. The rows are found by direct addressing (a slot per
  // local row, reset after the step), not hashed: a request costs one load. SGD is linear in
  // the gradient, so a plain SGD table's rows take each request's gradient as it comes
  // (w -= lr * g per request: the same update as with the sum, to rounding), with no sum.
  TouchedRows& touched = buffers_.touched;
  touched.rows.clear();
  touched.offset.clear();
  touched.updated_per_piece.clear();
  std::vector<float>& summed = touched.summed;
  summed.resize(static_cast<size_t>(received.num_elements()));  // an upper bound: no regrowth
  const float* in = received.data<float>();
  int64_t used = 0;
  touched.slots.resize(shards_.size());
  for (size_t i = 0; i < r.served.size(); ++i) {
    if (i + kPrefetchAhead < r.served.size()) {
      const auto [t, row] = r.served[i + kPrefetchAhead];
      const TableShard& shard = shards_[static_cast<size_t>(t)];
      if (applies_per_piece(t)) prefetch_row(shard.data + row * shard.cols, shard.cols);
      const std::vector<int32_t>& ahead = touched.slots[static_cast<size_t>(t)];
      if (!ahead.empty()) __builtin_prefetch(ahead.data() + row);
    }
    const auto [table, local_row] = r.served[i];
    const auto t = static_cast<size_t>(table);
    const int64_t cols = shards_[t].cols;
    if (!accumulates(table)) {
      update_row_with_piece(table, local_row, in, touched);
      in += cols;
      continue;
    }
    if (applies_per_piece(table)) {
      float* w = shards_[t].data + local_row * cols;
      const float lr = step_lr_[t];
      for (int64_t c = 0; c < cols; ++c) w[c] -= lr * in[c];
      in += cols;
      continue;
    }
    std::vector<int32_t>& slots = touched.slots[t];
    if (slots.empty()) slots.assign(static_cast<size_t>(shards_[t].values.shape()[0]), -1);
    int32_t& slot = slots[static_cast<size_t>(local_row)];
    if (slot < 0) {
      slot = static_cast<int32_t>(touched.rows.size());
      touched.rows.emplace_back(table, local_row);
      touched.offset.push_back(used);
      std::copy(in, in + cols, summed.data() + used);
      used += cols;
    } else {
      float* dst = summed.data() + touched.offset[static_cast<size_t>(slot)];
      for (int64_t c = 0; c < cols; ++c) dst[c] += in[c];
    }
    in += cols;
  }
  summed.resize(static_cast<size_t>(used));

  // 4. Data-parallel tables: the dense gradient, all-reduced (rows with a nonzero gradient).
  for (size_t t = 0; t < layout_.shardings.size(); ++t) {
    if (layout_.shardings[t].placement() != TablePlacement::kDataParallel) continue;
    const TableDescriptor& desc = layout_.config.tables[t];
    Tensor dense = Tensor::zeros(Shape{desc.vocabulary_size, desc.dimension}, DType::kF32);
    float* dp = dense.data<float>();
    for (size_t u = 0; u < r.unique.size(); ++u) {
      if (r.unique[u].first != static_cast<int>(t)) continue;
      const float* src = grads + r.row_offset[u];
      std::copy(src, src + desc.dimension, dp + r.unique[u].second * desc.dimension);
    }
    comm.all_reduce(dense, dense, ReduceOp::kSum, options);
    counts.bytes_sent += 2 * (n - 1) * static_cast<int64_t>(dense.nbytes()) / n;
    ++counts.collectives;
    for (int64_t row = 0; row < desc.vocabulary_size; ++row) {
      const float* g = dp + row * desc.dimension;
      if (std::all_of(g, g + desc.dimension, [](float v) { return v == 0.0f; })) continue;
      touched.rows.emplace_back(static_cast<int>(t), row);
      touched.offset.push_back(static_cast<int64_t>(summed.size()));
      summed.insert(summed.end(), g, g + desc.dimension);
    }
  }
  update_rows(touched);
  touched.forget_slots();
}

void DeviceShards::update_row_with_piece(int table, int64_t local_row, const float* piece,
                                         TouchedRows& touched) {
  TableShard& shard = shards_[static_cast<size_t>(table)];
  const int64_t base = local_row * shard.cols;
  touched.piece_slots.clear();  // kept from piece to piece: no allocation per row
  for (Tensor& slot : shard.slots) touched.piece_slots.push_back(slot.data<float>() + base);
  touched.piece.assign(piece, piece + shard.cols);  // the update clips it in place
  update_row(layout_.config.tables[static_cast<size_t>(table)].optimization_parameters,
             step_lr_[static_cast<size_t>(table)], shard.data + base, touched.piece_slots.data(),
             touched.piece.data(), shard.cols);
  touched.updated_per_piece.emplace_back(table, local_row);
}

void TouchedRows::forget_slots() {
  for (const auto& [table, local_row] : rows) {
    const auto t = static_cast<size_t>(table);
    // Data-parallel rows were never given a slot.
    if (t < slots.size() && !slots[t].empty()) slots[t][static_cast<size_t>(local_row)] = -1;
  }
}

void DeviceShards::update_rows(TouchedRows& touched) {
  std::vector<float*> slots;
  for (size_t i = 0; i < touched.rows.size(); ++i) {
    if (i + kPrefetchAhead < touched.rows.size()) {
      const auto [t, row] = touched.rows[i + kPrefetchAhead];
      const TableShard& ahead = shards_[static_cast<size_t>(t)];
      prefetch_row(ahead.data + row * ahead.cols, ahead.cols);
      for (const Tensor& slot : ahead.slots) {
        prefetch_row(slot.data<float>() + row * ahead.cols, ahead.cols);
      }
    }
    const auto [table, local_row] = touched.rows[i];
    const auto t = static_cast<size_t>(table);
    TableShard& shard = shards_[t];
    const int64_t base = local_row * shard.cols;
    slots.clear();
    for (Tensor& slot : shard.slots) slots.push_back(slot.data<float>() + base);
    update_row(layout_.config.tables[t].optimization_parameters, step_lr_[t], shard.data + base,
               slots.data(), touched.summed.data() + touched.offset[i], shard.cols);
  }
  for (size_t t = 0; t < shards_.size(); ++t) {
    const OptimizationParameters& o = layout_.config.tables[t].optimization_parameters;
    if (o.optimizer == EmbeddingOptimizer::kAdam && !o.lazy_adam) {
      update_untouched_rows(static_cast<int>(t), touched);
    }
  }
}

void DeviceShards::update_untouched_rows(int table, const TouchedRows& touched) {
  TableShard& shard = shards_[static_cast<size_t>(table)];
  const int64_t rows = shard.values.shape()[0];
  std::vector<bool> done(static_cast<size_t>(rows), false);
  for (const auto* rows : {&touched.rows, &touched.updated_per_piece}) {
    for (const auto& [t, row] : *rows) {
      if (t == table) done[static_cast<size_t>(row)] = true;
    }
  }
  std::vector<float> zero(static_cast<size_t>(shard.cols));
  std::vector<float*> slots(shard.slots.size());
  const auto ts = static_cast<size_t>(table);
  for (int64_t row = 0; row < rows; ++row) {
    if (done[static_cast<size_t>(row)]) continue;
    const int64_t base = row * shard.cols;
    for (size_t k = 0; k < slots.size(); ++k) slots[k] = shard.slots[k].data<float>() + base;
    std::fill(zero.begin(), zero.end(), 0.0f);  // update_row clips it in place
    update_row(layout_.config.tables[ts].optimization_parameters, step_lr_[ts], shard.data + base,
               slots.data(), zero.data(), shard.cols);
  }
}

}  // namespace tessel::detail
