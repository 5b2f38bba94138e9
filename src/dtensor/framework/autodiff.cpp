// GradientTape and value_and_grad: records of op calls, walked backwards through each op's VJP
// (see autodiff.h); the suspensions of recompute_grad and OpDef::save (tape_suspension.h).
#include "tessel/dtensor/autodiff.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "core/errors.h"
#include "dtensor/dtensor_internal.h"
#include "dtensor/framework/tape_memory_counter.h"
#include "dtensor/framework/tape_suspension.h"
#include "tessel/dtensor/op_profile.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/relayout.h"

namespace tessel {

struct GradientTape::Record {
  const OpDef* def = nullptr;
  std::shared_ptr<const OpDef> owned_def;  // recompute_grad's: made per call
  std::vector<uint64_t> original_ids;     // the inputs as the caller passed them
  std::vector<Layout> original_layouts;
  std::vector<DTensor> inputs;  // as the kernel saw them (after relayouts), or stand-ins
  DTensor output;               // or a stand-in (another id: output_id is the output's)
  uint64_t output_id = 0;
  std::vector<DTensor> saved;  // OpDef::save's
  std::shared_ptr<const OpAttrs> attrs;
  std::vector<DTensor> counted;  // what tape_memory counts for this record
};

// A walk's gradients, and what a split backward pass keeps between its halves: which records
// the input half runs (those whose output a watched input flows into: the ids on that path), and
// per record what the weight half does with it.
struct GradientTape::Split {
  // A record's part left to the weight half.
  struct Waiting {
    std::vector<bool> compute;   // inputs whose gradients its VJP computes then
    DTensor grad;                // its output's gradient, for them (null when compute is empty)
    std::vector<DTensor> given;  // gradients its VJP gave unasked in the input half: added then,
                                 // in gradient()'s order
  };
  std::unordered_map<uint64_t, DTensor> grads;
  std::vector<uint64_t> input_path_ids;  // sorted
  std::vector<uint64_t> inputs;          // backward_input's inputs
  std::vector<std::optional<Waiting>> waiting;  // per record
  bool between = false;  // backward_input ran, backward_weight has not
  bool on_path(uint64_t id) const {
    return std::binary_search(input_path_ids.begin(), input_path_ids.end(), id);
  }
  // Whether the input half runs `r`: one of its inputs is on the path (an input made on the tape
  // from the weights leaves its own record to the weight half).
  bool reads_path(const Record& r) const {
    return std::any_of(r.original_ids.begin(), r.original_ids.end(),
                       [&](uint64_t id) { return on_path(id); });
  }
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

// This thread's suspensions, innermost last.
thread_local std::vector<detail::TapeSuspension*> suspensions;

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

// Gradients of sources reached through a relayout (fsdp's gathered parameters), waiting to go to
// their sources' layouts together: a run of such records (a block's gathers, met in reverse)
// becomes one relayout_batch, whose reduce-scatters are then one fused collective.
struct PendingRelayouts {
  std::vector<uint64_t> ids;
  std::vector<DTensor> grads;
  std::vector<Layout> layouts;
  bool holds(uint64_t id) const { return std::find(ids.begin(), ids.end(), id) != ids.end(); }
};

// What a VJP that does not read `t` gets instead: its shape, dtype and layout, no data.
DTensor stand_in(const DTensor& t) {
  if (t.is_abstract()) return t;
  return DTensor::abstract(t.layout(), t.shape(), t.dtype(), t.runtime());
}

void insert_sorted(std::vector<uint64_t>& ids, uint64_t id) {
  auto at = std::lower_bound(ids.begin(), ids.end(), id);
  if (at == ids.end() || *at != id) ids.insert(at, id);
}

}  // namespace

namespace detail {

TapeSuspension::TapeSuspension(const std::vector<DTensor>* function_inputs)
    : tapes_(GradientTape::active()), checked_(function_inputs != nullptr) {
  if (checked_) {
    for (const DTensor& in : *function_inputs) known_.insert(in.id());
  }
  suspensions.push_back(this);
}

TapeSuspension::~TapeSuspension() {
  auto at = std::find(suspensions.begin(), suspensions.end(), this);
  if (at != suspensions.end()) suspensions.erase(at);
}

bool TapeSuspension::suspends(const GradientTape* tape) const {
  return std::find(tapes_.begin(), tapes_.end(), tape) != tapes_.end();
}

void TapeSuspension::observe(const std::vector<DTensor>& inputs, const DTensor& output) {
  if (!checked_) return;
  for (const DTensor& in : inputs) {
    if (known_.count(in.id()) != 0) continue;
    for (const GradientTape* tape : tapes_) {
      if (tape->recording_ && tape->depends(in.id())) {
        throw_invalid("recompute_grad",
                      "the function reads DTensor #{} ({} {}), which a gradient tape watches or "
                      "computed from what it watches, without taking it as an input: its "
                      "gradient would be lost; pass it among the function's inputs",
                      in.id(), dtype_name(in.dtype()), in.shape().to_string());
      }
    }
  }
  known_.insert(output.id());
}

}  // namespace detail

GradientTape::GradientTape(bool persistent) : persistent_(persistent) {
  Tapes& t = tapes();
  std::lock_guard<std::mutex> lock(t.mu);
  t.list.emplace_back(std::this_thread::get_id(), this);
  t.count.fetch_add(1);
}

void GradientTape::stop_recording() { unregister(this); }

bool GradientTape::any() { return tapes().count.load(std::memory_order_relaxed) != 0; }

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
  insert_sorted(watched_, tensor.id());
  insert_sorted(sources_, tensor.id());
}

bool GradientTape::depends(uint64_t id) const {
  return std::binary_search(watched_.begin(), watched_.end(), id);
}

bool GradientTape::records(const std::vector<DTensor>& original_inputs) const {
  // Between the halves of a split backward pass the records are fixed (each has its plan).
  if (!recording_ || (split_ && split_->between)) return false;
  for (const DTensor& in : original_inputs) {
    if (depends(in.id())) return true;
  }
  return false;
}

void GradientTape::record_call(const OpDef& def, const std::vector<DTensor>& original_inputs,
                               const std::vector<DTensor>& inputs, const DTensor& output,
                               std::shared_ptr<const OpAttrs> attrs,
                               std::shared_ptr<const OpDef> owned_def) {
  if (!any()) return;
  const std::vector<GradientTape*> here = active();
  if (here.empty()) return;
  detail::TapeSuspension* suspension = suspensions.empty() ? nullptr : suspensions.back();
  if (suspension != nullptr) suspension->observe(original_inputs, output);
  std::vector<GradientTape*> recording;
  for (GradientTape* tape : here) {
    if (suspension != nullptr && suspension->suspends(tape)) continue;
    if (tape->records(original_inputs)) recording.push_back(tape);
  }
  if (recording.empty()) return;

  Record r;
  r.def = &def;
  r.owned_def = std::move(owned_def);
  for (const DTensor& in : original_inputs) {
    r.original_ids.push_back(in.id());
    r.original_layouts.push_back(in.layout());
  }
  // An op without a VJP reads nothing: gradient() stops at it with an error.
  const VjpSaves saves = def.vjp ? def.saves : VjpSaves::nothing();
  r.inputs.reserve(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    r.inputs.push_back(saves.keeps_input(k) ? inputs[k] : stand_in(inputs[k]));
  }
  r.output = saves.output ? output : stand_in(output);
  r.output_id = output.id();
  if (def.save && def.vjp) {
    const detail::TapeSuspension outside_the_tapes;  // the saved values are not differentiated
    r.saved = def.save(inputs, output, attrs != nullptr ? *attrs : OpAttrs{});
  }
  r.attrs = std::move(attrs);
  for (size_t i = 0; i + 1 < recording.size(); ++i) recording[i]->add_record(r);
  recording.back()->add_record(std::move(r));
}

void GradientTape::add_record(Record record) {
  const auto count = [&](const DTensor& t) {
    if (!t.defined() || t.is_abstract()) return;
    if (std::binary_search(sources_.begin(), sources_.end(), t.id())) return;  // not activations
    detail::tape_memory_keep(t);
    record.counted.push_back(t);
  };
  for (const DTensor& in : record.inputs) count(in);
  count(record.output);
  for (const DTensor& s : record.saved) count(s);
  // The output depends on the watched tensors too.
  insert_sorted(watched_, record.output_id);
  records_.push_back(std::move(record));
}

void GradientTape::release(Record& r) {
  for (const DTensor& t : r.counted) detail::tape_memory_release(t);
  r.counted.clear();
  r.inputs.clear();
  r.output = DTensor();
  r.saved.clear();
  r.owned_def.reset();
  r.attrs.reset();
}

std::vector<DTensor> GradientTape::gradient(const DTensor& target,
                                            const std::vector<DTensor>& sources,
                                            const DTensor& output_gradient) {
  return backward(target, sources, output_gradient, /*reduce=*/true);
}

std::vector<DTensor> GradientTape::gradient_with_pending(const DTensor& target,
                                                         const std::vector<DTensor>& sources,
                                                         const DTensor& output_gradient) {
  return backward(target, sources, output_gradient, /*reduce=*/false);
}

GradientTape::~GradientTape() {
  unregister(this);
  for (Record& r : records_) release(r);
}

void GradientTape::start(const DTensor& target, const DTensor& output_gradient) {
  if (split_ && split_->between) {
    detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                        "backward_input() ran on this tape and backward_weight() has not: the "
                        "backward pass is half done");
  }
  if (used_ && !persistent_) {
    detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                        "gradient() was already called on this non-persistent tape (or its "
                        "backward_input() and backward_weight())");
  }
  if (!target.defined()) detail::throw_invalid(kComponent, "the target is a null DTensor");
  if (output_gradient.defined() &&
      (output_gradient.shape() != target.shape() || output_gradient.dtype() != target.dtype())) {
    detail::throw_invalid(kComponent,
                          "the output gradient is {} {}, the target {} {}: they must match",
                          dtype_name(output_gradient.dtype()), output_gradient.shape().to_string(),
                          dtype_name(target.dtype()), target.shape().to_string());
  }
  used_ = true;
  split_ = std::make_unique<Split>();
  DTensor& g = split_->grads[target.id()];
  if (output_gradient.defined()) {
    const Layout want = keep_pending(output_gradient.layout(), target.layout().without_partial());
    g = output_gradient.layout() == want ? output_gradient : relayout(output_gradient, want);
  } else {
    g = ones_like(target.layout().is_partial()
                      ? DTensor(target.layout().without_partial(), target.shape(), target.dtype(),
                                target.components(), target.runtime())
                      : target);
  }
}

void GradientTape::walk(Half half, const std::vector<DTensor>& sources) {
  recording_ = false;  // the VJPs' ops are not part of this tape (outer tapes still record them)
  struct Resume {
    bool& flag;
    ~Resume() { flag = true; }
  } resume{recording_};
  Split& split = *split_;
  std::unordered_map<uint64_t, DTensor>& grads = split.grads;
  std::unordered_set<uint64_t> source_ids;
  for (const DTensor& s : sources) source_ids.insert(s.id());
  const auto accumulate = [&](uint64_t id, const DTensor& gk) {
    auto [slot, fresh] = grads.try_emplace(id, gk);
    if (!fresh) slot->second = add(slot->second, gk);
  };
  PendingRelayouts pending;
  const auto flush = [&] {
    if (pending.ids.empty()) return;
    const std::vector<DTensor> relaid = relayout_batch(pending.grads, pending.layouts);
    for (size_t i = 0; i < relaid.size(); ++i) accumulate(pending.ids[i], relaid[i]);
    pending = PendingRelayouts{};
  };
  const auto keep_counted = [](Record& r, const DTensor& t) {
    if (!t.defined() || t.is_abstract()) return;
    detail::tape_memory_keep(t);
    r.counted.push_back(t);
  };
  for (size_t i = records_.size(); i-- > 0;) {
    Record& r = records_[i];
    const bool input_half = half != Half::kWhole && split.reads_path(r);
    if (half == Half::kInput && !input_half) continue;  // the weight half's
    if (half == Half::kWeight && input_half && !split.waiting[i]) continue;  // ran whole before
    // Gradients waiting to be relaid out together are added before a record reads its own.
    const bool defers = r.def == &detail::relayout_op() && r.original_ids.size() == 1 &&
                        source_ids.count(r.original_ids[0]) != 0 &&
                        !pending.holds(r.original_ids[0]);
    if (!defers) flush();
    DTensor grad;
    std::vector<bool> wanted(r.original_ids.size());
    std::vector<DTensor> given;
    if (half == Half::kWeight && input_half) {
      Split::Waiting w = std::move(*split.waiting[i]);
      split.waiting[i].reset();
      wanted = std::move(w.compute);
      grad = std::move(w.grad);
      given = std::move(w.given);
    } else {
      auto g = grads.find(r.output_id);
      if (g == grads.end()) {
        if (!persistent_) release(r);
        continue;
      }
      grad = g->second;
      // The output's gradient has no other use once its VJP has it (a source's is returned).
      if (source_ids.count(r.output_id) == 0) grads.erase(g);
      for (size_t k = 0; k < wanted.size(); ++k) {
        wanted[k] = half == Half::kInput ? split.on_path(r.original_ids[k])
                                         : depends(r.original_ids[k]);
      }
    }
    std::vector<DTensor> input_grads;
    DTensor vjp_grad_as_used;  // VjpArgs::grad_as_used
    if (std::find(wanted.begin(), wanted.end(), true) != wanted.end()) {
      if (!r.def->vjp) {
        detail::throw_error(ErrorCode::kUnimplemented, kComponent,
                            "op '{}' has no gradient (VJP) and lies on the path to the target",
                            r.def->name);
      }
      // The VJP's arguments are all that is left of the record once it is let go (its op, when
      // the record owns it, and the attrs the arguments point to are kept until the VJP
      // returns).
      const std::shared_ptr<const OpDef> owned_def = r.owned_def;
      const std::shared_ptr<const OpAttrs> attrs = r.attrs;
      const OpDef& def = *r.def;
      VjpArgs args{r.inputs, r.output, grad, attrs.get(), r.saved, wanted};
      if (!persistent_ && half != Half::kInput) release(r);
      input_grads = def.vjp(args);
      vjp_grad_as_used = std::move(args.grad_as_used);
    }
    input_grads.resize(r.original_ids.size());
    if (half == Half::kInput) {
      // What the weight half needs of this record: the gradients its VJP left out (an op that
      // skips unwanted ones) and those it gave unasked, kept for gradient()'s order of sums.
      Split::Waiting w{std::vector<bool>(wanted.size()), DTensor(),
                       std::vector<DTensor>(wanted.size())};
      bool compute = false, kept = false;
      for (size_t k = 0; k < wanted.size(); ++k) {
        if (wanted[k] || !depends(r.original_ids[k])) continue;
        if (input_grads[k].defined()) {
          w.given[k] = std::exchange(input_grads[k], DTensor());
          kept = true;
        } else if (r.def->vjp_skips_unwanted) {
          w.compute[k] = compute = true;
        }
      }
      if (compute || kept) {
        if (compute) w.grad = vjp_grad_as_used.defined() ? vjp_grad_as_used : grad;
        // Counted with what the record keeps (tape_memory.h), let go with it.
        for (const DTensor& t : w.given) keep_counted(r, t);
        keep_counted(r, w.grad);
        split.waiting[i] = std::move(w);
      } else {
        release(r);
      }
    } else if (input_half) {
      for (size_t k = 0; k < given.size(); ++k) {
        if (given[k].defined()) input_grads[k] = std::move(given[k]);
      }
      release(r);
    }
    grad = DTensor();
    for (size_t k = 0; k < input_grads.size(); ++k) {
      DTensor gk = input_grads[k];
      if (!gk.defined() || !depends(r.original_ids[k])) continue;
      const Layout want = keep_pending(gk.layout(), r.original_layouts[k]);
      if (gk.layout() != want && defers) {
        pending.ids.push_back(r.original_ids[k]);
        pending.grads.push_back(gk);
        pending.layouts.push_back(want);
        continue;
      }
      if (gk.layout() != want) gk = relayout(gk, want);
      accumulate(r.original_ids[k], gk);
    }
  }
  flush();
}

std::vector<DTensor> GradientTape::collect(const std::vector<DTensor>& sources, bool reduce) {
  std::vector<DTensor> out;
  std::vector<Layout> layouts;
  for (const DTensor& s : sources) {
    auto g = split_->grads.find(s.id());
    if (!reduce) {
      out.push_back(g != split_->grads.end() ? g->second : DTensor());
      continue;
    }
    out.push_back(g != split_->grads.end() ? g->second : zeros_like(s));
    layouts.push_back(s.layout());
  }
  if (!reduce) return out;
  // Its own phase in the op profile: the reduction's share of a step is read off the table.
  const ProfilePhase reduction("gradient reduction");
  return relayout_batch(out, layouts);
}

std::vector<DTensor> GradientTape::backward(const DTensor& target,
                                            const std::vector<DTensor>& sources,
                                            const DTensor& output_gradient, bool reduce) {
  start(target, output_gradient);
  walk(Half::kWhole, sources);
  if (!persistent_) records_.clear();
  std::vector<DTensor> out = collect(sources, reduce);
  split_.reset();
  return out;
}

std::vector<DTensor> GradientTape::backward_input(const DTensor& target,
                                                  const std::vector<DTensor>& inputs,
                                                  const DTensor& output_gradient) {
  if (persistent_) {
    detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                        "backward_input() on a persistent tape: the split backward pass lets go "
                        "of each record as it runs; use gradient()");
  }
  start(target, output_gradient);
  Split& split = *split_;
  for (const DTensor& x : inputs) {
    insert_sorted(split.input_path_ids, x.id());
    split.inputs.push_back(x.id());
  }
  for (const Record& r : records_) {
    if (split.reads_path(r)) insert_sorted(split.input_path_ids, r.output_id);
  }
  split.waiting.assign(records_.size(), std::nullopt);
  walk(Half::kInput, inputs);
  split.between = true;
  std::vector<DTensor> out = collect(inputs, /*reduce=*/true);
  // The inputs' gradients are complete (every op reading them ran); the weight half needs one
  // only to walk on through the op that made that input, when the tape recorded it.
  for (uint64_t id : split.inputs) {
    if (std::none_of(records_.begin(), records_.end(),
                     [&](const Record& r) { return r.output_id == id; })) {
      split.grads.erase(id);
    }
  }
  return out;
}

std::vector<DTensor> GradientTape::backward_weight(const std::vector<DTensor>& weights) {
  if (!split_ || !split_->between) {
    detail::throw_error(ErrorCode::kFailedPrecondition, kComponent,
                        "backward_weight() needs backward_input() on this tape first");
  }
  for (const DTensor& w : weights) {
    if (std::find(split_->inputs.begin(), split_->inputs.end(), w.id()) != split_->inputs.end()) {
      detail::throw_invalid(kComponent,
                            "DTensor #{} ({} {}) was an input of backward_input(), which returned "
                            "its gradient: pass it there only",
                            w.id(), dtype_name(w.dtype()), w.shape().to_string());
    }
  }
  split_->between = false;
  walk(Half::kWeight, weights);
  records_.clear();
  std::vector<DTensor> out = collect(weights, /*reduce=*/true);
  split_.reset();
  return out;
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
