#include <fmt/format.h>

#include <cmath>

#include "dcpmla/backend.h"
#include "dcpmla/error.h"
#include "device_backends.h"
#include "error_translation.h"
#include "ops.h"
#include "schedule_registry.h"

namespace dcpmla::torch_ops {
namespace {

// What the library calls the ops' arguments.
const python::ArgumentNames kDecodeNames = {{"cache", "kv_cache"}, {"memory", "schedule"}};
const python::ArgumentNames kWriteNames = {
    {"cache", "kv_cache"}, {"latents", "latent"}, {"slots", "slot_mapping"}};
const python::ArgumentNames kMergeNames = {};

// The kernels read q, the cache, out and the workspace in 16-byte vectors.
constexpr std::size_t kVectorAlignment = 16;

// The cache view; k_scale scales an fp8 cache and must be 1 for any other.
KvCacheRef cache_ref(const Tensor& kv_cache, Place place, double k_scale) {
  const TensorRef t =
      tensor_arg(kv_cache, "kv_cache", {DType::f32, DType::bf16, DType::fp8_e4m3},
                 {-1, -1, kHeadDim}, "[num_blocks, block_size, 576]", place, kVectorAlignment);
  DCPMLA_REQUIRE(std::isfinite(float(k_scale)) && k_scale > 0, ErrorCode::invalid_argument,
                 "k_scale", "finite and > 0", fmt::format("{}", k_scale));
  DCPMLA_REQUIRE(
      t.dtype == DType::fp8_e4m3 || k_scale == 1.0, ErrorCode::invalid_argument, "k_scale",
      fmt::format("1 for a {} cache (it scales float8_e4m3fn caches only)", to_string(t.dtype)),
      fmt::format("{}", k_scale));
  DCPMLA_REQUIRE(t.shape[1] <= std::numeric_limits<int>::max(), ErrorCode::invalid_argument,
                 "kv_cache", "a block size below 2^31", std::to_string(t.shape[1]));
  const KvCacheRef ref{t.data, t.dtype, t.shape[0], int(t.shape[1]), float(k_scale)};
  validate_cache(ref, "kv_cache");
  return ref;
}

}  // namespace

void mla_decode(Tensor q, Tensor kv_cache, Tensor block_table, Tensor schedule, Tensor workspace,
                Tensor out, Tensor lse, double softmax_scale, double q_scale, double k_scale) {
  translated(kDecodeNames, [&] {
    const Place place = place_of(q, "q");
    DecodeArgs a;
    a.q = tensor_arg(q, "q", {DType::f32, DType::bf16}, {-1, -1, kHeadDim},
                     "[num_tokens, heads, 576]", place, kVectorAlignment);
    const std::int64_t rows = a.q.shape[0], H = a.q.shape[1];
    a.cache = cache_ref(kv_cache, place, k_scale);
    a.block_table = tensor_arg(block_table, "block_table", {DType::i32}, {-1, -1},
                               "[num_reqs, max_blocks]", place);
    const TensorRef memory = bytes_arg(schedule, "schedule", place, 16);
    a.workspace = bytes_arg(workspace, "workspace", place, kVectorAlignment);
    a.out = tensor_arg(out, "out", {DType::f32, a.q.dtype}, {rows, H, kLatentDim},
                       "[num_tokens, heads, 512]", place, kVectorAlignment);
    a.lse = tensor_arg(lse, "lse", {DType::f32}, {rows, H}, "[num_tokens, heads]", place);
    for (const auto& [t, name] : {std::pair{a.out, "out"}, std::pair{a.lse, "lse"}}) {
      require_disjoint(a.q, "q", t, name);
      require_disjoint(a.cache.tensor(), "kv_cache", t, name);
      require_disjoint(memory, "schedule", t, name);
      require_disjoint(a.workspace, "workspace", t, name);
    }
    require_disjoint(a.out, "out", a.lse, "lse");
    require_disjoint(memory, "schedule", a.workspace, "workspace");
    a.schedule = &registered_schedule(place, memory, "schedule");
    a.softmax_scale = float(softmax_scale);
    a.q_scale = float(q_scale);
    const BackendCall call(place);
    call.backend().decode(a, call.stream());
  });
}

void merge_states(Tensor v, Tensor s, Tensor v_out, Tensor s_out, bool lse_base_e) {
  translated(kMergeNames, [&] {
    const Place place = place_of(v, "v");
    MergeStatesArgs a;
    a.v = tensor_arg(v, "v", {DType::f32, DType::bf16}, {-1, -1, -1, -1},
                     "[num_states, num_tokens, heads, dim]", place);
    const auto S = a.v.shape[0], N = a.v.shape[1], H = a.v.shape[2], D = a.v.shape[3];
    a.s = tensor_arg(s, "s", {DType::f32}, {S, N, H}, "[num_states, num_tokens, heads]", place);
    a.v_out = tensor_arg(v_out, "v_out", {DType::f32, a.v.dtype}, {N, H, D},
                         "[num_tokens, heads, dim]", place);
    a.s_out = tensor_arg(s_out, "s_out", {DType::f32}, {N, H}, "[num_tokens, heads]", place);
    for (const auto& [t, name] : {std::pair{a.v_out, "v_out"}, std::pair{a.s_out, "s_out"}}) {
      require_disjoint(a.v, "v", t, name);
      require_disjoint(a.s, "s", t, name);
    }
    require_disjoint(a.v_out, "v_out", a.s_out, "s_out");
    a.lse_base_e = lse_base_e;
    validate(a);
    const BackendCall call(place);
    call.backend().merge_states(a, call.stream());
  });
}

void write_kv(Tensor latent, Tensor slot_mapping, Tensor kv_cache, double k_scale) {
  translated(kWriteNames, [&] {
    const Place place = place_of(kv_cache, "kv_cache");
    KvWriteArgs a;
    a.cache = cache_ref(kv_cache, place, k_scale);
    a.latents = tensor_arg(latent, "latent", {DType::f32, DType::bf16}, {-1, kHeadDim},
                           "[num_tokens, 576]", place);
    a.slots = tensor_arg(slot_mapping, "slot_mapping", {DType::i64}, {a.latents.shape[0]},
                         "[num_tokens]", place);
    require_disjoint(a.latents, "latent", a.cache.tensor(), "kv_cache");
    require_disjoint(a.slots, "slot_mapping", a.cache.tensor(), "kv_cache");
    validate(a);
    const BackendCall call(place);
    call.backend().write_kv(a, call.stream());
  });
}

}  // namespace dcpmla::torch_ops
