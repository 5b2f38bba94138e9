// isa_peaks: one core's peak arithmetic rate (GFLOP/s) of the three AVX-512 multiply-add
// instructions a matmul can be built on, measured: f32 FMA, bf16 dot products into f32
// (AVX512_BF16's vdpbf16ps, what a bf16 GEMM without AMX runs on) and f16 FMA (AVX512_FP16).
// Twelve independent accumulators per loop, so that each instruction's throughput, not its
// latency, is measured; the best of three rounds.
//
//   gcc -O2 bench/isa_peaks.c -o /tmp/isa_peaks && /tmp/isa_peaks
//
// Why it exists (issue 33): whether a bf16 step can beat the f32 one on this CPU is decided by
// vdpbf16ps's rate against vfmadd231ps's (docs/benchmarks.md, "Mixed precision on this CPU").
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// 12 independent accumulators (zmm0..zmm11), operands in zmm12 and zmm13, `iters` rounds.
#define KERNEL(NAME, INSN)                                                           \
  static void NAME(long iters) {                                                     \
    __asm__ volatile(                                                                \
        "vpxord %%zmm0, %%zmm0, %%zmm0\n\t" "vmovaps %%zmm0, %%zmm1\n\t"             \
        "vmovaps %%zmm0, %%zmm2\n\t" "vmovaps %%zmm0, %%zmm3\n\t"                    \
        "vmovaps %%zmm0, %%zmm4\n\t" "vmovaps %%zmm0, %%zmm5\n\t"                    \
        "vmovaps %%zmm0, %%zmm6\n\t" "vmovaps %%zmm0, %%zmm7\n\t"                    \
        "vmovaps %%zmm0, %%zmm8\n\t" "vmovaps %%zmm0, %%zmm9\n\t"                    \
        "vmovaps %%zmm0, %%zmm10\n\t" "vmovaps %%zmm0, %%zmm11\n\t"                  \
        "vmovaps %%zmm0, %%zmm12\n\t" "vmovaps %%zmm0, %%zmm13\n\t"                  \
        "1:\n\t"                                                                     \
        INSN " %%zmm12, %%zmm13, %%zmm0\n\t" INSN " %%zmm12, %%zmm13, %%zmm1\n\t"    \
        INSN " %%zmm12, %%zmm13, %%zmm2\n\t" INSN " %%zmm12, %%zmm13, %%zmm3\n\t"    \
        INSN " %%zmm12, %%zmm13, %%zmm4\n\t" INSN " %%zmm12, %%zmm13, %%zmm5\n\t"    \
        INSN " %%zmm12, %%zmm13, %%zmm6\n\t" INSN " %%zmm12, %%zmm13, %%zmm7\n\t"    \
        INSN " %%zmm12, %%zmm13, %%zmm8\n\t" INSN " %%zmm12, %%zmm13, %%zmm9\n\t"    \
        INSN " %%zmm12, %%zmm13, %%zmm10\n\t" INSN " %%zmm12, %%zmm13, %%zmm11\n\t"  \
        "dec %0\n\t"                                                                 \
        "jnz 1b\n\t"                                                                 \
        : "+r"(iters)                                                                \
        :                                                                            \
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",   \
          "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "cc");                        \
  }

KERNEL(fma_f32, "vfmadd231ps")
KERNEL(dp_bf16, "vdpbf16ps")
KERNEL(fma_f16, "vfmadd231ph")

int main(void) {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bf16") ||
      !__builtin_cpu_supports("avx512fp16")) {
    fprintf(stderr, "isa_peaks: this CPU lacks AVX-512 F, BF16 or FP16\n");
    return 2;
  }
  const long iters = 50000000;
  struct { const char* name; void (*run)(long); double flops_per_insn; } k[] = {
      {"vfmadd231ps zmm (f32 FMA)", fma_f32, 16 * 2},
      {"vdpbf16ps zmm (bf16 pairs, f32 sums)", dp_bf16, 32 * 2},
      {"vfmadd231ph zmm (f16 FMA)", fma_f16, 32 * 2}};
  double best[3] = {0, 0, 0};
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 3; ++i) {
      const double t = now();
      k[i].run(iters);
      const double rate = iters * 12.0 * k[i].flops_per_insn / (now() - t) / 1e9;
      if (rate > best[i]) best[i] = rate;
    }
  }
  for (int i = 0; i < 3; ++i)
    printf("%-40s %7.1f GFLOP/s  %.2fx f32\n", k[i].name, best[i], best[i] / best[0]);
  return 0;
}
