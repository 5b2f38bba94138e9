// Internal: TESSEL_VECTOR_CLONES, the attribute that compiles a loop once per vector ISA
// (AVX-512, AVX2, baseline); the dynamic loader resolves each call to the widest the CPU has.
// Sanitizer builds take the plain loops: the clones' resolvers (ifuncs) run before the sanitizer
// runtime is initialised, and an instrumented resolver crashes the program at load.
#pragma once

#if defined(__x86_64__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)
#define TESSEL_VECTOR_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TESSEL_VECTOR_CLONES
#endif
