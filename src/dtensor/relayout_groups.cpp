// Internal: relayout's communicator pools by runtime id (see relayout_groups.h).
#include "dtensor/relayout_groups.h"

#include <map>
#include <mutex>

namespace tessel::detail {
namespace {

struct Registry {
  std::mutex mu;
  std::map<uint64_t, std::shared_ptr<CommunicatorPool>> pools;  // by Runtime::id()
  std::map<uint64_t, CommunicatorPool::GroupFactory> factories;  // tests only
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
  if (!pool) {
    auto factory = r.factories.find(runtime.id());
    pool = factory == r.factories.end() ? std::make_shared<CommunicatorPool>()
                                        : std::make_shared<CommunicatorPool>(factory->second);
  }
  return pool;
}

void set_relayout_group_factory(const Runtime& runtime, CommunicatorPool::GroupFactory factory) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.factories[runtime.id()] = std::move(factory);
  r.pools.erase(runtime.id());
}

void drop_relayout_groups(const Runtime& runtime) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.pools.erase(runtime.id());
}

}  // namespace tessel::detail
