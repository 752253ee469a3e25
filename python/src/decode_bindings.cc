// Every use of the planner and the decode entry points (Plan, DeviceModel, DecodeArgs, make_plan,
// Backend::decode, dcp_step) in the Python module, so that a change of their shape is adapted
// here alone: dcpmla.cpu.mla_decode (one rank's decode), dcpmla.cpu.dcp_step_simulated (W ranks
// as threads, combined) and the read-only Plan view.
#include <fmt/format.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "arrays.h"
#include "batch_args.h"
#include "bindings.h"
#include "dcpmla/backend.h"
#include "dcpmla/comm.h"
#include "dcpmla/cpu_backend.h"
#include "dcpmla/dcp.h"
#include "dcpmla/error.h"
#include "dcpmla/plan.h"
#include "dcpmla/testing/run_ranks.h"
#include "errors.h"
#include "shared_backend.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace dcpmla::python {
namespace {

// What the library calls the Python arguments of mla_decode and make_plan.
const ArgumentNames kRankNames = {{"total_len", "seq_lens"},        {"max_blocks", "block_table"},
                                  {"world", "dcp_world_size"},      {"rank", "dcp_rank"},
                                  {"interleave", "dcp_interleave"}, {"num_heads", "q"},
                                  {"block_size", "kv_cache"},       {"num_blocks", "kv_cache"}};
// ... and those of dcp_step_simulated.
const ArgumentNames kStepNames = {{"total_len", "seq_lens"},
                                  {"max_blocks", "block_table"},
                                  {"interleave", "dcp_interleave"},
                                  {"num_heads", "q"},
                                  {"q_local", "q"}};

// Split-KV work items for a CPU backend of `threads` threads.
// The model the CPU backend plans for with `threads` threads (Backend::device_model()).
DeviceModel cpu_model(int threads) {
  return {threads, 0, 256};
}

// The block table is on the host here: every id a rank reads is checked before any rank runs.
Plan checked_plan(const Batch& batch, const PlanConfig& config) {
  validate_block_ids(batch, config);
  return make_plan(batch, config);
}

Array query_arg(nb::handle q, std::int64_t rows) {
  return array_arg(q, "q", {DType::f32, DType::bf16}, {rows, -1, kHeadDim},
                   fmt::format("[num_tokens, heads, 576]; num_tokens = {}", rows));
}

Array cache_arg(nb::handle cache, const std::string& name) {
  return array_arg(cache, name, {DType::f32, DType::bf16, DType::fp8_e4m3}, {-1, -1, kHeadDim},
                   "[num_blocks, block_size, 576]");
}

// The cache view; k_scale scales an fp8 cache and must be 1 for any other.
KvCacheRef cache_ref(const Array& cache, double k_scale, const std::string& name) {
  const DType t = cache.tensor.dtype;
  DCPMLA_REQUIRE(std::isfinite(float(k_scale)) && k_scale > 0, ErrorCode::invalid_argument,
                 "k_scale", "finite and > 0", fmt::format("{}", k_scale));
  DCPMLA_REQUIRE(
      t == DType::fp8_e4m3 || k_scale == 1.0, ErrorCode::invalid_argument, "k_scale",
      fmt::format("1 for a {} cache (it scales float8_e4m3fn caches only)", numpy_name(t)),
      fmt::format("{}", k_scale));
  const KvCacheRef ref{cache.tensor.data, t, cache.tensor.shape[0], int(cache.tensor.shape[1]),
                       float(k_scale)};
  validate_cache(ref, name);
  return ref;
}

// out [rows, H, 512] (float32 or q's dtype) and lse [rows, H] float32, neither overlapping the
// other nor an input (q and the caches, named cache_names).
struct Outputs {
  Array out, lse;
};
Outputs outputs_arg(nb::handle out, nb::handle lse, const Array& q,
                    const std::vector<const Array*>& caches,
                    const std::vector<std::string>& cache_names) {
  const std::int64_t rows = q.tensor.shape[0], H = q.tensor.shape[1];
  Outputs o{array_arg(out, "out", {DType::f32, q.tensor.dtype}, {rows, H, kLatentDim},
                      "[num_tokens, heads, 512]", Access::write),
            array_arg(lse, "lse", {DType::f32}, {rows, H}, "[num_tokens, heads]", Access::write)};
  require_disjoint(o.out, "out", o.lse, "lse");
  require_disjoint(q, "q", o.out, "out");
  require_disjoint(q, "q", o.lse, "lse");
  for (std::size_t r = 0; r < caches.size(); ++r) {
    require_disjoint(*caches[r], cache_names[r], o.out, "out");
    require_disjoint(*caches[r], cache_names[r], o.lse, "lse");
  }
  return o;
}

TensorRef block_table_of(const Batch& batch) {
  return TensorRef(batch.block_table.data(), DType::i32, {batch.num_requests(), batch.max_blocks});
}

// ------------------------------------------------------------------ mla_decode

// One rank's decode: with W > 1 the rank-local partial result (O, natural-log LSE) over the
// positions this rank owns, as the DCP combine expects it.
void mla_decode(nb::handle q, nb::handle kv_cache, nb::handle block_table,
                nb::handle query_start_loc, nb::handle seq_lens, double softmax_scale,
                std::optional<std::int64_t> num_tokens, int dcp_world_size, int dcp_rank,
                int dcp_interleave, nb::handle mask, double k_scale, nb::handle out,
                nb::handle lse) {
  const Batch batch = read_batch({query_start_loc, seq_lens, num_tokens, mask, block_table});
  const Array query = query_arg(q, batch.rows());
  const Array cache = cache_arg(kv_cache, "kv_cache");
  const Outputs outputs = outputs_arg(out, lse, query, {&cache}, {"kv_cache"});
  const KvCacheRef cache_view = cache_ref(cache, k_scale, "kv_cache");
  const PlanConfig config{Sharding{dcp_world_size, dcp_rank, dcp_interleave},
                          int(query.tensor.shape[1]),
                          cache_view.block_size,
                          cache_view.num_blocks,
                          cpu_model(hardware_threads()),
                          0};
  const Plan plan = with_python_names(kRankNames, [&] { return checked_plan(batch, config); });

  DecodeArgs args;
  args.plan = &plan;
  args.q = query.tensor;
  args.cache = cache_view;
  args.block_table = block_table_of(batch);
  args.out = outputs.out.tensor;
  args.lse = outputs.lse.tensor;
  args.softmax_scale = float(softmax_scale);
  nb::gil_scoped_release released;
  SharedCpuBackend backend;
  const DeviceBuffer workspace(*backend, decode_workspace_bytes(plan));
  args.workspace =
      TensorRef(workspace.data(), DType::fp8_e4m3, {std::int64_t(workspace.bytes())});  // bytes
  with_python_names(kRankNames, [&] { validate(args); });
  backend->decode(args, nullptr);
}

// ------------------------------------------------------------------ dcp_step_simulated

// Rank r's buffers: its heads of the query, its combined output heads and the step workspace.
struct RankState {
  std::unique_ptr<Backend> backend;
  DeviceBuffer q, out, lse;
  std::unique_ptr<DcpWorkspace> workspace;
};

// Copies heads [first, first + count) of every row of src [rows, heads, width] (elements of
// `element` bytes) to dst [rows, count, width], or back when `to_src` is set.
void copy_heads(std::uint8_t* src, std::uint8_t* dst, std::int64_t rows, std::int64_t heads,
                std::int64_t first, std::int64_t count, std::int64_t width, std::size_t element,
                bool to_src) {
  const std::size_t run = std::size_t(count * width) * element;
  for (std::int64_t i = 0; i < rows; ++i) {
    std::uint8_t* whole = src + std::size_t((i * heads + first) * width) * element;
    std::uint8_t* part = dst + std::size_t(i) * run;
    to_src ? std::memcpy(whole, part, run) : std::memcpy(part, whole, run);
  }
}

// W ranks as threads of this process, each with its own CPU backend and cache, running
// dcp_step (query all-gather, local decode, combine) over in-process collectives.
void dcp_step_simulated(nb::handle q, nb::handle kv_caches, nb::handle block_table,
                        nb::handle query_start_loc, nb::handle seq_lens, double softmax_scale,
                        std::optional<std::int64_t> num_tokens, int world, int dcp_interleave,
                        nb::handle mask, double k_scale, const std::string& combine, nb::handle out,
                        nb::handle lse) {
  const Combine how = parse_combine(combine, "combine");
  DCPMLA_REQUIRE(world >= 1, ErrorCode::invalid_argument, "world", ">= 1", std::to_string(world));
  const Batch batch = read_batch({query_start_loc, seq_lens, num_tokens, mask, block_table});
  const std::int64_t rows = batch.rows();
  const Array query = query_arg(q, rows);
  const std::int64_t H = query.tensor.shape[1], Hl = H / world;
  DCPMLA_REQUIRE(
      H % world == 0, ErrorCode::shape_mismatch, "q",
      fmt::format("a head count divisible by world {} (rank r owns heads [r*H/W, (r+1)*H/W))",
                  world),
      fmt::format("{} heads", H));

  DCPMLA_REQUIRE(nb::isinstance<nb::sequence>(kv_caches) && !nb::isinstance<nb::str>(kv_caches),
                 ErrorCode::dtype_mismatch, "kv_caches", "a sequence of arrays, one cache per rank",
                 python_type_name(kv_caches));
  const std::size_t num_caches = nb::len(kv_caches);
  DCPMLA_REQUIRE(num_caches == std::size_t(world), ErrorCode::shape_mismatch, "kv_caches",
                 fmt::format("{} caches (one per rank of world {})", world, world),
                 fmt::format("{} caches", num_caches));
  std::vector<Array> caches;
  std::vector<KvCacheRef> cache_views;
  for (int r = 0; r < world; ++r) {
    const std::string name = fmt::format("kv_caches[{}]", r);
    caches.push_back(cache_arg(nb::borrow<nb::sequence>(kv_caches)[r], name));
    cache_views.push_back(cache_ref(caches.back(), k_scale, name));
    const KvCacheRef& first = cache_views.front();
    DCPMLA_REQUIRE(cache_views.back().dtype == first.dtype, ErrorCode::dtype_mismatch, name,
                   fmt::format("dtype {} (as kv_caches[0])", numpy_name(first.dtype)),
                   numpy_name(cache_views.back().dtype));
    DCPMLA_REQUIRE(cache_views.back().block_size == first.block_size, ErrorCode::shape_mismatch,
                   name, fmt::format("block size {} (as kv_caches[0])", first.block_size),
                   std::to_string(cache_views.back().block_size));
  }
  std::vector<const Array*> cache_arrays;
  std::vector<std::string> cache_names;
  for (int r = 0; r < world; ++r) {
    cache_arrays.push_back(&caches[std::size_t(r)]);
    cache_names.push_back(fmt::format("kv_caches[{}]", r));
  }
  const Outputs outputs = outputs_arg(out, lse, query, cache_arrays, cache_names);

  const int threads_per_rank = std::max(1, hardware_threads() / world);
  std::vector<Plan> plans;
  for (int r = 0; r < world; ++r) {
    const PlanConfig config{
        Sharding{world, r, dcp_interleave}, int(H),
        cache_views[0].block_size,          cache_views[std::size_t(r)].num_blocks,
        cpu_model(threads_per_rank),        0};
    plans.push_back(with_python_names(kStepNames, [&] { return checked_plan(batch, config); }));
  }

  const DType q_dtype = query.tensor.dtype, out_dtype = outputs.out.tensor.dtype;
  auto* q_data = static_cast<std::uint8_t*>(query.tensor.data);
  auto* out_data = static_cast<std::uint8_t*>(outputs.out.tensor.data);
  auto* lse_data = static_cast<std::uint8_t*>(outputs.lse.tensor.data);
  nb::gil_scoped_release released;
  InProcessGroup group(world);
  std::barrier ready(world);
  std::atomic<bool> setup_failed{false};
  std::vector<RankState> states(static_cast<std::size_t>(world));
  with_python_names(kStepNames, [&] {
    testing::run_ranks(world, [&](int r) {
      RankState& st = states[std::size_t(r)];
      const Plan& plan = plans[std::size_t(r)];
      // A rank that fails to set up says so before the step, so no peer waits for it forever in
      // a collective.
      try {
        st.backend = make_cpu_backend(threads_per_rank);
        Backend& be = *st.backend;
        st.q = DeviceBuffer(be, std::size_t(rows * Hl * kHeadDim) * dtype_size(q_dtype));
        st.out = DeviceBuffer(be, std::size_t(rows * Hl * kLatentDim) * dtype_size(out_dtype));
        st.lse = DeviceBuffer(be, std::size_t(rows * Hl) * sizeof(float));
        st.workspace = std::make_unique<DcpWorkspace>(be, world, rows, int(Hl), q_dtype,
                                                      decode_workspace_bytes(plan));
        copy_heads(q_data, static_cast<std::uint8_t*>(st.q.data()), rows, H, r * Hl, Hl, kHeadDim,
                   dtype_size(q_dtype), false);
      } catch (...) {
        setup_failed = true;
        ready.arrive_and_wait();
        throw;
      }
      ready.arrive_and_wait();
      if (setup_failed) return;
      InProcessCommunicator comm(group, r, st.backend.get());
      DcpStepArgs args;
      args.plan = &plan;
      args.q_local = st.q.tensor(q_dtype, {rows, Hl, kHeadDim});
      args.cache = cache_views[std::size_t(r)];
      args.block_table = block_table_of(batch);
      args.out = st.out.tensor(out_dtype, {rows, Hl, kLatentDim});
      args.lse = st.lse.tensor(DType::f32, {rows, Hl});
      args.softmax_scale = float(softmax_scale);
      args.combine = how;
      dcp_step(*st.backend, comm, *st.workspace, args, nullptr);
      st.backend->synchronize(nullptr);
      copy_heads(out_data, static_cast<std::uint8_t*>(st.out.data()), rows, H, r * Hl, Hl,
                 kLatentDim, dtype_size(out_dtype), true);
      copy_heads(lse_data, static_cast<std::uint8_t*>(st.lse.data()), rows, H, r * Hl, Hl, 1,
                 sizeof(float), true);
    });
  });
}

// ------------------------------------------------------------------ Plan inspection

// A plan, read through the fields that stay: per-row visible local prefixes, per-request local
// lengths, row counts.
struct PlanView {
  Plan plan;
};

template <class T>
nb::ndarray<nb::numpy, const T, nb::ndim<1>> read_only_view(const std::vector<T>& v) {
  return nb::ndarray<nb::numpy, const T, nb::ndim<1>>(v.data(), {v.size()}, nb::handle());
}

PlanView make_plan_view(nb::handle block_table, nb::handle query_start_loc, nb::handle seq_lens,
                        int num_heads, int block_size, std::int64_t num_blocks,
                        std::optional<std::int64_t> num_tokens, int dcp_world_size, int dcp_rank,
                        int dcp_interleave, nb::handle mask) {
  const Batch batch = read_batch({query_start_loc, seq_lens, num_tokens, mask, block_table});
  const PlanConfig config{Sharding{dcp_world_size, dcp_rank, dcp_interleave},
                          num_heads,
                          block_size,
                          num_blocks,
                          cpu_model(hardware_threads()),
                          0};
  const ArgumentNames names = {{"total_len", "seq_lens"},
                               {"max_blocks", "block_table"},
                               {"world", "dcp_world_size"},
                               {"rank", "dcp_rank"},
                               {"interleave", "dcp_interleave"}};
  return {with_python_names(names, [&] { return checked_plan(batch, config); })};
}

}  // namespace

void register_decode(nb::module_& m) {
  m.def("mla_decode", &mla_decode, "q"_a.none(), "kv_cache"_a.none(), "block_table"_a.none(),
        "query_start_loc"_a.none(), "seq_lens"_a.none(), "softmax_scale"_a, "num_tokens"_a.none(),
        "dcp_world_size"_a, "dcp_rank"_a, "dcp_interleave"_a, "mask"_a.none(), "k_scale"_a,
        "out"_a.none(), "lse"_a.none());
  m.def("dcp_step_simulated", &dcp_step_simulated, "q"_a.none(), "kv_caches"_a.none(),
        "block_table"_a.none(), "query_start_loc"_a.none(), "seq_lens"_a.none(), "softmax_scale"_a,
        "num_tokens"_a.none(), "world"_a, "dcp_interleave"_a, "mask"_a.none(), "k_scale"_a,
        "combine"_a, "out"_a.none(), "lse"_a.none());

  nb::class_<PlanView>(m, "Plan",
                       "One rank's decode plan (read-only views of its per-row and per-request "
                       "fields)")
      .def_prop_ro(
          "num_rows", [](const PlanView& p) { return p.plan.num_rows; }, "query rows incl. padding")
      .def_prop_ro(
          "num_partial_rows", [](const PlanView& p) { return p.plan.num_partial_rows; },
          "rows of the split-KV partial workspace")
      .def_prop_ro(
          "row_local_bound",
          [](const PlanView& p) { return read_only_view(p.plan.row_local_bound); },
          nb::rv_policy::reference_internal,
          "[num_rows] int32: the local prefix each row sees on this rank (0 for padding)")
      .def_prop_ro(
          "request_local_len",
          [](const PlanView& p) { return read_only_view(p.plan.request_local_len); },
          nb::rv_policy::reference_internal, "[B] int32: each request's local length")
      .def("__repr__", [](const PlanView& p) {
        return fmt::format("Plan(num_rows={}, num_requests={}, num_partial_rows={})",
                           p.plan.num_rows, p.plan.num_requests, p.plan.num_partial_rows);
      });
  m.def("make_plan", &make_plan_view, "block_table"_a.none(), "query_start_loc"_a.none(),
        "seq_lens"_a.none(), "num_heads"_a, "block_size"_a, "num_blocks"_a, "num_tokens"_a.none(),
        "dcp_world_size"_a, "dcp_rank"_a, "dcp_interleave"_a, "mask"_a.none());
}

}  // namespace dcpmla::python
