// dcpmla element types as NCCL element types.
#pragma once

#include <nccl.h>

#include "dcpmla/types.h"

namespace dcpmla::nccl {

// NCCL's element type for t. fp8 e4m3 travels as bytes (ncclUint8): the collectives of a DCP step
// only move it, never add it, so no NCCL fp8 support is needed. Throws Error(invalid_argument)
// for a value outside DType.
ncclDataType_t nccl_dtype(DType t);

}  // namespace dcpmla::nccl
