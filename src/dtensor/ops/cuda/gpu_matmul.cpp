// The GPU kernel of matmul and einsum: one cuBLAS strided-batched GEMM per block on operands read
// in place (einsum_gemm.h): f32 and f64, and bf16 and f16 on the tensor cores with f32 sums
// (cublasGemmStridedBatchedEx, CUBLAS_COMPUTE_32F: the output rounded once, as the CPU's bf16
// kernel rounds it; the CPU's f16 kernel, MKL's hgemm, sums in f16 and is the less exact one).
// Blocks that need a rearranging copy, and other dtypes, run host-staged. f32 GEMMs run on the
// TF32 tensor cores while tensor_float_32_execution_enabled() (tessel/core/matmul_precision.h:
// the default), in strict f32 otherwise.
#include <cublas_v2.h>

#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "core/errors.h"
#include "dtensor/ops/cuda/gpu_kernels.h"
#include "dtensor/ops/einsum_gemm.h"
#include "tessel/core/float16.h"
#include "tessel/core/matmul_precision.h"
#include "dtensor/framework/kernel_runner.h"
#include "runtime/cuda/cuda_check.h"

namespace tessel::detail {
namespace {

void check_cublas(cublasStatus_t status, std::string_view what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw_error(ErrorCode::kInternal, "matmul", "{} failed: {}", what, cublasGetStatusString(status));
  }
}

// One cuBLAS handle per GPU and thread, made on first use and kept until exit. A handle is only
// ever used by the thread that made it, so never by two threads at once, also when several
// devices share a GPU (their workers are distinct threads); the caller binds its stream and a
// workspace of that stream's device on every call (gemm_workspace). Keyed by thread id, so that
// a new thread with a dead one's id reuses its handle (the count stays at the threads alive at
// once); the map itself is locked.
cublasHandle_t handle_for(int ordinal) {
  static std::mutex mu;
  using Key = std::pair<int, std::thread::id>;
  static auto* handles = new std::map<Key, cublasHandle_t>();  // kept until exit
  const Key key{ordinal, std::this_thread::get_id()};
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles->find(key);
  if (it != handles->end()) return it->second;
  ScopedCudaDevice on(ordinal);
  cublasHandle_t h = nullptr;
  const cublasStatus_t status = cublasCreate(&h);
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw_error(ErrorCode::kInternal, "matmul", "cublasCreate on cuda:{} failed: {}", ordinal,
                cublasGetStatusString(status));
  }
  handles->emplace(key, h);
  return h;
}

// cuBLAS's recommended workspace for Hopper GPUs (and more than older ones use).
constexpr int64_t kGemmWorkspaceBytes = int64_t{32} << 20;

// A GEMM's scratch memory, from the output's device allocator. cuBLAS's default workspace
// belongs to the handle, and a thread's handle serves several streams when the thread launches
// the blocks of several devices on one GPU in turn (an inline launch of a small op): two GEMMs
// running at once on one workspace would race. A block from the device's own allocator is used
// only by work on that device's stream (freed when the launch returns, it goes next to later work
// on the same stream). Over the device's memory limit: none (null), and cuBLAS picks algorithms
// that need no workspace.
Tensor gemm_workspace(const Tensor& out) {
  try {
    return Tensor::empty(Shape{kGemmWorkspaceBytes}, DType::kU8, out.allocator(),
                         /*zero_fill=*/false);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kResourceExhausted) throw;
    return Tensor();
  }
}

template <typename T>
cublasStatus_t gemm_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const T* a, int lda, long long sa, const T* b, int ldb,
                            long long sb, T* c, int ldc, long long sc, int batch) {
  const T one = 1, zero = 0;
  if constexpr (std::is_same_v<T, float>) {
    return cublasSgemmStridedBatched(h, ta, tb, m, n, k, &one, a, lda, sa, b, ldb, sb, &zero, c,
                                     ldc, sc, batch);
  } else {
    return cublasDgemmStridedBatched(h, ta, tb, m, n, k, &one, a, lda, sa, b, ldb, sb, &zero, c,
                                     ldc, sc, batch);
  }
}

// bf16 and f16 blocks: 16-bit A, B and C, f32 alpha, beta and sums.
cublasStatus_t gemm_batched_16(cublasHandle_t h, cudaDataType_t type, cublasOperation_t ta,
                               cublasOperation_t tb, int m, int n, int k, const void* a, int lda,
                               long long sa, const void* b, int ldb, long long sb, void* c, int ldc,
                               long long sc, int batch) {
  const float one = 1, zero = 0;
  return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &one, a, type, lda, sa, b, type, ldb, sb,
                                    &zero, c, type, ldc, sc, batch, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT);
}

template <typename T>
cublasStatus_t gemm_any(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                        int k, const T* a, int lda, long long sa, const T* b, int ldb, long long sb,
                        T* c, int ldc, long long sc, int batch) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    return gemm_batched_16(h, CUDA_R_16BF, ta, tb, m, n, k, a, lda, sa, b, ldb, sb, c, ldc, sc,
                           batch);
  } else if constexpr (std::is_same_v<T, float16>) {
    return gemm_batched_16(h, CUDA_R_16F, ta, tb, m, n, k, a, lda, sa, b, ldb, sb, c, ldc, sc,
                           batch);
  } else {
    return gemm_batched<T>(h, ta, tb, m, n, k, a, lda, sa, b, ldb, sb, c, ldc, sc, batch);
  }
}

int checked_int(int64_t v) { return static_cast<int>(std::max<int64_t>(v, 1)); }

template <typename T>
void gemm_block(const EinsumGemm& g, const Tensor& a, const Tensor& b, Tensor& out,
                const LocalContext& context) {
  const int ordinal = out.memory_space().device_ordinal;
  ScopedCudaDevice on(ordinal);
  auto stream = static_cast<cudaStream_t>(context.cuda_stream);
  if (g.k == 0) {
    check_cuda(cudaMemsetAsync(out.data_ptr(), 0, out.nbytes(), stream), "matmul", "zero output");
    return;
  }
  cublasHandle_t h = handle_for(ordinal);
  check_cublas(cublasSetStream(h, stream), "cublasSetStream");  // also unbinds any workspace
  // The handle keeps its math mode: set on every call, as the setting may change between them.
  // CUBLAS_DEFAULT_MATH leaves f32 GEMMs in f32 (cuBLAS 11+); the 16-bit ones use the tensor
  // cores under either mode, and f64 ones never do.
  const bool tf32 = std::is_same_v<T, float> && tensor_float_32_execution_enabled();
  check_cublas(cublasSetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
               "cublasSetMathMode");
  Tensor workspace = gemm_workspace(out);
  check_cublas(cublasSetWorkspace(h, workspace.defined() ? workspace.data_ptr() : nullptr,
                                  workspace.defined() ? workspace.nbytes() : 0),
               "cublasSetWorkspace");
  const auto* pa = static_cast<const T*>(a.data_ptr());
  const auto* pb = static_cast<const T*>(b.data_ptr());
  auto* pc = static_cast<T*>(out.data_ptr());
  const long long sc = g.m * g.n;
  // Row-major through column-major cuBLAS: a row-major [r, c] matrix is the column-major [c, r]
  // one. Output [m, n]: C^T = op(B)^T op(A)^T; transposed output [n, m]: C = op(A) op(B).
  if (!g.out_transposed) {
    check_cublas(gemm_any<T>(h, g.b_trans ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 g.a_trans ? CUBLAS_OP_T : CUBLAS_OP_N, checked_int(g.n),
                                 checked_int(g.m), checked_int(g.k), pb, checked_int(g.ldb),
                                 g.b_stride, pa, checked_int(g.lda), g.a_stride, pc,
                                 checked_int(g.n), sc, checked_int(g.batch)),
                 "cuBLAS gemm");
  } else {
    check_cublas(gemm_any<T>(h, g.a_trans ? CUBLAS_OP_N : CUBLAS_OP_T,
                                 g.b_trans ? CUBLAS_OP_N : CUBLAS_OP_T, checked_int(g.m),
                                 checked_int(g.n), checked_int(g.k), pa, checked_int(g.lda),
                                 g.a_stride, pb, checked_int(g.ldb), g.b_stride, pc,
                                 checked_int(g.m), sc, checked_int(g.batch)),
                 "cuBLAS gemm");
  }
}

OpDef::Kernel einsum_gpu_kernel(std::string name) {
  return [name](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                const LocalContext& context) {
    const DType dtype = out.dtype();
    const bool supported = dtype == DType::kF32 || dtype == DType::kF64 ||
                           dtype == DType::kBF16 || dtype == DType::kF16;
    const std::optional<EinsumGemm> g =
        supported ? einsum_gemm(name, in[0], in[1], out, attrs, context) : std::nullopt;
    const bool fits = g && g->m <= INT32_MAX && g->n <= INT32_MAX && g->k <= INT32_MAX &&
                      g->batch <= INT32_MAX && in[0].is_contiguous() && in[1].is_contiguous();
    if (!fits) {
      run_host_staged(OpRegistry::global().get(name), in, out, attrs, context);
      return;
    }
    if (out.num_elements() == 0) return;
    switch (dtype) {
      case DType::kF32: gemm_block<float>(*g, in[0], in[1], out, context); break;
      case DType::kF64: gemm_block<double>(*g, in[0], in[1], out, context); break;
      case DType::kBF16: gemm_block<bfloat16>(*g, in[0], in[1], out, context); break;
      default: gemm_block<float16>(*g, in[0], in[1], out, context);
    }
  };
}

}  // namespace

void register_gpu_matmul_kernels(OpRegistry& registry) {
  for (const char* name : {"matmul", "einsum"}) registry.set_gpu_kernel(name, einsum_gpu_kernel(name));
}

}  // namespace tessel::detail
