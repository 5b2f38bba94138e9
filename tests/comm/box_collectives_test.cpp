// Communicator::transfer_boxes and reduce_scatter_boxes on both paths: shared memory (in-process
// group) and point to point (the same group behind a transport that hides its shared memory).
// Relayouts (all-gather of uneven row shards, rows -> columns, uneven 3-D moves, explicit
// transfers), reduce-scatter into row, column and uneven boxes, exact values in f32, bf16 and
// i64; the signature texts; every argument error; mismatched lists; a missing rank.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/in_process_hub.h"
#include "tessel/comm/communicator.h"
#include "tessel/mesh/shard_range.h"
#include "testing/forwarding_transport.h"
#include "testing/recording_transport.h"
#include "testing/reduction_reference.h"
#include "testing/run_ranks.h"

namespace tessel {
namespace {

using testing::error_of;
using testing::first_error;
using testing::run_ranks;
using Transfers = std::vector<Communicator::BoxTransfer>;
using Origins = std::vector<std::vector<int64_t>>;

// ---- groups --------------------------------------------------------------------------------

// Hides the in-process group's shared memory, so that the point-to-point paths run.
class PointToPointTransport : public testing::ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;
  bool shares_memory() const override { return false; }
};

struct Group {
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::shared_ptr<testing::RecordingTransport>> recorders;  // per rank
};

Group make_group(int n, bool shared) {
  std::vector<std::string> names;
  for (int r = 0; r < n; ++r) names.push_back("rank " + std::to_string(r));
  Group group;
  for (auto& t : detail::make_in_process_transports(std::move(names))) {
    auto rec = std::make_shared<testing::RecordingTransport>(t);
    std::shared_ptr<detail::Transport> top = rec;
    if (!shared) top = std::make_shared<PointToPointTransport>(rec);
    group.recorders.push_back(rec);
    group.comms.push_back(std::make_unique<Communicator>(top));
  }
  return group;
}

CollectiveOptions opts(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  CollectiveOptions o;
  o.timeout = timeout;
  return o;
}

class BoxCollectiveTest : public ::testing::TestWithParam<bool> {
 protected:
  bool shared() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Paths, BoxCollectiveTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "SharedMemory" : "PointToPoint"; });

// ---- global arrays -------------------------------------------------------------------------

int64_t flat(const std::vector<int64_t>& g, const std::vector<int64_t>& dims) {
  int64_t f = 0;
  for (size_t d = 0; d < dims.size(); ++d) f = f * dims[d] + g[d];
  return f;
}

// The block `box` of a global array of extents `dims` whose element g is value(flat index of
// g); a null Tensor for an empty box (a rank that holds nothing).
Tensor global_block(const Box& box, const std::vector<int64_t>& dims, DType dtype,
                    const std::function<double(int64_t)>& value = [](int64_t i) { return double(i); }) {
  if (box.empty()) return Tensor();
  std::vector<double> v;
  std::vector<int64_t> g = box.offsets;
  while (true) {
    v.push_back(value(flat(g, dims)));
    int d = box.rank() - 1;
    while (d >= 0 && ++g[d] == box.offsets[d] + box.extents[d]) {
      g[d] = box.offsets[d];
      --d;
    }
    if (d < 0) break;
  }
  return Tensor::from_vector<double>(v, Shape(box.extents)).astype(dtype);
}

Box rows_of(const std::vector<int64_t>& dims, int n, int r) {
  const ShardRange s = shard_range(dims[0], n, r);
  return Box{{s.offset, 0}, {s.extent, dims[1]}};
}

Box columns_of(const std::vector<int64_t>& dims, int n, int r) {
  const ShardRange s = shard_range(dims[1], n, r);
  return Box{{0, s.offset}, {dims[0], s.extent}};
}

// ---- transfer_boxes ------------------------------------------------------------------------

// Moves a global index array (element = its flat index) from blocks `in` to blocks `out` (one
// per rank; empty: the rank passes a null Tensor) with one transfer per pair of ranks (their
// intersection, empty ones included), and checks every output exactly. Returns the group.
Group expect_relayout(bool shared, const std::vector<int64_t>& dims, const std::vector<Box>& in,
                      const std::vector<Box>& out, DType dtype, std::string_view label) {
  const int n = static_cast<int>(in.size());
  SCOPED_TRACE(std::string(label) + " " + std::string(dtype_name(dtype)) + (shared ? " shared" : " p2p"));
  Origins in_origins, out_origins;
  Transfers transfers;
  for (int f = 0; f < n; ++f) {
    in_origins.push_back(in[f].offsets);
    out_origins.push_back(out[f].offsets);
    for (int t = 0; t < n; ++t) transfers.push_back({f, t, intersect(in[f], out[t])});
  }
  Group group = make_group(n, shared);
  std::vector<Tensor> outputs(n);
  auto errors = run_ranks(n, [&](int r) {
    const Tensor input = global_block(in[r], dims, dtype);
    if (!out[r].empty()) outputs[r] = Tensor::full(Shape(out[r].extents), dtype, -1);
    group.comms[r]->transfer_boxes(input, in_origins, outputs[r], out_origins, transfers, label, opts());
  });
  EXPECT_EQ(first_error(errors), "");
  for (int r = 0; r < n; ++r) {
    if (out[r].empty()) continue;
    EXPECT_EQ(outputs[r].to_doubles(), global_block(out[r], dims, dtype).to_doubles()) << "rank " << r;
  }
  return group;
}

TEST_P(BoxCollectiveTest, AllGatherOfUnevenRowShards) {
  // 10 rows on 4 ranks: 3, 3, 3, 1 (chunk semantics).
  const std::vector<int64_t> dims{10, 3};
  std::vector<Box> in, out;
  for (int r = 0; r < 4; ++r) {
    in.push_back(rows_of(dims, 4, r));
    out.push_back(Box{{0, 0}, dims});
  }
  EXPECT_EQ(in[3], (Box{{9, 0}, {1, 3}}));
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kI64}) {
    Group g = expect_relayout(shared(), dims, in, out, dtype, "all_gather");
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(g.recorders[r]->signatures(),
                std::vector<std::string>{fmt::format("all_gather({}, 16 transfers, 30 elements to rank {})",
                                                     dtype_name(dtype), r)});
    }
  }
}

TEST_P(BoxCollectiveTest, AllGatherWithRanksThatHoldNothing) {
  // 2 rows on 4 ranks: 1, 1, 0, 0; ranks 2 and 3 pass a null input.
  const std::vector<int64_t> dims{2, 5};
  std::vector<Box> in, out;
  for (int r = 0; r < 4; ++r) {
    in.push_back(rows_of(dims, 4, r));
    out.push_back(Box{{0, 0}, dims});
  }
  EXPECT_TRUE(in[2].empty() && in[3].empty());
  expect_relayout(shared(), dims, in, out, DType::kF32, "all_gather");
}

TEST_P(BoxCollectiveTest, AllGatherOfColumnShards) {
  // 50 columns on 4 ranks: 13, 13, 13, 11; every output row gathers four runs.
  const std::vector<int64_t> dims{9, 50};
  std::vector<Box> in, out;
  for (int r = 0; r < 4; ++r) {
    in.push_back(columns_of(dims, 4, r));
    out.push_back(Box{{0, 0}, dims});
  }
  expect_relayout(shared(), dims, in, out, DType::kI64, "all_gather");
}

TEST_P(BoxCollectiveTest, AllToAllRowsToColumns) {
  // 8 rows: 2 per rank; 6 columns: 2, 2, 2, 0 — rank 3 receives nothing (null output).
  const std::vector<int64_t> dims{8, 6};
  std::vector<Box> in, out;
  for (int r = 0; r < 4; ++r) {
    in.push_back(rows_of(dims, 4, r));
    out.push_back(columns_of(dims, 4, r));
  }
  EXPECT_TRUE(out[3].empty());
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kI64}) {
    Group g = expect_relayout(shared(), dims, in, out, dtype, "all_to_all");
    EXPECT_EQ(g.recorders[0]->signatures(),
              std::vector<std::string>{fmt::format("all_to_all({}, 16 transfers, 16 elements to rank 0)",
                                                   dtype_name(dtype))});
    EXPECT_EQ(g.recorders[3]->signatures(),
              std::vector<std::string>{fmt::format("all_to_all({}, 16 transfers, 0 elements to rank 3)",
                                                   dtype_name(dtype))});
  }
}

TEST_P(BoxCollectiveTest, UnevenMovesInThreeDimensions) {
  const std::vector<int64_t> dims{5, 4, 3};
  const std::vector<Box> in = {Box{{0, 0, 0}, {5, 1, 3}}, Box{{0, 1, 0}, {5, 3, 3}}, Box{{0, 0, 0}, {0, 0, 0}}};
  const std::vector<Box> out = {Box{{0, 0, 0}, {2, 4, 3}}, Box{{2, 0, 0}, {3, 4, 2}}, Box{{2, 0, 2}, {3, 4, 1}}};
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kI64}) {
    expect_relayout(shared(), dims, in, out, dtype, "send_recv");
  }
}

TEST_P(BoxCollectiveTest, ExplicitTransfersAndALocalCopy) {
  // Rank 0 sends part of its block to rank 2; rank 1 copies locally; rank 0 has no output and
  // rank 2 no input. Elements no transfer covers keep their -1.
  const std::vector<int64_t> dims{4, 4};
  const Box whole{{0, 0}, {4, 4}};
  const Origins origins(3, {0, 0});
  const Transfers transfers = {{0, 2, Box{{1, 1}, {2, 3}}}, {1, 1, Box{{3, 0}, {1, 2}}}};
  Group group = make_group(3, shared());
  std::vector<Tensor> outputs(3);
  auto errors = run_ranks(3, [&](int r) {
    const Tensor input = r == 2 ? Tensor() : global_block(whole, dims, DType::kF32);
    if (r > 0) outputs[r] = Tensor::full({4, 4}, DType::kF32, -1);
    group.comms[r]->transfer_boxes(input, origins, outputs[r], origins, transfers, "send_recv", opts());
  });
  ASSERT_EQ(first_error(errors), "");
  const double u = -1;  // untouched
  EXPECT_EQ(outputs[1].to_doubles(), (std::vector<double>{u, u, u, u, u, u, u, u, u, u, u, u, 12, 13, u, u}));
  EXPECT_EQ(outputs[2].to_doubles(), (std::vector<double>{u, u, u, u, u, 5, 6, 7, u, 9, 10, 11, u, u, u, u}));
  EXPECT_EQ(group.recorders[2]->signatures(),
            std::vector<std::string>{"send_recv(f32, 2 transfers, 6 elements to rank 2)"});
  EXPECT_EQ(group.recorders[0]->signatures(),
            std::vector<std::string>{"send_recv(f32, 2 transfers, 0 elements to rank 0)"});
}

TEST_P(BoxCollectiveTest, NoTransfersIsOneRendezvous) {
  Group group = make_group(2, shared());
  auto errors = run_ranks(2, [&](int r) {
    Tensor none;
    group.comms[r]->transfer_boxes(none, Origins(2), none, Origins(2), {}, "all_gather", opts());
  });
  ASSERT_EQ(first_error(errors), "");
  EXPECT_EQ(group.recorders[1]->signatures(),
            std::vector<std::string>{"all_gather(null, 0 transfers, 0 elements to rank 1)"});
}

// ---- reduce_scatter_boxes ------------------------------------------------------------------

// Every rank holds block `block` of the global array (dims) of its reduction inputs; rank r
// receives op over the ranks of boxes[r] (null output for an empty box); checked exactly.
void expect_reduce_scatter(bool shared, const std::vector<int64_t>& dims, const Box& block,
                           const std::vector<Box>& boxes, ReduceOp op, DType dtype) {
  const int n = static_cast<int>(boxes.size());
  SCOPED_TRACE(std::string(reduce_op_name(op)) + " " + std::string(dtype_name(dtype)) +
               (shared ? " shared" : " p2p"));
  Group group = make_group(n, shared);
  std::vector<Tensor> outputs(n);
  auto errors = run_ranks(n, [&](int r) {
    const Tensor input = global_block(block, dims, dtype,
                                      [&](int64_t i) { return testing::reduction_input(op, dtype, r, i); });
    if (!boxes[r].empty()) outputs[r] = Tensor::full(Shape(boxes[r].extents), dtype, -1);
    group.comms[r]->reduce_scatter_boxes(input, block.offsets, outputs[r], boxes, op, opts());
  });
  ASSERT_EQ(first_error(errors), "");
  for (int r = 0; r < n; ++r) {
    if (boxes[r].empty()) continue;
    const Tensor want = global_block(boxes[r], dims, DType::kF64,
                                     [&](int64_t i) { return testing::reduction_expected(op, dtype, n, i); });
    EXPECT_EQ(outputs[r].to_doubles(), want.to_doubles()) << "rank " << r;
  }
  EXPECT_EQ(group.recorders[1]->signatures(),
            std::vector<std::string>{fmt::format("reduce_scatter_boxes({}, {}, {}, box {} to rank 1)",
                                                 dtype_name(dtype), Shape(block.extents).to_string(),
                                                 reduce_op_name(op), boxes[1].to_string())});
}

const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMean};
const DType kDTypes[] = {DType::kF32, DType::kBF16, DType::kI64};

TEST_P(BoxCollectiveTest, ReduceScatterIntoRowBoxes) {
  // The block [2:8, 1:6] of an [8, 6] array; 6 rows on 4 ranks: 2, 2, 2, 0 (rank 3: empty box).
  const std::vector<int64_t> dims{8, 6};
  const Box block{{2, 1}, {6, 5}};
  std::vector<Box> boxes;
  for (int r = 0; r < 4; ++r) {
    const ShardRange s = shard_range(6, 4, r);
    boxes.push_back(Box{{2 + s.offset, 1}, {s.extent, 5}});
  }
  EXPECT_TRUE(boxes[3].empty());
  for (ReduceOp op : kOps) {
    for (DType dtype : kDTypes) expect_reduce_scatter(shared(), dims, block, boxes, op, dtype);
  }
}

TEST_P(BoxCollectiveTest, ReduceScatterIntoColumnBoxes) {
  // 5 columns on 4 ranks: 2, 2, 1, 0.
  const std::vector<int64_t> dims{8, 6};
  const Box block{{2, 1}, {6, 5}};
  std::vector<Box> boxes;
  for (int r = 0; r < 4; ++r) {
    const ShardRange s = shard_range(5, 4, r);
    boxes.push_back(Box{{2, 1 + s.offset}, {6, s.extent}});
  }
  for (ReduceOp op : kOps) {
    for (DType dtype : kDTypes) expect_reduce_scatter(shared(), dims, block, boxes, op, dtype);
  }
}

TEST_P(BoxCollectiveTest, ReduceScatterIntoUnevenBoxesInThreeDimensions) {
  // Boxes need not tile the block; here they overlap and leave parts out.
  const std::vector<int64_t> dims{4, 3, 5};
  const Box block{{0, 0, 0}, dims};
  const std::vector<Box> boxes = {Box{{0, 0, 0}, {4, 1, 5}}, Box{{0, 1, 0}, {2, 2, 5}},
                                  Box{{1, 1, 1}, {3, 2, 3}}};
  for (DType dtype : {DType::kF32, DType::kI64}) {
    expect_reduce_scatter(shared(), dims, block, boxes, ReduceOp::kSum, dtype);
  }
}

// ---- errors --------------------------------------------------------------------------------

constexpr int kN = 4;
// A failing rank must release the others long before the 30 s deadline.
constexpr double kReleaseBound = 1.0;

struct Outcome {
  testing::RankError error;
  double seconds = 0;
};

std::vector<Outcome> run_group(bool shared, const std::function<void(int, Communicator&)>& body,
                               int n = kN) {
  Group group = make_group(n, shared);
  std::vector<double> seconds(n);
  auto errors = run_ranks(n, [&](int r) {
    const auto start = std::chrono::steady_clock::now();
    try {
      body(r, *group.comms[r]);
    } catch (...) {
      seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      throw;
    }
  });
  std::vector<Outcome> out(n);
  for (int r = 0; r < n; ++r) out[r] = {error_of(errors[r]), seconds[r]};
  return out;
}

void expect_error(const Outcome& o, ErrorCode code, const std::string& substring, int r) {
  ASSERT_TRUE(o.error.thrown) << "rank " << r << " did not throw";
  EXPECT_EQ(error_code_name(o.error.code), error_code_name(code)) << "rank " << r << ": " << o.error.what;
  EXPECT_NE(o.error.what.find(substring), std::string::npos)
      << "rank " << r << ": \"" << o.error.what << "\" lacks \"" << substring << "\"";
}

void expect_all(const std::vector<Outcome>& out, ErrorCode code, const std::string& message) {
  for (int r = 0; r < static_cast<int>(out.size()); ++r) expect_error(out[r], code, message, r);
}

// Rank `bad` throws `code` with `message`; the others kAborted naming it, quickly.
void expect_only(const std::vector<Outcome>& out, int bad, ErrorCode code, const std::string& message) {
  expect_error(out[bad], code, message, bad);
  for (int r = 0; r < static_cast<int>(out.size()); ++r) {
    if (r == bad) continue;
    expect_error(out[r], ErrorCode::kAborted, fmt::format("rank {} (rank {}) failed in", bad, bad), r);
    expect_error(out[r], ErrorCode::kAborted, message, r);
    EXPECT_LT(out[r].seconds, kReleaseBound) << "rank " << r;
  }
}

// A valid all-gather of [8, 3] (2 rows per rank) that each error test bends in one place.
struct AllGather {
  std::vector<int64_t> dims{8, 3};
  Origins in_origins, out_origins;
  Transfers transfers;
  AllGather() {
    for (int f = 0; f < kN; ++f) {
      in_origins.push_back({2 * f, 0});
      out_origins.push_back({0, 0});
      for (int t = 0; t < kN; ++t) transfers.push_back({f, t, Box{{2 * f, 0}, {2, 3}}});
    }
  }
  // Rows [2r, 2r + 2), whatever a test does to the origins.
  Tensor input(int r, DType dtype = DType::kF32) const { return global_block(Box{{2 * r, 0}, {2, 3}}, dims, dtype); }
  void run(Communicator& c, const Tensor& input, Tensor& output, std::string_view label = "all_gather",
           std::chrono::milliseconds timeout = std::chrono::seconds(30)) const {
    c.transfer_boxes(input, in_origins, output, out_origins, transfers, label, opts(timeout));
  }
};

TEST_P(BoxCollectiveTest, TransferListErrorsAreInvalidArgumentOnEveryRank) {
  auto bent = [&](const std::function<void(AllGather&)>& bend) {
    return run_group(shared(), [&](int r, Communicator& c) {
      AllGather a;
      bend(a);
      Tensor out = Tensor::zeros({8, 3}, DType::kF32);
      a.run(c, a.input(r), out);
    });
  };
  expect_all(bent([](AllGather& a) { a.in_origins.pop_back(); }), ErrorCode::kInvalidArgument,
             "Communicator: all_gather: 3 input origins and 4 output origins given for a group of 4");
  expect_all(bent([](AllGather& a) { a.transfers[1].to = 7; }), ErrorCode::kInvalidArgument,
             "all_gather: transfer 1 (rank 0 -> rank 7) names a rank outside the group of 4");
  expect_all(bent([](AllGather& a) { a.transfers[6].from = -1; }), ErrorCode::kInvalidArgument,
             "all_gather: transfer 6 (rank -1 -> rank 2) names a rank outside the group of 4");
  expect_all(bent([](AllGather& a) { a.transfers[2].box = Box{{0}, {2}}; }), ErrorCode::kInvalidArgument,
             "all_gather: transfer 2 (rank 0 -> rank 2) box [0:2] has rank 1, expected 2");
  expect_all(bent([](AllGather& a) { a.transfers[3].box.extents = {2}; }), ErrorCode::kInvalidArgument,
             "all_gather: transfer 3 (rank 0 -> rank 3) box has 2 offsets but 1 extents");
  expect_all(bent([](AllGather& a) { a.transfers[5].box.extents = {-2, 3}; }), ErrorCode::kInvalidArgument,
             "all_gather: transfer 5 (rank 1 -> rank 1) box [2:0, 0:3] has a negative extent");
  expect_all(bent([](AllGather& a) { a.in_origins[1] = {2}; }), ErrorCode::kInvalidArgument,
             "all_gather: transfer 4 (rank 1 -> rank 0) has a box of rank 2 but input origin [2] of rank 1 "
             "and output origin [0,0] of rank 0");
}

TEST_P(BoxCollectiveTest, RegionOutsideTheSendersInputFailsThatRank) {
  auto out = run_group(shared(), [&](int r, Communicator& c) {
    AllGather a;
    a.transfers[1].box = Box{{0, 0}, {3, 3}};  // rank 0 holds only rows [0, 2)
    Tensor output = Tensor::zeros({8, 3}, DType::kF32);
    a.run(c, a.input(r), output);
  });
  expect_only(out, 0, ErrorCode::kInvalidArgument,
              "all_gather: transfer 1 (rank 0 -> rank 1): rank 0's input holds block [0:2, 0:3], "
              "which does not contain box [0:3, 0:3]");
}

TEST_P(BoxCollectiveTest, RegionOutsideTheReceiversOutputFailsThatRank) {
  auto out = run_group(shared(), [&](int r, Communicator& c) {
    AllGather a;
    Tensor output = Tensor::zeros({r == 1 ? 4 : 8, 3}, DType::kF32);
    a.run(c, a.input(r), output);
  });
  expect_only(out, 1, ErrorCode::kInvalidArgument,
              "all_gather: transfer 9 (rank 2 -> rank 1): rank 1's output holds block [0:4, 0:3], "
              "which does not contain box [4:6, 0:3]");
}

TEST_P(BoxCollectiveTest, BadTensorsFailThatRank) {
  // A sender without an input.
  auto out = run_group(shared(), [&](int r, Communicator& c) {
    AllGather a;
    Tensor output = Tensor::zeros({8, 3}, DType::kF32);
    a.run(c, r == 2 ? Tensor() : a.input(r), output);
  });
  expect_only(out, 2, ErrorCode::kInvalidArgument,
              "all_gather: transfer 8 (rank 2 -> rank 0): rank 2's input is a null tensor");
  // A strided output.
  out = run_group(shared(), [&](int r, Communicator& c) {
    AllGather a;
    Tensor wide = Tensor::zeros({8, 6}, DType::kF32);
    Tensor output = r == 3 ? wide.slice(1, 0, 3) : Tensor::zeros({8, 3}, DType::kF32);
    a.run(c, a.input(r), output);
  });
  expect_only(out, 3, ErrorCode::kInvalidArgument,
              "all_gather: transfer 3 (rank 0 -> rank 3): rank 3's output of shape [8,3] is a strided view");
  // Input and output of different dtypes on one rank.
  out = run_group(shared(), [&](int r, Communicator& c) {
    AllGather a;
    Tensor output = Tensor::zeros({8, 3}, r == 1 ? DType::kF64 : DType::kF32);
    a.run(c, a.input(r), output);
  });
  expect_only(out, 1, ErrorCode::kInvalidArgument, "all_gather: rank 1's input is f32 but its output is f64");
  // Output aliasing the input.
  out = run_group(shared(), [&](int r, Communicator& c) {
    AllGather a;
    Tensor whole = global_block(Box{{0, 0}, {8, 3}}, a.dims, DType::kF32);
    Tensor input = r == 0 ? whole.slice(0, 0, 2) : a.input(r);
    Tensor output = r == 0 ? whole : Tensor::zeros({8, 3}, DType::kF32);
    a.run(c, input, output);
  });
  expect_only(out, 0, ErrorCode::kInvalidArgument, "all_gather: output shares storage with input");
}

TEST_P(BoxCollectiveTest, RanksPassingDifferentDTypesAllFailWithFailedPrecondition) {
  auto out = run_group(shared(), [&](int r, Communicator& c) {
    AllGather a;
    const DType dtype = r == 2 ? DType::kF64 : DType::kF32;
    Tensor output = Tensor::zeros({8, 3}, dtype);
    a.run(c, a.input(r, dtype), output);
  });
  expect_all(out, ErrorCode::kFailedPrecondition, "all_gather: rank 0 passes f32 tensors but rank 2 passes f64");
}

TEST_P(BoxCollectiveTest, DifferentTransferListsOrLabelsAllFailWithFailedPrecondition) {
  auto out = run_group(shared(), [&](int r, Communicator& c) {
    AllGather a;
    if (r == 3) a.transfers[0].box.extents = {1, 3};
    Tensor output = Tensor::zeros({8, 3}, DType::kF32);
    a.run(c, a.input(r), output);
  });
  expect_all(out, ErrorCode::kFailedPrecondition,
             "collectives differ: rank 0 (rank 0) called all_gather(f32, 16 transfers, 24 elements to rank 0)");
  for (int r = 0; r < kN; ++r) EXPECT_LT(out[r].seconds, kReleaseBound);
  out = run_group(shared(), [&](int r, Communicator& c) {
    AllGather a;
    Tensor output = Tensor::zeros({8, 3}, DType::kF32);
    a.run(c, a.input(r), output, r == 1 ? "all_to_all" : "all_gather");
  });
  expect_all(out, ErrorCode::kFailedPrecondition,
             "but rank 1 (rank 1) called all_to_all(f32, 16 transfers, 24 elements to rank 1)");
}

TEST_P(BoxCollectiveTest, AMissingRankIsDeadlineExceededNamingIt) {
  const auto timeout = std::chrono::milliseconds(300);
  auto out = run_group(shared(), [&](int r, Communicator& c) {
    if (r == 3) return;  // never arrives
    AllGather a;
    Tensor output = Tensor::zeros({8, 3}, DType::kF32);
    a.run(c, a.input(r), output, "all_gather", timeout);
  });
  int deadline_count = 0;
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(out[r].error.thrown) << "rank " << r;
    const ErrorCode code = out[r].error.code;
    EXPECT_TRUE(code == ErrorCode::kDeadlineExceeded || code == ErrorCode::kAborted) << out[r].error.what;
    deadline_count += code == ErrorCode::kDeadlineExceeded;
    EXPECT_NE(out[r].error.what.find("for ranks [3 (rank 3)]"), std::string::npos) << out[r].error.what;
    EXPECT_GE(out[r].seconds, 0.29);
    EXPECT_LT(out[r].seconds, 2.0);
  }
  EXPECT_GE(deadline_count, 1);
  EXPECT_FALSE(out[3].error.thrown);
}

// A valid reduce-scatter of an [8, 3] block into row boxes of 2 rows each.
struct RowReduceScatter {
  std::vector<int64_t> origin{0, 0};
  std::vector<Box> boxes;
  RowReduceScatter() {
    for (int r = 0; r < kN; ++r) boxes.push_back(Box{{2 * r, 0}, {2, 3}});
  }
};

TEST_P(BoxCollectiveTest, ReduceScatterArgumentErrors) {
  auto bent = [&](const std::function<void(RowReduceScatter&)>& bend, ReduceOp op = ReduceOp::kSum,
                  DType dtype = DType::kF32) {
    return run_group(shared(), [&](int, Communicator& c) {
      RowReduceScatter a;
      bend(a);
      Tensor input = Tensor::zeros({8, 3}, dtype);
      Tensor output = Tensor::zeros({2, 3}, dtype);
      c.reduce_scatter_boxes(input, a.origin, output, a.boxes, op, opts());
    });
  };
  // Errors of the shared arguments: every rank.
  expect_all(bent([](RowReduceScatter& a) { a.boxes.pop_back(); }), ErrorCode::kInvalidArgument,
             "Communicator: reduce_scatter_boxes: 3 output boxes given for a group of 4");
  expect_all(bent([](RowReduceScatter& a) { a.boxes[2] = Box{{0, 0}, {9, 3}}; }), ErrorCode::kInvalidArgument,
             "reduce_scatter_boxes: output box of rank 2 [0:9, 0:3] is not inside the input block [0:8, 0:3]");
  expect_all(bent([](RowReduceScatter& a) { a.boxes[1] = Box{{2}, {2}}; }), ErrorCode::kInvalidArgument,
             "reduce_scatter_boxes: output box of rank 1 [2:4] has rank 1, expected 2");
  expect_all(bent([](RowReduceScatter& a) { a.boxes[0].extents = {-1, 3}; }), ErrorCode::kInvalidArgument,
             "reduce_scatter_boxes: output box of rank 0 [0:-1, 0:3] has a negative extent");
  expect_all(bent([](RowReduceScatter& a) { a.origin = {0}; }), ErrorCode::kInvalidArgument,
             "reduce_scatter_boxes: input origin [0] has 1 entries for an input of rank 2");
  expect_all(bent([](RowReduceScatter&) {}, ReduceOp::kMean, DType::kBool), ErrorCode::kInvalidArgument,
             "Communicator: mean is not defined for bool tensors");
}

TEST_P(BoxCollectiveTest, ReduceScatterBadTensorsFailThatRank) {
  auto with = [&](const std::function<void(int, Tensor&, Tensor&)>& bend) {
    return run_group(shared(), [&](int r, Communicator& c) {
      RowReduceScatter a;
      Tensor input = Tensor::zeros({8, 3}, DType::kF32);
      Tensor output = Tensor::zeros({2, 3}, DType::kF32);
      bend(r, input, output);
      c.reduce_scatter_boxes(input, a.origin, output, a.boxes, ReduceOp::kSum, opts());
    });
  };
  expect_only(with([](int r, Tensor&, Tensor& out) { if (r == 1) out = Tensor::zeros({3, 3}, DType::kF32); }), 1,
              ErrorCode::kInvalidArgument,
              "reduce_scatter_boxes: rank 1's output f32 [3,3] does not match its box [2:4, 0:3] (f32 [2,3])");
  expect_only(with([](int r, Tensor&, Tensor& out) { if (r == 2) out = Tensor::zeros({2, 3}, DType::kI64); }), 2,
              ErrorCode::kInvalidArgument, "rank 2's output i64 [2,3] does not match its box [4:6, 0:3] (f32 [2,3])");
  expect_only(with([](int r, Tensor&, Tensor& out) { if (r == 2) out = Tensor(); }), 2,
              ErrorCode::kInvalidArgument, "reduce_scatter_boxes: output is a null tensor");
  expect_only(with([](int r, Tensor& in, Tensor&) { if (r == 3) in = Tensor(); }), 3,
              ErrorCode::kInvalidArgument, "reduce_scatter_boxes: input is a null tensor");
  expect_only(with([](int r, Tensor& in, Tensor& out) { if (r == 0) out = in.slice(0, 0, 2); }), 0,
              ErrorCode::kInvalidArgument, "reduce_scatter_boxes: output shares storage with input");
}

TEST_P(BoxCollectiveTest, ReduceScatterDifferentBoxesAllFailWithFailedPrecondition) {
  auto out = run_group(shared(), [&](int r, Communicator& c) {
    RowReduceScatter a;
    if (r == 2) std::swap(a.boxes[0], a.boxes[1]);
    Tensor input = Tensor::zeros({8, 3}, DType::kF32);
    Tensor output = Tensor::zeros({2, 3}, DType::kF32);
    c.reduce_scatter_boxes(input, a.origin, output, a.boxes, ReduceOp::kSum, opts());
  });
  expect_all(out, ErrorCode::kFailedPrecondition,
             "collectives differ: rank 0 (rank 0) called reduce_scatter_boxes(f32, [8,3], sum, box [0:2, 0:3] "
             "to rank 0)");
}

TEST_P(BoxCollectiveTest, ReduceScatterMissingRankIsDeadlineExceeded) {
  auto out = run_group(shared(), [&](int r, Communicator& c) {
    if (r == 0) return;
    RowReduceScatter a;
    Tensor input = Tensor::zeros({8, 3}, DType::kF32);
    Tensor output = Tensor::zeros({2, 3}, DType::kF32);
    c.reduce_scatter_boxes(input, a.origin, output, a.boxes, ReduceOp::kSum, opts(std::chrono::milliseconds(300)));
  });
  int deadline_count = 0;
  for (int r = 1; r < kN; ++r) {
    ASSERT_TRUE(out[r].error.thrown) << "rank " << r;
    deadline_count += out[r].error.code == ErrorCode::kDeadlineExceeded;
    EXPECT_NE(out[r].error.what.find("for ranks [0 (rank 0)]"), std::string::npos) << out[r].error.what;
    EXPECT_LT(out[r].seconds, 2.0);
  }
  EXPECT_GE(deadline_count, 1);
}

}  // namespace
}  // namespace tessel
