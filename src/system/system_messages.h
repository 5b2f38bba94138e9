// Internal: the messages of the system lifecycle (proto/system.proto) as C++ values, and their
// encoding for a SystemChannel.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/mesh/topology.h"
#include "tessel/system/system.h"

namespace tessel::detail {

// Host -> coordinator: step 1 (disconnected) or step 3 (initialized).
struct HostReport {
  enum class Kind { kDisconnected, kInitialized };
  Kind kind = Kind::kDisconnected;
  int task = 0;
  uint64_t epoch = 0;
  int device_count = 0;            // kDisconnected
  uint64_t generation = 0;         // kInitialized
  std::vector<int64_t> ids;        // kInitialized
};

// Coordinator -> host, in start_system.
struct CoordinatorReply {
  enum class Kind { kConfiguration, kTopology, kFailure };
  Kind kind = Kind::kFailure;
  uint64_t epoch = 0;
  std::optional<HostConfiguration> configuration;  // kConfiguration
  std::optional<Topology> topology;                // kTopology
  ErrorCode code = ErrorCode::kInternal;           // kFailure
  std::string message;                             // kFailure: the coordinator's what()
};

std::string encode(const HostReport& report);
// Bytes that are no HostReportProto, or a report whose task differs from the sender's:
// kInternal naming the sender.
HostReport decode_host_report(const std::string& bytes, int sender);

std::string encode(const CoordinatorReply& reply);
// Bytes that are no CoordinatorReplyProto: kInternal naming the host.
CoordinatorReply decode_coordinator_reply(const std::string& bytes, int task);

}  // namespace tessel::detail
