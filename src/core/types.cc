#include "dcpmla/types.h"

#include <string>

#include "dcpmla/error.h"

namespace dcpmla {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::fp8_e4m3:
      return 1;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
  }
  return 0;
}

const char* to_string(DType t) {
  switch (t) {
    case DType::f32:
      return "fp32";
    case DType::bf16:
      return "bf16";
    case DType::fp8_e4m3:
      return "fp8";
    case DType::i32:
      return "int32";
    case DType::i64:
      return "int64";
  }
  return "unknown";
}

DType parse_dtype(std::string_view text, const std::string& argument) {
  if (text == "fp32" || text == "f32" || text == "float32") return DType::f32;
  if (text == "bf16" || text == "bfloat16") return DType::bf16;
  if (text == "fp8" || text == "fp8_e4m3" || text == "e4m3") return DType::fp8_e4m3;
  throw Error(ErrorCode::invalid_argument, argument, "one of fp32, bf16, fp8",
              "'" + std::string(text) + "'");
}

const char* to_string(Mask m) {
  return m == Mask::causal ? "causal" : "full";
}

Mask parse_mask(std::string_view text, const std::string& argument) {
  if (text == "causal") return Mask::causal;
  if (text == "full") return Mask::full;
  throw Error(ErrorCode::invalid_argument, argument, "causal or full",
              "'" + std::string(text) + "'");
}

}  // namespace dcpmla
