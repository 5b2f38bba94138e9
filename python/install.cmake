# Install rules of the Python package (component "python"): the extension and python/tessel/*.py
# into <dir>/tessel/. Under `pip install .` (scikit-build-core sets SKBUILD) <dir> is the wheel's
# root and the tessel CLI goes to the environment's bin/ (SKBUILD_SCRIPTS_DIR), so a venv gets both
# `import tessel` and `tessel` on PATH. A plain `cmake --install` puts the package under
# TESSEL_PYTHON_INSTALL_DIR (default lib/python3/dist-packages, where Debian's python3 looks).
if(SKBUILD)
  set(TESSEL_PYTHON_INSTALL_DIR .)
else()
  set(TESSEL_PYTHON_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/python3/dist-packages CACHE PATH
      "Where cmake --install puts the tessel Python package (relative to the prefix)")
endif()
install(TARGETS tessel_python LIBRARY DESTINATION ${TESSEL_PYTHON_INSTALL_DIR}/tessel
        COMPONENT python)
install(FILES ${TESSEL_PY_SOURCES} DESTINATION ${TESSEL_PYTHON_INSTALL_DIR}/tessel
        COMPONENT python)
if(SKBUILD AND TARGET tessel_cli)
  install(TARGETS tessel_cli RUNTIME DESTINATION ${SKBUILD_SCRIPTS_DIR} COMPONENT python)
endif()
