// set_cluster / cluster_of (tessel/comm/multi_client.h): the runtime's GroupService keeps the
// cluster.
#include "tessel/comm/multi_client.h"

#include <utility>

#include "comm/group_service.h"

namespace tessel {

void set_cluster(Runtime& runtime, std::shared_ptr<Cluster> cluster) {
  detail::GroupService::of(runtime)->set_cluster(std::move(cluster));
}

std::shared_ptr<Cluster> cluster_of(const Runtime& runtime) {
  return detail::GroupService::of(runtime)->cluster();
}

}  // namespace tessel
