# Driver of the build_routes.default_generator test (cmake -P): the route most C++ users take,
# `cmake -S . -B b && cmake --build b`, with CMake's default generator (Unix Makefiles) and no
# options. Configures the source tree in WORK_DIR and builds one small target, the generated
# protobuf code (the folder protoc writes into must exist under Make too), and checks that
# configure chose a Python that imports numpy. Kept cheap for make test: no full build.
foreach(var SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "default_generator_test.cmake: -D${var}=... is required")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})

include(${CMAKE_CURRENT_LIST_DIR}/../testing/run_step.cmake)  # step()

# The user's environment minus a generator preset: CMake's own default must be what runs.
unset(ENV{CMAKE_GENERATOR})
set(launcher "")
if(COMPILER_LAUNCHER)  # the parent build's ccache, so that repeated runs are cache hits
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${COMPILER_LAUNCHER})
endif()
step("configure" ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR} -DTESSEL_BUILD_TESTS=OFF
     ${launcher})
if(NOT step_output MATCHES "tessel: Python ([^\n]*) \\(has numpy\\)")
  message(FATAL_ERROR "configure did not report a Python with numpy:\n${step_output}")
endif()
file(STRINGS ${WORK_DIR}/CMakeCache.txt generator REGEX "^CMAKE_GENERATOR:INTERNAL=")
if(NOT generator STREQUAL "CMAKE_GENERATOR:INTERNAL=Unix Makefiles")
  message(FATAL_ERROR "expected CMake's default generator, Unix Makefiles; the cache has ${generator}")
endif()
step("build tessel_proto" ${CMAKE_COMMAND} --build ${WORK_DIR} --target tessel_proto -j2)
if(NOT EXISTS ${WORK_DIR}/proto/tessel/proto/layout.pb.h)
  message(FATAL_ERROR "the build did not generate proto/tessel/proto/layout.pb.h")
endif()
