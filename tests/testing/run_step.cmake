# For the tests that are CMake scripts (cmake -P): step(<what> <command...>) runs a command,
# echoing it; any failure fails the test with the command's output, which is left in
# `step_output` otherwise.
function(step what)
  message("-- ${what}: ${ARGN}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()
