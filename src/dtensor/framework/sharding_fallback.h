// Internal: the sharding decision of an op call, with the fallback for a rule that has no answer
// (tessel/dtensor/sharding_fallback.h says what the fallback does and how it is counted).
//
//   Fallback fallback;
//   ShardingDecision d = decide_sharding(def, specs, out, attrs, &fallback);
//   ... relayout the inputs to d.inputs, launch ...
//   if (fallback.happened()) count_fallback(fallback);   // once per call that ran
//
// Thread safety: any thread; the counters are atomics, their table is behind a mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessel/dtensor/op_registry.h"

namespace tessel::detail {

// The counters of one (op, input layouts) pair; shared by the table and every plan that fell back.
struct FallbackCounter;

// What a call that fell back does once per run: count on its pair's counter, and warn the first
// time. Made by decide_sharding; kept by the dispatch cache with the call's plan.
struct Fallback {
  std::shared_ptr<FallbackCounter> counter;  // null: the rule answered
  int64_t bytes = 0;                         // what the call's fallback relayouts send
  std::string warning;                       // printed on the pair's first counted call

  bool happened() const { return counter != nullptr; }
};

// The rule's decision for `inputs`; when the rule has no answer (kUnimplemented), the fallback's,
// described in `*fallback` when given. Errors: strict mode or a rule that refuses even replicated
// inputs, kUnimplemented naming the op and the input layouts; any other error of the rule as is.
ShardingDecision decide_sharding(const OpDef& def, const std::vector<TensorSpec>& inputs,
                                 const TensorSpec& output, const OpAttrs& attrs,
                                 Fallback* fallback = nullptr);

// Counts one run of a call that fell back (warning on its pair's first).
void count_fallback(const Fallback& fallback);

}  // namespace tessel::detail
