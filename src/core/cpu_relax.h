// Internal: the pause a spinning wait issues between polls (x86's PAUSE, arm64's YIELD: the
// core's pipeline goes to its sibling hyper-thread and the loop burns less power).
#pragma once

namespace tessel::detail {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace tessel::detail
