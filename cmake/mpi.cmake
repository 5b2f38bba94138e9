# The switch of the optional MPI backend (include/tessel/comm/mpi.h,
# include/tessel/system/mpi_system_channel.h).
#
# TESSEL_WITH_MPI defaults to ON when FindMPI finds MPI for C++ (the project's only language;
# tessel calls MPI's C API, so MPI_CXX_SKIP_MPICXX leaves the deprecated C++ bindings out). ON
# without MPI is an error; OFF builds the stubs, whose calls throw kUnavailable, so the rest of
# tessel has no #ifdefs.
# Sets TESSEL_HAVE_MPI (config.h's TESSEL_HAVE_MPI) before src/ configures config.h. Which files
# it adds to the library (the real ones or the stubs) is src/comm/mpi/CMakeLists.txt's choice.
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
