// The BLAS under tessel's matmuls, and the kernel set it runs on this CPU.
//
// Which library: Intel MKL where it is present and the CPU is an Intel one, else OpenBLAS.
// MKL's GEMMs are 1.1-1.4x OpenBLAS's per thread at a small model's shapes here (768x128x128 to
// 16384x384x1536; docs/benchmarks.md), but tessel does not link it: it is loaded at run time
// from TESSEL_MKL_DIR or the cache folder scripts/install-deps.sh unpacks PyPI's `mkl` wheel into
// (src/core/mkl_library.h). TESSEL_BLAS=openblas or =mkl overrides the choice (mkl absent: a
// kFailedPrecondition naming the folder).
//
// A dynamic-architecture OpenBLAS picks its kernels by the CPU's model number at load, and one
// older than the CPU falls back to a generic kernel without a word: Debian 12's OpenBLAS 0.3.21
// runs its SSE3 `Prescott` kernel on a Sapphire or Emerald Rapids Xeon, 5x below the AVX-512
// `SkylakeX` kernel the same library holds. tessel checks the choice against the vector units the
// CPU reports (cpuid) once, before the first GEMM, and when the library's own choice is weaker it
// re-selects the best kernel set the library has for them (through OpenBLAS's
// gotoblas_dynamic_init, as OPENBLAS_CORETYPE would at load). An OPENBLAS_CORETYPE the user sets
// is kept as it is. blas_info() says what happened; `tessel info` and every `tessel bench` print
// it.
//
// sgemm / dgemm: row-major C = op(A) op(B) (alpha 1, beta 0), on up to intra_op_threads()
// threads (parallel.h): the rows (or, for a wide C, the columns) of C are split between them and
// each part is one single-threaded BLAS call (either library), so that several devices calling at
// once never oversubscribe the machine. Sizes past the BLAS's int range: kUnimplemented naming the
// value.
//
// gemm_bf16_f32 / gemm_bf16: the same product of bfloat16 matrices, accumulated in f32 (mixed
// precision; docs/gpt.md). The routine, in blas_info().bf16_gemm: MKL's cblas_gemm_bf16bf16f32
// (AMX-BF16 / AVX512-BF16 where the CPU has them), else OpenBLAS's cblas_sbgemm where the library
// exports it (Debian 12's OpenBLAS 0.3.21 does not), else the inputs widened to f32 (exact) and
// sgemm: the same result up to the summation order, without bf16's speed.
//
// gemm_f16: the product of binary16 matrices, C in f16. MKL's cblas_hgemm where MKL is the BLAS:
// on a CPU with AVX512-FP16 (Sapphire Rapids) it multiplies and sums in f16 at twice sgemm's
// rate (MKL's bf16 GEMM there runs at 0.6x sgemm: no AMX), with a relative error of about 3e-3
// (rms, against f64; measured at k = 128 to 16384), the error of bf16 mixed precision, instead
// of f32 sums' 2e-4; f16's range (65504) is why training in f16 scales its loss
// (docs/memory.md). Without MKL: the inputs widened to f32 (exact), sgemm, the sums rounded once.
//
//   const tessel::BlasInfo& b = tessel::blas_info();
//   b.library == "MKL 2026.0.2"; b.core == "AVX-512"          (MKL)
//   b.core == "SkylakeX"; b.library_core == "Prescott"; b.chosen_by_tessel == true  (OpenBLAS)
#pragma once

#include <cstdint>
#include <string>

#include "tessel/core/float16.h"

namespace tessel {

struct BlasInfo {
  std::string library;       // "OpenBLAS 0.3.21", "MKL 2026.0.2"
  std::string config;        // the library's build line (openblas_get_config; MKL's version)
  std::string core;          // the kernel set in use: "SkylakeX"; MKL's code path: "AVX-512"
  std::string library_core;  // the kernel set the library chose on its own at load
  std::string cpu_isa;  // the widest vector ISA the CPU reports: "avx512", "avx2", "avx", "sse"
  bool chosen_by_tessel = false;  // tessel replaced library_core with core (OpenBLAS)
  bool user_forced = false;       // OPENBLAS_CORETYPE was set: the user's choice is kept
  std::string path;               // MKL: the libmkl_rt loaded; empty for OpenBLAS
  std::string not_mkl;            // OpenBLAS: why not MKL ("no MKL at ...", "TESSEL_BLAS=...")
  // The bf16 GEMM: "cblas_gemm_bf16bf16f32 (MKL)", "cblas_sbgemm (OpenBLAS)" or
  // "sgemm on inputs widened to f32 (<library> has no bf16 GEMM)".
  std::string bf16_gemm;
  // The f16 GEMM: "cblas_hgemm (MKL)" or "sgemm on inputs widened to f32 (<library> has no f16
  // GEMM)".
  std::string f16_gemm;
  // "OpenBLAS 0.3.21, kernel SkylakeX (the library chose Prescott; CPU avx512)".
  std::string to_string() const;
};

// The BLAS and its kernel set, after tessel's check (which runs once, on the first call of any
// function here). Thread-safe.
const BlasInfo& blas_info();

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
           const float* b, int64_t ldb, float* c, int64_t ldc);
void dgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const double* a,
           int64_t lda, const double* b, int64_t ldb, double* c, int64_t ldc);

// C (f32) = op(A) op(B) for bf16 A and B, products summed in f32.
void gemm_bf16_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const bfloat16* a,
                   int64_t lda, const bfloat16* b, int64_t ldb, float* c, int64_t ldc);
// The same with C in bf16: the f32 sums rounded once (to nearest even), as torch and JAX do.
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const bfloat16* a,
               int64_t lda, const bfloat16* b, int64_t ldb, bfloat16* c, int64_t ldc);

// C (f16) = op(A) op(B) for f16 A and B: MKL's hgemm (f16 sums), else f32 sums rounded once.
void gemm_f16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float16* a,
              int64_t lda, const float16* b, int64_t ldb, float16* c, int64_t ldc);

// sgemm, dgemm, gemm_bf16 or gemm_f16 by the element type, for code templated on it.
inline void blas_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                      int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
  sgemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
}
inline void blas_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const double* a,
                      int64_t lda, const double* b, int64_t ldb, double* c, int64_t ldc) {
  dgemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
}
inline void blas_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      const bfloat16* a, int64_t lda, const bfloat16* b, int64_t ldb, bfloat16* c,
                      int64_t ldc) {
  gemm_bf16(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
}
inline void blas_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      const float16* a, int64_t lda, const float16* b, int64_t ldb, float16* c,
                      int64_t ldc) {
  gemm_f16(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
}

}  // namespace tessel
