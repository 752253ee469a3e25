# Decides whether the torch extension dcpmla._torch_ops (python/torch_ops) is built, and finds the
# torch it compiles against: the libtorch stable ABI headers of the torch importable by the
# Python module's interpreter (>= 2.11) and libtorch_cpu, which exports the stable ABI's
# functions. One build serves every later torch (the ABI is versioned by TORCH_TARGET_VERSION).
#
# DCPMLA_TORCH = AUTO builds it with the Python module when `import torch` works; ON requires it;
# OFF never builds it.
#
# Result: DCPMLA_WITH_TORCH, DCPMLA_TORCH_INCLUDE_DIR, DCPMLA_TORCH_LIBRARY.

set(DCPMLA_WITH_TORCH OFF)
set(_dcpmla_torch_why "DCPMLA_TORCH=OFF")
if(DCPMLA_TORCH AND NOT DCPMLA_WITH_PYTHON)
  set(_dcpmla_torch_why "the Python module is not built")
elseif(DCPMLA_TORCH)
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c
      "import os, torch; print(torch.__version__.split('+')[0]); print(os.path.dirname(torch.__file__))"
    OUTPUT_VARIABLE _dcpmla_torch_out ERROR_VARIABLE _dcpmla_torch_err
    OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _dcpmla_torch_rc)
  if(_dcpmla_torch_rc EQUAL 0)
    string(REPLACE "\n" ";" _dcpmla_torch_out "${_dcpmla_torch_out}")
    list(GET _dcpmla_torch_out 0 DCPMLA_TORCH_VERSION)
    list(GET _dcpmla_torch_out 1 _dcpmla_torch_dir)
    find_library(DCPMLA_TORCH_LIBRARY torch_cpu PATHS "${_dcpmla_torch_dir}/lib" NO_DEFAULT_PATH)
    set(DCPMLA_TORCH_INCLUDE_DIR "${_dcpmla_torch_dir}/include")
    if(DCPMLA_TORCH_VERSION VERSION_LESS 2.11)
      set(_dcpmla_torch_why "torch ${DCPMLA_TORCH_VERSION} is older than 2.11")
    elseif(NOT DCPMLA_TORCH_LIBRARY OR NOT EXISTS "${DCPMLA_TORCH_INCLUDE_DIR}/torch/csrc/stable/library.h")
      set(_dcpmla_torch_why "torch ${DCPMLA_TORCH_VERSION} has no libtorch_cpu or stable ABI headers")
    else()
      set(DCPMLA_WITH_TORCH ON)
    endif()
  else()
    set(_dcpmla_torch_why "`import torch` failed")
  endif()
endif()

if(DCPMLA_WITH_TORCH)
  message(STATUS "dcpmla: torch extension enabled (torch ${DCPMLA_TORCH_VERSION}, "
    "${DCPMLA_TORCH_INCLUDE_DIR})")
elseif(DCPMLA_TORCH STREQUAL "ON")
  message(FATAL_ERROR "dcpmla: DCPMLA_TORCH=ON but ${_dcpmla_torch_why}")
else()
  message(STATUS "dcpmla: torch extension disabled (${_dcpmla_torch_why})")
endif()
