#include "error_mapping.h"

#include <cstring>
#include <string>

namespace dcpmla::python {
namespace {

bool follows_name(const std::string& argument, const char* name) {
  const std::size_t n = std::strlen(name);
  if (argument.compare(0, n, name) != 0) return false;
  return argument.size() == n || argument[n] == '[' || argument[n] == '.' || argument[n] == ' ';
}

}  // namespace

PythonError python_error(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument:
    case ErrorCode::shape_mismatch:
    case ErrorCode::out_of_range:
    case ErrorCode::inconsistent:
      return PythonError::value_error;
    case ErrorCode::dtype_mismatch:
      return PythonError::type_error;
    case ErrorCode::unsupported:
    case ErrorCode::backend_failure:
      return PythonError::runtime_error;
  }
  return PythonError::runtime_error;
}

Error with_python_name(const Error& e, ArgumentNames names) {
  const char* library = nullptr;
  const char* python = nullptr;
  for (const auto& [from, to] : names) {
    if (follows_name(e.argument(), from) &&
        (!library || std::strlen(from) > std::strlen(library))) {
      library = from;
      python = to;
    }
  }
  if (!library) return e;
  return Error(e.code(), python + e.argument().substr(std::strlen(library)), e.expected(),
               e.actual());
}

}  // namespace dcpmla::python
