// Internal: Intel MKL loaded at run time (dlopen), when its single dynamic library is present.
//
// tessel does not link MKL: the library is a 200 MB download (PyPI's `mkl` wheel, which
// scripts/install-deps.sh unpacks into scripts/mkl-dir.sh's folder) that a build must not need.
// When it is there, MKL's GEMMs are 1.1-1.4x OpenBLAS's per thread at a small model's shapes on
// an Intel CPU (docs/benchmarks.md, bench/blas_candidates.py), so blas.cpp prefers it there.
// It is loaded with the sequential threading layer (each call on its calling thread: tessel
// splits the work over its own intra-op threads, as with OpenBLAS) and the LP64 interface.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tessel::detail {

// The CBLAS GEMMs as OpenBLAS's cblas.h declares them (MKL's LP64 signatures are the same).
using SgemmFn = void (*)(int layout, int trans_a, int trans_b, int m, int n, int k, float alpha,
                         const float* a, int lda, const float* b, int ldb, float beta, float* c,
                         int ldc);
using DgemmFn = void (*)(int layout, int trans_a, int trans_b, int m, int n, int k, double alpha,
                         const double* a, int lda, const double* b, int ldb, double beta, double* c,
                         int ldc);
// cblas_gemm_bf16bf16f32 (MKL) and cblas_sbgemm (OpenBLAS): bf16 A and B as 16-bit words, f32 C.
using Bf16GemmFn = void (*)(int layout, int trans_a, int trans_b, int m, int n, int k, float alpha,
                            const uint16_t* a, int lda, const uint16_t* b, int ldb, float beta,
                            float* c, int ldc);

// cblas_hgemm (MKL): f16 A, B and C as 16-bit words, alpha and beta in f16 too.
using HgemmFn = void (*)(int layout, int trans_a, int trans_b, int m, int n, int k, uint16_t alpha,
                         const uint16_t* a, int lda, const uint16_t* b, int ldb, uint16_t beta,
                         uint16_t* c, int ldc);

struct MklLibrary {
  SgemmFn sgemm = nullptr;
  DgemmFn dgemm = nullptr;
  Bf16GemmFn gemm_bf16 = nullptr;  // cblas_gemm_bf16bf16f32; null in an MKL without it
  HgemmFn hgemm = nullptr;         // cblas_hgemm; null in an MKL without it
  std::string version;             // "MKL 2026.0.2"
  std::string config;              // MKL's version string
  std::string isa;                 // the code path it runs on this CPU: "AVX-512", "AVX2", ...
  std::string path;                // the libmkl_rt it loaded
};

// The folder MKL is looked for in: TESSEL_MKL_DIR, else $XDG_CACHE_HOME/tessel/mkl/lib, else
// $HOME/.cache/tessel/mkl/lib (scripts/mkl-dir.sh prints the same).
std::string mkl_directory();

// MKL from mkl_directory(), loaded once (later calls return the same); nullopt with `why_not`
// set when it is absent or unusable (the file, the failing call).
std::optional<MklLibrary> load_mkl(std::string& why_not);

}  // namespace tessel::detail
