// The sharding fallback: what call_op does for an op whose sharding rule has no answer for its
// inputs' layouts, and the record of every time it did.
//
// A rule that has no answer throws kUnimplemented (op_registry.h). call_op then looks for the
// nearest layouts the rule accepts, in a fixed order, and relays the inputs out to what the rule
// asks for them:
//   1. the same layouts with every Partial reduced (when some input is Partial);
//   2. those with one sharded tensor dimension of one input made unsharded (gathered): of the
//      candidates the rule accepts, the one whose relayouts move the fewest bytes (the first
//      such in input, then dimension order);
//   3. every input replicated over the whole mesh.
// The op runs on the relaid-out inputs and its output has the layout the rule gives for them;
// gradients flow back to the inputs' own layouts as for any op (autodiff.h). A rule that refuses
// even replicated inputs is still kUnimplemented; every other error of a rule (kInvalidArgument
// for mismatched shapes, ...) is raised as it is, never a fallback.
//
// Every fallback is counted per (op, input layouts) pair with the bytes its relayouts sent between
// devices (as relayout_stats() counts them), and the first of each pair prints one warning on
// stderr:
//
//   tessel: warning: op 'cumsum' has no sharding rule for input 0: [4,4] f32 in
//   sharding_specs:x,y on mesh x=2,y=2 (<the rule's reason>); relaying its inputs out to input 0:
//   sharding_specs:unsharded,y on mesh x=2,y=2 (64 bytes moved per call); sharding_fallbacks()
//   lists every fallback, set_sharding_fallback_strict(true) makes them errors
//
// (in one line). The layouts are printed without their mesh, which is named once.
//
//   for (const tessel::FallbackRecord& r : tessel::sharding_fallbacks())
//     std::cout << r.op << " x" << r.count << ": " << r.bytes << " bytes\n";
//
// Counting: an eager call that falls back counts once per call, including a call that repeats an
// earlier one and reuses its plan (the dispatch cache keeps fallback plans); a call traced by
// compile() counts once, when it is traced; plan_op counts nothing (it moves nothing).
//
// Strict mode (set_sharding_fallback_strict(true), or TESSEL_STRICT_SHARDING=1 in the
// environment, read on first use) makes a fallback a kUnimplemented error naming the op and the
// input layouts instead.
//
// Thread safety: every function may be called from any thread, concurrently with op calls.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/mesh/layout.h"

namespace tessel {

// One (op, input layouts) pair that fell back since the last reset.
struct FallbackRecord {
  std::string op;               // the op's registered name
  std::vector<Layout> layouts;  // its inputs' layouts, as the caller passed them
  int64_t count = 0;            // calls that fell back
  int64_t bytes = 0;            // bytes the fallback relayouts of those calls sent between devices
};

// Every pair that fell back since the last reset, ordered by op name, then by layouts (their
// to_string()).
std::vector<FallbackRecord> sharding_fallbacks();

// Forgets every record; the next fallback of each pair warns again.
void reset_sharding_fallbacks();

// The records as text, one line per pair ("op (layouts): N calls, B bytes"); "" when none.
std::string sharding_fallbacks_text();

// Strict mode on or off (the default is TESSEL_STRICT_SHARDING's value, else off).
void set_sharding_fallback_strict(bool strict);
bool sharding_fallback_strict();

}  // namespace tessel
