// mkl_library.h: dlopen of libmkl_rt, its layers set before any other call.
#include "core/mkl_library.h"

#include <dlfcn.h>

#include <array>

#include "core/env.h"

namespace tessel::detail {
namespace {

constexpr const char* kMklRuntime = "libmkl_rt.so.3";
// MKL's mkl_service.h codes.
constexpr int kThreadingSequential = 1;  // MKL_THREADING_SEQUENTIAL
constexpr int kInterfaceLp64 = 0;        // MKL_INTERFACE_LP64

// MKL_Get_Version's record (mkl_types.h's MKLVersion).
struct MklVersion {
  int major, minor, update;
  char* product_status;
  char* build;
  char* processor;
  char* platform;
};

// A short name for MKL's processor line ("Intel(R) Advanced Vector Extensions 512 (Intel(R)
// AVX-512) with support for ...": "AVX-512").
std::string isa_of(const std::string& processor) {
  constexpr std::array<const char*, 5> kNames = {"AVX-512", "AVX2", "AVX", "SSE4.2", "SSE2"};
  for (const char* name : kNames) {
    if (processor.find(name) != std::string::npos) return name;
  }
  return processor;
}

std::optional<MklLibrary> open_mkl(std::string& why_not) {
  const std::string path = mkl_directory() + "/" + kMklRuntime;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    why_not = "no MKL at " + path + (error != nullptr ? std::string(" (") + error + ")" : "");
    return std::nullopt;
  }
  const auto find = [&](const char* symbol) { return dlsym(handle, symbol); };
  auto set_threading = reinterpret_cast<int (*)(int)>(find("MKL_Set_Threading_Layer"));
  auto set_interface = reinterpret_cast<int (*)(int)>(find("MKL_Set_Interface_Layer"));
  auto get_version = reinterpret_cast<void (*)(MklVersion*)>(find("MKL_Get_Version"));
  MklLibrary mkl;
  mkl.sgemm = reinterpret_cast<SgemmFn>(find("cblas_sgemm"));
  mkl.dgemm = reinterpret_cast<DgemmFn>(find("cblas_dgemm"));
  mkl.gemm_bf16 = reinterpret_cast<Bf16GemmFn>(find("cblas_gemm_bf16bf16f32"));
  mkl.hgemm = reinterpret_cast<HgemmFn>(find("cblas_hgemm"));
  if (set_threading == nullptr || set_interface == nullptr || get_version == nullptr ||
      mkl.sgemm == nullptr || mkl.dgemm == nullptr) {
    why_not = path + " lacks MKL's entry points (MKL_Set_Threading_Layer, cblas_sgemm, ...)";
    return std::nullopt;  // the handle stays open: harmless, and it may be shared
  }
  // The layers are chosen before any other MKL call, once per process.
  if (set_threading(kThreadingSequential) != kThreadingSequential ||
      set_interface(kInterfaceLp64) != kInterfaceLp64) {
    why_not = path + " refused the sequential threading layer or the LP64 interface";
    return std::nullopt;
  }
  MklVersion v{};
  get_version(&v);
  mkl.version = "MKL " + std::to_string(v.major) + "." + std::to_string(v.minor) + "." +
                std::to_string(v.update);
  mkl.config = mkl.version + " build " + (v.build != nullptr ? v.build : "?") + ", " +
               (v.processor != nullptr ? v.processor : "?");
  mkl.isa = isa_of(v.processor != nullptr ? v.processor : "");
  mkl.path = path;
  return mkl;
}

}  // namespace

std::string mkl_directory() {
  if (std::optional<std::string> dir = env_string("TESSEL_MKL_DIR")) return *dir;
  if (std::optional<std::string> cache = env_string("XDG_CACHE_HOME")) {
    return *cache + "/tessel/mkl/lib";
  }
  return env_string("HOME").value_or("") + "/.cache/tessel/mkl/lib";
}

std::optional<MklLibrary> load_mkl(std::string& why_not) {
  static std::string why;
  static const std::optional<MklLibrary> mkl = open_mkl(why);
  why_not = why;
  return mkl;
}

}  // namespace tessel::detail
