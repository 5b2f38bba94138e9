#include "comm/reduce_kernels.h"

#include <unistd.h>

#include <cstdlib>

#include <algorithm>
#include <complex>
#include <cstring>
#include <fstream>
#include <string>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/env.h"
#include "core/errors.h"
#include "tessel/core/float16.h"

namespace tessel::detail {
namespace {

// Elements reduced per block: the accumulator stays in L1.
constexpr int64_t kBlock = 2048;

template <typename T>
struct Traits {
  using Acc = T;
  static Acc load(const T& v) { return v; }
  static T store(Acc v) { return v; }
};
template <>
struct Traits<bfloat16> {
  using Acc = float;
  static float load(const bfloat16& v) { return bf16_bits_to_float(v.bits); }
  static bfloat16 store(float v) { return bfloat16(v); }
};
template <>
struct Traits<float16> {
  using Acc = float;
  static float load(const float16& v) { return f16_bits_to_float(v.bits); }
  static float16 store(float v) { return float16(v); }
};

template <typename A>
A combine(ReduceOp op, A a, A b) {
  if constexpr (std::is_same_v<A, bool>) {
    return (op == ReduceOp::kProd || op == ReduceOp::kMin) ? (a && b) : (a || b);
  } else {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kMean: return a + b;
      case ReduceOp::kProd: return a * b;
      case ReduceOp::kMax:
      case ReduceOp::kMin:
        // complex128 has no order (check_reducible rejects these ops before any kernel runs).
        if constexpr (std::is_same_v<A, std::complex<double>>) {
          return a;
        } else {
          return op == ReduceOp::kMax ? std::max(a, b) : std::min(a, b);
        }
    }
    return a;
  }
}

// The inner loop per op, so that the compiler vectorises it (no switch per element).
template <typename A, typename T, ReduceOp kOp>
void combine_block(A* acc, const T* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    acc[i] = combine<A>(kOp, acc[i], Traits<T>::load(in[i]));
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// The same loop compiled for AVX2 (twice the vector width of the SSE2 baseline), taken when
// the CPU has it and the switch TESSEL_NO_AVX2 is not on: 18% off a 4 MiB all-reduce over 4
// devices here (docs/benchmarks-history.md). Its callees are inline baseline code, which GCC and Clang
// inline into it.
#define TESSEL_HAVE_AVX2_KERNELS 1
template <typename A, typename T, ReduceOp kOp>
__attribute__((target("avx2"))) void combine_block_avx2(A* acc, const T* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    acc[i] = combine<A>(kOp, acc[i], Traits<T>::load(in[i]));
  }
}

bool cpu_has_avx2() {
  static const bool has =
      __builtin_cpu_supports("avx2") && !detail::env_flag("TESSEL_NO_AVX2", false, "Reduce");
  return has;
}
#endif

template <typename A, typename T, ReduceOp kOp>
void combine_block_best(A* acc, const T* in, int64_t n) {
#if defined(TESSEL_HAVE_AVX2_KERNELS)
  if (cpu_has_avx2()) return combine_block_avx2<A, T, kOp>(acc, in, n);
#endif
  combine_block<A, T, kOp>(acc, in, n);
}

template <typename A, typename T>
void combine_block(ReduceOp op, A* acc, const T* in, int64_t n) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean: return combine_block_best<A, T, ReduceOp::kSum>(acc, in, n);
    case ReduceOp::kProd: return combine_block_best<A, T, ReduceOp::kProd>(acc, in, n);
    case ReduceOp::kMax: return combine_block_best<A, T, ReduceOp::kMax>(acc, in, n);
    case ReduceOp::kMin: return combine_block_best<A, T, ReduceOp::kMin>(acc, in, n);
  }
}

// memcpy with non-temporal stores for the 16-byte-aligned middle of `dst` (plain stores for
// the unaligned head and the tail). The caller fences (_mm_sfence) before publishing.
void stream_copy(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
#if defined(__SSE2__)
  const size_t misalignment = reinterpret_cast<uintptr_t>(d) % 16;
  const size_t head = std::min(bytes, misalignment == 0 ? 0 : 16 - misalignment);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
    const __m128i v0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i v1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i v2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i v3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), v0);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), v1);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), v2);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), v3);
  }
  for (; bytes >= 16; bytes -= 16, d += 16, s += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), _mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
  }
#endif
  std::memcpy(d, s, bytes);
}

template <typename T>
void reduce_typed(ReduceOp op, const void* const* inputs, int num_inputs, void* const* outputs,
                  int num_outputs, int64_t begin, int64_t end, int64_t divisor, bool streaming) {
  using A = typename Traits<T>::Acc;
  alignas(64) A acc[kBlock];
  // Converted results (bf16, f16) staged for the streaming copy.
  alignas(64) T staged[std::is_same_v<A, T> ? 1 : kBlock];
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t n = std::min(kBlock, end - b);
    const T* first = static_cast<const T*>(inputs[0]) + b;
    for (int64_t i = 0; i < n; ++i) acc[i] = Traits<T>::load(first[i]);
    for (int k = 1; k < num_inputs; ++k) {
      combine_block<A, T>(op, acc, static_cast<const T*>(inputs[k]) + b, n);
    }
    if (op == ReduceOp::kMean && divisor > 1) {
      if constexpr (!std::is_same_v<A, bool>) {
        for (int64_t i = 0; i < n; ++i) acc[i] = static_cast<A>(acc[i] / static_cast<A>(divisor));
      }
    }
    if (streaming) {
      const T* result = nullptr;
      if constexpr (std::is_same_v<A, T>) {
        result = acc;
      } else {
        for (int64_t i = 0; i < n; ++i) staged[i] = Traits<T>::store(acc[i]);
        result = staged;
      }
      for (int k = 0; k < num_outputs; ++k) {
        stream_copy(static_cast<T*>(outputs[k]) + b, result, static_cast<size_t>(n) * sizeof(T));
      }
      continue;
    }
    for (int k = 0; k < num_outputs; ++k) {
      T* out = static_cast<T*>(outputs[k]) + b;
      if constexpr (std::is_same_v<A, T>) {
        std::copy(acc, acc + n, out);
      } else {
        for (int64_t i = 0; i < n; ++i) out[i] = Traits<T>::store(acc[i]);
      }
    }
  }
#if defined(__SSE2__)
  if (streaming) _mm_sfence();  // order the non-temporal stores before the next rendezvous
#endif
}

template <typename T>
void accumulate_typed(ReduceOp op, void* inout, const void* in, int64_t count) {
  T* io = static_cast<T*>(inout);
  const T* src = static_cast<const T*>(in);
  for (int64_t i = 0; i < count; ++i) {
    io[i] = Traits<T>::store(combine<typename Traits<T>::Acc>(op, Traits<T>::load(io[i]),
                                                              Traits<T>::load(src[i])));
  }
}

template <typename T>
void mean_typed(void* buffer, int64_t count, int64_t divisor) {
  using A = typename Traits<T>::Acc;
  T* p = static_cast<T*>(buffer);
  for (int64_t i = 0; i < count; ++i) {
    p[i] = Traits<T>::store(static_cast<A>(Traits<T>::load(p[i]) / static_cast<A>(divisor)));
  }
}

// Calls f.template operator()<T>() for the C++ type of `dtype`.
template <typename F>
void dispatch(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: return f.template operator()<float>();
    case DType::kF64: return f.template operator()<double>();
    case DType::kBF16: return f.template operator()<bfloat16>();
    case DType::kF16: return f.template operator()<float16>();
    case DType::kI32: return f.template operator()<int32_t>();
    case DType::kI64: return f.template operator()<int64_t>();
    case DType::kU8: return f.template operator()<uint8_t>();
    case DType::kBool: return f.template operator()<bool>();
    case DType::kU32: return f.template operator()<uint32_t>();
    case DType::kI8: return f.template operator()<int8_t>();
    case DType::kC128: return f.template operator()<std::complex<double>>();
  }
}

}  // namespace

void check_reducible(DType dtype, ReduceOp op) {
  if (dtype == DType::kBool && op == ReduceOp::kMean) {
    throw_invalid("Communicator", "mean is not defined for bool tensors");
  }
  if (is_complex(dtype) && (op == ReduceOp::kMax || op == ReduceOp::kMin)) {
    throw_invalid("Communicator", "{} is not defined for {} tensors (complex numbers have no order)",
                  reduce_op_name(op), dtype_name(dtype));
  }
}

void reduce_buffers(DType dtype, ReduceOp op, const void* const* inputs, int num_inputs,
                    void* const* outputs, int num_outputs, int64_t begin, int64_t end,
                    int64_t divisor, bool streaming) {
  dispatch(dtype, [&]<typename T>() {
    reduce_typed<T>(op, inputs, num_inputs, outputs, num_outputs, begin, end, divisor, streaming);
  });
}

void accumulate(DType dtype, ReduceOp op, void* inout, const void* in, int64_t count) {
  dispatch(dtype, [&]<typename T>() { accumulate_typed<T>(op, inout, in, count); });
}

void finish_mean(DType dtype, ReduceOp op, void* buffer, int64_t count, int64_t divisor) {
  if (op != ReduceOp::kMean || divisor <= 1 || dtype == DType::kBool) return;
  dispatch(dtype, [&]<typename T>() {
    if constexpr (!std::is_same_v<T, bool>) mean_typed<T>(buffer, count, divisor);
  });
}

size_t last_level_cache_bytes() {
  static const size_t bytes = [] {
    // sysfs describes the cache this (virtual) machine sees; sysconf may report the host's.
    std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index3/size");
    size_t value = 0;
    std::string unit;
    if (in >> value && value > 0) {
      in >> unit;
      if (unit == "K") return value << 10;
      if (unit == "M") return value << 20;
      return value;
    }
    const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return llc > 0 ? static_cast<size_t>(llc) : size_t{32} << 20;
  }();
  return bytes;
}

}  // namespace tessel::detail
