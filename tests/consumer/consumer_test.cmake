# Included from tests/CMakeLists.txt: a ctest that installs this build into a scratch prefix and
# builds and runs tests/consumer against it (run_consumer_test.cmake does the steps).
set(TESSEL_CONSUMER_WORK ${CMAKE_CURRENT_BINARY_DIR}/consumer_test)
# A sanitized static library needs the sanitizer runtime in whatever links it.
set(TESSEL_CONSUMER_FLAGS "")
if(TESSEL_SANITIZE STREQUAL "thread")
  set(TESSEL_CONSUMER_FLAGS "-fsanitize=thread")
elseif(TESSEL_SANITIZE STREQUAL "address")
  set(TESSEL_CONSUMER_FLAGS "-fsanitize=address,undefined")
endif()
add_test(NAME consumer.find_package
         COMMAND ${CMAKE_COMMAND}
                 -DTESSEL_BUILD_DIR=${PROJECT_BINARY_DIR}
                 -DCONSUMER_SOURCE_DIR=${CMAKE_CURRENT_LIST_DIR}
                 -DWORK_DIR=${TESSEL_CONSUMER_WORK}
                 -DGENERATOR=${CMAKE_GENERATOR}
                 -DCXX_COMPILER=${CMAKE_CXX_COMPILER}
                 "-DCXX_FLAGS=${TESSEL_CONSUMER_FLAGS}"
                 -DBUILD_TYPE=$<CONFIG>
                 -DEXPECTED_VERSION=${PROJECT_VERSION}
                 -P ${CMAKE_CURRENT_LIST_DIR}/run_consumer_test.cmake)
set_tests_properties(consumer.find_package PROPERTIES LABELS unit TIMEOUT 300)
