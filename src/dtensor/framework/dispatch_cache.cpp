// Internal: the per-thread cache of planned op calls (see dispatch_cache.h).
#include "dtensor/framework/dispatch_cache.h"

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace tessel::detail {
namespace {

constexpr size_t kSlots = 1024;

void mix(size_t& seed, size_t value) {
  seed ^= value + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2);  // boost::hash_combine
}

// The layout's type and specs (its mesh is left to the comparison: equal meshes may be distinct
// objects, and hashing one means printing it).
void mix_layout(size_t& seed, const Layout& layout) {
  mix(seed, static_cast<size_t>(layout.type()));
  for (const ShardingSpec& spec : layout.sharding_specs()) {
    mix(seed, static_cast<size_t>(spec.kind()));
    for (const std::string& dim : spec.mesh_dims()) mix(seed, std::hash<std::string_view>()(dim));
  }
  mix(seed, layout.partial().size());
}

// One attribute into the seed, equal values (OpAttrs' ==) giving equal hashes: std::hash<double>
// gives -0.0 and 0.0 one hash; a Layout hashes as mix_layout does.
void mix_attr(size_t& seed, const std::vector<int64_t>& list) {
  mix(seed, list.size());
  for (int64_t v : list) mix(seed, static_cast<size_t>(v));
}
void mix_attr(size_t& seed, int64_t v) { mix(seed, static_cast<size_t>(v)); }
void mix_attr(size_t& seed, uint64_t v) { mix(seed, static_cast<size_t>(v)); }
void mix_attr(size_t& seed, double v) { mix(seed, std::hash<double>()(v)); }
void mix_attr(size_t& seed, bool v) { mix(seed, v ? 1 : 0); }
void mix_attr(size_t& seed, DType v) { mix(seed, static_cast<size_t>(v)); }
void mix_attr(size_t& seed, const std::string& v) { mix(seed, std::hash<std::string>()(v)); }
void mix_attr(size_t& seed, const Layout& v) { mix_layout(seed, v); }
void mix_attr(size_t& seed, const Runtime* v) { mix(seed, std::hash<const void*>()(v)); }
template <typename T>
void mix_attr(size_t& seed, const std::optional<T>& v) {
  mix(seed, v.has_value() ? 1 : 0);
  if (v) mix_attr(seed, *v);
}

bool same_inputs(const std::vector<TensorSpec>& specs, const std::vector<DTensor>& inputs) {
  if (specs.size() != inputs.size()) return false;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].dtype != inputs[i].dtype() || specs[i].shape != inputs[i].shape() ||
        specs[i].layout != inputs[i].layout()) {
      return false;
    }
  }
  return true;
}

std::vector<std::shared_ptr<const PlannedCall>>& slots() {
  thread_local std::vector<std::shared_ptr<const PlannedCall>> cache(kSlots);
  return cache;
}

}  // namespace

size_t call_key(const OpDef& def, const std::vector<DTensor>& inputs, const OpAttrs& attrs,
                uint64_t runtime_id) {
  size_t seed = std::hash<const void*>()(&def);
  mix(seed, static_cast<size_t>(runtime_id));
  OpAttrs::for_each_field([&](std::string_view, auto member) { mix_attr(seed, attrs.*member); });
  for (const DTensor& in : inputs) {
    mix(seed, static_cast<size_t>(in.dtype()));
    for (int64_t d : in.shape().dims()) mix(seed, static_cast<size_t>(d));
    mix_layout(seed, in.layout());
  }
  return seed;
}

std::shared_ptr<const PlannedCall> find_planned_call(size_t key, const OpDef& def,
                                                     const std::vector<DTensor>& inputs,
                                                     const OpAttrs& attrs, uint64_t runtime_id) {
  const std::shared_ptr<const PlannedCall>& slot = slots()[key % kSlots];
  if (slot == nullptr || slot->def != &def || slot->runtime_id != runtime_id ||
      !same_inputs(slot->inputs, inputs) || !(slot->attrs == attrs)) {
    return nullptr;
  }
  return slot;
}

void remember_planned_call(size_t key, std::shared_ptr<const PlannedCall> call) {
  slots()[key % kSlots] = std::move(call);
}

}  // namespace tessel::detail
