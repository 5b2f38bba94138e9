// CommunicationOptions: TF's validations, merge, and the collective options they imply.
#include "tessel/distribute/communication_options.h"

#include <cctype>
#include <cmath>

#include "core/enum_names.h"
#include "core/errors.h"

namespace tessel {
namespace {

constexpr std::string_view kComponent = "CommunicationOptions";

constexpr detail::EnumName<CommunicationImplementation> kImplementationNames[] = {
    {CommunicationImplementation::kAuto, "AUTO"},
    {CommunicationImplementation::kRing, "RING"},
    {CommunicationImplementation::kNccl, "NCCL"},
};

}  // namespace

std::string_view communication_implementation_name(CommunicationImplementation implementation) {
  return detail::name_of(kImplementationNames, implementation, kComponent);
}

CommunicationImplementation communication_implementation_from_name(std::string_view name) {
  std::string upper(name);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (const auto implementation = detail::value_named(kImplementationNames, upper)) {
    return *implementation;
  }
  detail::throw_invalid(kComponent,
                        "implementation should be a "
                        "tf.distribute.experimental.CommunicationImplementation, got '{}'",
                        name);
}

CommunicationOptions::CommunicationOptions(int64_t bytes_per_pack,
                                           std::optional<double> timeout_seconds,
                                           CommunicationImplementation implementation)
    : bytes_per_pack_(bytes_per_pack),
      timeout_seconds_(timeout_seconds),
      implementation_(implementation) {
  if (bytes_per_pack < 0) {
    detail::throw_invalid(kComponent, "bytes_per_pack must be non-negative, got {}",
                          bytes_per_pack);
  }
  if (timeout_seconds && (!std::isfinite(*timeout_seconds) || *timeout_seconds < 0)) {
    detail::throw_invalid(kComponent, "timeout_seconds must be a non-negative number, got {}",
                          *timeout_seconds);
  }
}

CommunicationOptions::CommunicationOptions(int64_t bytes_per_pack,
                                           std::optional<double> timeout_seconds,
                                           std::string_view implementation)
    : CommunicationOptions(bytes_per_pack, timeout_seconds,
                           communication_implementation_from_name(implementation)) {}

CommunicationOptions CommunicationOptions::merge(const CommunicationOptions& other) const {
  CommunicationOptions out = *this;
  if (other.bytes_per_pack_ != 0) out.bytes_per_pack_ = other.bytes_per_pack_;
  if (other.timeout_seconds_) out.timeout_seconds_ = other.timeout_seconds_;
  if (other.implementation_ != CommunicationImplementation::kAuto) {
    out.implementation_ = other.implementation_;
  }
  return out;
}

CollectiveOptions CommunicationOptions::collective_options() const {
  CollectiveOptions out;
  out.algorithm =
      implementation_ == CommunicationImplementation::kAuto ? Algorithm::kAuto : Algorithm::kRing;
  if (timeout_seconds_ && *timeout_seconds_ > 0) {
    constexpr double kMaxSeconds = 1e9;  // keeps the conversion defined
    out.timeout = std::chrono::milliseconds(
        static_cast<int64_t>(std::ceil(std::min(*timeout_seconds_, kMaxSeconds) * 1000.0)));
  }
  return out;
}

std::string CommunicationOptions::to_string() const {
  return fmt::format(
      "CommunicationOptions(bytes_per_pack={}, timeout_seconds={}, "
      "implementation={})",
      bytes_per_pack_, timeout_seconds_ ? fmt::format("{}", *timeout_seconds_) : "None",
      communication_implementation_name(implementation_));
}

}  // namespace tessel
