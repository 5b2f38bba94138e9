// Box arithmetic and copy_box: the block copies that relayout is made of.
#include "tessel/core/box.h"

#include <algorithm>
#include <cstring>

#include "core/errors.h"

namespace tessel {
namespace {

constexpr std::string_view kBox = "Box";

// The block a contiguous tensor holds: `origin` with the tensor's extents.
Box held_block(const Tensor& t, const std::vector<int64_t>& origin) {
  return Box{origin, t.shape().dims()};
}

void check_holder(const Tensor& t, const std::vector<int64_t>& origin, const Box& region,
                  std::string_view what) {
  if (!t.defined()) detail::throw_invalid(kBox, "copy_box: {} is a null tensor", what);
  if (!t.is_contiguous()) {
    detail::throw_invalid(kBox, "copy_box: {} of shape {} is a strided view", what,
                          t.shape().to_string());
  }
  if (static_cast<int>(origin.size()) != t.rank()) {
    detail::throw_invalid(kBox, "copy_box: {} origin [{}] has {} entries for a tensor of rank {}",
                          what, fmt::join(origin, ","), origin.size(), t.rank());
  }
  const Box held = held_block(t, origin);
  if (!held.contains(region)) {
    detail::throw_invalid(kBox, "copy_box: region {} is not inside the {} block {}",
                          region.to_string(), what, held.to_string());
  }
}

}  // namespace

int64_t Box::num_elements() const {
  int64_t n = 1;
  for (int64_t e : extents) n *= e;
  return n;
}

bool Box::contains(const Box& other) const {
  if (other.rank() != rank() || other.extents.size() != other.offsets.size()) return false;
  if (other.empty()) return true;
  for (int d = 0; d < rank(); ++d) {
    if (other.offsets[d] < offsets[d] ||
        other.offsets[d] + other.extents[d] > offsets[d] + extents[d]) {
      return false;
    }
  }
  return true;
}

std::string Box::to_string() const {
  std::vector<std::string> parts;
  for (int d = 0; d < rank(); ++d) {
    const int64_t extent = d < static_cast<int>(extents.size()) ? extents[d] : 0;
    parts.push_back(fmt::format("{}:{}", offsets[d], offsets[d] + extent));
  }
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

Box intersect(const Box& a, const Box& b) {
  if (a.rank() != b.rank()) {
    detail::throw_invalid(kBox, "intersect: boxes {} and {} have ranks {} and {}", a.to_string(),
                          b.to_string(), a.rank(), b.rank());
  }
  Box out;
  for (int d = 0; d < a.rank(); ++d) {
    const int64_t lo = std::max(a.offsets[d], b.offsets[d]);
    const int64_t hi = std::min(a.offsets[d] + a.extents[d], b.offsets[d] + b.extents[d]);
    out.offsets.push_back(lo);
    out.extents.push_back(std::max<int64_t>(0, hi - lo));
  }
  return out;
}

namespace {

// How a region of a row-major block maps onto contiguous runs: the trailing dimensions the region
// spans in full in both blocks merge into one run of `run` elements covering dimensions
// [inner, rank); every other dimension is walked. Element strides and the region's corner in
// each block come with it. A region of rank 0 is one run of one element.
struct BoxRuns {
  int inner = 0;
  int64_t run = 1;
  std::vector<int64_t> sstride, dstride;  // element strides of the source and destination blocks
  int64_t sbase = 0, dbase = 0;           // the region's corner in each
  std::vector<int64_t> extents;           // the region's

  BoxRuns(const Box& src_block, const Box& dst_block, const Box& region)
      : extents(region.extents) {
    const int rank = region.rank();
    if (rank == 0) return;
    const std::vector<int64_t>& sdims = src_block.extents;
    const std::vector<int64_t>& ddims = dst_block.extents;
    inner = rank - 1;
    run = region.extents[inner];
    while (inner > 0 && region.extents[inner] == sdims[inner] &&
           region.extents[inner] == ddims[inner]) {
      --inner;
      run *= region.extents[inner];
    }
    sstride.assign(rank, 1);
    dstride.assign(rank, 1);
    for (int d = rank - 2; d >= 0; --d) {
      sstride[d] = sstride[d + 1] * sdims[d + 1];
      dstride[d] = dstride[d + 1] * ddims[d + 1];
    }
    for (int d = 0; d < rank; ++d) {
      sbase += (region.offsets[d] - src_block.offsets[d]) * sstride[d];
      dbase += (region.offsets[d] - dst_block.offsets[d]) * dstride[d];
    }
  }

  // Calls f(source offset, destination offset), in elements, for each index of the dimensions
  // [0, outer) (an odometer; once when outer is 0).
  template <typename F>
  void for_each(int outer, F&& f) const {
    std::vector<int64_t> index(static_cast<size_t>(outer), 0);
    while (true) {
      int64_t so = sbase, doff = dbase;
      for (int d = 0; d < outer; ++d) {
        so += index[d] * sstride[d];
        doff += index[d] * dstride[d];
      }
      f(so, doff);
      int d = outer - 1;
      while (d >= 0 && ++index[d] == extents[d]) index[d--] = 0;
      if (d < 0) return;
    }
  }
};

// copy_box within one device's memory: each run is a row, the dimension just outside the runs
// gives the rows of one strided copy (DeviceMemoryOps::copy_rows), and the dimensions outside
// that are walked, one strided copy each.
void copy_box_on_device(const Tensor& src, const Box& src_block, Tensor& dst, const Box& dst_block,
                        const Box& region) {
  if (region.empty()) return;
  DeviceMemoryOps& ops = device_memory_ops("copy_box", dst.memory_space());
  const size_t item = dtype_size(src.dtype());
  const auto* in = static_cast<const uint8_t*>(src.data_ptr());
  auto* out = static_cast<uint8_t*>(dst.data_ptr());
  const BoxRuns runs(src_block, dst_block, region);
  const size_t row_bytes = static_cast<size_t>(runs.run) * item;
  if (runs.inner == 0) {  // one run
    ops.copy_rows(out + runs.dbase * item, row_bytes, in + runs.sbase * item, row_bytes, row_bytes,
                  1, dst.memory_space());
    return;
  }
  const int rows_dim = runs.inner - 1;
  const auto rows = static_cast<size_t>(region.extents[rows_dim]);
  const size_t src_pitch = static_cast<size_t>(runs.sstride[rows_dim]) * item;
  const size_t dst_pitch = static_cast<size_t>(runs.dstride[rows_dim]) * item;
  runs.for_each(rows_dim, [&](int64_t so, int64_t doff) {
    ops.copy_rows(out + doff * item, dst_pitch, in + so * item, src_pitch, row_bytes, rows,
                  dst.memory_space());
  });
}

}  // namespace

void copy_box(const Tensor& src, const std::vector<int64_t>& src_origin, Tensor& dst,
              const std::vector<int64_t>& dst_origin, const Box& region) {
  if (region.extents.size() != region.offsets.size() ||
      std::any_of(region.extents.begin(), region.extents.end(), [](int64_t e) { return e < 0; })) {
    detail::throw_invalid(kBox, "copy_box: region has offsets [{}] and extents [{}]",
                          fmt::join(region.offsets, ","), fmt::join(region.extents, ","));
  }
  check_holder(src, src_origin, region, "source");
  check_holder(dst, dst_origin, region, "destination");
  if (src.dtype() != dst.dtype()) {
    detail::throw_invalid(kBox, "copy_box: source is {} but destination is {}",
                          dtype_name(src.dtype()), dtype_name(dst.dtype()));
  }
  if (!src.memory_space().is_host() || !dst.memory_space().is_host()) {
    if (src.memory_space() == dst.memory_space()) {
      // Within one device's memory: strided copies on the device (DeviceMemoryOps::copy_rows).
      copy_box_on_device(src, held_block(src, src_origin), dst, held_block(dst, dst_origin), region);
      return;
    }
    // Between memories: the region moves through host copies (whole blocks, then one copy back).
    Tensor staged = dst.to_host();  // dst itself when it is in host memory
    copy_box(src.to_host(), src_origin, staged, dst_origin, region);
    if (!staged.shares_storage_with(dst)) dst.copy_from(staged);
    return;
  }
  copy_box_bytes(src.data(), held_block(src, src_origin), dst.data(), held_block(dst, dst_origin),
                 region, dtype_size(src.dtype()));
}

void copy_box_bytes(const void* src, const Box& src_block, void* dst, const Box& dst_block,
                    const Box& region, size_t item) {
  if (region.empty()) return;
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  const BoxRuns runs(src_block, dst_block, region);
  const size_t run_bytes = static_cast<size_t>(runs.run) * item;
  runs.for_each(runs.inner, [&](int64_t so, int64_t doff) {
    std::memcpy(out + doff * item, in + so * item, run_bytes);
  });
}

}  // namespace tessel
