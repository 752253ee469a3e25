// dcpmla._core: the library's CPU path for Python (numpy or any DLPack array, zero-copy).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "arrays.h"
#include "bindings.h"
#include "dcpmla/types.h"
#include "dcpmla/version.h"
#include "errors.h"

NB_MODULE(_core, m) {
  m.doc() = "dcpmla's C++ library: MLA decode under decode context parallelism on the CPU";
  m.attr("__version__") = dcpmla::kVersionString;
  m.attr("LATENT_DIM") = dcpmla::kLatentDim;
  m.attr("ROPE_DIM") = dcpmla::kRopeDim;
  m.attr("HEAD_DIM") = dcpmla::kHeadDim;
  dcpmla::python::register_errors(m);
  m.def("array_signature", &dcpmla::python::array_signature, nanobind::arg("array"),
        nanobind::arg("name"));
  dcpmla::python::register_sharding(m);
  dcpmla::python::register_reference(m);
  dcpmla::python::register_decode(m);
}
