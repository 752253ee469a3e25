# Install and export rules: `cmake --install <build> --prefix <p>` puts the public headers, the
# generated version.h, the static libraries, the dcpmla tool and a CMake package under <p>, so that
# a consumer's find_package(dcpmla COMPONENTS ...) gives the dcpmla:: targets. The same names exist
# as aliases in this build, for projects that add dcpmla with add_subdirectory.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Library target -> exported name (dcpmla::<name>) and the component it belongs to.
set(_dcpmla_exported dcpmla_core core dcpmla_comm comm dcpmla_cpu cpu dcpmla_cuda cuda
    dcpmla_peer peer dcpmla_nccl nccl)
set(_dcpmla_install_targets dcpmla)
set_target_properties(dcpmla PROPERTIES EXPORT_NAME dcpmla)
add_library(dcpmla::dcpmla ALIAS dcpmla)
while(_dcpmla_exported)
  list(POP_FRONT _dcpmla_exported _target _name)
  if(TARGET ${_target})
    set_target_properties(${_target} PROPERTIES EXPORT_NAME ${_name})
    add_library(dcpmla::${_name} ALIAS ${_target})
    list(APPEND _dcpmla_install_targets ${_target})
    # The sources use fmt (through dcpmla_options in this tree); a consumer links it.
    target_link_libraries(${_target} PRIVATE $<INSTALL_INTERFACE:fmt::fmt>)
  endif()
endwhile()

install(TARGETS ${_dcpmla_install_targets} EXPORT dcpmlaTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# Public headers of the parts this build has.
set(_dcpmla_header_excludes)
if(NOT TARGET dcpmla_cuda)
  list(APPEND _dcpmla_header_excludes PATTERN cuda_backend.h EXCLUDE PATTERN peer_comm.h EXCLUDE)
endif()
if(NOT TARGET dcpmla_nccl)
  list(APPEND _dcpmla_header_excludes PATTERN nccl_comm.h EXCLUDE)
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/dcpmla ${PROJECT_BINARY_DIR}/include/dcpmla
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h" ${_dcpmla_header_excludes})

if(TARGET dcpmla_tool)
  install(TARGETS dcpmla_tool RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

set(_dcpmla_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/dcpmla)
install(EXPORT dcpmlaTargets NAMESPACE dcpmla:: DESTINATION ${_dcpmla_cmake_dir})
if(TARGET dcpmla_cuda)
  set(DCPMLA_WITH_CUDA_BOOL TRUE)
else()
  set(DCPMLA_WITH_CUDA_BOOL FALSE)
endif()
if(TARGET dcpmla_nccl)
  set(DCPMLA_WITH_NCCL_BOOL TRUE)
else()
  set(DCPMLA_WITH_NCCL_BOOL FALSE)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/dcpmlaConfig.cmake.in
  ${PROJECT_BINARY_DIR}/dcpmlaConfig.cmake INSTALL_DESTINATION ${_dcpmla_cmake_dir})
# 0.x: a minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dcpmlaConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
set(_dcpmla_package_files ${PROJECT_BINARY_DIR}/dcpmlaConfig.cmake
    ${PROJECT_BINARY_DIR}/dcpmlaConfigVersion.cmake)
if(TARGET dcpmla_nccl)
  list(APPEND _dcpmla_package_files ${PROJECT_SOURCE_DIR}/cmake/FindNCCL.cmake)
endif()
install(FILES ${_dcpmla_package_files} DESTINATION ${_dcpmla_cmake_dir})
