// The caching allocator of one GPU's memory.
#include "runtime/cuda/cuda_allocator.h"

#include <algorithm>

#include "core/byte_size.h"
#include "core/errors.h"
#include "runtime/cuda/cuda_check.h"

namespace tessel::detail {
namespace {
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = size_t{2} << 20;
constexpr size_t kSmallLimit = size_t{1} << 20;

// The live allocators of each GPU: devices sharing a GPU (runtime.h) each have one, and a
// failed cudaMalloc empties them all, not only the caller's, so that memory one device keeps
// cached does not make another's request fail.
struct GpuAllocators {
  std::mutex mu;  // taken before any allocator's own mutex, never after
  std::map<int, std::vector<CudaCachingAllocator*>> by_ordinal;
};

GpuAllocators& gpu_allocators() {
  static auto* registry = new GpuAllocators();  // kept until exit: allocators outlive statics
  return *registry;
}

// Returns the cached blocks of every allocator on GPU `ordinal` to CUDA.
void empty_caches_of_gpu(int ordinal) {
  GpuAllocators& r = gpu_allocators();
  std::lock_guard<std::mutex> lock(r.mu);
  for (CudaCachingAllocator* a : r.by_ordinal[ordinal]) a->empty_cache();
}
}  // namespace

CudaCachingAllocator::CudaCachingAllocator(int ordinal, std::string name)
    : ordinal_(ordinal), name_(std::move(name)) {
  GpuAllocators& r = gpu_allocators();
  std::lock_guard<std::mutex> lock(r.mu);
  r.by_ordinal[ordinal_].push_back(this);
}

CudaCachingAllocator::~CudaCachingAllocator() {
  {
    GpuAllocators& r = gpu_allocators();
    std::lock_guard<std::mutex> lock(r.mu);
    std::vector<CudaCachingAllocator*>& mine = r.by_ordinal[ordinal_];
    mine.erase(std::remove(mine.begin(), mine.end(), this), mine.end());
  }
  std::lock_guard<std::mutex> lock(mu_);
  empty_cache_locked();
}

size_t CudaCachingAllocator::rounded_size(size_t bytes) {
  if (bytes == 0) return kSmallRound;  // a unique, valid pointer for empty tensors
  const size_t round = bytes < kSmallLimit ? kSmallRound : kLargeRound;
  return (bytes + round - 1) / round * round;
}

void* CudaCachingAllocator::allocate(size_t bytes) {
  const size_t size = rounded_size(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_blocks_.find(size);
    if (it != free_blocks_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_bytes_ -= static_cast<int64_t>(size);
      return p;
    }
  }
  ScopedCudaDevice on(ordinal_);
  void* p = nullptr;
  cudaError_t status = cudaMalloc(&p, size);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    empty_caches_of_gpu(ordinal_);
    status = cudaMalloc(&p, size);
  }
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    throw_error(ErrorCode::kResourceExhausted, "GPU", "'{}': cudaMalloc of {} failed: out of memory",
                name_, format_request_bytes(static_cast<int64_t>(size)));
  }
  check_cuda(status, "GPU", fmt::format("'{}': cudaMalloc({})", name_, size));
  return p;
}

void CudaCachingAllocator::deallocate(void* p, size_t bytes) noexcept {
  const size_t size = rounded_size(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  try {
    free_blocks_[size].push_back(p);
    cached_bytes_ += static_cast<int64_t>(size);
  } catch (...) {
    (void)cudaFree(p);  // no room to keep it: give it back
  }
}

int64_t CudaCachingAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_bytes_;
}

void CudaCachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  empty_cache_locked();
}

void CudaCachingAllocator::empty_cache_locked() {
  int previous = -1;
  const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != ordinal_ &&
                        cudaSetDevice(ordinal_) == cudaSuccess;
  // At process exit the CUDA runtime may already be gone; its errors are ignored here.
  for (auto& [size, blocks] : free_blocks_) {
    for (void* p : blocks) (void)cudaFree(p);
  }
  free_blocks_.clear();
  cached_bytes_ = 0;
  if (switched) (void)cudaSetDevice(previous);
}

}  // namespace tessel::detail
