// Recursive halving-doubling all-reduce (Rabenseifner): lg P exchange steps that halve the
// range each rank is responsible for (reduce-scatter), then lg P steps that double it back
// (all-gather): 2·lg P·alpha + 2·(P-1)/P·S·beta. With N not a power of two, the N - P ranks
// above the largest power of two P first fold their data into rank r - P and get the result
// back at the end.
#include <cstring>
#include <utility>
#include <vector>

#include "comm/algorithms.h"
#include "comm/reduce_kernels.h"
#include "comm/segments.h"

namespace tessel::detail {

void halving_doubling_all_reduce(Transport& t, const AllReduceArgs& a) {
  const int n = t.size();
  const int r = t.rank();
  if (a.output != a.input && a.count > 0) {
    std::memcpy(a.output, a.input, a.count * dtype_size(a.dtype));
  }
  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  SegmentedLink link(t, a);
  if (r >= p2) {  // fold into the partner below, then wait for the result
    link.send(r - p2, a.output, 0, a.count);
    link.recv(r - p2, a.output, 0, a.count);
    return;
  }
  if (r + p2 < n) link.recv_reduce(r + p2, a.output, 0, a.count);

  // Halving: keep one half of the current range, give the partner the other.
  std::vector<std::pair<int64_t, int64_t>> levels;
  int64_t lo = 0, hi = a.count;
  for (int d = p2 / 2; d >= 1; d /= 2) {
    levels.emplace_back(lo, hi);
    const int partner = r ^ d;
    const int64_t mid = lo + (hi - lo) / 2;
    const bool lower = (r & d) == 0;
    const int64_t keep_lo = lower ? lo : mid, keep_hi = lower ? mid : hi;
    const int64_t give_lo = lower ? mid : lo, give_hi = lower ? hi : mid;
    link.send(partner, a.output, give_lo, give_hi - give_lo);
    link.recv_reduce(partner, a.output, keep_lo, keep_hi - keep_lo);
    lo = keep_lo;
    hi = keep_hi;
  }
  finish_mean(a.dtype, a.op, static_cast<uint8_t*>(a.output) + lo * dtype_size(a.dtype), hi - lo, n);

  // Doubling: swap finished ranges with the same partners in reverse order.
  for (int d = 1, level = static_cast<int>(levels.size()) - 1; d < p2; d *= 2, --level) {
    const int partner = r ^ d;
    const auto [level_lo, level_hi] = levels[static_cast<size_t>(level)];
    link.send(partner, a.output, lo, hi - lo);
    const bool mine_is_lower = lo == level_lo;
    const int64_t other_lo = mine_is_lower ? hi : level_lo;
    const int64_t other_hi = mine_is_lower ? level_hi : lo;
    link.recv(partner, a.output, other_lo, other_hi - other_lo);
    lo = level_lo;
    hi = level_hi;
  }
  if (r + p2 < n) link.send(r + p2, a.output, 0, a.count);
}

}  // namespace tessel::detail
