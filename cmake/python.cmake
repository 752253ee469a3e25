# Decides whether the Python module dcpmla._core (python/) is built, and finds what it needs:
# a Python interpreter with its development files (Python::Module) and nanobind.
#
# DCPMLA_PYTHON = AUTO builds it in a top-level build without sanitizers when both are found
# (scripts/install-deps.sh installs them); ON requires them (the wheel build sets it); OFF never
# builds it. Sanitizer builds keep it off: an ASan-instrumented extension only loads into a Python
# that preloads the ASan runtime.
#
# Result: DCPMLA_WITH_PYTHON, Python_EXECUTABLE and the nanobind CMake functions.

set(DCPMLA_WITH_PYTHON OFF)
# The `python3` first on PATH, the one scripts/install-deps.sh installs the packages into (not a
# python3.N found earlier in the search).
if(NOT DEFINED Python_FIND_UNVERSIONED_NAMES)
  set(Python_FIND_UNVERSIONED_NAMES FIRST)
endif()

# Finds nanobind through the interpreter (pip installs it as a Python package). A macro, so that
# what nanobind's package file defines stays in this scope.
macro(_dcpmla_find_nanobind mode)
  if(NOT nanobind_ROOT AND NOT nanobind_DIR)
    execute_process(COMMAND "${Python_EXECUTABLE}" -m nanobind --cmake_dir
      OUTPUT_VARIABLE _dcpmla_nanobind_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
      RESULT_VARIABLE _dcpmla_nanobind_rc)
    if(_dcpmla_nanobind_rc EQUAL 0 AND EXISTS "${_dcpmla_nanobind_dir}")
      set(nanobind_ROOT "${_dcpmla_nanobind_dir}")
    endif()
  endif()
  find_package(nanobind CONFIG ${mode})
endmacro()

if(DCPMLA_PYTHON STREQUAL "AUTO")
  if(PROJECT_IS_TOP_LEVEL AND NOT DCPMLA_SANITIZE)
    find_package(Python 3.9 COMPONENTS Interpreter Development.Module)
    if(Python_FOUND)
      _dcpmla_find_nanobind(QUIET)
      set(DCPMLA_WITH_PYTHON ${nanobind_FOUND})
    endif()
  endif()
elseif(DCPMLA_PYTHON)
  find_package(Python 3.9 COMPONENTS Interpreter Development.Module REQUIRED)
  _dcpmla_find_nanobind(REQUIRED)
  set(DCPMLA_WITH_PYTHON ON)
endif()

if(DCPMLA_WITH_PYTHON)
  message(STATUS "dcpmla: Python module enabled (${Python_EXECUTABLE}, nanobind ${nanobind_VERSION})")
else()
  message(STATUS "dcpmla: Python module disabled (not top level, sanitizers on, Python or nanobind "
    "not found, or DCPMLA_PYTHON=OFF)")
endif()
