# Install rules: headers, the library and a CMake package so that consumers can write
#   find_package(tessel REQUIRED)  target_link_libraries(app PRIVATE tessel::tessel)
include(CMakePackageConfigHelpers)

# The public headers are C++20 (defaulted operator==, ...): consumers inherit the requirement.
target_compile_features(tessel INTERFACE cxx_std_20)

install(TARGETS tessel EXPORT tesselTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/tessel DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/include/tessel/config.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tessel)
if(TARGET tessel_cli)
  install(TARGETS tessel_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

set(TESSEL_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/tessel)
install(EXPORT tesselTargets NAMESPACE tessel:: DESTINATION ${TESSEL_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/tesselConfig.cmake.in
  ${PROJECT_BINARY_DIR}/tesselConfig.cmake INSTALL_DESTINATION ${TESSEL_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tesselConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tesselConfig.cmake
              ${PROJECT_BINARY_DIR}/tesselConfigVersion.cmake
        DESTINATION ${TESSEL_CMAKE_DIR})
