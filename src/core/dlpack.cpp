// DLPack exchange (dlpack.h): export holds the tensor's storage in the DLManagedTensor's context;
// import wraps the foreign memory as the storage of a Tensor through a one-block Allocator whose
// deallocate runs the producer's deleter.
#include "tessel/core/dlpack.h"

#include <dlpack/dlpack.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/errors.h"
#include "tessel/core/allocator.h"

namespace tessel {
namespace {

constexpr std::string_view kDlpack = "DLPack";

struct DtypeCode {
  DType dtype;
  uint8_t code;
  uint8_t bits;
};
// Every tessel dtype DLPack 0.6 can name (it has no bool).
constexpr std::array<DtypeCode, 7> kDtypeCodes = {{
    {DType::kF32, kDLFloat, 32},
    {DType::kF64, kDLFloat, 64},
    {DType::kF16, kDLFloat, 16},
    {DType::kBF16, kDLBfloat, 16},
    {DType::kI32, kDLInt, 32},
    {DType::kI64, kDLInt, 64},
    {DType::kU8, kDLUInt, 8},
}};

std::optional<DType> dtype_from_dlpack(const DLDataType& t) {
  if (t.lanes != 1) return std::nullopt;
  for (const DtypeCode& c : kDtypeCodes) {
    if (c.code == t.code && c.bits == t.bits) return c.dtype;
  }
  return std::nullopt;
}

// What an exported DLManagedTensor points into: the tensor (its storage stays alive) and the
// shape and strides arrays the struct refers to.
struct ExportContext {
  Tensor tensor;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  DLManagedTensor managed{};
};

// The memory of one imported DLManagedTensor as an Allocator: allocate() hands out that memory
// (from a 64-byte boundary at or before the first element, as Tensor storage must be aligned), and
// deallocate() -- or destruction, if no storage was ever made -- runs the producer's deleter once.
class ImportedMemory final : public Allocator {
 public:
  explicit ImportedMemory(DLManagedTensor* managed) : managed_(managed) {}
  ~ImportedMemory() override { release(); }
  void set_base(void* base) { base_ = base; }
  void* allocate(size_t) override { return base_; }
  void deallocate(void*, size_t) noexcept override { release(); }
  std::string_view name() const override { return "dlpack"; }

 private:
  void release() noexcept {
    if (managed_ != nullptr && managed_->deleter != nullptr) managed_->deleter(managed_);
    managed_ = nullptr;
  }
  DLManagedTensor* managed_;
  void* base_ = nullptr;
};

}  // namespace

DLManagedTensor* to_dlpack(const Tensor& t) {
  if (!t.defined()) {
    detail::throw_error(ErrorCode::kFailedPrecondition, kDlpack, "to_dlpack of a null tensor");
  }
  const auto code = std::find_if(kDtypeCodes.begin(), kDtypeCodes.end(),
                                 [&](const DtypeCode& c) { return c.dtype == t.dtype(); });
  if (code == kDtypeCodes.end()) {
    detail::throw_error(ErrorCode::kUnimplemented, kDlpack,
                        "DLPack 0.6 has no type for {} (tensor {})", dtype_name(t.dtype()),
                        t.shape().to_string());
  }
  auto ctx = std::make_unique<ExportContext>();
  ctx->tensor = t;
  ctx->shape = t.shape().dims();
  ctx->strides = t.strides();
  DLTensor& dl = ctx->managed.dl_tensor;
  dl.data = const_cast<void*>(t.data());  // DLPack has no const; consumers may write, as views do
  dl.device = {kDLCPU, 0};
  dl.ndim = t.rank();
  dl.dtype = {code->code, code->bits, 1};
  dl.shape = ctx->shape.data();
  dl.strides = ctx->strides.data();
  dl.byte_offset = 0;
  ctx->managed.manager_ctx = ctx.get();
  ctx->managed.deleter = [](DLManagedTensor* self) {
    delete static_cast<ExportContext*>(self->manager_ctx);
  };
  return &ctx.release()->managed;
}

Tensor from_dlpack(DLManagedTensor* managed) {
  if (managed == nullptr) detail::throw_invalid(kDlpack, "from_dlpack of a null DLManagedTensor");
  const DLTensor& dl = managed->dl_tensor;
  // Owns `managed` from here on: any error below runs its deleter through the destructor.
  const auto memory = std::make_shared<ImportedMemory>(managed);
  if (dl.device.device_type != kDLCPU) {
    detail::throw_invalid(kDlpack, "only host memory (kDLCPU = 1) can be imported, got device type {}",
                          static_cast<int>(dl.device.device_type));
  }
  const std::optional<DType> dtype = dtype_from_dlpack(dl.dtype);
  if (!dtype) {
    detail::throw_invalid(kDlpack, "no tessel dtype for DLPack type code {}, bits {}, lanes {}",
                          dl.dtype.code, dl.dtype.bits, dl.dtype.lanes);
  }
  if (dl.ndim < 0 || (dl.ndim > 0 && dl.shape == nullptr)) {
    detail::throw_invalid(kDlpack, "bad rank {} or missing shape", dl.ndim);
  }
  const std::vector<int64_t> dims(dl.shape, dl.shape + dl.ndim);
  int64_t count = 1;
  for (int64_t d : dims) {
    if (d < 0) detail::throw_invalid(kDlpack, "negative dimension in shape [{}]", fmt::join(dims, ","));
    count = d == 0 || count == 0 ? 0 : count * d;  // overflow is caught by Tensor's size check
  }
  const Shape shape(dims);
  if (dl.strides != nullptr && count > 1) {
    const std::vector<int64_t> row_major = shape.strides();
    for (int i = 0; i < dl.ndim; ++i) {
      if (dims[static_cast<size_t>(i)] > 1 && dl.strides[i] != row_major[static_cast<size_t>(i)]) {
        detail::throw_invalid(kDlpack,
                              "strides [{}] of shape {} are not row-major [{}]; import a "
                              "contiguous copy (e.g. numpy.ascontiguousarray)",
                              fmt::join(dl.strides, dl.strides + dl.ndim, ","), shape.to_string(),
                              fmt::join(row_major, ","));
      }
    }
  }
  const size_t item = dtype_size(*dtype);
  if (count == 0) return Tensor::zeros(shape, *dtype);  // no memory to share; deleter runs now
  const auto first = reinterpret_cast<uintptr_t>(dl.data) + dl.byte_offset;
  if (dl.data == nullptr || first % item != 0) {
    detail::throw_invalid(kDlpack, "data pointer {:#x} is not aligned to the {}-byte element",
                          first, item);
  }
  const uintptr_t base = first - first % kAllocatorAlignment;
  const auto pad = static_cast<int64_t>((first - base) / item);
  memory->set_base(reinterpret_cast<void*>(base));
  const Tensor block = Tensor::empty(Shape({pad + count}), *dtype, memory.get(),
                                     /*zero_fill=*/false);
  return block.slice(0, pad, pad + count).reshape(shape);
}

}  // namespace tessel
