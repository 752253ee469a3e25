// The torch ops of dcpmla (namespace torch.ops.dcpmla), registered through the libtorch stable
// ABI so that one build loads into every torch from 2.11 on. Every op runs on the CPU backend for
// CPU tensors and on the CUDA backend (builds with it) for CUDA tensors; the Python package
// registers their fake implementations (dcpmla/_torch_library.py) for torch.compile.
#include <torch/csrc/stable/library.h>

#include "error_translation.h"
#include "ops.h"

using namespace dcpmla::torch_ops;

STABLE_TORCH_LIBRARY(dcpmla, m) {
  m.def(
      "mla_decode_(Tensor q, Tensor kv_cache, Tensor block_table, Tensor schedule, "
      "Tensor(a!) workspace, Tensor(b!) out, Tensor(c!) lse, float softmax_scale, "
      "float q_scale=1.0, float k_scale=1.0) -> ()");
  m.def(
      "merge_states_(Tensor v, Tensor s, Tensor(a!) v_out, Tensor(b!) s_out, "
      "bool lse_base_e=True) -> ()");
  m.def(
      "write_kv_(Tensor latent, Tensor slot_mapping, Tensor(a!) kv_cache, float k_scale=1.0) "
      "-> ()");
  m.def("schedule_sizes(int device, int[] config, int[] limits) -> int[]");
  m.def(
      "plan_host_(Tensor(a!) schedule, Tensor query_start_loc, Tensor seq_lens, int num_tokens, "
      "str[] mask, int[] config, int[] limits) -> int[]");
  m.def(
      "plan_device_(Tensor(a!) schedule, Tensor query_start_loc, Tensor seq_lens, "
      "int num_tokens, int[] config, int[] limits) -> ()");
  m.def("schedule_status(Tensor schedule) -> (int, int, str)");
  m.def("schedule_release_(Tensor schedule) -> ()");
  m.def("has_cuda_backend() -> bool");
  m.def("last_error() -> (str, str, str, str, str, str)");
}

// The same functions for both devices: each checks that its tensors share one device.
#define DCPMLA_TORCH_IMPLS(m)                             \
  m.impl("mla_decode_", TORCH_BOX(&mla_decode));          \
  m.impl("merge_states_", TORCH_BOX(&merge_states));      \
  m.impl("write_kv_", TORCH_BOX(&write_kv));              \
  m.impl("plan_host_", TORCH_BOX(&plan_host));            \
  m.impl("plan_device_", TORCH_BOX(&plan_device));        \
  m.impl("schedule_status", TORCH_BOX(&schedule_status)); \
  m.impl("schedule_release_", TORCH_BOX(&schedule_release))

STABLE_TORCH_LIBRARY_IMPL(dcpmla, CPU, m) {
  DCPMLA_TORCH_IMPLS(m);
}

STABLE_TORCH_LIBRARY_IMPL(dcpmla, CUDA, m) {
  DCPMLA_TORCH_IMPLS(m);
}

STABLE_TORCH_LIBRARY_IMPL(dcpmla, CompositeExplicitAutograd, m) {
  m.impl("schedule_sizes", TORCH_BOX(&schedule_sizes));
  m.impl("has_cuda_backend", TORCH_BOX(&has_cuda_backend));
  m.impl("last_error", TORCH_BOX(&last_error));
}
