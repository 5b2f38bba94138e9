// The lifecycle's messages <-> HostReportProto / CoordinatorReplyProto bytes.
#include "system/system_messages.h"

#include "core/errors.h"
#include "tessel/proto/system.pb.h"

namespace tessel::detail {

std::string encode(const HostReport& report) {
  proto::HostReportProto p;
  p.set_task(report.task);
  p.set_host_epoch(report.epoch);
  if (report.kind == HostReport::Kind::kDisconnected) {
    p.mutable_disconnected()->set_device_count(report.device_count);
  } else {
    proto::HostReportProto::Initialized* init = p.mutable_initialized();
    init->set_generation(report.generation);
    for (int64_t id : report.ids) init->add_global_device_ids(id);
  }
  return p.SerializeAsString();
}

HostReport decode_host_report(const std::string& bytes, int sender) {
  proto::HostReportProto p;
  if (!p.ParseFromString(bytes) || p.report_case() == proto::HostReportProto::REPORT_NOT_SET) {
    throw_error(ErrorCode::kInternal, "SystemCoordinator",
                "task {} sent {} bytes that are no host report", sender, bytes.size());
  }
  if (p.task() != sender) {
    throw_error(ErrorCode::kInternal, "SystemCoordinator",
                "task {} sent a report in the name of task {}", sender, p.task());
  }
  HostReport out;
  out.task = p.task();
  out.epoch = p.host_epoch();
  if (p.has_disconnected()) {
    out.kind = HostReport::Kind::kDisconnected;
    out.device_count = p.disconnected().device_count();
  } else {
    out.kind = HostReport::Kind::kInitialized;
    out.generation = p.initialized().generation();
    out.ids.assign(p.initialized().global_device_ids().begin(),
                   p.initialized().global_device_ids().end());
  }
  return out;
}

std::string encode(const CoordinatorReply& reply) {
  proto::CoordinatorReplyProto p;
  p.set_host_epoch(reply.epoch);
  switch (reply.kind) {
    case CoordinatorReply::Kind::kConfiguration:
      p.mutable_configuration()->ParseFromString(reply.configuration->serialized());
      break;
    case CoordinatorReply::Kind::kTopology:
      p.mutable_topology()->ParseFromString(reply.topology->serialized());
      break;
    case CoordinatorReply::Kind::kFailure:
      p.mutable_failure()->set_code(static_cast<int>(reply.code));
      p.mutable_failure()->set_message(reply.message);
      break;
  }
  return p.SerializeAsString();
}

CoordinatorReply decode_coordinator_reply(const std::string& bytes, int task) {
  proto::CoordinatorReplyProto p;
  if (!p.ParseFromString(bytes) || p.reply_case() == proto::CoordinatorReplyProto::REPLY_NOT_SET) {
    throw_error(ErrorCode::kInternal, "Host",
                "host {} received {} bytes from the coordinator that are no reply", task,
                bytes.size());
  }
  CoordinatorReply out;
  out.epoch = p.host_epoch();
  if (p.has_configuration()) {
    out.kind = CoordinatorReply::Kind::kConfiguration;
    out.configuration = HostConfiguration::from_serialized(p.configuration().SerializeAsString());
  } else if (p.has_topology()) {
    out.kind = CoordinatorReply::Kind::kTopology;
    out.topology = Topology::from_serialized(p.topology().SerializeAsString());
  } else {
    out.kind = CoordinatorReply::Kind::kFailure;
    const int code = p.failure().code();
    out.code = code >= 0 && code < kNumErrorCodes
                   ? static_cast<ErrorCode>(code)
                   : ErrorCode::kInternal;
    out.message = p.failure().message();
  }
  return out;
}

}  // namespace tessel::detail
