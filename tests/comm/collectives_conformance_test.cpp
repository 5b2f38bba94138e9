// Conformance of the collectives other than all-reduce on the in-process transport (world sizes
// 1..8: the direct versions) and behind a transport that hides its shared memory (world sizes
// 1..4 and 7, whole blocks and 40-byte segments: the point-to-point versions MPI runs), every dtype, against references computed here in double: reduce to every root,
// broadcast from every root, all_gather/gather along axes 0, 1 and -1 with unequal (and zero)
// sizes per rank, reduce_scatter with chunk semantics and explicit unequal counts, all_to_all
// with equal and unequal send counts, scatter (chunks and counts), send/recv around a ring and
// all pairs, barrier. Then the argument errors: the exact code and message on the failing rank,
// and kAborted naming it on every other rank, well before the deadline.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "tessel/comm/communicator.h"
#include "testing/fault_transport.h"
#include "testing/message_passing_transport.h"
#include "testing/reduction_reference.h"
#include "testing/run_ranks.h"

namespace tessel {
namespace {

using testing::error_of;
using testing::first_error;
using testing::run_ranks;

const DType kDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                         DType::kI32, DType::kI64, DType::kU8,   DType::kBool};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin,
                         ReduceOp::kProd};

CollectiveOptions opts() {
  CollectiveOptions o;
  o.timeout = std::chrono::seconds(20);
  return o;
}

// ---- references ----------------------------------------------------------------------------

// A value that identifies (rank, element) and is exact in every dtype (< 97; bool: 0/1).
double pattern(DType dtype, int rank, int64_t i) {
  if (dtype == DType::kBool) return static_cast<double>((rank + i) % 2);
  return static_cast<double>((rank * 37 + i * 11) % 97);
}

using testing::reduction_expected;
using testing::reduction_input;

// Relative tolerance: only means of floating dtypes are inexact.
double tolerance(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return 1e-2;
    case DType::kF16: return 1e-3;
    case DType::kF32: return 1e-6;
    case DType::kF64: return 1e-12;
    default: return 0;
  }
}

Tensor make(const Shape& shape, DType dtype, const std::function<double(int64_t)>& f) {
  std::vector<double> v(static_cast<size_t>(shape.num_elements()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = f(static_cast<int64_t>(i));
  return Tensor::from_vector<double>(v, shape).astype(dtype);
}

// Throws (inside a rank's thread) when `got` differs from the expected shape, dtype or values.
void check(const std::string& what, const Tensor& got, const Shape& shape, DType dtype,
           const std::vector<double>& want, double tol = 0) {
  auto fail = [&](const std::string& why) {
    throw std::runtime_error(what + ": " + why + "; got " +
                             (got.defined() ? got.to_string() : std::string("null")));
  };
  if (!got.defined()) fail("null tensor");
  if (!(got.shape() == shape)) fail("shape " + got.shape().to_string() + " != " + shape.to_string());
  if (got.dtype() != dtype) fail("dtype " + std::string(dtype_name(got.dtype())));
  if (!got.is_contiguous()) fail("not contiguous");
  const std::vector<double> values = got.to_doubles();
  if (values.size() != want.size()) fail("element count");
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::abs(values[i] - want[i]) > tol * (1 + std::abs(want[i]))) {
      fail("element " + std::to_string(i) + " is " + std::to_string(values[i]) + ", want " +
           std::to_string(want[i]));
    }
  }
}

std::vector<double> reduced(ReduceOp op, DType dtype, int n, int64_t begin, int64_t end) {
  std::vector<double> out;
  for (int64_t i = begin; i < end; ++i) out.push_back(reduction_expected(op, dtype, n, i));
  return out;
}

// Row-major flat index of `index` in `dims`.
int64_t flat_index(const std::vector<int64_t>& index, const std::vector<int64_t>& dims) {
  int64_t f = 0;
  for (size_t d = 0; d < dims.size(); ++d) f = f * dims[d] + index[d];
  return f;
}

// Reference concatenation along `axis` of tensors with dims base (axis extent replaced by
// sizes[r]) holding pattern(dtype, r, flat): walks the output's multi-indices and asks which
// rank owns each one.
std::vector<double> concat_reference(DType dtype, const std::vector<int64_t>& base, int axis,
                                     const std::vector<int64_t>& sizes, std::vector<int64_t>* dims) {
  *dims = base;
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  (*dims)[axis] = total;
  int64_t count = 1;
  for (int64_t d : *dims) count *= d;
  std::vector<double> out;
  std::vector<int64_t> index(dims->size(), 0);
  for (int64_t f = 0; f < count; ++f) {
    int64_t rest = f;
    for (int d = static_cast<int>(dims->size()) - 1; d >= 0; --d) {
      index[d] = rest % (*dims)[d];
      rest /= (*dims)[d];
    }
    int owner = 0;
    int64_t local = index[axis];
    while (local >= sizes[owner]) local -= sizes[owner++];
    std::vector<int64_t> local_index = index;
    local_index[axis] = local;
    std::vector<int64_t> local_dims = base;
    local_dims[axis] = sizes[owner];
    out.push_back(pattern(dtype, owner, flat_index(local_index, local_dims)));
  }
  return out;
}

int64_t chunk_begin(int64_t rows, int n, int r) {
  const int64_t chunk = (rows + n - 1) / n;
  return std::min<int64_t>(r * chunk, rows);
}

std::string case_name(const std::string& op, DType dtype, const std::string& more) {
  return op + " " + std::string(dtype_name(dtype)) + " " + more;
}

// run_ranks over one group; a rank whose check fails aborts the group, so that the others stop
// at once instead of waiting out their deadline.
std::vector<std::exception_ptr> run_checked(std::vector<std::unique_ptr<Communicator>>& comms,
                                            const std::function<void(int)>& body) {
  return run_ranks(static_cast<int>(comms.size()), [&](int r) {
    try {
      body(r);
    } catch (const std::exception& e) {
      comms[r]->abort(std::string("rank ") + std::to_string(r) + " failed a check: " + e.what());
      throw;
    }
  });
}

// ---- per world size --------------------------------------------------------------------------

// One world size over one kind of transport.
struct GroupKind {
  int world = 1;
  bool message_passing = false;  // hide the shared memory: the point-to-point versions run
  size_t segment_bytes = 0;      // their message size (0: the default)
};

class CollectivesConformance : public ::testing::TestWithParam<GroupKind> {
 protected:
  std::vector<std::unique_ptr<Communicator>> make_group() const {
    return GetParam().message_passing ? testing::make_message_passing_communicators(GetParam().world)
                                      : make_in_process_communicators(GetParam().world);
  }
  // The file's opts() with this kind's segment size (the tests below call this one).
  CollectiveOptions opts() const {
    CollectiveOptions o = tessel::opts();
    o.segment_bytes = GetParam().segment_bytes;
    return o;
  }
};

TEST_P(CollectivesConformance, ReduceToEveryRootEveryDTypeAndOp) {
  const int n = GetParam().world;
  auto comms = make_group();
  const Shape shapes[] = {Shape{0}, Shape{1}, Shape{7}, Shape{1023}, Shape{3, 5}};
  auto errors = run_checked(comms, [&](int r) {
    for (int root = 0; root < n; ++root) {
      for (DType dtype : kDTypes) {
        for (ReduceOp op : kOps) {
          if (dtype == DType::kBool && op == ReduceOp::kMean) continue;
          for (const Shape& shape : shapes) {
            Tensor in = make(shape, dtype, [&](int64_t i) { return reduction_input(op, dtype, r, i); });
            const Tensor before = in.clone();
            // Non-roots: even ranks pass a null output, odd ranks a sentinel that must not change.
            Tensor out;
            if (r == root) {
              out = Tensor::zeros(shape, dtype);
            } else if (r % 2 == 1) {
              out = Tensor::full(shape, dtype, 1);
            }
            comms[r]->reduce(in, out, op, root, opts());
            const std::string what = case_name("reduce", dtype, std::string(reduce_op_name(op)) +
                                                                    " root " + std::to_string(root) +
                                                                    " shape " + shape.to_string());
            check(what + " input unchanged", in, shape, dtype, before.to_doubles());
            if (r == root) {
              check(what, out, shape, dtype, reduced(op, dtype, n, 0, shape.num_elements()),
                    tolerance(dtype));
            } else if (r % 2 == 1) {
              check(what + " non-root output untouched", out, shape, dtype,
                    std::vector<double>(static_cast<size_t>(shape.num_elements()), 1.0));
            }
          }
        }
      }
    }
  });
  EXPECT_EQ(first_error(errors), "");
}

TEST_P(CollectivesConformance, ReduceInPlaceOnTheRoot) {
  const int n = GetParam().world;
  auto comms = make_group();
  auto errors = run_checked(comms, [&](int r) {
    for (int root = 0; root < n; ++root) {
      Tensor x = make(Shape{100}, DType::kF32, [&](int64_t i) { return reduction_input(ReduceOp::kSum, DType::kF32, r, i); });
      comms[r]->reduce(x, x, ReduceOp::kSum, root, opts());
      if (r == root) {
        check("in-place reduce root " + std::to_string(root), x, Shape{100}, DType::kF32,
              reduced(ReduceOp::kSum, DType::kF32, n, 0, 100));
      }
    }
  });
  EXPECT_EQ(first_error(errors), "");
}

TEST_P(CollectivesConformance, BroadcastFromEveryRootEveryDType) {
  const int n = GetParam().world;
  auto comms = make_group();
  const Shape shapes[] = {Shape{0}, Shape{1}, Shape{7}, Shape{33, 31}};
  auto errors = run_checked(comms, [&](int r) {
    for (int root = 0; root < n; ++root) {
      for (DType dtype : kDTypes) {
        for (const Shape& shape : shapes) {
          Tensor t = make(shape, dtype, [&](int64_t i) { return pattern(dtype, r, i); });
          comms[r]->broadcast(t, root, opts());
          std::vector<double> want;
          for (int64_t i = 0; i < shape.num_elements(); ++i) want.push_back(pattern(dtype, root, i));
          check(case_name("broadcast", dtype, "root " + std::to_string(root) + " shape " + shape.to_string()),
                t, shape, dtype, want);
        }
      }
    }
  });
  EXPECT_EQ(first_error(errors), "");
}

// Sizes along the gathered axis per rank: unequal, with zeros on ranks 1 and 5.
int64_t uneven_size(int r) { return (3 * r + 1) % 4; }

TEST_P(CollectivesConformance, AllGatherUnequalSizesAlongAxes0And1AndMinus1) {
  const int n = GetParam().world;
  auto comms = make_group();
  const std::vector<int64_t> base = {2, 3, 4};
  auto errors = run_checked(comms, [&](int r) {
    for (DType dtype : kDTypes) {
      for (int axis : {0, 1, -1}) {
        const int a = axis < 0 ? axis + 3 : axis;
        for (bool all_empty : {false, true}) {
          std::vector<int64_t> sizes(n);
          for (int k = 0; k < n; ++k) sizes[k] = all_empty ? 0 : uneven_size(k);
          std::vector<int64_t> dims = base;
          dims[a] = sizes[r];
          Tensor in = make(Shape(dims), dtype, [&](int64_t i) { return pattern(dtype, r, i); });
          Tensor out = comms[r]->all_gather(in, axis, opts());
          std::vector<int64_t> want_dims;
          const auto want = concat_reference(dtype, base, a, sizes, &want_dims);
          check(case_name("all_gather", dtype, "axis " + std::to_string(axis) +
                                                   (all_empty ? " all empty" : " uneven")),
                out, Shape(want_dims), dtype, want);
        }
      }
    }
  });
  EXPECT_EQ(first_error(errors), "");
}

TEST_P(CollectivesConformance, GatherToEveryRootUnequalSizes) {
  const int n = GetParam().world;
  auto comms = make_group();
  const std::vector<int64_t> base = {3, 2};
  auto errors = run_checked(comms, [&](int r) {
    for (int root = 0; root < n; ++root) {
      for (DType dtype : kDTypes) {
        for (int axis : {0, 1, -1}) {
          const int a = axis < 0 ? axis + 2 : axis;
          std::vector<int64_t> sizes(n);
          for (int k = 0; k < n; ++k) sizes[k] = uneven_size(k + root);
          std::vector<int64_t> dims = base;
          dims[a] = sizes[r];
          Tensor in = make(Shape(dims), dtype, [&](int64_t i) { return pattern(dtype, r, i); });
          Tensor out = comms[r]->gather(in, root, axis, opts());
          const std::string what =
              case_name("gather", dtype, "root " + std::to_string(root) + " axis " + std::to_string(axis));
          if (r != root) {
            if (out.defined()) throw std::runtime_error(what + ": a non-root got a tensor");
            continue;
          }
          std::vector<int64_t> want_dims;
          const auto want = concat_reference(dtype, base, a, sizes, &want_dims);
          check(what, out, Shape(want_dims), dtype, want);
        }
      }
    }
  });
  EXPECT_EQ(first_error(errors), "");
}

TEST_P(CollectivesConformance, ReduceScatterChunkSemantics) {
  const int n = GetParam().world;
  auto comms = make_group();
  constexpr int64_t kCols = 3;
  // Fewer rows than ranks (empty trailing shards), uneven and even splits.
  const std::vector<int64_t> row_cases = {0, 1, std::max(1, n - 1), 2 * n + 1, 3 * n};
  auto errors = run_checked(comms, [&](int r) {
    for (DType dtype : kDTypes) {
      for (ReduceOp op : kOps) {
        if (dtype == DType::kBool && op == ReduceOp::kMean) continue;
        for (int64_t rows : row_cases) {
          Tensor in = make(Shape{rows, kCols}, dtype, [&](int64_t i) { return reduction_input(op, dtype, r, i); });
          Tensor out = comms[r]->reduce_scatter(in, op, {}, opts());
          const int64_t begin = chunk_begin(rows, n, r), end = chunk_begin(rows, n, r + 1);
          check(case_name("reduce_scatter", dtype, std::string(reduce_op_name(op)) + " rows " + std::to_string(rows)),
                out, Shape{end - begin, kCols}, dtype, reduced(op, dtype, n, begin * kCols, end * kCols),
                tolerance(dtype));
        }
      }
    }
  });
  EXPECT_EQ(first_error(errors), "");
}

TEST_P(CollectivesConformance, ReduceScatterExplicitUnequalCountsWithZeros) {
  const int n = GetParam().world;
  auto comms = make_group();
  constexpr int64_t kCols = 2;
  std::vector<int64_t> counts(n);
  for (int k = 0; k < n; ++k) counts[k] = k % 3 == 1 ? 0 : k % 4 + 1;
  int64_t rows = 0;
  for (int64_t c : counts) rows += c;
  auto errors = run_checked(comms, [&](int r) {
    for (DType dtype : kDTypes) {
      for (ReduceOp op : kOps) {
        if (dtype == DType::kBool && op == ReduceOp::kMean) continue;
        Tensor in = make(Shape{rows, kCols}, dtype, [&](int64_t i) { return reduction_input(op, dtype, r, i); });
        Tensor out = comms[r]->reduce_scatter(in, op, counts, opts());
        int64_t begin = 0;
        for (int k = 0; k < r; ++k) begin += counts[k];
        check(case_name("reduce_scatter counts", dtype, std::string(reduce_op_name(op))), out,
              Shape{counts[r], kCols}, dtype,
              reduced(op, dtype, n, begin * kCols, (begin + counts[r]) * kCols), tolerance(dtype));
      }
    }
  });
  EXPECT_EQ(first_error(errors), "");
}

// all_to_all reference: rank r receives, from each rank j in order, the rows rank j sends it.
std::vector<double> all_to_all_reference(DType dtype, int n, int r, int64_t cols,
                                         const std::function<int64_t(int, int)>& send_count,
                                         int64_t* rows_out) {
  std::vector<double> out;
  *rows_out = 0;
  for (int j = 0; j < n; ++j) {
    int64_t offset = 0;
    for (int k = 0; k < r; ++k) offset += send_count(j, k);
    for (int64_t row = offset; row < offset + send_count(j, r); ++row) {
      for (int64_t c = 0; c < cols; ++c) out.push_back(pattern(dtype, j, row * cols + c));
    }
    *rows_out += send_count(j, r);
  }
  return out;
}

TEST_P(CollectivesConformance, AllToAllEqualSplits) {
  const int n = GetParam().world;
  auto comms = make_group();
  constexpr int64_t kCols = 2;
  auto errors = run_checked(comms, [&](int r) {
    for (DType dtype : kDTypes) {
      for (int64_t k : {0, 1, 3}) {
        Tensor in = make(Shape{n * k, kCols}, dtype, [&](int64_t i) { return pattern(dtype, r, i); });
        Tensor out = comms[r]->all_to_all(in, {}, opts());
        int64_t rows = 0;
        const auto want = all_to_all_reference(dtype, n, r, kCols, [&](int, int) { return k; }, &rows);
        check(case_name("all_to_all equal", dtype, "k " + std::to_string(k)), out, Shape{rows, kCols},
              dtype, want);
      }
    }
  });
  EXPECT_EQ(first_error(errors), "");
}

TEST_P(CollectivesConformance, AllToAllUnequalSendCountsWithZeros) {
  const int n = GetParam().world;
  auto comms = make_group();
  constexpr int64_t kCols = 3;
  auto send_count = [](int from, int to) -> int64_t { return (from + 2 * to) % 3; };
  auto errors = run_checked(comms, [&](int r) {
    for (DType dtype : kDTypes) {
      std::vector<int64_t> counts(n);
      int64_t rows = 0;
      for (int j = 0; j < n; ++j) rows += counts[j] = send_count(r, j);
      Tensor in = make(Shape{rows, kCols}, dtype, [&](int64_t i) { return pattern(dtype, r, i); });
      Tensor out = comms[r]->all_to_all(in, counts, opts());
      int64_t out_rows = 0;
      const auto want = all_to_all_reference(dtype, n, r, kCols, send_count, &out_rows);
      check(case_name("all_to_all unequal", dtype, ""), out, Shape{out_rows, kCols}, dtype, want);
    }
  });
  EXPECT_EQ(first_error(errors), "");
}

TEST_P(CollectivesConformance, ScatterFromEveryRootChunksAndCounts) {
  const int n = GetParam().world;
  auto comms = make_group();
  constexpr int64_t kCols = 2;
  std::vector<int64_t> counts(n);
  for (int k = 0; k < n; ++k) counts[k] = k % 2 == 0 ? k + 1 : 0;
  int64_t counted_rows = 0;
  for (int64_t c : counts) counted_rows += c;
  auto errors = run_checked(comms, [&](int r) {
    for (int root = 0; root < n; ++root) {
      for (DType dtype : kDTypes) {
        for (int64_t rows : {int64_t{0}, int64_t{n - 1}, int64_t{2 * n + 1}, int64_t{-1}}) {
          const bool explicit_counts = rows < 0;
          if (explicit_counts) rows = counted_rows;
          Tensor in;
          if (r == root) {
            in = make(Shape{rows, kCols}, dtype, [&](int64_t i) { return pattern(dtype, root, i); });
          } else if (r % 2 == 1) {
            in = Tensor::zeros(Shape{5}, DType::kI32);  // ignored on non-roots
          }
          Tensor out = comms[r]->scatter(in, root, explicit_counts ? counts : std::vector<int64_t>{}, opts());
          int64_t begin = 0, end = 0;
          if (explicit_counts) {
            for (int k = 0; k < r; ++k) begin += counts[k];
            end = begin + counts[r];
          } else {
            begin = chunk_begin(rows, n, r);
            end = chunk_begin(rows, n, r + 1);
          }
          std::vector<double> want;
          for (int64_t i = begin * kCols; i < end * kCols; ++i) want.push_back(pattern(dtype, root, i));
          check(case_name("scatter", dtype, "root " + std::to_string(root) + " rows " + std::to_string(rows) +
                                                (explicit_counts ? " counts" : " chunks")),
                out, Shape{end - begin, kCols}, dtype, want);
        }
      }
    }
  });
  EXPECT_EQ(first_error(errors), "");
}

TEST_P(CollectivesConformance, SendRecvRingExchangeKeepsOrderPerTag) {
  const int n = GetParam().world;
  if (n == 1) GTEST_SKIP() << "no peer";
  auto comms = make_group();
  auto errors = run_checked(comms, [&](int r) {
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    for (DType dtype : kDTypes) {
      // Two messages under tag 1 (delivered in order), one under tag 2, an empty one under 3.
      comms[r]->send(make(Shape{5}, dtype, [&](int64_t i) { return pattern(dtype, r, i); }), right, 1, opts());
      comms[r]->send(make(Shape{3}, dtype, [&](int64_t i) { return pattern(dtype, r + 1, i); }), right, 2, opts());
      comms[r]->send(make(Shape{2, 2}, dtype, [&](int64_t i) { return pattern(dtype, r + 2, i); }), right, 1, opts());
      comms[r]->send(Tensor::zeros(Shape{0}, dtype), right, 3, opts());
      Tensor b = Tensor::zeros(Shape{3}, dtype), a = Tensor::zeros(Shape{5}, dtype);
      Tensor c = Tensor::zeros(Shape{4}, dtype), e = Tensor::zeros(Shape{0}, dtype);
      comms[r]->recv(e, left, 3, opts());
      comms[r]->recv(b, left, 2, opts());
      comms[r]->recv(a, left, 1, opts());
      comms[r]->recv(c, left, 1, opts());  // same byte count, other shape: allowed
      auto want = [&](int who, int64_t count) {
        std::vector<double> v;
        for (int64_t i = 0; i < count; ++i) v.push_back(pattern(dtype, who, i));
        return v;
      };
      const std::string what = case_name("send/recv", dtype, "from " + std::to_string(left));
      check(what + " tag 1 first", a, Shape{5}, dtype, want(left, 5));
      check(what + " tag 2", b, Shape{3}, dtype, want(left + 1, 3));
      check(what + " tag 1 second", c, Shape{4}, dtype, want(left + 2, 4));
      check(what + " tag 3 empty", e, Shape{0}, dtype, {});
    }
    // Send/recv start no collective: the sequence number does not move.
    if (comms[r]->sequence_number() != 0) throw std::runtime_error("send/recv moved the sequence");
    comms[r]->barrier(opts());
  });
  EXPECT_EQ(first_error(errors), "");
}

TEST_P(CollectivesConformance, SendRecvEveryPair) {
  const int n = GetParam().world;
  auto comms = make_group();
  auto errors = run_checked(comms, [&](int r) {
    for (int to = 0; to < n; ++to) {
      if (to == r) continue;
      comms[r]->send(Tensor::full(Shape{4}, DType::kI64, r * 100 + to), to, 7, opts());
    }
    for (int from = n - 1; from >= 0; --from) {
      if (from == r) continue;
      Tensor t = Tensor::zeros(Shape{4}, DType::kI64);
      comms[r]->recv(t, from, 7, opts());
      check("pair " + std::to_string(from) + "->" + std::to_string(r), t, Shape{4}, DType::kI64,
            std::vector<double>(4, from * 100 + r));
    }
  });
  EXPECT_EQ(first_error(errors), "");
}

TEST_P(CollectivesConformance, BarrierReleasesNobodyEarly) {
  const int n = GetParam().world;
  constexpr int kRounds = 20;
  // The last rank is slowed down so that the others really wait for it.
  testing::Faults slow;
  slow.delay = std::chrono::milliseconds(1);
  auto group = GetParam().message_passing ? testing::make_message_passing_faulty_group(n, {{n - 1, slow}})
                                          : testing::make_faulty_group(n, {{n - 1, slow}});
  std::vector<std::atomic<int>> arrived(kRounds);
  auto errors = run_checked(group.comms, [&](int r) {
    for (int round = 0; round < kRounds; ++round) {
      arrived[round].fetch_add(1);
      group.comms[r]->barrier(opts());
      const int seen = arrived[round].load();
      if (seen != n) {
        throw std::runtime_error("round " + std::to_string(round) + ": left the barrier with " +
                                 std::to_string(seen) + " of " + std::to_string(n) + " arrived");
      }
    }
    if (group.comms[r]->sequence_number() != kRounds) throw std::runtime_error("sequence number");
  });
  EXPECT_EQ(first_error(errors), "");
}

std::vector<GroupKind> in_process_kinds() {
  std::vector<GroupKind> kinds;
  for (int n = 1; n <= 8; ++n) kinds.push_back({n, false, 0});
  return kinds;
}

std::vector<GroupKind> message_passing_kinds() {
  std::vector<GroupKind> kinds;
  for (int n : {1, 2, 3, 4, 7}) {
    for (size_t segment : {size_t{0}, size_t{40}}) kinds.push_back({n, true, segment});
  }
  return kinds;
}

std::string kind_name(const ::testing::TestParamInfo<GroupKind>& info) {
  const GroupKind& k = info.param;
  return "world" + std::to_string(k.world) +
         (k.segment_bytes ? "_segment" + std::to_string(k.segment_bytes) : std::string());
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CollectivesConformance, ::testing::ValuesIn(in_process_kinds()), kind_name);
INSTANTIATE_TEST_SUITE_P(MessagePassing, CollectivesConformance, ::testing::ValuesIn(message_passing_kinds()),
                         kind_name);

// ---- argument errors -------------------------------------------------------------------------

constexpr int kN = 4;
constexpr auto kLongTimeout = std::chrono::seconds(30);
// A failing rank must release the others long before the 30 s deadline.
constexpr double kReleaseBound = 1.0;

struct Outcome {
  testing::RankError error;
  double seconds = 0;  // duration of the rank's call
};

// Runs body(rank, comm, options) on every rank of a fresh group of kN, timing each call.
std::vector<Outcome> run_group(const std::function<void(int, Communicator&, const CollectiveOptions&)>& body,
                               int n = kN) {
  auto comms = make_in_process_communicators(n);
  CollectiveOptions o;
  o.timeout = kLongTimeout;
  std::vector<double> seconds(n);
  auto errors = run_ranks(n, [&](int r) {
    const auto start = std::chrono::steady_clock::now();
    try {
      body(r, *comms[r], o);
    } catch (...) {
      seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      throw;
    }
    seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
  std::vector<Outcome> out(n);
  for (int r = 0; r < n; ++r) out[r] = {error_of(errors[r]), seconds[r]};
  return out;
}

void expect_error(const Outcome& o, ErrorCode code, const std::string& substring, const std::string& who) {
  ASSERT_TRUE(o.error.thrown) << who << " did not throw";
  EXPECT_EQ(error_code_name(o.error.code), error_code_name(code)) << who << ": " << o.error.what;
  EXPECT_NE(o.error.what.find(substring), std::string::npos)
      << who << ": message \"" << o.error.what << "\" lacks \"" << substring << "\"";
}

// Every rank throws `code` with `message`.
void expect_all(const std::vector<Outcome>& out, ErrorCode code, const std::string& message) {
  for (size_t r = 0; r < out.size(); ++r) expect_error(out[r], code, message, "rank " + std::to_string(r));
}

// Rank `bad` throws `code` with `message`; every other rank throws kAborted naming it and its
// error, within kReleaseBound seconds although the deadline is 30 s.
void expect_only(const std::vector<Outcome>& out, int bad, ErrorCode code, const std::string& message) {
  expect_error(out[bad], code, message, "failing rank " + std::to_string(bad));
  const std::string names = "rank " + std::to_string(bad) + " (rank " + std::to_string(bad) + ") failed in";
  for (size_t r = 0; r < out.size(); ++r) {
    if (static_cast<int>(r) == bad) continue;
    const std::string who = "rank " + std::to_string(r);
    expect_error(out[r], ErrorCode::kAborted, names, who);
    expect_error(out[r], ErrorCode::kAborted, message, who);
    EXPECT_LT(out[r].seconds, kReleaseBound) << who << " waited " << out[r].seconds << " s";
  }
}

Tensor f32(const Shape& shape) { return Tensor::zeros(shape, DType::kF32); }

TEST(CollectiveErrors, BadRootIsInvalidArgumentOnEveryRank) {
  for (int root : {kN, -1}) {
    const std::string r = std::to_string(root);
    auto out = run_group([&](int, Communicator& c, const CollectiveOptions& o) {
      Tensor x = f32({4});
      c.reduce(x, x, ReduceOp::kSum, root, o);
    });
    expect_all(out, ErrorCode::kInvalidArgument, "Communicator: reduce: root " + r + " is not a rank of 4");
    out = run_group([&](int, Communicator& c, const CollectiveOptions& o) {
      Tensor x = f32({4});
      c.broadcast(x, root, o);
    });
    expect_all(out, ErrorCode::kInvalidArgument, "Communicator: broadcast: root " + r + " is not a rank of 4");
    out = run_group([&](int, Communicator& c, const CollectiveOptions& o) { c.gather(f32({4}), root, 0, o); });
    expect_all(out, ErrorCode::kInvalidArgument, "Communicator: gather: root " + r + " is not a rank of 4");
    out = run_group([&](int, Communicator& c, const CollectiveOptions& o) { c.scatter(f32({4}), root, {}, o); });
    expect_all(out, ErrorCode::kInvalidArgument, "Communicator: scatter: root " + r + " is not a rank of 4");
  }
}

TEST(CollectiveErrors, BadRootOnOneRankAbortsTheOthersQuickly) {
  auto out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    Tensor x = f32({4});
    c.broadcast(x, r == 2 ? 7 : 0, o);
  });
  expect_only(out, 2, ErrorCode::kInvalidArgument, "broadcast: root 7 is not a rank of 4");
  out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    c.gather(f32({4}), r == 1 ? -3 : 0, 0, o);
  });
  expect_only(out, 1, ErrorCode::kInvalidArgument, "gather: root -3 is not a rank of 4");
}

TEST(CollectiveErrors, MismatchedOutputShapeOrDType) {
  auto out = run_group([&](int, Communicator& c, const CollectiveOptions& o) {
    Tensor in = f32({4}), wrong = f32({5});
    c.all_reduce(in, wrong, ReduceOp::kSum, o);
  });
  expect_all(out, ErrorCode::kInvalidArgument,
             "Communicator: all_reduce: output f32 [5] does not match input f32 [4]");
  // Only rank 3's output is wrong (a dtype mismatch): it fails, the others are released.
  out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    Tensor in = f32({2, 2});
    Tensor o2 = r == 3 ? Tensor::zeros({2, 2}, DType::kF64) : f32({2, 2});
    c.all_reduce(in, o2, ReduceOp::kSum, o);
  });
  expect_only(out, 3, ErrorCode::kInvalidArgument, "all_reduce: output f64 [2,2] does not match input f32 [2,2]");
  // reduce checks the output on the root only.
  out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    Tensor in = f32({3});
    Tensor o2 = r == 1 ? f32({1, 3}) : f32({7});
    c.reduce(in, o2, ReduceOp::kMax, 1, o);
  });
  expect_only(out, 1, ErrorCode::kInvalidArgument, "reduce: output f32 [1,3] does not match input f32 [3]");
}

TEST(CollectiveErrors, StridedInputIsRejected) {
  const std::string strided = "of shape [4,2] is a strided view; pass a contiguous tensor";
  auto out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    Tensor base = f32({4, 4});
    Tensor in = r == 0 ? base.slice(1, 0, 2) : f32({4, 2});
    Tensor res = f32({4, 2});
    c.all_reduce(in, res, ReduceOp::kSum, o);
  });
  expect_only(out, 0, ErrorCode::kInvalidArgument, "all_reduce: input " + strided);
  out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    Tensor base = f32({4, 4});
    Tensor in = f32({4, 2});
    Tensor res = r == 2 ? base.slice(1, 2, 4) : f32({4, 2});
    c.all_reduce(in, res, ReduceOp::kSum, o);
  });
  expect_only(out, 2, ErrorCode::kInvalidArgument, "all_reduce: output " + strided);
  out = run_group([&](int, Communicator& c, const CollectiveOptions& o) {
    Tensor t = f32({4, 4}).slice(1, 1, 3);
    c.broadcast(t, 0, o);
  });
  expect_all(out, ErrorCode::kInvalidArgument, "broadcast: tensor " + strided);
  out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    c.all_gather(r == 3 ? f32({4, 4}).slice(1, 0, 2) : f32({4, 2}), 0, o);
  });
  expect_only(out, 3, ErrorCode::kInvalidArgument, "all_gather: input " + strided);
  out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    c.reduce_scatter(r == 1 ? f32({4, 4}).slice(1, 0, 2) : f32({4, 2}), ReduceOp::kSum, {}, o);
  });
  expect_only(out, 1, ErrorCode::kInvalidArgument, "reduce_scatter: input " + strided);
  out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    c.all_to_all(r == 1 ? f32({4, 4}).slice(1, 0, 2) : f32({4, 2}), {}, o);
  });
  expect_only(out, 1, ErrorCode::kInvalidArgument, "all_to_all: input " + strided);
  out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    c.scatter(r == 0 ? f32({4, 4}).slice(1, 0, 2) : Tensor(), 0, {}, o);
  });
  expect_only(out, 0, ErrorCode::kInvalidArgument, "scatter: input " + strided);
}

TEST(CollectiveErrors, NullTensorIsRejected) {
  auto out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    Tensor x = r == 2 ? Tensor() : f32({4});
    c.broadcast(x, 0, o);
  });
  expect_only(out, 2, ErrorCode::kInvalidArgument, "broadcast: tensor is a null tensor");
  out = run_group([&](int, Communicator& c, const CollectiveOptions& o) { c.scatter(Tensor(), 1, {}, o); });
  expect_only(out, 1, ErrorCode::kInvalidArgument, "scatter: input is a null tensor");
}

TEST(CollectiveErrors, BadCountsAreInvalidArgument) {
  auto out = run_group([&](int, Communicator& c, const CollectiveOptions& o) {
    c.reduce_scatter(f32({6, 2}), ReduceOp::kSum, {1, 2, 3}, o);
  });
  expect_all(out, ErrorCode::kInvalidArgument, "Communicator: reduce_scatter: 3 counts given for a group of 4");
  out = run_group([&](int, Communicator& c, const CollectiveOptions& o) {
    c.reduce_scatter(f32({6, 2}), ReduceOp::kSum, {4, 3, -1, 0}, o);
  });
  expect_all(out, ErrorCode::kInvalidArgument, "reduce_scatter: count -1 is negative");
  out = run_group([&](int, Communicator& c, const CollectiveOptions& o) {
    c.reduce_scatter(f32({6, 2}), ReduceOp::kSum, {1, 1, 1, 2}, o);
  });
  expect_all(out, ErrorCode::kInvalidArgument, "reduce_scatter: counts [1,1,1,2] add up to 5 but the tensor has 6 rows");
  out = run_group([&](int, Communicator& c, const CollectiveOptions& o) {
    c.reduce_scatter(Tensor::full({}, DType::kF32, 1), ReduceOp::kSum, {}, o);
  });
  expect_all(out, ErrorCode::kInvalidArgument, "reduce_scatter: the input is a scalar");
  // all_to_all: send counts are per rank, so one rank's bad counts fail it alone.
  out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    c.all_to_all(f32({4, 2}), r == 2 ? std::vector<int64_t>{2, 2, 2, -2} : std::vector<int64_t>{}, o);
  });
  expect_only(out, 2, ErrorCode::kInvalidArgument, "all_to_all: count -2 is negative");
  out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    c.all_to_all(f32({4, 2}), r == 1 ? std::vector<int64_t>{1, 1, 1, 0} : std::vector<int64_t>{}, o);
  });
  expect_only(out, 1, ErrorCode::kInvalidArgument, "all_to_all: counts [1,1,1,0] add up to 3 but the tensor has 4 rows");
  out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    c.all_to_all(f32({r == 0 ? 5 : 4, 2}), {}, o);
  });
  expect_only(out, 0, ErrorCode::kInvalidArgument, "all_to_all: 5 rows do not split evenly over 4 ranks; pass send_counts");
  out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    c.all_to_all(f32({4, 2}), r == 3 ? std::vector<int64_t>{2, 2} : std::vector<int64_t>{}, o);
  });
  expect_only(out, 3, ErrorCode::kInvalidArgument, "all_to_all: 2 counts given for a group of 4");
  // scatter: the counts must match the root's rows on every rank.
  out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    c.scatter(r == 0 ? f32({5, 2}) : Tensor(), 0, {1, 1, 1, 1}, o);
  });
  expect_all(out, ErrorCode::kInvalidArgument, "scatter: counts [1,1,1,1] add up to 4 but the tensor has 5 rows");
  // scatter: ranks disagreeing on the counts call different collectives.
  out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    c.scatter(r == 0 ? f32({4, 2}) : Tensor(), 0, r == 2 ? std::vector<int64_t>{4, 0, 0, 0} : std::vector<int64_t>{1, 1, 1, 1}, o);
  });
  expect_all(out, ErrorCode::kFailedPrecondition,
             "rank 0 (rank 0) called scatter(root 0, counts [1,1,1,1]) over group [rank 0, rank 1, rank 2, rank 3] (sequence 1) "
             "but rank 2 (rank 2) called scatter(root 0, counts [4,0,0,0])");
}

TEST(CollectiveErrors, NegativeTagAndBadPeer) {
  // The sender fails; the receiver waiting for it is released with kAborted naming it.
  auto out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    if (r == 0) c.send(f32({2}), 1, -1, o);
    if (r == 1) {
      Tensor t = f32({2});
      c.recv(t, 0, 0, o);
    }
    if (r >= 2) c.barrier(o);
  });
  expect_only(out, 0, ErrorCode::kInvalidArgument, "Communicator: send: tag -1 is negative");
  out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    Tensor t = f32({2});
    if (r == 0) c.recv(t, 1, -5, o);
    if (r >= 1) c.barrier(o);
  });
  expect_only(out, 0, ErrorCode::kInvalidArgument, "Communicator: recv: tag -5 is negative");
  out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    if (r == 2) c.send(f32({2}), 2, 0, o);
    c.barrier(o);
  });
  expect_only(out, 2, ErrorCode::kInvalidArgument, "send: peer 2 is not another rank of 4");
  out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    Tensor t = f32({2});
    if (r == 3) c.recv(t, 4, 0, o);
    c.barrier(o);
  });
  expect_only(out, 3, ErrorCode::kInvalidArgument, "recv: peer 4 is not another rank of 4");
}

TEST(CollectiveErrors, RecvOfTheWrongSizeIsInvalidArgumentAtTheReceiver) {
  auto out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    if (r == 0) c.send(f32({3}), 1, 4, o);
    if (r == 1) {
      Tensor t = f32({2});
      c.recv(t, 0, 4, o);
    }
    if (r == 0 || r >= 2) c.barrier(o);
  });
  expect_only(out, 1, ErrorCode::kInvalidArgument, "rank 1 expected 8 bytes from rank 0 (tag 4) but 12 were sent");
}

TEST(CollectiveErrors, MeanOfBoolFailsThatRankAndAbortsTheOthersQuickly) {
  const std::string message = "Communicator: mean is not defined for bool tensors";
  auto out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    if (r == 1) {
      Tensor b = Tensor::zeros({8}, DType::kBool);
      c.all_reduce(b, b, ReduceOp::kMean, o);
    } else {
      Tensor x = f32({8});
      c.all_reduce(x, x, ReduceOp::kSum, o);
    }
  });
  expect_only(out, 1, ErrorCode::kInvalidArgument, message);
  EXPECT_NE(out[0].error.what.find("rank 1 (rank 1) failed in all_reduce(bool, 8 elements, mean) over group "
                                   "[rank 0, rank 1, rank 2, rank 3] (sequence 1)"),
            std::string::npos)
      << out[0].error.what;
  out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    Tensor b = Tensor::zeros({8}, DType::kBool);
    Tensor res = Tensor::zeros({8}, DType::kBool);
    c.reduce(b, res, r == 2 ? ReduceOp::kMean : ReduceOp::kSum, 0, o);
  });
  expect_only(out, 2, ErrorCode::kInvalidArgument, message);
  out = run_group([&](int, Communicator& c, const CollectiveOptions& o) {
    c.reduce_scatter(Tensor::zeros({8}, DType::kBool), ReduceOp::kMean, {}, o);
  });
  expect_all(out, ErrorCode::kInvalidArgument, message);
}

TEST(CollectiveErrors, AllGatherOtherDimensionsMustAgree) {
  auto out = run_group([&](int r, Communicator& c, const CollectiveOptions& o) {
    c.all_gather(f32({2, r == 2 ? 4 : 3}), 0, o);
  });
  expect_all(out, ErrorCode::kFailedPrecondition, "collectives differ: rank 0 (rank 0) called all_gather(f32, [2,3], axis 0)");
  for (const Outcome& o : out) {
    EXPECT_NE(o.error.what.find("but rank 2 (rank 2) called all_gather(f32, [2,4], axis 0)"), std::string::npos)
        << o.error.what;
  }
}

TEST(CollectiveErrors, AnAbortedGroupStaysAborted) {
  auto comms = make_in_process_communicators(2);
  comms[0]->abort("stop here");
  CollectiveOptions o;
  o.timeout = kLongTimeout;
  Tensor x = f32({2});
  for (auto& c : comms) {
    try {
      c->all_reduce(x, x, ReduceOp::kSum, o);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kAborted);
      EXPECT_NE(std::string(e.what()).find("group aborted: stop here"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tessel
