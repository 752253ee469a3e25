// Before nccl.h (through nccl_types.h): older NCCL releases declare ncclBfloat16 only when
// cuda_bf16.h has been included first.
#include <cuda_bf16.h>

#include "nccl_types.h"

#include "dcpmla/error.h"

namespace dcpmla::nccl {

ncclDataType_t nccl_dtype(DType t) {
  switch (t) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::fp8_e4m3:
      return ncclUint8;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
  }
  throw Error(ErrorCode::invalid_argument, "dtype", "f32, bf16, fp8_e4m3, i32 or i64",
              "DType value " + std::to_string(int(t)));
}

}  // namespace dcpmla::nccl
