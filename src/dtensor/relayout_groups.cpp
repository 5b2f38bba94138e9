// Internal: relayout's communicator pools by runtime id (see relayout_groups.h).
#include "dtensor/relayout_groups.h"

#include <map>
#include <mutex>

namespace tessel::detail {
namespace {

struct Registry {
  std::mutex mu;
  std::map<uint64_t, std::shared_ptr<CommunicatorPool>> pools;  // by Runtime::id()
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: relayouts may run during exit
  return *r;
}

}  // namespace

std::shared_ptr<CommunicatorPool> relayout_groups(const Runtime& runtime) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::shared_ptr<CommunicatorPool>& pool = r.pools[runtime.id()];
  if (!pool) pool = std::make_shared<CommunicatorPool>();
  return pool;
}

void drop_relayout_groups(const Runtime& runtime) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.pools.erase(runtime.id());
}

}  // namespace tessel::detail
