// GPU support of this build and machine: whether tessel was built with CUDA, and how many CUDA
// GPUs this process sees. A Runtime makes one GPU device per visible GPU (runtime.h,
// TESSEL_GPU_DEVICES); these answer without making any.
//
//   if (visible_gpu_count() == 0) { /* CPU devices only */ }
//
// Thread safety: any thread.
#pragma once

namespace tessel {

// True when this build contains the CUDA backend (CMake TESSEL_WITH_CUDA).
bool built_with_cuda();

// CUDA GPUs visible to this process (honouring CUDA_VISIBLE_DEVICES); 0 when built without CUDA,
// when no driver is installed, or when the machine has no GPU. Never throws.
int visible_gpu_count();

}  // namespace tessel
