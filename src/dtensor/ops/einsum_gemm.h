// Internal: one device's block of a matmul / einsum call as a batched GEMM on operands read in
// place, for kernels other than the CPU one (the GPU kernel calls cuBLAS with it).
//
// Row-major: for i < batch, C_i [m, n] = op(A_i) op(B_i), A_i at a + i * a_stride with leading
// dimension lda (transposed in memory when a_trans), B_i likewise, C_i at out + i * m * n; when
// out_transposed the output block is [batch, n, m] (C_i^T = op(B_i)^T op(A_i)^T).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "tessel/dtensor/op_registry.h"

namespace tessel::detail {

struct EinsumGemm {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  bool a_trans = false, b_trans = false;
  int64_t lda = 1, ldb = 1;
  int64_t a_stride = 0, b_stride = 0;
  bool out_transposed = false;
};

// The GEMM of op `op` ("matmul" or "einsum") on these blocks, or nullopt when an operand or the
// output needs a rearranging copy, or a letter is summed out (the CPU kernel's copies).
std::optional<EinsumGemm> einsum_gemm(std::string_view op, const Tensor& a, const Tensor& b,
                                      const Tensor& out, const OpAttrs& attrs,
                                      const LocalContext& context);

}  // namespace tessel::detail
