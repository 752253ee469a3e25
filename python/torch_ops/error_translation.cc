#include "error_translation.h"

#include <stdexcept>

namespace dcpmla::torch_ops {
namespace {

struct LastError {
  std::string type, kind, argument, expected, actual, message;
};

LastError& last() {
  thread_local LastError error;
  return error;
}

const char* type_name(python::PythonError t) {
  switch (t) {
    case python::PythonError::value_error:
      return "ValueError";
    case python::PythonError::type_error:
      return "TypeError";
    case python::PythonError::runtime_error:
      return "RuntimeError";
  }
  return "RuntimeError";
}

}  // namespace

void throw_for_torch(const Error& error, python::ArgumentNames names) {
  const Error e = python::with_python_name(error, names);
  const python::PythonError t = python::python_error(e.code());
  last() = {type_name(t), to_string(e.code()), e.argument(), e.expected(), e.actual(), e.what()};
  if (t == python::PythonError::runtime_error) throw std::runtime_error(e.what());
  throw std::invalid_argument(e.what());
}

std::tuple<std::string, std::string, std::string, std::string, std::string, std::string>
last_error() {
  const LastError& e = last();
  return {e.type, e.kind, e.argument, e.expected, e.actual, e.message};
}

}  // namespace dcpmla::torch_ops
