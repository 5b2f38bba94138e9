// GradientTape and value_and_grad: records of op calls, walked backwards through each op's VJP
// (see autodiff.h).
#include "tessel/dtensor/autodiff.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/errors.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/relayout.h"

namespace tessel {

struct GradientTape::Record {
  const OpDef* def = nullptr;
  std::vector<uint64_t> original_ids;     // the inputs as the caller passed them
  std::vector<Layout> original_layouts;
  std::vector<DTensor> inputs;            // as the kernel saw them (after relayouts)
  DTensor output;
  std::shared_ptr<const OpAttrs> attrs;
};

namespace {

constexpr std::string_view kComponent = "GradientTape";

// Recording tapes with the thread each records, process-wide so that a tape can be destroyed
// (or stopped) from any thread; the count lets call_op skip the lock when no tape exists.
struct Tapes {
  std::mutex mu;
  std::vector<std::pair<std::thread::id, GradientTape*>> list;
  std::atomic<int> count{0};
};

Tapes& tapes() {
  static Tapes* t = new Tapes();  // never destroyed: tapes may die during exit
  return *t;
}

void unregister(GradientTape* tape) {
  Tapes& t = tapes();
  std::lock_guard<std::mutex> lock(t.mu);
  for (auto it = t.list.begin(); it != t.list.end(); ++it) {
    if (it->second == tape) {
      t.list.erase(it);
      t.count.fetch_sub(1);
      return;
    }
  }
}

// `grad`'s layout changed to `like`'s sharding; its pending reductions over mesh dims that
// `like` does not shard on stay pending (they are reduced once, at the end, in fused buckets).
Layout keep_pending(const Layout& grad, const Layout& like) {
  std::vector<PartialDim> partial;
  for (const PartialDim& p : grad.partial()) {
    bool used = false;
    for (const ShardingSpec& s : like.sharding_specs()) used = used || s.uses(p.mesh_dim);
    if (!used) partial.push_back(p);
  }
  return Layout::create(like.type(), like.sharding_specs(), like.mesh(), std::move(partial));
}

}  // namespace

GradientTape::GradientTape(bool persistent) : persistent_(persistent) {
  Tapes& t = tapes();
  std::lock_guard<std::mutex> lock(t.mu);
  t.list.emplace_back(std::this_thread::get_id(), this);
  t.count.fetch_add(1);
}

GradientTape::~GradientTape() { unregister(this); }

void GradientTape::stop_recording() { unregister(this); }

std::vector<GradientTape*> GradientTape::active() {
  Tapes& t = tapes();
  if (t.count.load() == 0) return {};
  const std::thread::id me = std::this_thread::get_id();
  std::vector<GradientTape*> mine;
  std::lock_guard<std::mutex> lock(t.mu);
  for (const auto& [thread, tape] : t.list) {
    if (thread == me) mine.push_back(tape);
  }
  return mine;
}

void GradientTape::watch(const DTensor& tensor) {
  if (!tensor.defined()) detail::throw_invalid(kComponent, "cannot watch a null DTensor");
  watched_.insert(std::upper_bound(watched_.begin(), watched_.end(), tensor.id()), tensor.id());
}

bool GradientTape::depends(uint64_t id) const {
  return std::binary_search(watched_.begin(), watched_.end(), id);
}

void GradientTape::record(const OpDef& def, const std::vector<DTensor>& original_inputs,
                          const std::vector<DTensor>& inputs, const DTensor& output,
                          std::shared_ptr<const OpAttrs> attrs) {
  if (!recording_) return;
  bool connected = false;
  for (const DTensor& in : original_inputs) connected = connected || depends(in.id());
  if (!connected) return;
  Record r;
  r.def = &def;
  for (const DTensor& in : original_inputs) {
    r.original_ids.push_back(in.id());
    r.original_layouts.push_back(in.layout());
  }
  r.inputs = inputs;
  r.output = output;
  r.attrs = std::move(attrs);
  records_.push_back(std::move(r));
  // The output depends on the watched tensors too.
  watched_.insert(std::upper_bound(watched_.begin(), watched_.end(), output.id()), output.id());
}

std::vector<DTensor> GradientTape::gradient(const DTensor& target,
                                            const std::vector<DTensor>& sources) {
  if (used_ && !persistent_) {
    detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                        "gradient() was already called on this non-persistent tape");
  }
  used_ = true;
  if (!target.defined()) detail::throw_invalid(kComponent, "the target is a null DTensor");
  recording_ = false;  // the VJPs' ops are not part of this tape (outer tapes still record them)
  struct Resume {
    bool& flag;
    ~Resume() { flag = true; }
  } resume{recording_};

  std::unordered_map<uint64_t, DTensor> grads;
  grads[target.id()] = ones_like(target.layout().is_partial()
                                     ? DTensor(target.layout().without_partial(), target.shape(),
                                               target.dtype(), target.components(),
                                               target.runtime())
                                     : target);
  for (auto it = records_.rbegin(); it != records_.rend(); ++it) {
    const Record& r = *it;
    auto g = grads.find(r.output.id());
    if (g == grads.end()) continue;
    if (!r.def->vjp) {
      detail::throw_error(ErrorCode::kUnimplemented, kComponent,
                          "op '{}' has no gradient (VJP) and lies on the path to the target",
                          r.def->name);
    }
    const std::vector<DTensor> input_grads =
        r.def->vjp(VjpArgs{r.inputs, r.output, g->second, r.attrs.get()});
    for (size_t k = 0; k < input_grads.size() && k < r.inputs.size(); ++k) {
      DTensor gk = input_grads[k];
      if (!gk.defined() || !depends(r.original_ids[k])) continue;
      const Layout want = keep_pending(gk.layout(), r.original_layouts[k]);
      if (gk.layout() != want) gk = relayout(gk, want);
      auto [slot, fresh] = grads.try_emplace(r.original_ids[k], gk);
      if (!fresh) slot->second = add(slot->second, gk);
    }
  }
  std::vector<DTensor> out;
  std::vector<Layout> layouts;
  for (const DTensor& s : sources) {
    auto g = grads.find(s.id());
    out.push_back(g != grads.end() ? g->second : zeros_like(s));
    layouts.push_back(s.layout());
  }
  return relayout_batch(out, layouts);
}

std::pair<DTensor, std::vector<DTensor>> value_and_grad(
    const std::function<DTensor(const std::vector<DTensor>&)>& fn,
    const std::vector<DTensor>& params) {
  GradientTape tape;
  for (const DTensor& p : params) tape.watch(p);
  DTensor value = fn(params);
  std::vector<DTensor> grads = tape.gradient(value, params);
  return {std::move(value), std::move(grads)};
}

}  // namespace tessel
