#include "nccl_check.h"

#include <cuda_runtime_api.h>

namespace dcpmla::nccl {

std::string failure_message(ncclResult_t result, ncclComm_t comm) {
  std::string message = ncclGetErrorString(result);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0' && message.find(last) == std::string::npos) {
    message += ": ";
    message += last;
  }
  return message;
}

void check_nccl(ncclResult_t result, const char* call, ncclComm_t comm) {
  if (result != ncclSuccess) {
    throw Error(ErrorCode::backend_failure, call, "ncclSuccess", failure_message(result, comm));
  }
}

void check_cuda(int cuda_result, const char* call) {
  const auto e = static_cast<cudaError_t>(cuda_result);
  if (e != cudaSuccess) {
    throw Error(ErrorCode::backend_failure, call, "cudaSuccess", cudaGetErrorString(e));
  }
}

}  // namespace dcpmla::nccl
