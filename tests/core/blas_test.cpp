// blas.h: the kernel set checked against the CPU, and the split GEMMs against a plain triple loop
// in double (every transpose, shapes that split by rows and by columns, ragged sizes).
#include "tessel/core/blas.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/mkl_library.h"
#include "tessel/core/parallel.h"

namespace tessel {
namespace {

template <typename T>
std::vector<T> random_matrix(int64_t size, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<T> m(static_cast<size_t>(size));
  for (T& x : m) x = static_cast<T>(u(gen));
  return m;
}

// C = op(A) op(B) in double, row-major, A stored m x k (k x m when transposed), B k x n (n x k).
template <typename T>
std::vector<double> reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                              const std::vector<T>& a, const std::vector<T>& b) {
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = ta ? a[static_cast<size_t>(p * m + i)] : a[static_cast<size_t>(i * k + p)];
        const double y = tb ? b[static_cast<size_t>(j * k + p)] : b[static_cast<size_t>(p * n + j)];
        s += x * y;
      }
      c[static_cast<size_t>(i * n + j)] = s;
    }
  }
  return c;
}

template <typename T, typename Gemm>
void check_gemm(Gemm gemm, double tolerance) {
  struct Case {
    int64_t m, n, k;
  };
  for (int threads : {1, 2, 3}) {
    set_intra_op_threads(threads);
    for (Case s : {Case{1, 1, 1}, Case{37, 5, 11}, Case{300, 70, 33}, Case{5, 260, 40},
                   Case{129, 131, 127}}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          const auto a = random_matrix<T>(s.m * s.k, 1);
          const auto b = random_matrix<T>(s.k * s.n, 2);
          std::vector<T> c(static_cast<size_t>(s.m * s.n), T(-7));
          gemm(ta, tb, s.m, s.n, s.k, a.data(), ta ? s.m : s.k, b.data(), tb ? s.k : s.n, c.data(),
               s.n);
          const auto want = reference(ta, tb, s.m, s.n, s.k, a, b);
          for (size_t i = 0; i < c.size(); ++i) {
            ASSERT_NEAR(c[i], want[i], tolerance)
                << "m=" << s.m << " n=" << s.n << " k=" << s.k << " ta=" << ta << " tb=" << tb
                << " threads=" << threads << " at " << i;
          }
        }
      }
    }
  }
  set_intra_op_threads(0);
}

TEST(Blas, SgemmMatchesAReferenceForEveryTransposeAndSplit) { check_gemm<float>(sgemm, 1e-4); }

TEST(Blas, DgemmMatchesAReferenceForEveryTransposeAndSplit) { check_gemm<double>(dgemm, 1e-11); }

// gemm_bf16_f32 and gemm_bf16 against the double product of the bf16 inputs: the f32 sums
// within f32 rounding of the sums of |a b|; the bf16 output within one bf16 rounding (2^-8
// relative) on top.
TEST(Blas, Bf16GemmMatchesTheProductOfTheRoundedInputsForEveryTransposeAndSplit) {
  struct Case {
    int64_t m, n, k;
  };
  for (int threads : {1, 3}) {
    set_intra_op_threads(threads);
    for (Case s : {Case{1, 1, 1}, Case{37, 5, 11}, Case{300, 70, 33}, Case{5, 260, 40}}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          std::vector<bfloat16> a, b;
          std::vector<float> a32, b32;  // the same values
          for (float x : random_matrix<float>(s.m * s.k, 1)) a.push_back(bfloat16(x));
          for (float x : random_matrix<float>(s.k * s.n, 2)) b.push_back(bfloat16(x));
          for (bfloat16 x : a) a32.push_back(static_cast<float>(x));
          for (bfloat16 x : b) b32.push_back(static_cast<float>(x));
          const int64_t lda = ta ? s.m : s.k, ldb = tb ? s.k : s.n;
          std::vector<float> c32(static_cast<size_t>(s.m * s.n), -7.0f);
          std::vector<bfloat16> c16(static_cast<size_t>(s.m * s.n), bfloat16(-7.0f));
          gemm_bf16_f32(ta, tb, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, c32.data(), s.n);
          gemm_bf16(ta, tb, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, c16.data(), s.n);
          const auto want = reference(ta, tb, s.m, s.n, s.k, a32, b32);
          const double sum_bound = 1e-6 * static_cast<double>(s.k);  // |a|, |b| <= 1
          for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_NEAR(c32[i], want[i], sum_bound) << "f32 output, ta=" << ta << " tb=" << tb
                                                    << " m=" << s.m << " n=" << s.n << " at " << i;
            ASSERT_NEAR(static_cast<float>(c16[i]), want[i],
                        std::ldexp(std::abs(want[i]), -8) + sum_bound)
                << "bf16 output, ta=" << ta << " tb=" << tb << " m=" << s.m << " at " << i;
          }
        }
      }
    }
  }
  set_intra_op_threads(0);
}

// gemm_f16 against the double product of the f16 inputs. MKL's hgemm sums in f16: within the
// classic bound of a k-term sum in unit roundoff u = 2^-11, (k + 1) u sum |a b|, plus the output's
// rounding; without it the f32 sums rounded once are far inside that.
TEST(Blas, F16GemmMatchesTheProductOfTheRoundedInputsForEveryTransposeAndSplit) {
  struct Case {
    int64_t m, n, k;
  };
  for (int threads : {1, 3}) {
    set_intra_op_threads(threads);
    for (Case s : {Case{1, 1, 1}, Case{37, 5, 11}, Case{300, 70, 33}, Case{5, 260, 40}}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          std::vector<float16> a, b;
          std::vector<float> a32, b32, a_abs, b_abs;  // the same values, and their magnitudes
          for (float x : random_matrix<float>(s.m * s.k, 3)) a.push_back(float16(x));
          for (float x : random_matrix<float>(s.k * s.n, 4)) b.push_back(float16(x));
          for (float16 x : a) a32.push_back(static_cast<float>(x));
          for (float16 x : b) b32.push_back(static_cast<float>(x));
          for (float x : a32) a_abs.push_back(std::abs(x));
          for (float x : b32) b_abs.push_back(std::abs(x));
          const int64_t lda = ta ? s.m : s.k, ldb = tb ? s.k : s.n;
          std::vector<float16> c(static_cast<size_t>(s.m * s.n), float16(-7.0f));
          gemm_f16(ta, tb, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, c.data(), s.n);
          const auto want = reference(ta, tb, s.m, s.n, s.k, a32, b32);
          const auto magnitude = reference(ta, tb, s.m, s.n, s.k, a_abs, b_abs);
          const double u = std::ldexp(1.0, -11);
          for (size_t i = 0; i < want.size(); ++i) {
            const double bound = static_cast<double>(s.k + 1) * u * magnitude[i] +
                                 u * std::abs(want[i]) + 1e-7;
            ASSERT_NEAR(static_cast<float>(c[i]), want[i], bound)
                << "ta=" << ta << " tb=" << tb << " m=" << s.m << " n=" << s.n << " k=" << s.k
                << " at " << i << " (" << blas_info().f16_gemm << ")";
          }
        }
      }
    }
  }
  set_intra_op_threads(0);
}

TEST(Blas, F16SaysWhichRoutineRunsIt) {
  const BlasInfo& info = blas_info();
  if (!info.path.empty()) {
    EXPECT_EQ(info.f16_gemm, "cblas_hgemm (MKL)");  // in every MKL since 2021
  } else {
    EXPECT_EQ(info.f16_gemm,
              "sgemm on inputs widened to f32 (" + info.library + " has no f16 GEMM)");
  }
}

TEST(Blas, Bf16SaysWhichRoutineRunsIt) {
  const BlasInfo& info = blas_info();
  if (!info.path.empty()) {
    // Every MKL since 2020 has cblas_gemm_bf16bf16f32.
    EXPECT_EQ(info.bf16_gemm, "cblas_gemm_bf16bf16f32 (MKL)");
  } else if (dlsym(RTLD_DEFAULT, "cblas_sbgemm") != nullptr) {
    EXPECT_EQ(info.bf16_gemm, "cblas_sbgemm (OpenBLAS)");
  } else {
    EXPECT_EQ(info.bf16_gemm,
              "sgemm on inputs widened to f32 (" + info.library + " has no bf16 GEMM)");
  }
}

bool runs_mkl(const BlasInfo& info) { return info.library.rfind("MKL ", 0) == 0; }

TEST(Blas, SaysWhichLibraryAndKernelItRuns) {
  const BlasInfo& info = blas_info();
  EXPECT_TRUE(runs_mkl(info) || info.library.find("OpenBLAS") != std::string::npos)
      << info.to_string();
  EXPECT_EQ(runs_mkl(info), !info.path.empty()) << info.to_string();
  EXPECT_EQ(runs_mkl(info), info.not_mkl.empty()) << info.to_string();
  EXPECT_FALSE(info.core.empty());
  EXPECT_FALSE(info.library_core.empty());
  EXPECT_NE(info.to_string().find(info.core), std::string::npos);
  if (info.chosen_by_tessel) {
    EXPECT_NE(info.core, info.library_core);
  }
}

// The point of the check: on a CPU with AVX-512 and a library that holds an AVX-512 kernel set,
// the GEMMs run one, whatever the library picked at load, with no variable set by the user.
TEST(Blas, RunsTheWidestKernelTheLibraryHasForThisCpu) {
  const BlasInfo& info = blas_info();
  if (runs_mkl(info)) {
    if (info.cpu_isa == "avx512") EXPECT_EQ(info.core, "AVX-512") << info.to_string();
    if (info.cpu_isa == "avx2") EXPECT_EQ(info.core, "AVX2") << info.to_string();
    return;
  }
  if (info.user_forced) GTEST_SKIP() << "OPENBLAS_CORETYPE is set: the user's choice is kept";
  if (info.cpu_isa == "avx512" && dlsym(RTLD_DEFAULT, "gotoblas_SKYLAKEX") != nullptr) {
    EXPECT_TRUE(info.core == "SkylakeX" || info.core == "Cooperlake" ||
                info.core == "SapphireRapids")
        << info.to_string();
  }
  if (info.cpu_isa == "avx2" && dlsym(RTLD_DEFAULT, "gotoblas_HASWELL") != nullptr) {
    EXPECT_NE(info.core, "Prescott") << info.to_string();
  }
}

// MKL where it is present, on an Intel CPU, unless TESSEL_BLAS says otherwise; OpenBLAS says why
// not MKL. (The other choices, TESSEL_BLAS=openblas|mkl|bogus, are CLI tests: the choice is made
// once per process.)
TEST(Blas, PrefersMklWhereItIsPresentOnAnIntelCpu) {
  const BlasInfo& info = blas_info();
  __builtin_cpu_init();
  const std::string dir = detail::mkl_directory();
  void* present = dlopen((dir + "/libmkl_rt.so.3").c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  const char* wanted = std::getenv("TESSEL_BLAS");
  if (wanted != nullptr && *wanted) GTEST_SKIP() << "TESSEL_BLAS=" << wanted << " decides";
  if (runs_mkl(info)) {
    EXPECT_NE(present, nullptr) << "MKL runs but is not loaded from " << dir;
    EXPECT_EQ(info.path, dir + "/libmkl_rt.so.3");
  } else {
    EXPECT_FALSE(info.not_mkl.empty());
    if (__builtin_cpu_is("intel")) {
      EXPECT_NE(info.not_mkl.find("no MKL at " + dir), std::string::npos) << info.not_mkl;
    }
  }
}

}  // namespace
}  // namespace tessel
