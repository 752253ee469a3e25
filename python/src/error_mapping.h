// How library Errors reach Python, shared by the Python modules (no Python headers): the Python
// exception type of each error code, and the argument renamed to what the Python API calls it (the
// library calls "total_len" what Python calls "seq_lens").
#pragma once

#include <initializer_list>
#include <utility>

#include "dcpmla/error.h"

namespace dcpmla::python {

// ValueError for bad values, shapes and indices, TypeError for dtypes, RuntimeError for what this
// build or a backend cannot run.
enum class PythonError { value_error, type_error, runtime_error };
PythonError python_error(ErrorCode code);

// (library name, Python name) pairs.
using ArgumentNames = std::initializer_list<std::pair<const char*, const char*>>;

// The same error naming the Python argument: an argument equal to a library name, or starting with
// it followed by '[', '.' or ' ', gets the Python name in its place (the longest match wins).
Error with_python_name(const Error& e, ArgumentNames names);

// Runs f, renaming the argument of any Error it throws.
template <class F>
auto with_python_names(ArgumentNames names, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    throw with_python_name(e, names);
  }
}

}  // namespace dcpmla::python
