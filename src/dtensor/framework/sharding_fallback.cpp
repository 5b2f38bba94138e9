// The sharding fallback and its records (see tessel/dtensor/sharding_fallback.h and
// sharding_fallback.h beside this file).
#include "dtensor/framework/sharding_fallback.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "core/env.h"
#include "core/errors.h"
#include "dtensor/framework/op_util.h"
#include "tessel/dtensor/relayout_plan.h"
#include "tessel/dtensor/sharding_fallback.h"

namespace tessel {
namespace detail {

struct FallbackCounter {
  FallbackCounter(std::string op_name, std::vector<Layout> input_layouts)
      : op(std::move(op_name)), layouts(std::move(input_layouts)) {}

  const std::string op;
  const std::vector<Layout> layouts;
  std::atomic<int64_t> count{0};
  std::atomic<int64_t> bytes{0};
  std::atomic<bool> warned{false};
};

namespace {

constexpr std::string_view kComponent = "sharding fallback";

// Strict mode: -1 until first read (then TESSEL_STRICT_SHARDING's value), else 0 or 1.
std::atomic<int> g_strict{-1};

// Every pair that has fallen back, by "op\nlayout\nlayout...". Counters are reset in place, never
// removed: the dispatch cache's plans keep pointing at them.
struct CounterTable {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<FallbackCounter>> counters;
};

CounterTable& table() {
  static CounterTable* t = new CounterTable();  // never destroyed: ops may run during exit
  return *t;
}

std::shared_ptr<FallbackCounter> counter_of(const std::string& op,
                                            const std::vector<TensorSpec>& inputs) {
  std::string key = op;
  std::vector<Layout> layouts;
  for (const TensorSpec& in : inputs) {
    key += '\n' + in.layout.to_string();
    layouts.push_back(in.layout);
  }
  CounterTable& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  std::shared_ptr<FallbackCounter>& slot = t.counters[key];
  if (slot == nullptr) slot = std::make_shared<FallbackCounter>(op, std::move(layouts));
  return slot;
}

// A layout's text without its mesh ("sharding_specs:x,unsharded, partial:sum(y)"): a message
// names the mesh once (mesh_text), as every input of a call is on the same mesh.
std::string short_layout(const Layout& layout) {
  std::string text = layout.to_string();
  const size_t mesh = text.find(", mesh:");
  return mesh == std::string::npos ? text : text.substr(0, mesh);
}

// " on mesh x=2,y=2" (nothing for a call without inputs).
std::string mesh_text(const std::vector<Layout>& layouts) {
  if (layouts.empty()) return "";
  std::string dims;
  for (const MeshDimension& d : layouts[0].mesh().dims()) {
    dims += fmt::format("{}{}={}", dims.empty() ? "" : ",", d.name, d.size);
  }
  return " on mesh " + dims;
}

std::vector<Layout> layouts_of(const std::vector<TensorSpec>& inputs) {
  std::vector<Layout> layouts;
  for (const TensorSpec& in : inputs) layouts.push_back(in.layout);
  return layouts;
}

// "input 0: [8,4] f32 in sharding_specs:x,unsharded; input 1: ... on mesh x=2".
std::string specs_text(const std::vector<TensorSpec>& inputs) {
  std::string text;
  for (size_t i = 0; i < inputs.size(); ++i) {
    text +=
        fmt::format("{}input {}: {} {} in {}", i == 0 ? "" : "; ", i, inputs[i].shape.to_string(),
                    dtype_name(inputs[i].dtype), short_layout(inputs[i].layout));
  }
  return text + mesh_text(layouts_of(inputs));
}

// "input 0: sharding_specs:x,unsharded; input 1: ... on mesh x=2".
std::string layouts_text(const std::vector<Layout>& layouts) {
  std::string text;
  for (size_t i = 0; i < layouts.size(); ++i) {
    text += fmt::format("{}input {}: {}", i == 0 ? "" : "; ", i, short_layout(layouts[i]));
  }
  return text + mesh_text(layouts);
}

// The rule's decision for `inputs`, or nullopt when it has none (kUnimplemented); its other
// errors propagate.
std::optional<ShardingDecision> ask_rule(const OpDef& def, const std::vector<TensorSpec>& inputs,
                                         const TensorSpec& output, const OpAttrs& attrs,
                                         std::string* why = nullptr) {
  ShardingDecision d;
  try {
    d = def.shard(inputs, output, attrs);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kUnimplemented) throw;
    if (why != nullptr) *why = e.message();
    return std::nullopt;
  }
  if (d.inputs.size() != inputs.size()) {
    throw_error(ErrorCode::kInternal, def.name,
                "sharding rule returned {} input layouts for {} inputs", d.inputs.size(),
                inputs.size());
  }
  return d;
}

// The bytes relaying `inputs` out to `layouts` sends between devices.
int64_t bytes_moved(const std::vector<TensorSpec>& inputs, const std::vector<Layout>& layouts) {
  int64_t bytes = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].layout == layouts[i]) continue;
    bytes +=
        plan_relayout(inputs[i].shape, inputs[i].layout, layouts[i], inputs[i].dtype).bytes_total();
  }
  return bytes;
}

// `inputs` with each input's layout replaced by `layout_of(its layout)`.
template <typename LayoutOf>
std::vector<TensorSpec> with_layouts(const std::vector<TensorSpec>& inputs, LayoutOf layout_of) {
  std::vector<TensorSpec> out = inputs;
  for (TensorSpec& in : out) in.layout = layout_of(in.layout);
  return out;
}

// The nearest layouts the rule accepts, in the header's order, and its decision for them; nullopt
// when it refuses even replicated inputs.
std::optional<ShardingDecision> nearest_accepted(const OpDef& def,
                                                 const std::vector<TensorSpec>& inputs,
                                                 const TensorSpec& output, const OpAttrs& attrs) {
  // 1. Partials reduced, shardings kept.
  const std::vector<TensorSpec> reduced =
      with_layouts(inputs, [](const Layout& l) { return l.without_partial(); });
  bool any_partial = false;
  for (const TensorSpec& in : inputs) any_partial = any_partial || in.layout.is_partial();
  if (any_partial) {
    if (auto d = ask_rule(def, reduced, output, attrs)) return d;
  }
  // 2. One sharded dimension of one input gathered: the cheapest the rule accepts.
  std::optional<ShardingDecision> best;
  int64_t best_bytes = 0;
  for (size_t i = 0; i < reduced.size(); ++i) {
    const SpecList specs = spec_list(reduced[i].layout);
    for (size_t dim = 0; dim < specs.size(); ++dim) {
      if (specs[dim].empty()) continue;
      SpecList gathered = specs;
      gathered[dim].clear();
      std::vector<TensorSpec> candidate = reduced;
      candidate[i].layout = make_layout(reduced[i].layout.mesh(), gathered);
      std::optional<ShardingDecision> d = ask_rule(def, candidate, output, attrs);
      if (!d) continue;
      const int64_t bytes = bytes_moved(inputs, d->inputs);
      if (!best || bytes < best_bytes) {
        best = std::move(d);
        best_bytes = bytes;
      }
    }
  }
  if (best) return best;
  // 3. Everything replicated.
  const auto replicated = [](const Layout& l) { return Layout::replicated(l.mesh(), l.rank()); };
  return ask_rule(def, with_layouts(inputs, replicated), output, attrs);
}

}  // namespace

ShardingDecision decide_sharding(const OpDef& def, const std::vector<TensorSpec>& inputs,
                                 const TensorSpec& output, const OpAttrs& attrs,
                                 Fallback* fallback) {
  std::string why;
  if (std::optional<ShardingDecision> d = ask_rule(def, inputs, output, attrs, &why)) return *d;
  if (sharding_fallback_strict()) {
    throw_error(ErrorCode::kUnimplemented, def.name,
                "no sharding rule for {} ({}); strict sharding is on "
                "(set_sharding_fallback_strict(false) or TESSEL_STRICT_SHARDING=0 lets the inputs "
                "be relaid out to layouts the rule accepts)",
                specs_text(inputs), why);
  }
  std::optional<ShardingDecision> d = nearest_accepted(def, inputs, output, attrs);
  if (!d) {
    throw_error(ErrorCode::kUnimplemented, def.name,
                "no sharding rule for {} ({}), not even for replicated inputs", specs_text(inputs),
                why);
  }
  if (fallback != nullptr) {
    fallback->counter = counter_of(def.name, inputs);
    fallback->bytes = bytes_moved(inputs, d->inputs);
    fallback->warning = fmt::format(
        "tessel: warning: op '{}' has no sharding rule for {} ({}); relaying its inputs out to {} "
        "({} bytes moved per call); sharding_fallbacks() lists every fallback, "
        "set_sharding_fallback_strict(true) makes them errors\n",
        def.name, specs_text(inputs), why, layouts_text(d->inputs), fallback->bytes);
  }
  return std::move(*d);
}

void count_fallback(const Fallback& fallback) {
  FallbackCounter& counter = *fallback.counter;
  counter.count.fetch_add(1, std::memory_order_relaxed);
  counter.bytes.fetch_add(fallback.bytes, std::memory_order_relaxed);
  if (!counter.warned.exchange(true)) std::fputs(fallback.warning.c_str(), stderr);
}

}  // namespace detail

std::vector<FallbackRecord> sharding_fallbacks() {
  std::vector<FallbackRecord> records;
  detail::CounterTable& t = detail::table();
  std::lock_guard<std::mutex> lock(t.mu);
  for (const auto& [key, counter] : t.counters) {  // the key orders by op, then layouts
    const int64_t count = counter->count.load(std::memory_order_relaxed);
    if (count == 0) continue;
    records.push_back(
        {counter->op, counter->layouts, count, counter->bytes.load(std::memory_order_relaxed)});
  }
  return records;
}

void reset_sharding_fallbacks() {
  detail::CounterTable& t = detail::table();
  std::lock_guard<std::mutex> lock(t.mu);
  for (const auto& [key, counter] : t.counters) {
    counter->count.store(0, std::memory_order_relaxed);
    counter->bytes.store(0, std::memory_order_relaxed);
    counter->warned.store(false);
  }
}

std::string sharding_fallbacks_text() {
  std::string text;
  for (const FallbackRecord& r : sharding_fallbacks()) {
    text += fmt::format("{} ({}): {} call{}, {} bytes moved\n", r.op,
                        detail::layouts_text(r.layouts), r.count, r.count == 1 ? "" : "s", r.bytes);
  }
  return text;
}

void set_sharding_fallback_strict(bool strict) { detail::g_strict.store(strict ? 1 : 0); }

bool sharding_fallback_strict() {
  int strict = detail::g_strict.load();
  if (strict < 0) {
    const int from_env =
        detail::env_flag("TESSEL_STRICT_SHARDING", false, detail::kComponent) ? 1 : 0;
    // A concurrent set_sharding_fallback_strict wins over the environment.
    detail::g_strict.compare_exchange_strong(strict, from_env);
    strict = detail::g_strict.load();
  }
  return strict == 1;
}

}  // namespace tessel
