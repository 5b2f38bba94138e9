// Internal to `tessel bench <collective>`: each collective's buffers, calls and exact reference,
// for one size at a time, over N in-process ranks (one Communicator each).
//
// Per rank r, on r's worker: setup(r, count) once per size, then timed call(r, in_place) calls,
// then prepare_check + call + check for the verified call, then teardown(r). Ranks read each
// other's buffers inside a call, so the bench separates the phases with barriers (Team::sync).
//
// The size column and busbw follow nccl-tests; min_traffic is the fewest bytes the collective
// must move through memory, for N ranks in one process that share memory and a per-rank size S
// (the size column):
//   all_reduce:     N*S read (every input once) + N*S written (every output once)   = 2*N*S
//   reduce_scatter: N*S read (every input once) + N * S/N written (each rank's block) = (N+1)*S
//   all_gather:     N * S/N read (every input once) + N*S written (every output)      = (N+1)*S
//   broadcast:      S read (the root's buffer) + (N-1)*S written (the other ranks')   = N*S
//   all_to_all:     N*S read + N*S written                                           = 2*N*S
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench_check.h"
#include "tessel/comm/collective_options.h"
#include "tessel/comm/communicator.h"
#include "tessel/core/dtype.h"
#include "tessel/core/reduce_op.h"
#include "tessel/core/tensor.h"

namespace tessel::cli::bench {

// The collectives the bench times, by the names its command line takes.
inline const std::vector<std::string> kCollectives = {"all_reduce", "all_gather", "reduce_scatter",
                                                      "broadcast", "all_to_all"};

// Which collective runs, over how many ranks, on which values.
struct CollectiveParams {
  std::string collective;  // one of kCollectives
  int devices = 4;
  Algorithm algorithm = Algorithm::kAuto;
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;  // all_reduce and reduce_scatter
  int root = 0;                  // broadcast
};

class Collective {
 public:
  // `comms`: one in-process group of p.devices ranks; both outlive the Collective.
  Collective(const CollectiveParams& p, std::vector<std::unique_ptr<Communicator>>& comms);
  virtual ~Collective() = default;

  // The per-call count (nccl-tests' count column) that fits in `bytes`.
  virtual int64_t count_for(int64_t bytes) const { return bytes / static_cast<int64_t>(item_); }
  // The size column: max(send, recv) bytes per rank.
  virtual int64_t size_of(int64_t count) const { return count * static_cast<int64_t>(item_); }
  // busbw = algbw * bus_factor().
  virtual double bus_factor() const = 0;
  // Fewest bytes read + written through memory by one call (see the top of this file).
  virtual double min_traffic(int64_t count) const = 0;
  // Bytes of buffers the bench holds at once for `count`, to refuse sizes that cannot fit.
  virtual double footprint(int64_t count) const = 0;
  virtual std::string redop() const { return "none"; }
  virtual int root() const { return -1; }
  // Whether the mode has a form in the API (`tensor` in place, or separate output).
  virtual bool has_mode(bool in_place) const = 0;

  virtual void setup(int r, int64_t count) = 0;
  // Restores inputs and poisons outputs before the checked call.
  virtual void prepare_check(int r, bool in_place) = 0;
  // One call; a collective that returns a new tensor returns it (freed by the caller after timing).
  virtual Tensor call(int r, bool in_place) = 0;
  // Wrong elements of rank r's result (`result`: what call returned).
  virtual int64_t check(int r, bool in_place, const Tensor& result) = 0;
  virtual void teardown(int r) = 0;

 protected:
  Pattern input_pattern(int rank) const;
  Pattern reduced_pattern() const;
  static void poison(Tensor& t);

  const CollectiveParams& p_;
  std::vector<std::unique_ptr<Communicator>>& comms_;
  const int n_;
  const size_t item_;
  CollectiveOptions options_;
};

// The Collective named by p.collective (one of kCollectives).
std::unique_ptr<Collective> make_collective(const CollectiveParams& p,
                                            std::vector<std::unique_ptr<Communicator>>& comms);

}  // namespace tessel::cli::bench
