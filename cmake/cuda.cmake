# The switch of the optional CUDA backend: GPU devices in the runtime (src/runtime/cuda/) and the
# NCCL communicator (src/comm/nccl/).
#
# TESSEL_WITH_CUDA is AUTO (the default), ON or OFF. AUTO turns it on when CMake's CUDAToolkit
# finds the CUDA runtime and NCCL's header and library are found beside it (or under NCCL_ROOT);
# a machine needs no GPU to build it: the CUDA runtime reports no device there and tessel makes
# no GPU devices. ON without them is an error; OFF builds the stubs, whose calls throw
# kUnavailable, so the rest of tessel has no #ifdefs.
# With CUDA, the CUDA language is enabled for the ops' device kernels (src/dtensor/cuda/*.cu, a
# few small files compiled by nvcc); everything else is C++ from the host compiler calling the
# CUDA runtime API. CMAKE_CUDA_ARCHITECTURES defaults to 90 (H100 / H200) when not set: pass
# -DCMAKE_CUDA_ARCHITECTURES=80 (A100), "80;90", native, ... for other GPUs.
# Sets TESSEL_HAVE_CUDA (config.h's TESSEL_HAVE_CUDA) before src/ configures config.h.
set(TESSEL_WITH_CUDA AUTO CACHE STRING "Build GPU devices and NCCL collectives: AUTO, ON or OFF")
set_property(CACHE TESSEL_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)
if(NOT TESSEL_WITH_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "TESSEL_WITH_CUDA must be AUTO, ON or OFF, got '${TESSEL_WITH_CUDA}'")
endif()

set(_tessel_cuda_found OFF)
if(NOT TESSEL_WITH_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    find_path(NCCL_INCLUDE_DIR nccl.h
              HINTS ${NCCL_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS}
              DOC "NCCL's header (the CUDA toolkit's, or NCCL_ROOT/include)")
    find_library(NCCL_LIBRARY nccl
                 HINTS ${NCCL_ROOT}/lib ${CUDAToolkit_LIBRARY_DIR}
                 DOC "NCCL's library (the CUDA toolkit's, or NCCL_ROOT/lib)")
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY AND TARGET CUDA::cudart)
      set(_tessel_cuda_found ON)
    endif()
  endif()
endif()

if(TESSEL_WITH_CUDA STREQUAL "ON" AND NOT _tessel_cuda_found)
  message(FATAL_ERROR "TESSEL_WITH_CUDA is ON but the CUDA toolkit (CUDAToolkit) or NCCL "
                      "(nccl.h, libnccl) was not found; set CUDAToolkit_ROOT / NCCL_ROOT, or "
                      "-DTESSEL_WITH_CUDA=OFF")
endif()
set(TESSEL_HAVE_CUDA ${_tessel_cuda_found})
if(TESSEL_HAVE_CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND CUDAToolkit_NVCC_EXECUTABLE)
    set(CMAKE_CUDA_COMPILER ${CUDAToolkit_NVCC_EXECUTABLE})
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "GPU architectures the device kernels are built for")
  endif()
  # The kernels are C++17 for nvcc; set before the language is enabled, so that no target (the
  # library holds the kernels' objects) asks nvcc for the project's C++20, which CMake 3.25
  # cannot request from it.
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  enable_language(CUDA)
  message(STATUS "tessel: CUDA ON (CUDA ${CUDAToolkit_VERSION}, NCCL ${NCCL_LIBRARY}, "
                 "kernels for sm_${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "tessel: CUDA OFF (stubs report kUnavailable)")
endif()
