// dcpmla dtypes as NCCL dtypes, and NCCL failures as dcpmla::Error. Host-only.
#include "nccl/nccl_types.h"

#include <gtest/gtest.h>

#include "dcpmla/error.h"
#include "nccl/nccl_check.h"

namespace dcpmla::nccl {
namespace {

TEST(NcclTypes, EveryDTypeMapsToAnNcclTypeOfTheSameSize) {
  EXPECT_EQ(nccl_dtype(DType::f32), ncclFloat32);
  EXPECT_EQ(nccl_dtype(DType::bf16), ncclBfloat16);
  EXPECT_EQ(nccl_dtype(DType::fp8_e4m3), ncclUint8);  // moved as bytes, never added
  EXPECT_EQ(nccl_dtype(DType::i32), ncclInt32);
  EXPECT_EQ(nccl_dtype(DType::i64), ncclInt64);
}

TEST(NcclTypes, AValueOutsideDTypeIsAnError) {
  try {
    nccl_dtype(static_cast<DType>(77));
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_EQ(e.argument(), "dtype");
    EXPECT_EQ(e.actual(), "DType value 77");
  }
}

TEST(NcclCheck, FailuresNameTheCallAndCarryNcclsMessage) {
  EXPECT_NO_THROW(check_nccl(ncclSuccess, "ncclAllGather"));
  try {
    check_nccl(ncclInvalidArgument, "ncclAllGather");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::backend_failure);
    EXPECT_EQ(e.argument(), "ncclAllGather");
    EXPECT_EQ(e.expected(), "ncclSuccess");
    EXPECT_NE(e.actual().find(ncclGetErrorString(ncclInvalidArgument)), std::string::npos)
        << e.actual();
  }
}

TEST(NcclCheck, CudaFailuresNameTheCall) {
  EXPECT_NO_THROW(check_cuda(0, "cudaSetDevice"));
  try {
    check_cuda(1, "cudaSetDevice(7)");  // cudaErrorInvalidValue
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::backend_failure);
    EXPECT_EQ(e.argument(), "cudaSetDevice(7)");
    EXPECT_EQ(e.expected(), "cudaSuccess");
    EXPECT_FALSE(e.actual().empty());
  }
}

}  // namespace
}  // namespace dcpmla::nccl
