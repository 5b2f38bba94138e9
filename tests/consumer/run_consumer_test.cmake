# Driver of the consumer.find_package test (cmake -P): install the tessel build at
# TESSEL_BUILD_DIR into WORK_DIR/prefix, configure and build CONSUMER_SOURCE_DIR against that
# prefix alone, run it and check that it printed the layout.
foreach(var TESSEL_BUILD_DIR CONSUMER_SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER EXPECTED_VERSION)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consumer_test.cmake: -D${var}=... is required")
  endif()
endforeach()

set(prefix ${WORK_DIR}/prefix)
set(build ${WORK_DIR}/build)
file(REMOVE_RECURSE ${WORK_DIR})  # a clean prefix: nothing left over from an earlier run

include(${CMAKE_CURRENT_LIST_DIR}/../testing/run_step.cmake)  # step()

step("install" ${CMAKE_COMMAND} --install ${TESSEL_BUILD_DIR} --prefix ${prefix})
foreach(path include/tessel/tessel.h include/tessel/config.h)
  if(NOT EXISTS ${prefix}/${path})
    message(FATAL_ERROR "install did not produce ${prefix}/${path}")
  endif()
endforeach()

# Only the scratch prefix may satisfy find_package(tessel): no package registries, and the
# build tree is not on any search path.
step("configure" ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${build} -G ${GENERATOR}
     -DCMAKE_PREFIX_PATH=${prefix}
     -DCMAKE_BUILD_TYPE=${BUILD_TYPE}
     -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
     "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
     -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
     -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
file(REAL_PATH ${prefix} real_prefix)
if(NOT step_output MATCHES "tessel ${EXPECTED_VERSION} from ([^\n]*)")
  message(FATAL_ERROR "configure did not report the tessel it found:\n${step_output}")
endif()
file(REAL_PATH "${CMAKE_MATCH_1}" found_dir)
string(FIND "${found_dir}" "${real_prefix}/" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "found tessel at ${found_dir}, not under the install prefix ${real_prefix}")
endif()

step("build" ${CMAKE_COMMAND} --build ${build})
step("run" ${build}/consumer)
message("${step_output}")
set(expected "sharding_specs:x,unsharded, mesh:|x=2,y=2|0,1,2,3|0,1,2,3|")
string(FIND "${step_output}" "tessel ${EXPECTED_VERSION}\n${expected}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "consumer output lacks the version and '${expected}...'")
endif()
if(NOT step_output MATCHES "local shape \\[5,6\\]\n.*\\[0:5\\)")
  message(FATAL_ERROR "consumer output lacks the README's local shape [5,6] and shard map")
endif()
# The README's DTensor example ran through the umbrella header: a loss, gradients in their
# parameters' layouts, a printed relayout plan.
if(NOT step_output MATCHES "loss [0-9.]+, grad layouts kept\n.*all_to_all")
  message(FATAL_ERROR "consumer output lacks the DTensor example's loss, kept gradient layouts "
                      "and relayout plan")
endif()
message("consumer test passed: tessel found in ${found_dir}")
