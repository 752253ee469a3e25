# Finds NCCL: the header and the library of one installation.
#
# Searched in order: NCCL_ROOT / NCCL_HOME (CMake or environment variables), the system prefixes
# (a distribution's libnccl-dev puts nccl.h in /usr/include), then the CUDA toolkit's directories
# (some images install NCCL into /usr/local/cuda). The library is looked up first next to the
# header that was found, so a header of one installation is never paired with the library of
# another.
#
# Result: NCCL_FOUND, NCCL_VERSION, NCCL_INCLUDE_DIR, NCCL_LIBRARY and the target NCCL::nccl.

set(_nccl_hints)
foreach(_root IN ITEMS "${NCCL_ROOT}" "$ENV{NCCL_ROOT}" "${NCCL_HOME}" "$ENV{NCCL_HOME}")
  if(_root)
    list(APPEND _nccl_hints "${_root}")
  endif()
endforeach()
set(_nccl_toolkit_dirs)
if(CUDAToolkit_INCLUDE_DIRS)
  list(APPEND _nccl_toolkit_dirs ${CUDAToolkit_INCLUDE_DIRS})
endif()
if(CUDAToolkit_LIBRARY_ROOT)
  list(APPEND _nccl_toolkit_dirs "${CUDAToolkit_LIBRARY_ROOT}/include")
endif()
list(APPEND _nccl_toolkit_dirs /usr/local/cuda/include)

find_path(NCCL_INCLUDE_DIR nccl.h
  HINTS ${_nccl_hints}
  PATH_SUFFIXES include
  PATHS ${_nccl_toolkit_dirs})

if(NCCL_INCLUDE_DIR AND NOT NCCL_LIBRARY)
  get_filename_component(_nccl_prefix "${NCCL_INCLUDE_DIR}" DIRECTORY)
  find_library(NCCL_LIBRARY NAMES nccl
    PATHS "${_nccl_prefix}"
    PATH_SUFFIXES lib64 lib lib/${CMAKE_LIBRARY_ARCHITECTURE} lib/x86_64-linux-gnu
    NO_DEFAULT_PATH)
endif()
find_library(NCCL_LIBRARY NAMES nccl
  HINTS ${_nccl_hints}
  PATH_SUFFIXES lib64 lib
  PATHS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)

if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_version_lines
    REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX REPLACE ".*#define NCCL_${_part} +([0-9]+).*" "\\1" _nccl_${_part}
      "${_nccl_version_lines}")
  endforeach()
  set(NCCL_VERSION "${_nccl_MAJOR}.${_nccl_MINOR}.${_nccl_PATCH}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL
  REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
  VERSION_VAR NCCL_VERSION)

if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES
    IMPORTED_LOCATION "${NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
