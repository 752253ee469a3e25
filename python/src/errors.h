// dcpmla::Error as Python exceptions, keeping the library's message: ValueError for bad values,
// shapes and indices, TypeError for dtypes, RuntimeError for what this build or a backend cannot
// run. The exception carries the error's parts as attributes: argument, expected, actual, kind.
#pragma once

#include <nanobind/nanobind.h>

#include "dcpmla/error.h"
#include "error_mapping.h"

namespace dcpmla::python {

void register_errors(nanobind::module_& m);

}  // namespace dcpmla::python
