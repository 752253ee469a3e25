#include "errors.h"

#include <nanobind/stl/string.h>

#include <exception>
#include <string>

namespace nb = nanobind;

namespace dcpmla::python {
namespace {

PyObject* python_type(ErrorCode code) {
  switch (python_error(code)) {
    case PythonError::value_error:
      return PyExc_ValueError;
    case PythonError::type_error:
      return PyExc_TypeError;
    case PythonError::runtime_error:
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

}  // namespace

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
