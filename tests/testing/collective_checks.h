// Rank-local checks of the collectives other than all_reduce, for any group: in-process, MPI
// (make_mpi_communicator) or hierarchical across processes. Every rank of the group calls the
// same check with the same options; each runs its collective over every dtype (and reduce op),
// every root, uneven and zero counts, and compares each result with a reference computed here
// from the rank numbers alone (values exact in every dtype), throwing std::runtime_error naming
// the case at the first difference. A rank that throws should abort its group (or let the
// caller's harness do it) so that the others stop waiting.
//
// `memory` says where a check's tensors live: host memory (null) or a device's allocator (a
// GPU's, or a simulated GPU's), so that the same cases run on device memory. Every result must
// then be in that memory too (where a collective stages through the host, it copies back).
//
//   auto comm = make_mpi_communicator();
//   testing::check_reduce_scatter(*comm, options);   // on every process
//   for (const NamedCheck& c : testing::collective_checks()) c.check(*comm, options, nullptr);
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "tessel/comm/communicator.h"
#include "tessel/core/box.h"
#include "tessel/mesh/shard_range.h"
#include "testing/reduction_reference.h"

namespace tessel::testing::collective_checks_detail {

inline const DType kAllDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                                   DType::kI32, DType::kI64, DType::kU8,   DType::kBool};
inline const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin,
                                   ReduceOp::kProd};

// A value exact in every dtype (0..96; bool 0/1) derived from `key`.
inline double exact(DType dtype, int64_t key) {
  return dtype == DType::kBool ? static_cast<double>(key % 2) : static_cast<double>(key % 97);
}

// `host` copied into `memory` (a device's allocator); `host` itself when memory is null.
inline Tensor placed(const Tensor& host, Allocator* memory) {
  if (memory == nullptr || !host.defined()) return host;
  Tensor out = Tensor::empty(host.shape(), host.dtype(), memory, /*zero_fill=*/false);
  out.copy_from(host);
  return out;
}

inline Tensor tensor_with(const Shape& shape, DType dtype, const std::function<double(int64_t)>& value,
                          Allocator* memory = nullptr) {
  std::vector<double> v(static_cast<size_t>(shape.num_elements()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = value(static_cast<int64_t>(i));
  return placed(Tensor::from_vector<double>(v, shape).astype(dtype), memory);
}

// Throws unless `got` has `shape`, `dtype` and the values of `value` (rounded to dtype), and
// lives in `memory` (host memory when null).
inline void expect_tensor(const std::string& what, const Tensor& got, const Shape& shape, DType dtype,
                          const std::function<double(int64_t)>& value, Allocator* memory = nullptr) {
  auto fail = [&](const std::string& why) {
    throw std::runtime_error(what + ": " + why + "; got " +
                             (got.defined() ? got.to_host().to_string() : "null"));
  };
  if (!got.defined()) fail("a null tensor");
  if (!(got.shape() == shape)) fail("shape " + got.shape().to_string() + ", want " + shape.to_string());
  if (got.dtype() != dtype) fail("dtype " + std::string(dtype_name(got.dtype())));
  const MemorySpace space = memory == nullptr ? MemorySpace::host() : memory->memory_space();
  if (!(got.memory_space() == space)) {
    fail("in " + got.memory_space().to_string() + " memory, want " + space.to_string());
  }
  const std::vector<double> have = got.to_host().to_doubles();
  const std::vector<double> want = tensor_with(shape, dtype, value).to_doubles();
  for (size_t i = 0; i < want.size(); ++i) {
    if (have[i] != want[i]) {
      fail("element " + std::to_string(i) + " is " + std::to_string(have[i]) + ", want " + std::to_string(want[i]));
    }
  }
}

inline std::string case_name(const std::string& op, DType dtype, const std::string& more) {
  return op + " " + std::string(dtype_name(dtype)) + " " + more;
}

inline std::vector<int64_t> chunk_counts(int64_t rows, int n) {
  std::vector<int64_t> counts(n);
  for (int k = 0; k < n; ++k) counts[k] = shard_range(rows, n, k).extent;
  return counts;
}

inline int64_t sum_before(const std::vector<int64_t>& counts, int k) {
  int64_t s = 0;
  for (int j = 0; j < k; ++j) s += counts[j];
  return s;
}

inline int64_t sum_of(const std::vector<int64_t>& counts) { return sum_before(counts, static_cast<int>(counts.size())); }

// Uneven row counts with zeros (ranks 1, 4, 7, ...).
inline std::vector<int64_t> uneven_counts(int n) {
  std::vector<int64_t> counts(n);
  for (int k = 0; k < n; ++k) counts[k] = k % 3 == 1 ? 0 : k % 4 + 1;
  return counts;
}

}  // namespace tessel::testing::collective_checks_detail

namespace tessel::testing {

// all_reduce, every dtype and op, 0..1023 elements, out of place and in place.
inline void check_all_reduce(Communicator& c, const CollectiveOptions& o, Allocator* memory = nullptr) {
  using namespace collective_checks_detail;
  const int n = c.size(), r = c.rank();
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : kAllOps) {
      if (dtype == DType::kBool && op == ReduceOp::kMean) continue;
      for (int64_t count : {0, 1, 7, 1023}) {
        const Shape shape{count};
        auto input = [&](int64_t i) { return reduction_input(op, dtype, r, i); };
        auto expected = [&](int64_t i) { return reduction_expected(op, dtype, n, i); };
        const std::string what = case_name("all_reduce", dtype, std::string(reduce_op_name(op)) + " count " +
                                                                    std::to_string(count));
        const Tensor in = tensor_with(shape, dtype, input, memory);
        Tensor out = placed(Tensor::zeros(shape, dtype), memory);
        c.all_reduce(in, out, op, o);
        expect_tensor(what, out, shape, dtype, expected, memory);
        expect_tensor(what + " (input unchanged)", in, shape, dtype, input, memory);
        Tensor both = tensor_with(shape, dtype, input, memory);
        c.all_reduce(both, both, op, o);
        expect_tensor(what + " in place", both, shape, dtype, expected, memory);
      }
    }
  }
}

// send/recv around the ring, every dtype: two messages under one tag (delivered in order), one
// under another, an empty one; then every pair. A group of one has no peer: nothing to check.
inline void check_send_recv(Communicator& c, const CollectiveOptions& o, Allocator* memory = nullptr) {
  using namespace collective_checks_detail;
  const int n = c.size(), r = c.rank();
  if (n == 1) return;
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  for (DType dtype : kAllDTypes) {
    auto from = [&](int who) { return [&, who](int64_t i) { return exact(dtype, who * 7 + i); }; };
    c.send(tensor_with(Shape{5}, dtype, from(r), memory), right, 1, o);
    c.send(tensor_with(Shape{3}, dtype, from(r + 1), memory), right, 2, o);
    c.send(tensor_with(Shape{2, 2}, dtype, from(r + 2), memory), right, 1, o);
    c.send(placed(Tensor::zeros(Shape{0}, dtype), memory), right, 3, o);
    Tensor a = placed(Tensor::zeros(Shape{5}, dtype), memory), b = placed(Tensor::zeros(Shape{3}, dtype), memory);
    Tensor d = placed(Tensor::zeros(Shape{4}, dtype), memory), e = placed(Tensor::zeros(Shape{0}, dtype), memory);
    c.recv(e, left, 3, o);
    c.recv(b, left, 2, o);
    c.recv(a, left, 1, o);
    c.recv(d, left, 1, o);  // the same byte count as sent in another shape: allowed
    const std::string what = case_name("send/recv", dtype, "from " + std::to_string(left));
    expect_tensor(what + " tag 1 first", a, Shape{5}, dtype, from(left), memory);
    expect_tensor(what + " tag 2", b, Shape{3}, dtype, from(left + 1), memory);
    expect_tensor(what + " tag 1 second", d, Shape{4}, dtype, from(left + 2), memory);
    expect_tensor(what + " tag 3 empty", e, Shape{0}, dtype, from(left), memory);
  }
  for (int to = 0; to < n; ++to) {
    if (to != r) c.send(tensor_with(Shape{4}, DType::kI64, [&](int64_t) { return r * 100 + to; }, memory), to, 7, o);
  }
  for (int peer = n - 1; peer >= 0; --peer) {
    if (peer == r) continue;
    Tensor t = placed(Tensor::zeros(Shape{4}, DType::kI64), memory);
    c.recv(t, peer, 7, o);
    expect_tensor("send/recv pair " + std::to_string(peer) + "->" + std::to_string(r), t, Shape{4}, DType::kI64,
                  [&](int64_t) { return peer * 100 + r; }, memory);
  }
}

// reduce to every root, every dtype and op, 0..1023 elements; non-root outputs (null or a
// sentinel) stay untouched.
inline void check_reduce(Communicator& c, const CollectiveOptions& o, Allocator* memory = nullptr) {
  using namespace collective_checks_detail;
  const int n = c.size(), r = c.rank();
  for (int root = 0; root < n; ++root) {
    for (DType dtype : kAllDTypes) {
      for (ReduceOp op : kAllOps) {
        if (dtype == DType::kBool && op == ReduceOp::kMean) continue;
        for (int64_t count : {0, 1, 7, 1023}) {
          const Shape shape{count};
          const Tensor in = tensor_with(shape, dtype, [&](int64_t i) { return reduction_input(op, dtype, r, i); }, memory);
          Tensor out = r == root     ? placed(Tensor::zeros(shape, dtype), memory)
                       : r % 2 == 1 ? placed(Tensor::full(shape, dtype, 1), memory)
                                    : Tensor();
          c.reduce(in, out, op, root, o);
          const std::string what = case_name("reduce", dtype, std::string(reduce_op_name(op)) + " root " +
                                                                  std::to_string(root) + " count " + std::to_string(count));
          if (r == root) {
            expect_tensor(what, out, shape, dtype, [&](int64_t i) { return reduction_expected(op, dtype, n, i); }, memory);
          } else if (out.defined()) {
            expect_tensor(what + " (non-root output)", out, shape, dtype, [](int64_t) { return 1.0; }, memory);
          }
        }
      }
    }
  }
}

// broadcast from every root, every dtype, 0 to 70000 elements (1000 with small segments: already
// tens of them).
inline void check_broadcast(Communicator& c, const CollectiveOptions& o, Allocator* memory = nullptr) {
  using namespace collective_checks_detail;
  const int n = c.size(), r = c.rank();
  const std::vector<int64_t> counts =
      o.segment_bytes == 0 || o.segment_bytes >= 4096 ? std::vector<int64_t>{0, 1, 1000, 70000}
                                                      : std::vector<int64_t>{0, 1, 1000};
  for (int root = 0; root < n; ++root) {
    for (DType dtype : kAllDTypes) {
      for (int64_t count : counts) {
        const Shape shape{count};
        Tensor t = tensor_with(shape, dtype, [&](int64_t i) { return exact(dtype, r * 13 + i); }, memory);
        c.broadcast(t, root, o);
        expect_tensor(case_name("broadcast", dtype, "root " + std::to_string(root) + " count " + std::to_string(count)),
                      t, shape, dtype, [&](int64_t i) { return exact(dtype, root * 13 + i); }, memory);
      }
    }
  }
}

// all_gather, and gather to every root, along axes 0, 1 and -1 of [2, 3, 4]-based blocks whose
// sizes along the axis are uneven (zero on some ranks). Element values are their flat index in
// the gathered tensor, so the reference is the index itself.
inline void check_gathers(Communicator& c, const CollectiveOptions& o, Allocator* memory = nullptr) {
  using namespace collective_checks_detail;
  const int n = c.size(), r = c.rank();
  const std::vector<int64_t> base = {2, 3, 4};
  const std::vector<int64_t> sizes = uneven_counts(n);
  for (DType dtype : kAllDTypes) {
    for (int axis : {0, 1, -1}) {
      const int a = axis < 0 ? axis + 3 : axis;
      std::vector<int64_t> mine = base, whole = base;
      mine[a] = sizes[r];
      whole[a] = sum_of(sizes);
      // Element (i0, i1, i2) of this rank's block is element (.., offset + i_a, ..) of the whole.
      const Tensor in = tensor_with(Shape(mine), dtype, [&](int64_t f) {
        std::vector<int64_t> index(3);
        for (int d = 2; d >= 0; --d) {
          index[d] = f % mine[d];
          f /= mine[d];
        }
        index[a] += sum_before(sizes, r);
        return exact(dtype, (index[0] * whole[1] + index[1]) * whole[2] + index[2]);
      }, memory);
      auto flat = [&](int64_t f) { return exact(dtype, f); };
      const std::string axis_text = "axis " + std::to_string(axis);
      expect_tensor(case_name("all_gather", dtype, axis_text), c.all_gather(in, axis, o), Shape(whole), dtype, flat, memory);
      for (int root = 0; root < n; ++root) {
        const Tensor got = c.gather(in, root, axis, o);
        const std::string what = case_name("gather", dtype, axis_text + " root " + std::to_string(root));
        if (r == root) {
          expect_tensor(what, got, Shape(whole), dtype, flat, memory);
        } else if (got.defined()) {
          throw std::runtime_error(what + ": a non-root got a tensor");
        }
      }
    }
  }
}

// reduce_scatter of [rows, 3] with chunk semantics (fewer rows than ranks, uneven, even) and
// with explicit uneven counts including zeros, every dtype and op.
inline void check_reduce_scatter(Communicator& c, const CollectiveOptions& o, Allocator* memory = nullptr) {
  using namespace collective_checks_detail;
  const int n = c.size(), r = c.rank();
  constexpr int64_t kCols = 3;
  const std::vector<int64_t> row_cases = {0, 1, n + 1, 3 * n};
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : kAllOps) {
      if (dtype == DType::kBool && op == ReduceOp::kMean) continue;
      for (int variant = 0; variant <= static_cast<int>(row_cases.size()); ++variant) {
        const bool explicit_counts = variant == static_cast<int>(row_cases.size());
        const std::vector<int64_t> counts = explicit_counts ? uneven_counts(n) : chunk_counts(row_cases[variant], n);
        const int64_t rows = sum_of(counts);
        const Tensor in = tensor_with(Shape{rows, kCols}, dtype, [&](int64_t i) { return reduction_input(op, dtype, r, i); }, memory);
        const Tensor got = c.reduce_scatter(in, op, explicit_counts ? counts : std::vector<int64_t>{}, o);
        const int64_t first = sum_before(counts, r) * kCols;
        expect_tensor(case_name("reduce_scatter", dtype, std::string(reduce_op_name(op)) + " rows " + std::to_string(rows) +
                                                             (explicit_counts ? " counts" : " chunks")),
                      got, Shape{counts[r], kCols}, dtype,
                      [&](int64_t i) { return reduction_expected(op, dtype, n, first + i); }, memory);
      }
    }
  }
}

// all_to_all with equal splits (0, 1 and 3 rows per peer) and with unequal send counts
// including zeros, every dtype. Row j of the block rank `from` sends rank `to` holds values
// derived from (from, to, j).
inline void check_all_to_all(Communicator& c, const CollectiveOptions& o, Allocator* memory = nullptr) {
  using namespace collective_checks_detail;
  const int n = c.size(), r = c.rank();
  constexpr int64_t kCols = 2;
  for (DType dtype : kAllDTypes) {
    for (int variant = 0; variant < 4; ++variant) {
      auto send_count = [&](int from, int to) -> int64_t {
        return variant < 3 ? std::vector<int64_t>{0, 1, 3}[variant] : (from + 2 * to) % 3;
      };
      auto value = [&](int from, int to, int64_t j, int64_t col) { return exact(dtype, from * 31 + to * 7 + j * 3 + col); };
      std::vector<int64_t> send(n);
      for (int k = 0; k < n; ++k) send[k] = send_count(r, k);
      std::vector<double> in_values, want;
      for (int k = 0; k < n; ++k) {
        for (int64_t j = 0; j < send[k]; ++j) {
          for (int64_t col = 0; col < kCols; ++col) in_values.push_back(value(r, k, j, col));
        }
        for (int64_t j = 0; j < send_count(k, r); ++j) {
          for (int64_t col = 0; col < kCols; ++col) want.push_back(value(k, r, j, col));
        }
      }
      const int64_t in_rows = sum_of(send), out_rows = static_cast<int64_t>(want.size()) / kCols;
      const Tensor in = tensor_with(Shape{in_rows, kCols}, dtype, [&](int64_t i) { return in_values[static_cast<size_t>(i)]; }, memory);
      const Tensor got = c.all_to_all(in, variant < 3 ? std::vector<int64_t>{} : send, o);
      expect_tensor(case_name("all_to_all", dtype, variant < 3 ? "equal " + std::to_string(send[0]) : "unequal"), got,
                    Shape{out_rows, kCols}, dtype, [&](int64_t i) { return want[static_cast<size_t>(i)]; }, memory);
    }
  }
}

// scatter from every root, chunk semantics (0, N-1 and 2N+1 rows) and explicit uneven counts;
// non-roots pass a null tensor or an ignored one of another dtype.
inline void check_scatter(Communicator& c, const CollectiveOptions& o, Allocator* memory = nullptr) {
  using namespace collective_checks_detail;
  const int n = c.size(), r = c.rank();
  constexpr int64_t kCols = 2;
  for (int root = 0; root < n; ++root) {
    for (DType dtype : kAllDTypes) {
      for (int64_t rows : {int64_t{0}, int64_t{n - 1}, int64_t{2 * n + 1}, int64_t{-1}}) {
        const bool explicit_counts = rows < 0;
        const std::vector<int64_t> counts = explicit_counts ? uneven_counts(n) : chunk_counts(rows, n);
        rows = sum_of(counts);
        auto value = [&](int64_t i) { return exact(dtype, root * 5 + i); };
        Tensor in;
        if (r == root) {
          in = tensor_with(Shape{rows, kCols}, dtype, value, memory);
        } else if (r % 2 == 1) {
          in = placed(Tensor::zeros(Shape{5}, DType::kI32), memory);
        }
        const Tensor got = c.scatter(in, root, explicit_counts ? counts : std::vector<int64_t>{}, o);
        const int64_t first = sum_before(counts, r) * kCols;
        // The block lands in the memory of this rank's input: host memory for a null one.
        expect_tensor(case_name("scatter", dtype, "root " + std::to_string(root) + " rows " + std::to_string(rows)),
                      got, Shape{counts[r], kCols}, dtype, [&](int64_t i) { return value(first + i); },
                      in.defined() ? memory : nullptr);
      }
    }
  }
}

// reduce_scatter_boxes of a [N+2, 5] block into row boxes (chunk semantics: the last ranks'
// boxes may be empty, with a null output) and into column boxes, f32, bf16 and i64, every op.
inline void check_reduce_scatter_boxes(Communicator& c, const CollectiveOptions& o, Allocator* memory = nullptr) {
  using namespace collective_checks_detail;
  const int n = c.size(), r = c.rank();
  const std::vector<int64_t> dims = {n + 2, 5};
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kI64}) {
    for (ReduceOp op : kAllOps) {
      for (bool by_rows : {true, false}) {
        std::vector<Box> boxes;
        for (int k = 0; k < n; ++k) {
          const ShardRange s = shard_range(dims[by_rows ? 0 : 1], n, k);
          boxes.push_back(by_rows ? Box{{s.offset, 0}, {s.extent, dims[1]}} : Box{{0, s.offset}, {dims[0], s.extent}});
        }
        const Tensor in = tensor_with(Shape(dims), dtype, [&](int64_t i) { return reduction_input(op, dtype, r, i); }, memory);
        const Box& mine = boxes[r];
        Tensor out = mine.empty() ? Tensor() : placed(Tensor::zeros(Shape(mine.extents), dtype), memory);
        c.reduce_scatter_boxes(in, {0, 0}, out, boxes, op, o);
        if (mine.empty()) continue;
        expect_tensor(case_name("reduce_scatter_boxes", dtype, std::string(reduce_op_name(op)) + " box " + mine.to_string()),
                      out, Shape(mine.extents), dtype, [&](int64_t i) {
                        const int64_t row = mine.offsets[0] + i / mine.extents[1];
                        const int64_t col = mine.offsets[1] + i % mine.extents[1];
                        return reduction_expected(op, dtype, n, row * dims[1] + col);
                      }, memory);
      }
    }
  }
}

// The checks above by name, for parameterised suites.
struct NamedCheck {
  const char* name;
  void (*check)(Communicator&, const CollectiveOptions&, Allocator* memory);
};

// gtest prints a parameter by its name.
inline void PrintTo(const NamedCheck& check, std::ostream* os) { *os << check.name; }

inline const std::vector<NamedCheck>& collective_checks() {
  static const std::vector<NamedCheck> checks = {
      {"reduce", check_reduce},
      {"broadcast", check_broadcast},
      {"all_gather_and_gather", check_gathers},
      {"reduce_scatter", check_reduce_scatter},
      {"all_to_all", check_all_to_all},
      {"scatter", check_scatter},
      {"reduce_scatter_boxes", check_reduce_scatter_boxes},
  };
  return checks;
}

// gtest parameters: every check, with whole blocks per message (segment 0) and with 40-byte
// messages (many per block, a broadcast down the chain).
using CheckParam = std::tuple<NamedCheck, size_t>;

inline auto every_check_and_segment() {
  return ::testing::Combine(::testing::ValuesIn(collective_checks()), ::testing::Values(size_t{0}, size_t{40}));
}

inline std::string check_param_name(const ::testing::TestParamInfo<CheckParam>& info) {
  const auto& [check, segment_bytes] = info.param;
  return std::string(check.name) +
         (segment_bytes == 0 ? std::string("_whole_blocks") : "_segment" + std::to_string(segment_bytes));
}

}  // namespace tessel::testing
