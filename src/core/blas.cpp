// blas.h: the BLAS chosen once (MKL where present on an Intel CPU, else OpenBLAS with its
// kernel set checked against the CPU), and the GEMMs split over the intra-op threads.
#include "tessel/core/blas.h"

#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/env.h"
#include "core/errors.h"
#include "core/mkl_library.h"
#include "tessel/core/parallel.h"

// OpenBLAS's dynamic-architecture entry points (exported by its DYNAMIC_ARCH builds, absent from
// single-target ones, hence looked up at run time rather than declared).
using DynamicInitFn = void (*)();

namespace tessel {
namespace {

// How wide a kernel set's vector code is: 0 scalar/SSE .. 3 AVX-512; -1 for a name not known here.
int isa_level_of_core(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  constexpr std::array<std::string_view, 3> kAvx512 = {"skylakex", "cooperlake", "sapphirerapids"};
  constexpr std::array<std::string_view, 5> kAvx2 = {"haswell", "zen", "excavator", "steamroller",
                                                     "skylake"};
  constexpr std::array<std::string_view, 3> kAvx = {"sandybridge", "bulldozer", "piledriver"};
  constexpr std::array<std::string_view, 14> kSse = {
      "prescott", "core2",         "penryn",    "dunnington", "nehalem", "atom",       "nano",
      "opteron",  "opteron(sse3)", "barcelona", "bobcat",     "katmai",  "coppermine", "northwood"};
  const auto in = [&](const auto& names) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  if (in(kAvx512)) return 3;
  if (in(kAvx2)) return 2;
  if (in(kAvx)) return 1;
  if (in(kSse)) return 0;
  return -1;
}

// The widest ISA this CPU has (and the OS enables), as a level like isa_level_of_core's.
int cpu_isa_level() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
    return 3;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 2;
  if (__builtin_cpu_supports("avx")) return 1;
  return 0;
}

constexpr std::array<const char*, 4> kIsaNames = {"sse", "avx", "avx2", "avx512"};

// The OpenBLAS kernel sets to try for an ISA level, best first (the library holds a subset, by
// version: "SapphireRapids" from 0.3.22, "Cooperlake" from 0.3.11).
std::vector<std::string_view> cores_for(int level) {
  switch (level) {
    case 3:
      return {"SapphireRapids", "Cooperlake", "SkylakeX", "Haswell", "SandyBridge"};
    case 2:
      return {"Haswell", "SandyBridge"};
    case 1:
      return {"SandyBridge"};
    default:
      return {};
  }
}

std::string current_core() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "";
}

// OpenBLAS with its kernel set checked against the CPU (and raised when the library's own pick
// is weaker).
BlasInfo choose_openblas_kernels() {
  openblas_set_num_threads(1);  // one thread per call: tessel splits the work itself
  BlasInfo info;
  const char* config = openblas_get_config();
  info.config = config != nullptr ? config : "";
  info.library = "OpenBLAS";
  if (const size_t space = info.config.find(' '); space != std::string::npos) {
    info.library = info.config.substr(0, space);
    if (const size_t next = info.config.find(' ', space + 1); next != std::string::npos) {
      info.library.append(" ").append(info.config, space + 1, next - space - 1);
    }
  }
  info.library_core = current_core();
  info.core = info.library_core;
  const int cpu = cpu_isa_level();
  info.cpu_isa = kIsaNames[cpu];
  if (detail::env_string("OPENBLAS_CORETYPE")) {
    info.user_forced = true;
    return info;
  }
  const int have = isa_level_of_core(info.library_core);
  auto quit = reinterpret_cast<DynamicInitFn>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit"));
  auto init = reinterpret_cast<DynamicInitFn>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init"));
  if (have < 0 || have >= cpu || quit == nullptr || init == nullptr) return info;
  for (std::string_view core : cores_for(cpu)) {
    std::string symbol = "gotoblas_";  // the kernel table's name: gotoblas_SKYLAKEX
    for (char c : core) symbol += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (dlsym(RTLD_DEFAULT, symbol.c_str()) == nullptr) continue;  // not in this build
    if (isa_level_of_core(std::string(core)) <= have) break;
    // The library reads OPENBLAS_CORETYPE in gotoblas_dynamic_init; set it only for that call.
    setenv("OPENBLAS_CORETYPE", std::string(core).c_str(), 1);
    quit();
    init();
    unsetenv("OPENBLAS_CORETYPE");
    info.core = current_core();
    info.chosen_by_tessel = true;
    break;
  }
  return info;
}

// The GEMMs of the chosen library; gemm_bf16 is null when it has none (then bf16 inputs are
// widened to f32 for sgemm).
struct Gemms {
  detail::SgemmFn sgemm = nullptr;
  detail::DgemmFn dgemm = nullptr;
  detail::Bf16GemmFn gemm_bf16 = nullptr;
  detail::HgemmFn hgemm = nullptr;  // MKL's only; null: f16 inputs are widened to f32 for sgemm
};
Gemms g_gemms;

void use_openblas() {
  g_gemms.sgemm = [](int layout, int ta, int tb, int m, int n, int k, float alpha, const float* a,
                     int lda, const float* b, int ldb, float beta, float* c, int ldc) {
    cblas_sgemm(static_cast<CBLAS_ORDER>(layout), static_cast<CBLAS_TRANSPOSE>(ta),
                static_cast<CBLAS_TRANSPOSE>(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  };
  g_gemms.dgemm = [](int layout, int ta, int tb, int m, int n, int k, double alpha, const double* a,
                     int lda, const double* b, int ldb, double beta, double* c, int ldc) {
    cblas_dgemm(static_cast<CBLAS_ORDER>(layout), static_cast<CBLAS_TRANSPOSE>(ta),
                static_cast<CBLAS_TRANSPOSE>(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  };
  // Exported by OpenBLAS builds with BUILD_BFLOAT16 only (not Debian 12's), hence looked up.
  g_gemms.gemm_bf16 = reinterpret_cast<detail::Bf16GemmFn>(dlsym(RTLD_DEFAULT, "cblas_sbgemm"));
}

std::string f16_gemm_name(const BlasInfo& info) {
  if (g_gemms.hgemm == nullptr) {
    return "sgemm on inputs widened to f32 (" + info.library + " has no f16 GEMM)";
  }
  return "cblas_hgemm (MKL)";
}

std::string bf16_gemm_name(const BlasInfo& info) {
  if (g_gemms.gemm_bf16 == nullptr) {
    return "sgemm on inputs widened to f32 (" + info.library + " has no bf16 GEMM)";
  }
  return info.path.empty() ? "cblas_sbgemm (OpenBLAS)" : "cblas_gemm_bf16bf16f32 (MKL)";
}

// TESSEL_BLAS: "mkl", "openblas", or unset / "auto" (MKL when loadable on an Intel CPU).
BlasInfo choose_blas() {
  const std::string wanted = detail::env_string("TESSEL_BLAS").value_or("auto");
  if (wanted != "auto" && wanted != "mkl" && wanted != "openblas") {
    detail::throw_invalid("BLAS", "TESSEL_BLAS='{}' is not auto, mkl or openblas", wanted);
  }
  std::string why_not;
  if (wanted != "openblas") {
    __builtin_cpu_init();
    const bool intel = __builtin_cpu_is("intel");
    if (std::optional<detail::MklLibrary> mkl = detail::load_mkl(why_not);
        mkl && (intel || wanted == "mkl")) {
      BlasInfo info;
      info.library = mkl->version;
      info.config = mkl->config;
      info.core = mkl->isa;
      info.library_core = mkl->isa;
      info.cpu_isa = kIsaNames[cpu_isa_level()];
      info.path = mkl->path;
      g_gemms.sgemm = mkl->sgemm;
      g_gemms.dgemm = mkl->dgemm;
      g_gemms.gemm_bf16 = mkl->gemm_bf16;
      g_gemms.hgemm = mkl->hgemm;
      info.bf16_gemm = bf16_gemm_name(info);
      info.f16_gemm = f16_gemm_name(info);
      return info;
    } else if (mkl) {
      why_not = "MKL is there, but the CPU is not an Intel one (OpenBLAS picks kernels for it)";
    }
    if (wanted == "mkl") {
      detail::throw_error(ErrorCode::kFailedPrecondition, "BLAS",
                          "TESSEL_BLAS=mkl, but {} (scripts/install-deps.sh fetches MKL; "
                          "TESSEL_MKL_DIR names another folder)",
                          why_not);
    }
  } else {
    why_not = "TESSEL_BLAS=openblas";
  }
  BlasInfo info = choose_openblas_kernels();
  info.not_mkl = why_not;
  use_openblas();
  info.bf16_gemm = bf16_gemm_name(info);
  info.f16_gemm = f16_gemm_name(info);
  return info;
}

// Checked at load (before any thread of the program can call a GEMM) and again, through the same
// once, by every entry point.
const BlasInfo& checked_blas() {
  static const BlasInfo info = choose_blas();
  return info;
}
// At load an error (a bad TESSEL_BLAS) is left for the first call to raise: the static above is
// initialised again then, and throws where the caller can catch it.
[[maybe_unused]] const bool g_checked_at_load = [] {
  try {
    checked_blas();
    return true;
  } catch (const Error&) {
    return false;
  }
}();

int blas_int(int64_t v, std::string_view what) {
  if (v > INT_MAX) {
    detail::throw_error(ErrorCode::kUnimplemented, "matmul", "{} = {} exceeds the BLAS int range",
                        what, v);
  }
  return static_cast<int>(std::max<int64_t>(v, 1));
}

// C's rows (or columns) per thread at the least: below this the split costs more than it saves.
constexpr int64_t kMinFlopsPerThread = int64_t{1} << 21;

// One single-threaded BLAS call, C = op(A) op(B) (C is f32 for bf16 A and B, f16 for f16 ones).
template <typename T, typename C>
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const T* a, int lda,
          const T* b, int ldb, C* c, int ldc) {
  if constexpr (std::is_same_v<T, float>) {
    g_gemms.sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  } else if constexpr (std::is_same_v<T, double>) {
    g_gemms.dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc);
  } else if constexpr (std::is_same_v<T, float16>) {
    static_assert(std::is_same_v<C, float16> && sizeof(float16) == sizeof(uint16_t));
    constexpr uint16_t kOne = 0x3C00, kZero = 0;  // 1.0 and 0.0 in binary16
    g_gemms.hgemm(CblasRowMajor, ta, tb, m, n, k, kOne, reinterpret_cast<const uint16_t*>(a), lda,
                  reinterpret_cast<const uint16_t*>(b), ldb, kZero,
                  reinterpret_cast<uint16_t*>(c), ldc);
  } else {
    static_assert(std::is_same_v<T, bfloat16> && sizeof(bfloat16) == sizeof(uint16_t));
    g_gemms.gemm_bf16(CblasRowMajor, ta, tb, m, n, k, 1.0f, reinterpret_cast<const uint16_t*>(a),
                      lda, reinterpret_cast<const uint16_t*>(b), ldb, 0.0f, c, ldc);
  }
}

template <typename T, typename C>
void split_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
                const T* b, int64_t ldb, C* c, int64_t ldc) {
  checked_blas();
  const auto call = [&](int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    // Rows m0..m1 of op(A): A's rows, or its columns when transposed; likewise op(B)'s columns.
    const T* a_part = ta ? a + m0 : a + m0 * lda;
    const T* b_part = tb ? b + n0 * ldb : b + n0;
    gemm(ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, blas_int(m1 - m0, "m"),
         blas_int(n1 - n0, "n"), blas_int(k, "k"), a_part, blas_int(lda, "lda"), b_part,
         blas_int(ldb, "ldb"), c + m0 * ldc + n0, blas_int(ldc, "ldc"));
  };
  const int64_t flops_per_row = 2 * std::max<int64_t>(n, 1) * std::max<int64_t>(k, 1);
  const int64_t flops_per_column = 2 * std::max<int64_t>(m, 1) * std::max<int64_t>(k, 1);
  if (m >= n) {
    const int64_t grain = std::max<int64_t>(16, kMinFlopsPerThread / flops_per_row);
    parallel_for(m, grain, [&](int64_t m0, int64_t m1) { call(m0, m1, 0, n); });
  } else {
    const int64_t grain = std::max<int64_t>(16, kMinFlopsPerThread / flops_per_column);
    parallel_for(n, grain, [&](int64_t n0, int64_t n1) { call(0, m, n0, n1); });
  }
}

// A rows x cols bf16 or f16 matrix (leading dimension ld) widened to a contiguous f32 one (exact).
template <typename T>
std::vector<float> widened(const T* p, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  parallel_for(rows, std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(cols, 1)),
               [&](int64_t r0, int64_t r1) {
                 // float16.h's vector conversions, a row at a time.
                 for (int64_t r = r0; r < r1; ++r) convert(p + r * ld, out.data() + r * cols, cols);
               });
  return out;
}

}  // namespace

std::string BlasInfo::to_string() const {
  std::string text = library + ", kernel " + core;
  if (!path.empty()) {
    text += " (sequential, split over tessel's intra-op threads; CPU " + cpu_isa + ")";
  } else if (chosen_by_tessel) {
    text += " (chosen by tessel; the library chose " + library_core + "; CPU " + cpu_isa + ")";
  } else if (user_forced) {
    text += " (OPENBLAS_CORETYPE; CPU " + cpu_isa + ")";
  } else {
    text += " (the library's choice; CPU " + cpu_isa + ")";
  }
  return text;
}

const BlasInfo& blas_info() { return checked_blas(); }

void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
           const float* b, int64_t ldb, float* c, int64_t ldc) {
  split_gemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
}

void dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
           const double* b, int64_t ldb, double* c, int64_t ldc) {
  split_gemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
}

namespace {

// C (f32) = op(A) op(B) for 16-bit A and B widened to f32 (exact) for sgemm: the fallback where
// the library has no GEMM of their type. op(A) is m x k: A is stored k x m when transposed;
// likewise B.
template <typename T>
void widened_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
                  const T* b, int64_t ldb, float* c, int64_t ldc) {
  const std::vector<float> a32 = widened(a, ta ? k : m, ta ? m : k, lda);
  const std::vector<float> b32 = widened(b, tb ? n : k, tb ? k : n, ldb);
  split_gemm(ta, tb, m, n, k, a32.data(), ta ? m : k, b32.data(), tb ? k : n, c, ldc);
}

}  // namespace

void gemm_bf16_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const bfloat16* a,
                   int64_t lda, const bfloat16* b, int64_t ldb, float* c, int64_t ldc) {
  checked_blas();
  if (g_gemms.gemm_bf16 != nullptr) {
    split_gemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
  } else {
    widened_gemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
  }
}

namespace {

// C (bf16 or f16, leading dimension ldc) = the m x n f32 sums rounded once to nearest even.
template <typename T>
void round_into(const std::vector<float>& sums, int64_t m, int64_t n, T* c, int64_t ldc) {
  parallel_for(m, std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(n, 1)),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) convert(sums.data() + r * n, c + r * ldc, n);
               });
}

}  // namespace

void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const bfloat16* a, int64_t lda,
               const bfloat16* b, int64_t ldb, bfloat16* c, int64_t ldc) {
  std::vector<float> sums(static_cast<size_t>(m * n));
  gemm_bf16_f32(ta, tb, m, n, k, a, lda, b, ldb, sums.data(), n);
  round_into(sums, m, n, c, ldc);
}

void gemm_f16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float16* a, int64_t lda,
              const float16* b, int64_t ldb, float16* c, int64_t ldc) {
  checked_blas();
  if (g_gemms.hgemm != nullptr) {
    split_gemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
    return;
  }
  std::vector<float> sums(static_cast<size_t>(m * n));
  widened_gemm(ta, tb, m, n, k, a, lda, b, ldb, sums.data(), n);
  round_into(sums, m, n, c, ldc);
}

}  // namespace tessel
