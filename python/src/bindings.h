// The parts of the dcpmla._core module, each registered by the file that implements it.
#pragma once

#include <nanobind/nanobind.h>

namespace dcpmla::python {

void register_sharding(nanobind::module_& m);   // sharding_bindings.cc
void register_reference(nanobind::module_& m);  // reference_binding.cc
void register_decode(nanobind::module_& m);     // decode_bindings.cc

}  // namespace dcpmla::python
