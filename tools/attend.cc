// `dcpmla attend --case DIR`: the file interface that lets any other implementation be checked
// against this one (format: docs/attend-format.md).
#include "attend.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>

#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "dcpmla/backend.h"
#include "dcpmla/comm.h"
#include "dcpmla/cpu_backend.h"
#include "dcpmla/error.h"
#include "dcpmla/numeric.h"
#include "dcpmla/sharding.h"
#include "dcpmla/testing/run_ranks.h"
#include "npy.h"

namespace dcpmla::tool {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kConfig = "config.json";
constexpr int kMaxWorld = 256;  // ranks run as threads

// ------------------------------------------------------------------ config.json

std::string field(const std::string& key) {
  return fmt::format("{}: {}", kConfig, key);
}

// Appends v as dump() writes it, stopping once `out` is longer than `limit`. dump() itself recurses
// once per nesting level, so a deeply nested config.json would overflow the stack; here the
// depth is bounded by the limit, as every level first appends a bracket.
void append_excerpt(const json& v, std::string& out, std::size_t limit) {
  if (!v.is_structured()) {
    out += v.dump();
    return;
  }
  const bool array = v.is_array();
  out += array ? '[' : '{';
  bool first = true;
  for (auto it = v.begin(); it != v.end() && out.size() <= limit; ++it, first = false) {
    if (!first) out += ',';
    if (!array) out += json(it.key()).dump() + ':';
    append_excerpt(it.value(), out, limit);
  }
  out += array ? ']' : '}';
}

std::string show(const json& v) {
  std::string s;
  append_excerpt(v, s, 60);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

const json* find(const json& cfg, const char* key) {
  const auto it = cfg.find(key);
  return it == cfg.end() || it->is_null() ? nullptr : &*it;
}

int get_int(const json& cfg, const char* key, std::optional<int> fallback, int min) {
  const json* v = find(cfg, key);
  if (!v) {
    DCPMLA_REQUIRE(fallback.has_value(), ErrorCode::invalid_argument, field(key),
                   fmt::format("an integer >= {} (required)", min), "no such field");
    return *fallback;
  }
  const bool is_int = v->is_number_integer();
  const std::int64_t x = is_int ? v->get<std::int64_t>() : 0;
  DCPMLA_REQUIRE(is_int && x >= min && x <= std::numeric_limits<int>::max(),
                 ErrorCode::invalid_argument, field(key), fmt::format("an integer >= {}", min),
                 show(*v));
  return int(x);
}

float get_positive(const json& cfg, const char* key, std::optional<float> fallback) {
  const json* v = find(cfg, key);
  if (!v) {
    DCPMLA_REQUIRE(fallback.has_value(), ErrorCode::invalid_argument, field(key),
                   "a finite number > 0 (required)", "no such field");
    return *fallback;
  }
  const float x = v->is_number() ? float(v->get<double>()) : NAN;
  DCPMLA_REQUIRE(std::isfinite(x) && x > 0, ErrorCode::invalid_argument, field(key),
                 "a finite number > 0 (as float32)", show(*v));
  return x;
}

std::string get_string(const json& cfg, const char* key, std::optional<std::string> fallback,
                       const char* allowed) {
  const json* v = find(cfg, key);
  if (!v) {
    DCPMLA_REQUIRE(fallback.has_value(), ErrorCode::invalid_argument, field(key),
                   fmt::format("one of {} (required)", allowed), "no such field");
    return *fallback;
  }
  DCPMLA_REQUIRE(v->is_string(), ErrorCode::invalid_argument, field(key),
                 fmt::format("one of {}", allowed), show(*v));
  return v->get<std::string>();
}

// Re-throws a library error with `context` in front of the argument it names.
template <class F>
auto with_context(const std::string& context, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    throw Error(e.code(), context + e.argument(), e.expected(), e.actual());
  }
}

json read_config(const fs::path& dir) {
  const fs::path path = dir / kConfig;
  std::error_code ec;
  DCPMLA_REQUIRE(fs::is_regular_file(path, ec), ErrorCode::invalid_argument, kConfig,
                 fmt::format("a file at {}", path.string()), "no such file");
  std::ifstream in(path);
  json cfg;
  // JSON leaves a repeated key to the reader (nlohmann keeps the last): refuse it instead, so a
  // field is never silently taken from another line than the one read.
  std::vector<std::set<std::string>> keys;
  std::string repeated;
  const json::parser_callback_t no_repeats = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    if (event == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (event == json::parse_event_t::key && !keys.empty() &&
        !keys.back().insert(parsed.get<std::string>()).second && repeated.empty()) {
      repeated = parsed.get<std::string>();
    }
    return true;
  };
  try {
    cfg = json::parse(in, no_repeats);
  } catch (const json::exception& e) {
    throw Error(ErrorCode::invalid_argument, kConfig, "valid JSON", e.what());
  }
  DCPMLA_REQUIRE(repeated.empty(), ErrorCode::invalid_argument, field(repeated),
                 "a field given once", "a field given more than once");
  DCPMLA_REQUIRE(cfg.is_object(), ErrorCode::invalid_argument, kConfig, "a JSON object", show(cfg));
  static const std::set<std::string> known = {
      "world",   "interleave", "heads",   "softmax_scale", "block_size", "kv_dtype",
      "k_scale", "q_scale",    "q_dtype", "mask",          "num_tokens"};
  for (const auto& [key, value] : cfg.items()) {
    DCPMLA_REQUIRE(
        known.count(key) || key.starts_with("_"), ErrorCode::invalid_argument, field(key),
        fmt::format("one of the fields {} (or a '_' comment field)", fmt::join(known, ", ")),
        "an unknown field");
  }
  return cfg;
}

CaseConfig parse_config(const json& cfg) {
  CaseConfig c;
  c.world = get_int(cfg, "world", std::nullopt, 1);
  DCPMLA_REQUIRE(c.world <= kMaxWorld, ErrorCode::invalid_argument, field("world"),
                 fmt::format("at most {} simulated ranks", kMaxWorld), std::to_string(c.world));
  c.interleave = get_int(cfg, "interleave", 1, 1);
  c.heads = get_int(cfg, "heads", std::nullopt, 1);
  c.softmax_scale = get_positive(cfg, "softmax_scale", std::nullopt);
  c.block_size = get_int(cfg, "block_size", std::nullopt, 1);
  c.kv_dtype =
      parse_dtype(get_string(cfg, "kv_dtype", std::nullopt, "fp32, bf16, fp8"), field("kv_dtype"));
  c.q_dtype = parse_dtype(get_string(cfg, "q_dtype", "fp32", "fp32, bf16"), field("q_dtype"));
  DCPMLA_REQUIRE(c.q_dtype == DType::f32 || c.q_dtype == DType::bf16, ErrorCode::invalid_argument,
                 field("q_dtype"), "fp32 or bf16", to_string(c.q_dtype));
  c.k_scale = get_positive(cfg, "k_scale", 1.0f);
  DCPMLA_REQUIRE(c.kv_dtype == DType::fp8_e4m3 || c.k_scale == 1.0f, ErrorCode::invalid_argument,
                 field("k_scale"),
                 fmt::format("1 or absent for a {} cache (k_scale applies to fp8 only)",
                             to_string(c.kv_dtype)),
                 fmt::format("{}", c.k_scale));
  c.q_scale = get_positive(cfg, "q_scale", 1.0f);
  DCPMLA_REQUIRE(c.heads % c.world == 0, ErrorCode::invalid_argument, field("heads"),
                 fmt::format("a multiple of world {} (the query is gathered over heads)", c.world),
                 std::to_string(c.heads));
  DCPMLA_REQUIRE(c.block_size % c.interleave == 0, ErrorCode::invalid_argument, field("interleave"),
                 fmt::format("a divisor of block_size {}", c.block_size),
                 std::to_string(c.interleave));
  return c;
}

std::vector<Mask> parse_masks(const json& cfg, std::size_t B) {
  const json* v = find(cfg, "mask");
  if (!v) return std::vector<Mask>(B, Mask::causal);
  if (v->is_string()) {
    return std::vector<Mask>(B, parse_mask(v->get<std::string>(), field("mask")));
  }
  DCPMLA_REQUIRE(v->is_array(), ErrorCode::invalid_argument, field("mask"),
                 "\"causal\", \"full\" or a list of them, one per request", show(*v));
  DCPMLA_REQUIRE(v->size() == B, ErrorCode::shape_mismatch, field("mask"),
                 fmt::format("{} entries (one per request of seq_lens.npy)", B),
                 fmt::format("{} entries", v->size()));
  std::vector<Mask> masks;
  for (std::size_t b = 0; b < B; ++b) {
    const json& m = (*v)[b];
    const std::string name = field(fmt::format("mask[{}]", b));
    DCPMLA_REQUIRE(m.is_string(), ErrorCode::invalid_argument, name, "\"causal\" or \"full\"",
                   show(m));
    masks.push_back(parse_mask(m.get<std::string>(), name));
  }
  return masks;
}

// ------------------------------------------------------------------ .npy inputs

std::string dtypes_string(std::initializer_list<npy::Dtype> dtypes) {
  std::vector<std::string> names;
  for (auto d : dtypes) names.push_back(fmt::format("{} ('{}')", npy::name(d), npy::descr(d)));
  return fmt::format("{}", fmt::join(names, " or "));
}

// Checks dtype and shape; -1 in `shape` accepts any extent. `layout` describes the dimensions.
void check_array(const npy::Array& a, const std::string& file,
                 std::initializer_list<npy::Dtype> dtypes, std::vector<std::int64_t> shape,
                 const std::string& layout) {
  DCPMLA_REQUIRE(std::find(dtypes.begin(), dtypes.end(), a.dtype) != dtypes.end(),
                 ErrorCode::dtype_mismatch, file, fmt::format("dtype {}", dtypes_string(dtypes)),
                 fmt::format("{} ('{}')", npy::name(a.dtype), npy::descr(a.dtype)));
  bool ok = a.shape.size() == shape.size();
  for (std::size_t i = 0; ok && i < shape.size(); ++i) ok = shape[i] < 0 || a.shape[i] == shape[i];
  if (!ok) {
    std::vector<std::string> want;
    for (auto d : shape) want.push_back(d < 0 ? "*" : std::to_string(d));
    const std::string wanted = shape.size() == 1 ? fmt::format("({},)", want[0])
                                                 : fmt::format("({})", fmt::join(want, ", "));
    throw Error(ErrorCode::shape_mismatch, file, fmt::format("shape {} ({})", wanted, layout),
                npy::shape_string(a.shape));
  }
}

std::vector<std::int64_t> int_values(const npy::Array& a) {
  if (a.dtype == npy::Dtype::i8) return a.values<std::int64_t>();
  const auto v = a.values<std::int32_t>();
  return {v.begin(), v.end()};
}

npy::Dtype npy_dtype_of(DType t) {
  switch (t) {
    case DType::f32:
      return npy::Dtype::f4;
    case DType::bf16:
      return npy::Dtype::u2;
    default:
      return npy::Dtype::u1;
  }
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

// ------------------------------------------------------------------ running one rank

struct RankSetup {
  const Case* c;
  const Plan* plan;
  int rank;
};

DeviceBuffer upload(Backend& be, const void* host, std::size_t bytes) {
  DeviceBuffer buf(be, bytes);
  if (bytes) be.upload(buf.data(), host, bytes, nullptr);
  return buf;
}

std::vector<std::uint8_t> encode_q(const float* x, std::size_t n, DType t) {
  std::vector<std::uint8_t> bytes(n * dtype_size(t));
  if (t == DType::f32) {
    std::memcpy(bytes.data(), x, n * 4);
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint16_t h = float_to_bf16(x[i]);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  return bytes;
}

// The NaN pattern of one cache element (unused pages are poisoned with it).
std::vector<std::uint8_t> nan_cache(DType t, std::size_t elements) {
  std::vector<std::uint8_t> bytes(elements * dtype_size(t));
  if (t == DType::f32) {
    const float nan = NAN;
    for (std::size_t i = 0; i < elements; ++i) std::memcpy(&bytes[i * 4], &nan, 4);
  } else if (t == DType::bf16) {
    const std::uint16_t nan = float_to_bf16(NAN);
    for (std::size_t i = 0; i < elements; ++i) std::memcpy(&bytes[i * 2], &nan, 2);
  } else {
    std::fill(bytes.begin(), bytes.end(), std::uint8_t(0x7f));  // e4m3 NaN
  }
  return bytes;
}

// Everything one rank allocates before the step: nothing here talks to the other ranks.
struct RankState {
  std::unique_ptr<Backend> backend;
  KvCacheRef cache;
  DeviceBuffer cache_buf, block_table, q, out, lse;
  std::unique_ptr<DcpWorkspace> ws;
};

void prepare_rank(const Case& c, const Plan& plan, int rank, int threads, RankState& st) {
  const auto& cfg = c.config;
  const Batch& batch = c.batch;
  const int H = cfg.heads, Hl = H / cfg.world;
  const std::int64_t rows = batch.rows();
  st.backend = make_cpu_backend(threads);
  Backend& be = *st.backend;

  st.cache = {nullptr, cfg.kv_dtype, c.rank_num_blocks[std::size_t(rank)], cfg.block_size,
              cfg.kv_dtype == DType::fp8_e4m3 ? cfg.k_scale : 1.0f};
  st.cache_buf = DeviceBuffer(be, st.cache.bytes());
  st.cache.data = st.cache_buf.data();
  if (c.kv) {
    // Form (a): poison every page, then write this rank's tokens through the slot mapping.
    const auto poison = nan_cache(cfg.kv_dtype, st.cache.bytes() / dtype_size(cfg.kv_dtype));
    be.upload(st.cache.data, poison.data(), poison.size(), nullptr);
    const Sharding sh{cfg.world, rank, cfg.interleave};
    std::vector<float> latents;
    std::vector<std::int64_t> slots;
    std::size_t offset = 0;
    for (int b = 0; b < batch.num_requests(); ++b) {
      for (std::int64_t p = 0; p < batch.total_len[b]; ++p, ++offset) {
        if (sh.owner(p) != rank) continue;
        slots.push_back(sh.slot(p, batch.block_row(b), cfg.block_size));
        const float* src = c.kv->data() + offset * kHeadDim;
        latents.insert(latents.end(), src, src + kHeadDim);
      }
    }
    const auto n = std::int64_t(slots.size());
    const auto lat = upload(be, latents.data(), latents.size() * sizeof(float));
    const auto sl = upload(be, slots.data(), slots.size() * sizeof(std::int64_t));
    be.write_kv({lat.tensor(DType::f32, {n, kHeadDim}), sl.tensor(DType::i64, {n}), st.cache},
                nullptr);
  } else {
    const auto& bytes = c.rank_caches[std::size_t(rank)];
    be.upload(st.cache.data, bytes.data(), bytes.size(), nullptr);
  }

  st.block_table = upload(be, batch.block_table.data(), batch.block_table.size() * 4);
  std::vector<float> q_local(std::size_t(rows) * Hl * kHeadDim);
  for (std::int64_t i = 0; i < rows; ++i) {
    std::memcpy(&q_local[std::size_t(i) * Hl * kHeadDim],
                &c.query[(std::size_t(i) * H + std::size_t(rank) * Hl) * kHeadDim],
                std::size_t(Hl) * kHeadDim * sizeof(float));
  }
  const auto q_bytes = encode_q(q_local.data(), q_local.size(), cfg.q_dtype);
  st.q = upload(be, q_bytes.data(), q_bytes.size());
  st.out = DeviceBuffer(be, std::size_t(rows) * Hl * kLatentDim * dtype_size(cfg.q_dtype));
  st.lse = DeviceBuffer(be, std::size_t(rows) * Hl * sizeof(float));
  st.ws = std::make_unique<DcpWorkspace>(be, cfg.world, rows, Hl, cfg.q_dtype,
                                         decode_workspace_bytes(plan));
  be.synchronize(nullptr);
}

void run_rank(const Case& c, const Plan& plan, int rank, Combine combine, Communicator& comm,
              RankState& st, AttendResult& result) {
  const auto& cfg = c.config;
  const int H = cfg.heads, Hl = H / cfg.world;
  const std::int64_t rows = c.batch.rows();
  Backend& be = *st.backend;
  DcpStepArgs args;
  args.plan = &plan;
  args.q_local = st.q.tensor(cfg.q_dtype, {rows, Hl, kHeadDim});
  args.cache = st.cache;
  args.block_table =
      st.block_table.tensor(DType::i32, {c.batch.num_requests(), c.batch.max_blocks});
  args.out = st.out.tensor(cfg.q_dtype, {rows, Hl, kLatentDim});
  args.lse = st.lse.tensor(DType::f32, {rows, Hl});
  args.softmax_scale = cfg.softmax_scale;
  args.q_scale = cfg.q_scale;
  args.combine = combine;
  dcp_step(be, comm, *st.ws, args, nullptr);

  std::vector<std::uint8_t> out(st.out.bytes());
  std::vector<float> lse(std::size_t(rows) * Hl);
  if (!out.empty()) be.download(out.data(), st.out.data(), out.size(), nullptr);
  if (!lse.empty()) be.download(lse.data(), st.lse.data(), lse.size() * sizeof(float), nullptr);
  be.synchronize(nullptr);
  for (std::int64_t i = 0; i < rows; ++i) {
    for (int h = 0; h < Hl; ++h) {
      const std::size_t src = std::size_t(i) * Hl + h;
      const std::size_t dst = std::size_t(i) * H + std::size_t(rank) * Hl + h;
      result.lse[dst] = lse[src];
      float* o = &result.out[dst * kLatentDim];
      if (cfg.q_dtype == DType::f32) {
        std::memcpy(o, &out[src * kLatentDim * 4], kLatentDim * sizeof(float));
      } else {
        for (int d = 0; d < kLatentDim; ++d) {
          std::uint16_t h16;
          std::memcpy(&h16, &out[(src * kLatentDim + d) * 2], 2);
          o[d] = bf16_to_float(h16);
        }
      }
    }
  }
}

}  // namespace

// ------------------------------------------------------------------ load_case

Case load_case(const fs::path& dir) {
  std::error_code ec;
  DCPMLA_REQUIRE(fs::is_directory(dir, ec), ErrorCode::invalid_argument, "--case",
                 "a case directory", fmt::format("{} (not a directory)", dir.string()));
  const json cfg = read_config(dir);
  Case c;
  c.config = parse_config(cfg);
  const CaseConfig& cc = c.config;
  const int W = cc.world, H = cc.heads, bs = cc.block_size;

  // Request boundaries and lengths.
  const auto qsl_a = npy::read(dir / "query_start_loc.npy");
  check_array(qsl_a, "query_start_loc.npy", {npy::Dtype::i4, npy::Dtype::i8}, {-1}, "[B + 1]");
  const auto qsl = int_values(qsl_a);
  DCPMLA_REQUIRE(!qsl.empty(), ErrorCode::shape_mismatch, "query_start_loc.npy",
                 "B + 1 >= 1 entries, starting at 0", "an empty array");
  const std::size_t B = qsl.size() - 1;
  const auto lens_a = npy::read(dir / "seq_lens.npy");
  check_array(lens_a, "seq_lens.npy", {npy::Dtype::i4, npy::Dtype::i8}, {std::int64_t(B)},
              fmt::format("[B]; B = {} as query_start_loc.npy has {} entries", B, B + 1));
  const auto lens = int_values(lens_a);
  DCPMLA_REQUIRE(qsl[0] == 0, ErrorCode::inconsistent, "query_start_loc.npy[0]", "0",
                 std::to_string(qsl[0]));
  Batch& batch = c.batch;
  batch.query_start_loc.push_back(0);
  for (std::size_t b = 0; b < B; ++b) {
    DCPMLA_REQUIRE(
        qsl[b + 1] > qsl[b] && qsl[b + 1] <= std::numeric_limits<std::int32_t>::max(),
        ErrorCode::inconsistent, fmt::format("query_start_loc.npy[{}]", b + 1),
        fmt::format("> query_start_loc.npy[{}] = {} (every request has Q >= 1 tokens)", b, qsl[b]),
        std::to_string(qsl[b + 1]));
    batch.query_start_loc.push_back(std::int32_t(qsl[b + 1]));
    const auto Q = qsl[b + 1] - qsl[b];
    DCPMLA_REQUIRE(lens[b] >= Q, ErrorCode::inconsistent, fmt::format("seq_lens.npy[{}]", b),
                   fmt::format(">= its Q = {} query tokens (the global length includes them)", Q),
                   std::to_string(lens[b]));
    DCPMLA_REQUIRE(lens[b] <= std::numeric_limits<std::int32_t>::max(), ErrorCode::out_of_range,
                   fmt::format("seq_lens.npy[{}]", b),
                   fmt::format("<= {}", std::numeric_limits<std::int32_t>::max()),
                   std::to_string(lens[b]));
    batch.total_len.push_back(lens[b]);
  }
  batch.mask = parse_masks(cfg, B);
  const std::int64_t real = batch.real_tokens();
  if (const json* v = find(cfg, "num_tokens")) {
    DCPMLA_REQUIRE(
        v->is_number_integer() && v->get<std::int64_t>() >= real, ErrorCode::invalid_argument,
        field("num_tokens"),
        fmt::format("an integer >= query_start_loc.npy[B] = {} (real tokens + padding rows)", real),
        show(*v));
    batch.num_tokens = v->get<std::int64_t>();
  }
  const std::int64_t rows = batch.rows();

  const auto query_a = npy::read(dir / "query.npy");
  check_array(
      query_a, "query.npy", {npy::Dtype::f4}, {rows, H, kHeadDim},
      fmt::format("[tokens, heads, 576]; tokens = {} from {}, heads = {} from config.json", rows,
                  batch.num_tokens < 0 ? "query_start_loc.npy[B]" : "config.json num_tokens", H));
  c.query = query_a.values<float>();

  // The KV: global latents (a), or block tables and rank caches (b).
  const bool has_kv = fs::exists(dir / "kv.npy", ec);
  const bool has_bt = fs::exists(dir / "block_table.npy", ec);
  const bool has_cache0 = fs::exists(dir / "cache_rank0.npy", ec);
  DCPMLA_REQUIRE(
      !(has_kv && (has_bt || has_cache0)), ErrorCode::inconsistent, "kv.npy / block_table.npy",
      "exactly one KV form: kv.npy (a), or block_table.npy and cache_rank{r}.npy (b)", "both");
  DCPMLA_REQUIRE(has_kv || has_bt || has_cache0, ErrorCode::invalid_argument, "kv.npy",
                 "kv.npy (form a), or block_table.npy and cache_rank0.npy ... (form b)",
                 "neither in " + dir.string());
  DCPMLA_REQUIRE(has_bt || !has_cache0, ErrorCode::invalid_argument, "block_table.npy",
                 "a file next to cache_rank0.npy (KV form b)", "no such file");
  if (has_kv) {
    std::int64_t total = 0;
    for (auto T : batch.total_len) total += T;
    const auto kv_a = npy::read(dir / "kv.npy");
    check_array(kv_a, "kv.npy", {npy::Dtype::f4}, {total, kHeadDim},
                fmt::format("[sum of seq_lens.npy = {}, 576]", total));
    c.kv = kv_a.values<float>();
    // Block tables: each request gets the blocks rank 0 (which holds the most tokens) needs.
    const Sharding rank0{W, 0, cc.interleave};
    std::vector<std::int64_t> needed(B);
    std::int64_t blocks = 0, max_needed = 0;
    for (std::size_t b = 0; b < B; ++b) {
      needed[b] = ceil_div(rank0.local_len(batch.total_len[b]), bs);
      blocks += needed[b];
      max_needed = std::max(max_needed, needed[b]);
    }
    batch.max_blocks = std::int32_t(max_needed);
    batch.block_table.assign(B * std::size_t(max_needed), -1);
    std::int32_t next = 0;
    for (std::size_t b = 0; b < B; ++b) {
      for (std::int64_t i = 0; i < needed[b]; ++i) {
        batch.block_table[b * std::size_t(max_needed) + std::size_t(i)] = next++;
      }
    }
    c.rank_num_blocks.assign(std::size_t(W), std::max<std::int64_t>(blocks, 1));
    // The tool allocates these W caches: refused here, naming the field, when they cannot fit.
    const double cache_bytes = double(W) * double(std::max<std::int64_t>(blocks, 1)) * bs *
                               kHeadDim * double(dtype_size(cc.kv_dtype));
    check_run_size("rank caches", {{"config.json: block_size", double(bs), 64}}, cache_bytes);
  } else {
    const auto bt_a = npy::read(dir / "block_table.npy");
    check_array(bt_a, "block_table.npy", {npy::Dtype::i4, npy::Dtype::i8}, {std::int64_t(B), -1},
                fmt::format("[B, max_blocks]; B = {} from seq_lens.npy", B));
    const auto bt = int_values(bt_a);
    DCPMLA_REQUIRE(bt_a.shape[1] <= std::numeric_limits<std::int32_t>::max(),
                   ErrorCode::out_of_range, "block_table.npy", "at most 2^31 - 1 columns",
                   std::to_string(bt_a.shape[1]));
    batch.max_blocks = std::int32_t(bt_a.shape[1]);
    for (auto id : bt) {
      batch.block_table.push_back(
          std::int32_t(std::clamp<std::int64_t>(id, -1, std::numeric_limits<std::int32_t>::max())));
    }
    for (int r = 0; r < W; ++r) {
      const std::string file = fmt::format("cache_rank{}.npy", r);
      auto cache_a = npy::read(dir / file);
      const npy::Dtype want = npy_dtype_of(cc.kv_dtype);
      DCPMLA_REQUIRE(cache_a.dtype == want, ErrorCode::dtype_mismatch, file,
                     fmt::format("dtype {} ('{}') for kv_dtype {}{}", npy::name(want),
                                 npy::descr(want), to_string(cc.kv_dtype),
                                 cc.kv_dtype == DType::bf16       ? " (raw bf16 bits)"
                                 : cc.kv_dtype == DType::fp8_e4m3 ? " (raw e4m3 bits)"
                                                                  : ""),
                     fmt::format("{} ('{}')", npy::name(cache_a.dtype), npy::descr(cache_a.dtype)));
      check_array(
          cache_a, file, {want}, {-1, bs, kHeadDim},
          fmt::format("[num_blocks, block_size, 576]; block_size = {} from config.json", bs));
      const std::int64_t nb = cache_a.shape[0];
      DCPMLA_REQUIRE(nb >= 1, ErrorCode::shape_mismatch, file, "num_blocks >= 1", "0 blocks");
      const Sharding sh{W, r, cc.interleave};
      for (std::size_t b = 0; b < B; ++b) {
        const auto local = sh.local_len(batch.total_len[b]);
        const auto need = ceil_div(local, bs);
        DCPMLA_REQUIRE(
            need <= batch.max_blocks, ErrorCode::shape_mismatch,
            fmt::format("block_table.npy row {}", b),
            fmt::format(">= {} columns ({} local tokens of T = {} on rank {}, block size {})", need,
                        local, batch.total_len[b], r, bs),
            fmt::format("{} columns", batch.max_blocks));
        for (std::int64_t i = 0; i < need; ++i) {
          const auto id = bt[b * std::size_t(bt_a.shape[1]) + std::size_t(i)];
          DCPMLA_REQUIRE(
              id >= 0 && id < nb, ErrorCode::out_of_range,
              fmt::format("block_table.npy[{}][{}]", b, i),
              fmt::format("a block id in [0, {}) ({} has {} blocks; rank {} reads this block)", nb,
                          file, nb, r),
              std::to_string(id));
        }
      }
      c.rank_num_blocks.push_back(nb);
      c.rank_caches.push_back(std::move(cache_a.bytes));
    }
    const std::string extra = fmt::format("cache_rank{}.npy", W);
    DCPMLA_REQUIRE(!fs::exists(dir / extra, ec), ErrorCode::inconsistent, extra,
                   fmt::format("no such file for world {} (ranks 0..{})", W, W - 1),
                   "the file exists (is config.json's world right?)");
  }
  return c;
}

// ------------------------------------------------------------------ run_case

AttendResult run_case(const Case& c, const AttendOptions& options) {
  const auto& cfg = c.config;
  const int W = cfg.world;
  const int total_threads = options.threads > 0
                                ? options.threads
                                : int(std::max(1u, std::thread::hardware_concurrency()));
  const int per_rank = std::max(1, total_threads / W);
  // Each rank's CPU backend has per_rank threads: the model its plans are made for.
  const DeviceModel model =
      options.kv_chunk_blocks == 0 ? DeviceModel{} : DeviceModel{per_rank, 0, 256};
  DCPMLA_REQUIRE(c.rank_num_blocks.size() == std::size_t(W), ErrorCode::inconsistent, "rank caches",
                 fmt::format("{} (one per rank)", W), std::to_string(c.rank_num_blocks.size()));

  // Every rank's plan first: a bad batch is reported here, before any rank starts.
  std::vector<Plan> plans;
  for (int r = 0; r < W; ++r) {
    plans.push_back(with_context(fmt::format("rank {} plan: ", r), [&] {
      const PlanConfig config{
          Sharding{W, r, cfg.interleave},    cfg.heads, cfg.block_size,
          c.rank_num_blocks[std::size_t(r)], model,     std::max(0, options.kv_chunk_blocks)};
      validate_block_ids(c.batch, config);
      return make_plan(c.batch, config);
    }));
  }

  AttendResult result;
  result.rows = c.batch.rows();
  result.heads = cfg.heads;
  result.out.assign(std::size_t(result.rows) * cfg.heads * kLatentDim, NAN);
  result.lse.assign(std::size_t(result.rows) * cfg.heads, NAN);

  InProcessGroup group(W);
  std::barrier ready(W);
  std::atomic<bool> setup_failed{false};
  std::vector<RankState> states(static_cast<std::size_t>(W));
  testing::run_ranks(W, [&](int r) {
    with_context(fmt::format("rank {}: ", r), [&] {
      RankState& state = states[std::size_t(r)];
      // Set-up failures (memory) are agreed on before the step, so no rank waits forever in a
      // collective that a failed peer never joins.
      try {
        prepare_rank(c, plans[std::size_t(r)], r, per_rank, state);
      } catch (...) {
        setup_failed = true;
        ready.arrive_and_wait();
        throw;
      }
      ready.arrive_and_wait();
      if (setup_failed) return;
      InProcessCommunicator comm(group, r, state.backend.get());
      run_rank(c, plans[std::size_t(r)], r, options.combine, comm, state, result);
    });
  });
  states.clear();
  return result;
}

// ------------------------------------------------------------------ write_result

namespace {

// A filesystem step of write_result, its failure as an Error naming the file.
template <class Fn>
void file_step(const fs::path& path, const char* expected, Fn&& fn) {
  try {
    fn();
  } catch (const fs::filesystem_error& e) {
    throw Error(ErrorCode::backend_failure, path.string(), expected, e.code().message());
  }
}

}  // namespace

void write_result(const AttendResult& result, const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  DCPMLA_REQUIRE(fs::is_directory(dir, ec), ErrorCode::backend_failure, "--out",
                 "a writable directory", dir.string());
  const fs::path out_path = dir / "out.npy", lse_path = dir / "lse.npy";
  // Both targets are absent or regular files, checked before anything is written.
  for (const fs::path& path : {out_path, lse_path}) {
    const auto status = fs::symlink_status(path, ec);
    DCPMLA_REQUIRE(!fs::exists(status) || fs::is_regular_file(status), ErrorCode::backend_failure,
                   path.string(), "a regular file or nothing, to be replaced",
                   fs::is_directory(status) ? "a directory" : "another kind of file");
  }
  const std::vector<std::int64_t> out_shape{result.rows, result.heads, kLatentDim};
  const std::vector<std::int64_t> lse_shape{result.rows, result.heads};
  const std::string tag = fmt::format(".tmp{}", ::getpid());
  const fs::path out_tmp = dir / ("out.npy" + tag), lse_tmp = dir / ("lse.npy" + tag);
  const fs::path out_old = dir / ("out.npy" + tag + ".old");
  const bool had_out = fs::exists(out_path, ec);
  bool out_replaced = false;
  try {
    npy::write(out_tmp, npy::Dtype::f4, out_shape, result.out.data());
    npy::write(lse_tmp, npy::Dtype::f4, lse_shape, result.lse.data());
    // The previous out.npy stays aside until lse.npy is in place, so a failure restores it.
    if (had_out) file_step(out_path, "a replaceable file", [&] { fs::rename(out_path, out_old); });
    file_step(out_path, "a writable file", [&] { fs::rename(out_tmp, out_path); });
    out_replaced = true;
    file_step(lse_path, "a writable file", [&] { fs::rename(lse_tmp, lse_path); });
  } catch (...) {
    if (out_replaced) fs::remove(out_path, ec);
    if (had_out) fs::rename(out_old, out_path, ec);
    fs::remove(out_tmp, ec);
    fs::remove(lse_tmp, ec);
    throw;
  }
  if (had_out) fs::remove(out_old, ec);
}

// ------------------------------------------------------------------ the subcommand

namespace {

struct AttendCli {
  std::string case_dir;
  std::string out_dir;
  std::string combine = "ag_rs";
  int threads = 0;
  int kv_chunk_blocks = -1;
  bool quiet = false;
};

int run_attend(const AttendCli& o) {
  AttendOptions options;
  options.combine = parse_combine(o.combine, "--combine");
  options.threads = o.threads;
  options.kv_chunk_blocks = o.kv_chunk_blocks;
  const fs::path dir(o.case_dir);
  const fs::path out_dir = o.out_dir.empty() ? dir : fs::path(o.out_dir);
  const Case c = load_case(dir);
  const AttendResult result = run_case(c, options);
  write_result(result, out_dir);
  if (!o.quiet) {
    const auto& cfg = c.config;
    const Batch& b = c.batch;
    std::vector<int> q_lens;
    for (int i = 0; i < b.num_requests(); ++i) q_lens.push_back(b.q_len(i));
    fmt::print(
        "dcpmla attend: W={} I={} H={} block size {} kv {} q/out {} combine {}; {} requests "
        "(Q {}), {} rows; KV {}\n",
        cfg.world, cfg.interleave, cfg.heads, cfg.block_size, to_string(cfg.kv_dtype),
        to_string(cfg.q_dtype), to_string(options.combine), b.num_requests(),
        fmt::join(q_lens, "+"), b.rows(),
        c.kv ? "from kv.npy (sharded by the tool)" : "from block_table.npy + rank caches");
    fmt::print("wrote {} ({}, {}, 512) and {} ({}, {})\n", (out_dir / "out.npy").string(),
               result.rows, result.heads, (out_dir / "lse.npy").string(), result.rows,
               result.heads);
  }
  return 0;
}

}  // namespace

Runner add_attend(CLI::App& app) {
  auto o = std::make_shared<AttendCli>();
  app.add_option("--case", o->case_dir, "case directory (docs/attend-format.md)")->required();
  app.add_option("--out", o->out_dir, "write out.npy and lse.npy here instead of the case dir");
  app.add_option("--combine", o->combine, "DCP combine: ag_rs or a2a");
  app.add_option("--threads", o->threads, "CPU threads in total (0 = all)")
      ->check(non_negative_int());
  app.add_option("--kv-chunk-blocks", o->kv_chunk_blocks,
                 "split each request's local KV into chunks of this many blocks (default: "
                 "chosen from the thread count; 0 = never split)")
      ->check(non_negative_int());
  app.add_flag("--quiet", o->quiet, "print nothing on success");
  return [o] { return run_attend(*o); };
}

}  // namespace dcpmla::tool
