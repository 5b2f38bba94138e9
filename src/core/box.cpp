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
    // Device memory: the region moves through host copies (whole blocks, then one copy back).
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
  const int rank = region.rank();
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  if (rank == 0) {
    std::memcpy(out, in, item);
    return;
  }
  const std::vector<int64_t>& sdims = src_block.extents;
  const std::vector<int64_t>& ddims = dst_block.extents;
  const std::vector<int64_t>& src_origin = src_block.offsets;
  const std::vector<int64_t>& dst_origin = dst_block.offsets;
  // Trailing dimensions the region spans in full in both tensors merge into one run: the run
  // covers dimensions [inner, rank) and starts at the region's corner in each.
  int inner = rank - 1;
  int64_t run = region.extents[inner];
  while (inner > 0 && region.extents[inner] == sdims[inner] && region.extents[inner] == ddims[inner]) {
    --inner;
    run *= region.extents[inner];
  }
  // Element strides of both tensors, and the region's corner in each.
  std::vector<int64_t> sstride(rank, 1), dstride(rank, 1);
  for (int d = rank - 2; d >= 0; --d) {
    sstride[d] = sstride[d + 1] * sdims[d + 1];
    dstride[d] = dstride[d + 1] * ddims[d + 1];
  }
  int64_t sbase = 0, dbase = 0;
  for (int d = 0; d < rank; ++d) {
    sbase += (region.offsets[d] - src_origin[d]) * sstride[d];
    dbase += (region.offsets[d] - dst_origin[d]) * dstride[d];
  }
  // Odometer over the outer dimensions [0, inner), one memcpy per run.
  const size_t run_bytes = static_cast<size_t>(run) * item;
  std::vector<int64_t> index(inner, 0);
  while (true) {
    int64_t so = sbase, doff = dbase;
    for (int d = 0; d < inner; ++d) {
      so += index[d] * sstride[d];
      doff += index[d] * dstride[d];
    }
    std::memcpy(out + doff * item, in + so * item, run_bytes);
    int d = inner - 1;
    while (d >= 0 && ++index[d] == region.extents[d]) index[d--] = 0;
    if (d < 0) break;
  }
}

}  // namespace tessel
