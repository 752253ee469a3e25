#include "errors.h"

#include <nanobind/stl/string.h>

#include <cstring>
#include <exception>
#include <string>

namespace nb = nanobind;

namespace dcpmla::python {
namespace {

PyObject* python_type(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument:
    case ErrorCode::shape_mismatch:
    case ErrorCode::out_of_range:
    case ErrorCode::inconsistent:
      return PyExc_ValueError;
    case ErrorCode::dtype_mismatch:
      return PyExc_TypeError;
    case ErrorCode::unsupported:
    case ErrorCode::backend_failure:
      return PyExc_RuntimeError;
  }
  return PyExc_RuntimeError;
}

void raise(const Error& e) {
  PyObject* type = python_type(e.code());
  nb::object exc = nb::borrow(type)(e.what());
  exc.attr("argument") = e.argument();
  exc.attr("expected") = e.expected();
  exc.attr("actual") = e.actual();
  exc.attr("kind") = to_string(e.code());
  PyErr_SetObject(type, exc.ptr());
}

bool follows_name(const std::string& argument, const char* name) {
  const std::size_t n = std::strlen(name);
  if (argument.compare(0, n, name) != 0) return false;
  return argument.size() == n || argument[n] == '[' || argument[n] == '.' || argument[n] == ' ';
}

}  // namespace

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

void register_errors(nb::module_& m) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      raise(e);
    }
  });
}

}  // namespace dcpmla::python
