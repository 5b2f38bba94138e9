# Runs one CLI smoke test: cmake -DEXE=<tessel> -DEXPECT_RC=<n> [-DEXPECT_STDOUT=<regex>]
# [-DEXPECT_STDERR=<regex>] -P cli_test.cmake -- <args...>. Fails unless the exit status
# equals EXPECT_RC and each given regex matches its stream (CMake regexes: '.' spans lines).
set(args "")
set(after_separator FALSE)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last})
  if(after_separator)
    list(APPEND args "${CMAKE_ARGV${i}}")
  elseif(CMAKE_ARGV${i} STREQUAL "--")
    set(after_separator TRUE)
  endif()
endforeach()

execute_process(COMMAND ${EXE} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(JOIN "' '" shown ${args})
message("$ tessel '${shown}'\n--- exit status: ${rc}\n--- stdout:\n${out}--- stderr:\n${err}---")

if(NOT rc STREQUAL "${EXPECT_RC}")
  message(FATAL_ERROR "expected exit status ${EXPECT_RC}, got ${rc}")
endif()
if(EXPECT_STDOUT AND NOT out MATCHES "${EXPECT_STDOUT}")
  message(FATAL_ERROR "stdout does not match: ${EXPECT_STDOUT}")
endif()
if(EXPECT_STDERR AND NOT err MATCHES "${EXPECT_STDERR}")
  message(FATAL_ERROR "stderr does not match: ${EXPECT_STDERR}")
endif()
