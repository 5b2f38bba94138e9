// Destinations: the accepted forms of TF's `destinations` argument.
#include "tessel/distribute/destinations.h"

#include "tessel/core/allocator.h"

namespace tessel {

Destinations::Destinations(const char* device) : devices_{std::string(device)} {}
Destinations::Destinations(std::string device) : devices_{std::move(device)} {}
Destinations::Destinations(std::string_view device) : devices_{std::string(device)} {}
Destinations::Destinations(std::vector<std::string> devices) : devices_(std::move(devices)) {}
Destinations::Destinations(std::initializer_list<std::string> devices) : devices_(devices) {}
Destinations::Destinations(const DistributedValues& value)
    : devices_(value.devices()), from_values_(true) {}

Destinations::Destinations(const Tensor& tensor) {
  if (!tensor.defined()) return;  // no devices: empty, as TF's check_destinations says
  const std::string_view allocator = tensor.allocator()->name();
  devices_.emplace_back(allocator == host_allocator()->name() ? "/cpu:0" : std::string(allocator));
}

bool Destinations::is_empty() const {
  if (devices_.empty()) return true;
  for (const std::string& d : devices_) {
    if (d.empty()) return true;
  }
  return false;
}

}  // namespace tessel
