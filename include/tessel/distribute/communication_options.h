// CommunicationOptions: how cross-device ops run their collectives (TF's
// tf.distribute.experimental.CommunicationOptions, collective_util.Options).
//
//   CommunicationOptions opts(/*bytes_per_pack=*/50 << 20, /*timeout_seconds=*/10.0,
//                             CommunicationImplementation::kRing);
//   ops.batch_reduce(ReduceOp::kSum, pairs, opts);
//
// Fields, as TF defines them:
// - bytes_per_pack: CollectiveAllReduce splits a batch of dense tensors into packs of about this
//   many bytes and runs one all-reduce per pack (tessel/alloc/fusion_rules.h has the rule). 0: one pack.
// - timeout_seconds: a collective that runs longer fails with kDeadlineExceeded. nullopt or 0
//   means "no timeout" in TF; tessel bounds every wait, so there it means the process default
//   (default_collective_timeout(), TESSEL_COLLECTIVE_TIMEOUT_S or 300 s).
// - implementation: AUTO, RING or NCCL. tessel's devices are CPUs, where TF falls back from NCCL
//   to RING; tessel does the same. AUTO uses the in-process direct algorithm.
//
// Thread safety: an immutable value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tessel/comm/collective_options.h"

namespace tessel {

enum class CommunicationImplementation { kAuto, kRing, kNccl };

// "AUTO", "RING", "NCCL" (TF's enum values, equal to the names).
std::string_view communication_implementation_name(CommunicationImplementation implementation);
// Case-insensitive (TF upper-cases the string first). Anything else: kInvalidArgument
// "implementation should be a tf.distribute.experimental.CommunicationImplementation".
CommunicationImplementation communication_implementation_from_name(std::string_view name);

class CommunicationOptions {
 public:
  // bytes_per_pack < 0: kInvalidArgument "bytes_per_pack must be non-negative". A negative or
  // non-finite timeout_seconds: kInvalidArgument (TF does not check; tessel does).
  CommunicationOptions(
      int64_t bytes_per_pack = 0, std::optional<double> timeout_seconds = std::nullopt,
      CommunicationImplementation implementation = CommunicationImplementation::kAuto);
  // As above with the implementation named (communication_implementation_from_name).
  CommunicationOptions(int64_t bytes_per_pack, std::optional<double> timeout_seconds,
                       std::string_view implementation);

  int64_t bytes_per_pack() const { return bytes_per_pack_; }
  std::optional<double> timeout_seconds() const { return timeout_seconds_; }
  CommunicationImplementation implementation() const { return implementation_; }

  // TF's merge: a copy of *this where every field of `other` that is not its default
  // (bytes_per_pack != 0, timeout_seconds set, implementation != AUTO) overrides.
  CommunicationOptions merge(const CommunicationOptions& other) const;

  // The per-collective options these imply: the algorithm (AUTO -> kAuto; RING and NCCL ->
  // kRing, NCCL's CPU fallback) and the timeout (unset or 0 -> zero, the process default).
  CollectiveOptions collective_options() const;

  // "CommunicationOptions(bytes_per_pack=0, timeout_seconds=None, implementation=AUTO)".
  std::string to_string() const;

  friend bool operator==(const CommunicationOptions&, const CommunicationOptions&) = default;

 private:
  int64_t bytes_per_pack_;
  std::optional<double> timeout_seconds_;
  CommunicationImplementation implementation_;
};

}  // namespace tessel
