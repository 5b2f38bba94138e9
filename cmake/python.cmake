# The interpreter the Python module is built for and the tests run with: one that imports numpy
# (the module converts tensors to and from numpy arrays). Python3_EXECUTABLE given on the command
# line is used as it is; otherwise the first python3 on PATH that has numpy, then Debian's
# /usr/bin/python3. Under pip the interpreter is pip's. A PATH python3 without numpy (a pyenv or conda shim) is skipped, not used.
function(tessel_has_numpy python out)
  execute_process(COMMAND ${python} -c "import numpy"
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(rc EQUAL 0)
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

set(tessel_numpy_hint "install numpy for it (Debian: apt-get install python3-dev python3-numpy), \
or pass -DPython3_EXECUTABLE=<a python3 with numpy>, or build without the module: \
-DTESSEL_BUILD_PYTHON=OFF")
if(SKBUILD)
  # pip install .: scikit-build-core names the target environment's interpreter; numpy is a
  # runtime dependency (pyproject.toml) that an isolated build environment does not have.
  message(STATUS "tessel: Python ${Python3_EXECUTABLE} (pip build; numpy is a runtime dependency)")
  return()
elseif(DEFINED Python3_EXECUTABLE)
  tessel_has_numpy(${Python3_EXECUTABLE} ok)
  if(NOT ok)
    message(FATAL_ERROR "tessel: Python3_EXECUTABLE=${Python3_EXECUTABLE} cannot import numpy, "
                        "which tessel's Python module needs: ${tessel_numpy_hint}")
  endif()
else()
  find_program(tessel_path_python NAMES python3 NO_CACHE)
  set(tried "")
  foreach(candidate ${tessel_path_python} /usr/bin/python3)
    if(EXISTS ${candidate})
      list(APPEND tried ${candidate})
      tessel_has_numpy(${candidate} ok)
      if(ok)
        set(Python3_EXECUTABLE ${candidate} CACHE FILEPATH "The Python the module is built for")
        break()
      endif()
    endif()
  endforeach()
  if(NOT DEFINED Python3_EXECUTABLE)
    message(FATAL_ERROR "tessel: no python3 with numpy found (tried: ${tried}): "
                        "${tessel_numpy_hint}")
  endif()
endif()
message(STATUS "tessel: Python ${Python3_EXECUTABLE} (has numpy)")
