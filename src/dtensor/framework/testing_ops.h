// Internal: ops that exist only for the tests of the sharding fallback (sharding_fallback.h), in
// C++ and Python: their sharding rule has no answer for some sharded inputs, which no built-in
// op's has. Registered on demand, never by OpRegistry::global() itself.
//
//   testing.cumsum_rows          out[i, ...] = sum of x[0..i, ...] (running sum down dim 0)
//   testing.reverse_cumsum_rows  out[i, ...] = sum of x[i..n-1, ...] (its gradient, and back)
//
// Both take one f32 or f64 input of rank >= 1; their rule accepts any layout whose dim 0 is
// unsharded and that is not Partial (the output keeps it), and has no answer otherwise.
#pragma once

namespace tessel::detail {

// Adds the testing ops to OpRegistry::global() once; later calls do nothing. Call it before any
// thread dispatches ops (the registry is not locked).
void register_testing_ops();

}  // namespace tessel::detail
