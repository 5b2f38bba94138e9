# The optional MPI transport (include/tessel/comm/mpi.h).
#
# TESSEL_WITH_MPI defaults to ON when FindMPI finds MPI for C++ (the project's only language;
# tessel calls MPI's C API, so MPI_CXX_SKIP_MPICXX leaves the deprecated C++ bindings out). ON
# without MPI is an error; OFF builds the stub (src/comm/mpi_stub.cpp), whose calls throw
# kUnavailable, so the rest of tessel has no #ifdefs.
# Sets TESSEL_HAVE_MPI (config.h's TESSEL_HAVE_MPI) before src/ configures config.h, and defines
# tessel_add_mpi(<target>), which adds the real or stub sources to the library.
set(MPI_CXX_SKIP_MPICXX ON CACHE BOOL "tessel uses MPI's C API only")
find_package(MPI COMPONENTS CXX QUIET)
set(_tessel_mpi_default OFF)
if(MPI_CXX_FOUND)
  set(_tessel_mpi_default ON)
endif()
option(TESSEL_WITH_MPI "Build the MPI transport (needs an MPI implementation, e.g. Open MPI)"
       ${_tessel_mpi_default})
if(TESSEL_WITH_MPI AND NOT MPI_CXX_FOUND)
  message(FATAL_ERROR "TESSEL_WITH_MPI is ON but FindMPI found no MPI for C++ "
                      "(apt-get install libopenmpi-dev, or -DTESSEL_WITH_MPI=OFF)")
endif()
set(TESSEL_HAVE_MPI ${TESSEL_WITH_MPI})
if(TESSEL_HAVE_MPI)
  message(STATUS "tessel: MPI transport ON (${MPI_CXX_LIBRARIES}; mpiexec ${MPIEXEC_EXECUTABLE})")
else()
  message(STATUS "tessel: MPI transport OFF (stub reports kUnavailable)")
endif()

function(tessel_add_mpi target)
  if(TESSEL_HAVE_MPI)
    target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/src/comm/mpi_transport.cpp
                                     ${PROJECT_SOURCE_DIR}/src/comm/mpi_all_reduce.cpp
                                     ${PROJECT_SOURCE_DIR}/src/comm/mpi_hierarchy.cpp
                                     ${PROJECT_SOURCE_DIR}/src/comm/mpi_cluster.cpp
                                     ${PROJECT_SOURCE_DIR}/src/system/mpi_system_channel.cpp)
    target_link_libraries(${target} PRIVATE MPI::MPI_CXX)
  else()
    target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/src/comm/mpi_stub.cpp
                                     ${PROJECT_SOURCE_DIR}/src/system/mpi_system_channel_stub.cpp)
  endif()
endfunction()
