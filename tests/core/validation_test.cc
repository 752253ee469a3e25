// The malformed-input catalogue: every bad input raises dcpmla::Error with a specific code and
// argument name, and nothing is written to the outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "dcpmla/backend.h"
#include "dcpmla/cache.h"
#include "dcpmla/comm.h"
#include "dcpmla/cpu_backend.h"
#include "dcpmla/dcp.h"
#include "dcpmla/error.h"
#include "dcpmla/plan.h"
#include "dcpmla/schedule.h"
#include "dcpmla/testing/run_ranks.h"
#include "dcpmla/testing/scenario.h"
#include "dcpmla/types.h"

namespace dcpmla {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr std::uint8_t kSentinel = 0xA5;

// A valid problem: the warm-up batch (8, 1) with T = [100, 40] on rank 0 of W = 2, H = 4 heads,
// block size 16. Buffers are oversized so that a wrong shape never points past an allocation.
struct DecodeSetup {
  static constexpr int H = 4;
  Batch batch;
  PlanConfig config;
  HostKvCache cache{DType::bf16, 12, 16};
  std::vector<float> q;
  std::vector<std::uint8_t> out, lse, workspace;

  DecodeSetup() {
    batch.query_start_loc = {0, 8, 9};
    batch.total_len = {100, 40};
    batch.max_blocks = 5;
    // rank 0 holds 50 and 20 tokens: 4 and 2 blocks
    batch.block_table = {0, 1, 2, 3, -1, 4, 5, -1, -1, -1};
    config.sharding = {2, 0, 1};
    config.num_heads = H;
    config.block_size = 16;
    config.num_blocks = 12;
    cache.poison();
    q.assign(std::size_t(16) * (H + 1) * kHeadDim, 0.25f);
    out.assign(std::size_t(16) * (H + 1) * kHeadDim * 4, kSentinel);
    lse.assign(std::size_t(16) * (H + 1) * 4, kSentinel);
    workspace.assign(1 << 20, 0);
  }

  DecodeArgs args(const Plan& plan) {
    const std::int64_t rows = plan.num_rows;
    DecodeArgs a;
    a.plan = &plan;
    a.q = TensorRef(q.data(), DType::f32, {rows, H, kHeadDim});
    a.cache = cache.ref();
    a.block_table =
        TensorRef(batch.block_table.data(), DType::i32, {batch.num_requests(), batch.max_blocks});
    a.out = TensorRef(out.data(), DType::f32, {rows, H, kLatentDim});
    a.lse = TensorRef(lse.data(), DType::f32, {rows, H});
    a.softmax_scale = 0.1352338f;
    a.workspace =
        TensorRef(workspace.data(), DType::fp8_e4m3, {std::int64_t(decode_workspace_bytes(plan))});
    return a;
  }

  bool outputs_untouched() const {
    for (auto b : out) {
      if (b != kSentinel) return false;
    }
    for (auto b : lse) {
      if (b != kSentinel) return false;
    }
    return true;
  }
};

void expect_error(const std::function<void()>& fn, ErrorCode code, const std::string& arg) {
  try {
    fn();
    ADD_FAILURE() << "expected dcpmla::Error(" << to_string(code) << ", " << arg
                  << "), nothing was thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << "expected " << to_string(code) << ": " << e.what();
    EXPECT_EQ(e.argument(), arg) << e.what();
    EXPECT_NE(std::string(e.what()).find(arg), std::string::npos)
        << "what() must name the argument: " << e.what();
    EXPECT_FALSE(e.expected().empty());
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected dcpmla::Error, got another exception: " << e.what();
  }
}

struct DecodeCase {
  std::string name;
  ErrorCode code;
  std::string arg;
  std::function<void(DecodeSetup&)> before_plan;        // edit the batch / config
  std::function<void(DecodeArgs&, DecodeSetup&)> edit;  // edit the decode arguments
  const char* what_contains = nullptr;                  // optional extra check on what()
};

// Zeros in the fixture's first 6 pages (the ones its block table uses), over the poison.
void zero_used_pages(Backend& backend, DecodeSetup& s) {
  std::vector<float> zeros(std::size_t(6) * 16 * kHeadDim, 0.0f);
  std::vector<std::int64_t> slots(zeros.size() / kHeadDim);
  for (std::size_t i = 0; i < slots.size(); ++i) slots[i] = std::int64_t(i);
  backend.write_kv(
      {TensorRef(zeros.data(), DType::f32, {std::int64_t(slots.size()), kHeadDim}),
       TensorRef(slots.data(), DType::i64, {std::int64_t(slots.size())}), s.cache.ref()},
      nullptr);
}

void PrintTo(const DecodeCase& c, std::ostream* os) {
  *os << c.name;
}

class DecodeValidation : public ::testing::TestWithParam<DecodeCase> {};

// Plans and decodes with the case's edits: the error may come from make_plan or from decode,
// but it must come before any output is written.
TEST_P(DecodeValidation, RaisesTypedErrorAndWritesNothing) {
  const DecodeCase& c = GetParam();
  DecodeSetup s;
  auto backend = make_cpu_backend(2);
  std::string what;
  expect_error(
      [&] {
        if (c.before_plan) c.before_plan(s);
        try {
          const Plan plan = make_plan(s.batch, s.config);
          // The host-side check of the table an engine runs before a step (make_plan reads no
          // block id; the decode reads a bad one as NaN keys, as the GPU does).
          validate_block_ids(s.batch, s.config);
          DecodeArgs a = s.args(plan);
          if (c.edit) c.edit(a, s);
          backend->decode(a, nullptr);
        } catch (const Error& e) {
          what = e.what();
          throw;
        }
      },
      c.code, c.arg);
  EXPECT_TRUE(s.outputs_untouched()) << c.name << ": an output was written before the error";
  if (c.what_contains) {
    EXPECT_NE(what.find(c.what_contains), std::string::npos) << what;
  }
}

// The fixture itself is valid (so every case fails for its own reason).
TEST(DecodeValidationFixture, ValidSetupRuns) {
  DecodeSetup s;
  auto backend = make_cpu_backend(1);
  for (int chunk : {0, 1}) {
    s.config.kv_chunk_blocks = chunk;
    const Plan plan = make_plan(s.batch, s.config);
    DecodeArgs a = s.args(plan);
    // poisoned pages are NaN: fill the used ones with zeros so the output is finite
    zero_used_pages(*backend, s);
    ASSERT_NO_THROW(backend->decode(a, nullptr));
    EXPECT_FALSE(s.outputs_untouched());
    const auto* lse = reinterpret_cast<const float*>(s.lse.data());
    for (int i = 0; i < 9 * DecodeSetup::H; ++i) EXPECT_TRUE(std::isfinite(lse[i])) << i;
  }
}

using S = DecodeSetup;
using A = DecodeArgs;

const std::vector<DecodeCase> kDecodeCases = {
    // --- the batch description (make_plan) ---
    {"seed_crash_q_has_2_rows_for_8_plus_1_tokens", ErrorCode::shape_mismatch, "q", nullptr,
     [](A& a, S& s) {
       a.q.shape = {2, S::H, kHeadDim};
     },
     "expected 9 rows"},
    {"query_start_loc_non_monotonic", ErrorCode::inconsistent, "query_start_loc[2]",
     [](S& s) {
       s.batch.query_start_loc = {0, 8, 7};
     },
     nullptr},
    {"query_start_loc_zero_length_request", ErrorCode::inconsistent, "query_start_loc[1]",
     [](S& s) {
       s.batch.query_start_loc = {0, 0, 9};
     },
     nullptr},
    {"query_start_loc_not_starting_at_0", ErrorCode::inconsistent, "query_start_loc[0]",
     [](S& s) {
       s.batch.query_start_loc = {1, 9, 10};
     },
     nullptr},
    {"query_start_loc_too_long", ErrorCode::shape_mismatch, "query_start_loc",
     [](S& s) {
       s.batch.query_start_loc = {0, 8, 9, 10};
     },
     nullptr},
    {"query_start_loc_too_short", ErrorCode::shape_mismatch, "query_start_loc",
     [](S& s) {
       s.batch.query_start_loc = {0, 9};
     },
     nullptr},
    {"query_start_loc_empty", ErrorCode::shape_mismatch, "query_start_loc",
     [](S& s) { s.batch.query_start_loc.clear(); }, nullptr},
    {"total_len_below_query_tokens", ErrorCode::inconsistent, "total_len[0]",
     [](S& s) {
       s.batch.total_len = {7, 40};
     },
     nullptr},
    {"total_len_negative", ErrorCode::inconsistent, "total_len[1]",
     [](S& s) {
       s.batch.total_len = {100, -5};
     },
     nullptr},
    // make_plan reads no block id: validate_block_ids checks the table against the fullest rank
    // (rank 0 holds 50 tokens of request 0: 4 blocks) and the ids it reads.
    {"block_table_too_short_for_T", ErrorCode::shape_mismatch, "block_table row 0",
     [](S& s) {
       s.batch.max_blocks = 3;
       s.batch.block_table = {0, 1, 2, 4, 5, -1};
     },
     nullptr, ">= 4 blocks"},
    {"block_table_wrong_entry_count", ErrorCode::shape_mismatch, "block_table",
     [](S& s) { s.batch.block_table.pop_back(); }, nullptr},
    {"block_id_negative", ErrorCode::out_of_range, "block_table[0][1]",
     [](S& s) { s.batch.block_table[1] = -3; }, nullptr},
    {"block_id_past_num_blocks", ErrorCode::out_of_range, "block_table[1][0]",
     [](S& s) { s.batch.block_table[5] = 12; }, nullptr},
    {"max_blocks_negative", ErrorCode::invalid_argument, "max_blocks",
     [](S& s) { s.batch.max_blocks = -1; }, nullptr},
    {"rank_equal_to_world", ErrorCode::out_of_range, "rank",
     [](S& s) { s.config.sharding.rank = 2; }, nullptr},
    {"rank_negative", ErrorCode::out_of_range, "rank", [](S& s) { s.config.sharding.rank = -1; },
     nullptr},
    {"interleave_not_dividing_block_size", ErrorCode::invalid_argument, "interleave",
     [](S& s) { s.config.sharding.interleave = 3; }, nullptr},
    {"interleave_zero", ErrorCode::invalid_argument, "interleave",
     [](S& s) { s.config.sharding.interleave = 0; }, nullptr},
    {"world_zero", ErrorCode::invalid_argument, "world", [](S& s) { s.config.sharding.world = 0; },
     nullptr},
    {"mask_wrong_length", ErrorCode::shape_mismatch, "mask",
     [](S& s) { s.batch.mask = {Mask::causal}; }, nullptr},
    {"num_tokens_below_real_tokens", ErrorCode::inconsistent, "num_tokens",
     [](S& s) { s.batch.num_tokens = 8; }, nullptr},
    {"num_heads_zero", ErrorCode::invalid_argument, "num_heads",
     [](S& s) { s.config.num_heads = 0; }, nullptr},
    {"block_size_zero", ErrorCode::invalid_argument, "block_size",
     [](S& s) { s.config.block_size = 0; }, nullptr},
    {"num_blocks_zero", ErrorCode::invalid_argument, "num_blocks",
     [](S& s) { s.config.num_blocks = 0; }, nullptr},
    // --- the decode arguments ---
    {"plan_null", ErrorCode::invalid_argument, "plan", nullptr, [](A& a, S&) { a.plan = nullptr; },
     nullptr},
    {"q_head_count_differs_from_plan", ErrorCode::shape_mismatch, "q", nullptr,
     [](A& a, S&) {
       a.q.shape = {9, S::H + 1, kHeadDim};
     },
     nullptr},
    {"q_width_512_not_576", ErrorCode::shape_mismatch, "q", nullptr,
     [](A& a, S&) {
       a.q.shape = {9, S::H, kLatentDim};
     },
     nullptr},
    {"q_rank_2", ErrorCode::shape_mismatch, "q", nullptr,
     [](A& a, S&) {
       a.q.shape = {9, S::H * kHeadDim};
     },
     nullptr},
    {"q_dtype_int32", ErrorCode::dtype_mismatch, "q", nullptr,
     [](A& a, S&) { a.q.dtype = DType::i32; }, nullptr},
    {"q_dtype_fp8", ErrorCode::dtype_mismatch, "q", nullptr,
     [](A& a, S&) { a.q.dtype = DType::fp8_e4m3; }, nullptr},
    {"q_null", ErrorCode::invalid_argument, "q", nullptr, [](A& a, S&) { a.q.data = nullptr; },
     nullptr},
    {"softmax_scale_nan", ErrorCode::invalid_argument, "softmax_scale", nullptr,
     [](A& a, S&) { a.softmax_scale = kNaN; }, nullptr},
    {"softmax_scale_inf", ErrorCode::invalid_argument, "softmax_scale", nullptr,
     [](A& a, S&) { a.softmax_scale = kInf; }, nullptr},
    {"softmax_scale_zero", ErrorCode::invalid_argument, "softmax_scale", nullptr,
     [](A& a, S&) { a.softmax_scale = 0.0f; }, nullptr},
    {"softmax_scale_negative", ErrorCode::invalid_argument, "softmax_scale", nullptr,
     [](A& a, S&) { a.softmax_scale = -0.1f; }, nullptr},
    {"q_scale_nan", ErrorCode::invalid_argument, "q_scale", nullptr,
     [](A& a, S&) { a.q_scale = kNaN; }, nullptr},
    {"q_scale_inf", ErrorCode::invalid_argument, "q_scale", nullptr,
     [](A& a, S&) { a.q_scale = -kInf; }, nullptr},
    {"q_scale_zero", ErrorCode::invalid_argument, "q_scale", nullptr,
     [](A& a, S&) { a.q_scale = 0.0f; }, nullptr},
    {"out_dtype_int32", ErrorCode::dtype_mismatch, "out", nullptr,
     [](A& a, S&) { a.out.dtype = DType::i32; }, nullptr},
    {"out_bf16_for_fp32_q", ErrorCode::dtype_mismatch, "out", nullptr,
     [](A& a, S&) { a.out.dtype = DType::bf16; }, nullptr},
    {"out_shape_576_wide", ErrorCode::shape_mismatch, "out", nullptr,
     [](A& a, S&) {
       a.out.shape = {9, S::H, kHeadDim};
     },
     nullptr},
    {"out_too_few_rows", ErrorCode::shape_mismatch, "out", nullptr,
     [](A& a, S&) {
       a.out.shape = {2, S::H, kLatentDim};
     },
     nullptr},
    {"lse_dtype_bf16", ErrorCode::dtype_mismatch, "lse", nullptr,
     [](A& a, S&) { a.lse.dtype = DType::bf16; }, nullptr},
    {"lse_shape_wrong_heads", ErrorCode::shape_mismatch, "lse", nullptr,
     [](A& a, S&) {
       a.lse.shape = {9, S::H + 1};
     },
     nullptr},
    {"lse_shape_per_request", ErrorCode::shape_mismatch, "lse", nullptr,
     [](A& a, S&) {
       a.lse.shape = {2, S::H};
     },
     nullptr},
    {"block_table_dtype_int64", ErrorCode::dtype_mismatch, "block_table", nullptr,
     [](A& a, S&) { a.block_table.dtype = DType::i64; }, nullptr},
    {"block_table_tensor_per_token", ErrorCode::shape_mismatch, "block_table", nullptr,
     [](A& a, S&) {
       a.block_table.shape = {9, 1};
     },
     nullptr},
    {"block_table_tensor_too_few_columns", ErrorCode::shape_mismatch, "block_table", nullptr,
     [](A& a, S&) {
       a.block_table.shape = {2, 2};
     },
     ">= 4]"},
    {"block_table_tensor_too_few_rows", ErrorCode::shape_mismatch, "block_table", nullptr,
     [](A& a, S&) {
       a.block_table.shape = {1, 5};
     },
     "[>= 2,"},
    {"workspace_too_small", ErrorCode::shape_mismatch, "workspace",
     [](S& s) { s.config.kv_chunk_blocks = 1; },
     [](A& a, S&) { a.workspace.shape = {a.workspace.shape[0] - 1}; }, nullptr},
    {"workspace_null", ErrorCode::shape_mismatch, "workspace",
     [](S& s) { s.config.kv_chunk_blocks = 1; }, [](A& a, S&) { a.workspace = TensorRef(); },
     nullptr},
    {"cache_block_size_differs_from_plan", ErrorCode::inconsistent, "cache.block_size", nullptr,
     [](A& a, S&) { a.cache.block_size = 8; }, nullptr},
    {"cache_num_blocks_differs_from_plan", ErrorCode::inconsistent, "cache.num_blocks", nullptr,
     [](A& a, S&) { a.cache.num_blocks = 11; }, nullptr},
    {"cache_dtype_int32", ErrorCode::dtype_mismatch, "cache.dtype", nullptr,
     [](A& a, S&) { a.cache.dtype = DType::i32; }, nullptr},
    {"cache_null", ErrorCode::invalid_argument, "cache.data", nullptr,
     [](A& a, S&) { a.cache.data = nullptr; }, nullptr},
    {"fp8_k_scale_zero", ErrorCode::invalid_argument, "cache.k_scale", nullptr,
     [](A& a, S&) {
       a.cache.dtype = DType::fp8_e4m3;
       a.cache.k_scale = 0.0f;
     },
     nullptr},
    {"fp8_k_scale_negative", ErrorCode::invalid_argument, "cache.k_scale", nullptr,
     [](A& a, S&) {
       a.cache.dtype = DType::fp8_e4m3;
       a.cache.k_scale = -0.5f;
     },
     nullptr},
    {"fp8_k_scale_nan", ErrorCode::invalid_argument, "cache.k_scale", nullptr,
     [](A& a, S&) {
       a.cache.dtype = DType::fp8_e4m3;
       a.cache.k_scale = kNaN;
     },
     nullptr},
    {"fp8_k_scale_inf", ErrorCode::invalid_argument, "cache.k_scale", nullptr,
     [](A& a, S&) {
       a.cache.dtype = DType::fp8_e4m3;
       a.cache.k_scale = kInf;
     },
     nullptr},
    {"bf16_cache_with_k_scale", ErrorCode::invalid_argument, "cache.k_scale", nullptr,
     [](A& a, S&) { a.cache.k_scale = 0.5f; }, nullptr},
    {"fp32_cache_with_k_scale", ErrorCode::invalid_argument, "cache.k_scale", nullptr,
     [](A& a, S&) {
       a.cache.dtype = DType::f32;
       a.cache.k_scale = 2.0f;
     },
     nullptr},
};

INSTANTIATE_TEST_SUITE_P(Catalogue, DecodeValidation, ::testing::ValuesIn(kDecodeCases),
                         [](const auto& info) { return info.param.name; });

// The other forms: the gathered query [W, rows, H / W, 576], and the a2a send rows
// (DecodeArgs::send) in place of out and lse.
const std::vector<DecodeCase> kSendCases = {
    {"gathered_q_world_3_for_4_heads", ErrorCode::shape_mismatch, "q", nullptr,
     [](A& a, S&) {
       a.q.shape = {3, 9, 1, kHeadDim};
     },
     "W dividing the plan's 4 heads"},
    {"gathered_q_rows_per_rank", ErrorCode::shape_mismatch, "q", nullptr,
     [](A& a, S&) {
       a.q.shape = {2, 8, 2, kHeadDim};
     },
     "expected 9 rows"},
    {"gathered_q_heads_per_rank_wrong", ErrorCode::shape_mismatch, "q", nullptr,
     [](A& a, S&) {
       a.q.shape = {2, 9, 4, kHeadDim};
     },
     nullptr},
    {"gathered_q_dtype_fp8", ErrorCode::dtype_mismatch, "q", nullptr,
     [](A& a, S&) {
       a.q.shape = {2, 9, 2, kHeadDim};
       a.q.dtype = DType::fp8_e4m3;
     },
     nullptr},
    {"send_with_out_still_set", ErrorCode::invalid_argument, "out", nullptr,
     [](A& a, S& s) {
       a.send_world = 2;
       a.send = TensorRef(s.out.data(), DType::bf16, {2, 9, 2, kPackedRowBf16});
     },
     "empty"},
    {"send_with_lse_still_set", ErrorCode::invalid_argument, "lse", nullptr,
     [](A& a, S& s) {
       a.out = {};
       a.send_world = 2;
       a.send = TensorRef(s.out.data(), DType::bf16, {2, 9, 2, kPackedRowBf16});
     },
     nullptr},
    {"send_world_3_for_4_heads", ErrorCode::invalid_argument, "send_world", nullptr,
     [](A& a, S& s) {
       a.out = {};
       a.lse = {};
       a.send_world = 3;
       a.send = TensorRef(s.out.data(), DType::bf16, {3, 9, 1, kPackedRowBf16});
     },
     "divisor of the plan's 4 heads"},
    {"send_world_without_send", ErrorCode::shape_mismatch, "send", nullptr,
     [](A& a, S&) {
       a.out = {};
       a.lse = {};
       a.send_world = 2;
     },
     nullptr},
    {"send_bf16_rows_of_513_slots", ErrorCode::shape_mismatch, "send", nullptr,
     [](A& a, S& s) {
       a.out = {};
       a.lse = {};
       a.send_world = 2;
       a.send = TensorRef(s.out.data(), DType::bf16, {2, 9, 2, kPackedRow});
     },
     "514"},
    {"send_dtype_fp8", ErrorCode::dtype_mismatch, "send", nullptr,
     [](A& a, S& s) {
       a.out = {};
       a.lse = {};
       a.send_world = 2;
       a.send = TensorRef(s.out.data(), DType::fp8_e4m3, {2, 9, 2, kPackedRow});
     },
     nullptr},
    {"send_null", ErrorCode::invalid_argument, "send", nullptr,
     [](A& a, S&) {
       a.out = {};
       a.lse = {};
       a.send_world = 2;
       a.send = TensorRef(static_cast<void*>(nullptr), DType::f32, {2, 9, 2, kPackedRow});
     },
     nullptr},
};

INSTANTIATE_TEST_SUITE_P(SendRows, DecodeValidation, ::testing::ValuesIn(kSendCases),
                         [](const auto& info) { return info.param.name; });

// --- write_kv: the cache is the output ---

struct KvSetup {
  HostKvCache cache{DType::bf16, 4, 16};
  std::vector<float> latents = std::vector<float>(std::size_t(3) * kHeadDim, 1.5f);
  std::vector<std::int64_t> slots = {0, -1, 63};
  std::vector<std::int32_t> slots32 = {0, -1, 63};
  KvWriteArgs args() {
    return {TensorRef(latents.data(), DType::f32, {3, kHeadDim}),
            TensorRef(slots.data(), DType::i64, {3}), cache.ref()};
  }
  std::vector<std::uint8_t> snapshot() {
    const auto r = cache.ref();
    const auto* p = static_cast<const std::uint8_t*>(r.data);
    return {p, p + r.bytes()};
  }
};

struct KvCase {
  std::string name;
  ErrorCode code;
  std::string arg;
  std::function<void(KvWriteArgs&, KvSetup&)> edit;
};

void PrintTo(const KvCase& c, std::ostream* os) {
  *os << c.name;
}

class WriteKvValidation : public ::testing::TestWithParam<KvCase> {};

TEST_P(WriteKvValidation, RaisesTypedErrorAndWritesNothing) {
  const KvCase& c = GetParam();
  KvSetup s;
  s.cache.poison();
  const auto before = s.snapshot();
  auto backend = make_cpu_backend(1);
  KvWriteArgs a = s.args();
  c.edit(a, s);
  expect_error([&] { backend->write_kv(a, nullptr); }, c.code, c.arg);
  EXPECT_EQ(s.snapshot(), before) << c.name << ": the cache was written before the error";
}

// validate(KvWriteArgs) checks shapes and dtypes only (slots may live in device memory);
// validate_slot_values checks the host slot values.
TEST(WriteKvValidationFixture, SlotValuesAreCheckedSeparately) {
  KvSetup s;
  s.slots[1] = 64;
  const KvWriteArgs a = s.args();
  EXPECT_NO_THROW(validate(a));
  expect_error([&] { validate_slot_values(a); }, ErrorCode::out_of_range, "slots[1]");
  s.slots[1] = -1;
  EXPECT_NO_THROW(validate_slot_values(s.args()));
}

TEST(WriteKvValidationFixture, ValidSetupWrites) {
  KvSetup s;
  s.cache.poison();
  const auto before = s.snapshot();
  auto backend = make_cpu_backend(1);
  backend->write_kv(s.args(), nullptr);
  EXPECT_NE(s.snapshot(), before);
  EXPECT_EQ(s.cache.at(0, 0, 0), 1.5f);
  EXPECT_EQ(s.cache.at(3, 15, 575), 1.5f);
}

const std::vector<KvCase> kKvCases = {
    {"slot_past_capacity", ErrorCode::out_of_range, "slots[2]",
     [](KvWriteArgs&, KvSetup& s) { s.slots[2] = 64; }},
    {"slot_below_minus_one", ErrorCode::out_of_range, "slots[0]",
     [](KvWriteArgs&, KvSetup& s) { s.slots[0] = -2; }},
    {"slots_dtype_int32", ErrorCode::dtype_mismatch, "slots",
     [](KvWriteArgs& a, KvSetup& s) { a.slots = TensorRef(s.slots32.data(), DType::i32, {3}); }},
    {"slots_length_differs_from_latents", ErrorCode::shape_mismatch, "slots",
     [](KvWriteArgs& a, KvSetup&) { a.slots.shape = {2}; }},
    {"latents_dtype_fp8", ErrorCode::dtype_mismatch, "latents",
     [](KvWriteArgs& a, KvSetup&) { a.latents.dtype = DType::fp8_e4m3; }},
    {"latents_width_512", ErrorCode::shape_mismatch, "latents",
     [](KvWriteArgs& a, KvSetup&) {
       a.latents.shape = {3, kLatentDim};
     }},
    {"latents_null", ErrorCode::invalid_argument, "latents",
     [](KvWriteArgs& a, KvSetup&) { a.latents.data = nullptr; }},
    {"cache_bf16_with_k_scale", ErrorCode::invalid_argument, "cache.k_scale",
     [](KvWriteArgs& a, KvSetup&) { a.cache.k_scale = 0.25f; }},
    {"cache_fp8_k_scale_zero", ErrorCode::invalid_argument, "cache.k_scale",
     [](KvWriteArgs& a, KvSetup&) {
       a.cache.dtype = DType::fp8_e4m3;
       a.cache.k_scale = 0.0f;
     }},
    {"cache_dtype_int64", ErrorCode::dtype_mismatch, "cache.dtype",
     [](KvWriteArgs& a, KvSetup&) { a.cache.dtype = DType::i64; }},
    {"cache_num_blocks_zero", ErrorCode::invalid_argument, "cache.num_blocks",
     [](KvWriteArgs& a, KvSetup&) { a.cache.num_blocks = 0; }},
};

INSTANTIATE_TEST_SUITE_P(Catalogue, WriteKvValidation, ::testing::ValuesIn(kKvCases),
                         [](const auto& info) { return info.param.name; });

// --- dcp_step: checked on every rank before the first collective ---

struct StepSetup {
  static constexpr int W = 2;
  static constexpr int H = 4;  // heads after the all-gather
  DecodeSetup base;
  std::vector<float> q_local = std::vector<float>(std::size_t(16) * H * kHeadDim, 0.25f);
  std::vector<std::uint8_t> out =
      std::vector<std::uint8_t>(std::size_t(16) * H * kHeadDim * 4, kSentinel);
  std::vector<std::uint8_t> lse = std::vector<std::uint8_t>(std::size_t(16) * H * 4, kSentinel);
  bool untouched() const {
    for (auto b : out) {
      if (b != kSentinel) return false;
    }
    for (auto b : lse) {
      if (b != kSentinel) return false;
    }
    return true;
  }
  // Valid step arguments over this setup's buffers for a plan of a W-rank group.
  DcpStepArgs step_args(const Plan& plan, int world) {
    const std::int64_t rows = plan.num_rows, Hl = H / world;
    DcpStepArgs a;
    a.plan = &plan;
    a.q_local = TensorRef(q_local.data(), DType::f32, {rows, Hl, kHeadDim});
    a.cache = base.cache.ref();
    a.block_table = TensorRef(base.batch.block_table.data(), DType::i32,
                              {base.batch.num_requests(), base.batch.max_blocks});
    a.out = TensorRef(out.data(), DType::f32, {rows, Hl, kLatentDim});
    a.lse = TensorRef(lse.data(), DType::f32, {rows, Hl});
    a.softmax_scale = 0.1352338f;
    return a;
  }
};

struct StepCase {
  std::string name;
  ErrorCode code;
  std::string arg;
  // edits rank r's plan config before planning, and its step arguments / workspace shape
  std::function<void(PlanConfig&, int rank)> config;
  std::function<void(DcpStepArgs&)> args;
  int ws_heads_per_rank = StepSetup::H / StepSetup::W;
  std::int64_t ws_max_rows = 9;
  int comm_world = StepSetup::W;
};

void PrintTo(const StepCase& c, std::ostream* os) {
  *os << c.name;
}

class DcpStepValidation : public ::testing::TestWithParam<StepCase> {};

TEST_P(DcpStepValidation, EveryRankRaisesTypedErrorAndWritesNothing) {
  const StepCase& c = GetParam();
  const int W = c.comm_world;
  InProcessGroup group(W);
  std::vector<StepSetup> setups(static_cast<std::size_t>(W));
  std::vector<std::string> failures(static_cast<std::size_t>(W));
  testing::run_ranks(W, [&](int r) {
    StepSetup& s = setups[r];
    auto backend = make_cpu_backend(1);
    InProcessCommunicator comm(group, r);
    PlanConfig cfg = s.base.config;
    cfg.sharding = {W, r, 1};
    if (c.config) c.config(cfg, r);
    try {
      const Plan plan = make_plan(s.base.batch, cfg);
      DcpWorkspace ws(*backend, W, c.ws_max_rows, c.ws_heads_per_rank, DType::f32,
                      decode_workspace_bytes(plan));
      DcpStepArgs a = s.step_args(plan, W);
      if (c.args) c.args(a);
      dcp_step(*backend, comm, ws, a, nullptr);
      failures[r] = "nothing was thrown";
    } catch (const Error& e) {
      if (e.code() != c.code || e.argument() != c.arg ||
          std::string(e.what()).find(c.arg) == std::string::npos) {
        failures[r] = std::string("wrong error: ") + e.what();
      }
    } catch (const std::exception& e) {
      failures[r] = std::string("not a dcpmla::Error: ") + e.what();
    }
  });
  for (int r = 0; r < W; ++r) {
    EXPECT_EQ(failures[r], "") << c.name << " rank " << r << " expected " << to_string(c.code)
                               << " naming " << c.arg;
    EXPECT_TRUE(setups[r].untouched()) << c.name << " rank " << r << " wrote its outputs";
  }
}

TEST(DcpStepValidationFixture, ValidSetupRuns) {
  const int W = StepSetup::W;
  InProcessGroup group(W);
  std::vector<StepSetup> setups(static_cast<std::size_t>(W));
  const auto errors = testing::rank_failures(W, [&](int r) {
    StepSetup& s = setups[r];
    auto backend = make_cpu_backend(1);
    InProcessCommunicator comm(group, r);
    PlanConfig cfg = s.base.config;
    cfg.sharding = {W, r, 1};
    // zero pages so the poisoned cache contributes finite values
    std::vector<float> zeros(std::size_t(12) * 16 * kHeadDim, 0.0f);
    std::vector<std::int64_t> slots(zeros.size() / kHeadDim);
    for (std::size_t i = 0; i < slots.size(); ++i) slots[i] = std::int64_t(i);
    backend->write_kv(
        {TensorRef(zeros.data(), DType::f32, {std::int64_t(slots.size()), kHeadDim}),
         TensorRef(slots.data(), DType::i64, {std::int64_t(slots.size())}), s.base.cache.ref()},
        nullptr);
    const Plan plan = make_plan(s.base.batch, cfg);
    const int Hl = StepSetup::H / W;
    DcpWorkspace ws(*backend, W, 9, Hl, DType::f32, decode_workspace_bytes(plan));
    DcpStepArgs a = s.step_args(plan, W);
    dcp_step(*backend, comm, ws, a, nullptr);
  });
  for (int r = 0; r < W; ++r) {
    EXPECT_EQ(errors[r], "");
    EXPECT_FALSE(setups[r].untouched());
  }
}

const std::vector<StepCase> kStepCases = {
    {"heads_not_divisible_by_world", ErrorCode::shape_mismatch, "num_heads",
     [](PlanConfig& c, int) { c.num_heads = 3; }, nullptr},
    {"plan_rank_differs_from_communicator_rank", ErrorCode::inconsistent,
     "plan.config.sharding.rank", [](PlanConfig& c, int r) { c.sharding.rank = 1 - r; }, nullptr},
    {"plan_world_differs_from_communicator_world", ErrorCode::inconsistent,
     "plan.config.sharding.world",
     [](PlanConfig& c, int r) {
       c.sharding = {4, r, 1};
     },
     nullptr},
    {"plan_null", ErrorCode::invalid_argument, "plan", nullptr,
     [](DcpStepArgs& a) { a.plan = nullptr; }},
    {"q_local_has_all_heads", ErrorCode::shape_mismatch, "q_local", nullptr,
     [](DcpStepArgs& a) {
       a.q_local.shape = {9, StepSetup::H, kHeadDim};
     }},
    {"q_local_per_request_rows", ErrorCode::shape_mismatch, "q_local", nullptr,
     [](DcpStepArgs& a) {
       a.q_local.shape = {2, StepSetup::H / 2, kHeadDim};
     }},
    {"q_local_dtype_fp8", ErrorCode::dtype_mismatch, "q_local", nullptr,
     [](DcpStepArgs& a) { a.q_local.dtype = DType::fp8_e4m3; }},
    {"out_dtype_int32", ErrorCode::dtype_mismatch, "out", nullptr,
     [](DcpStepArgs& a) { a.out.dtype = DType::i32; }},
    {"out_has_all_heads", ErrorCode::shape_mismatch, "out", nullptr,
     [](DcpStepArgs& a) {
       a.out.shape = {9, StepSetup::H, kLatentDim};
     }},
    {"lse_has_all_heads", ErrorCode::shape_mismatch, "lse", nullptr,
     [](DcpStepArgs& a) {
       a.lse.shape = {9, StepSetup::H};
     }},
    {"softmax_scale_nan", ErrorCode::invalid_argument, "softmax_scale", nullptr,
     [](DcpStepArgs& a) { a.softmax_scale = kNaN; }},
    {"cache_fp8_k_scale_nan", ErrorCode::invalid_argument, "cache.k_scale", nullptr,
     [](DcpStepArgs& a) {
       a.cache.dtype = DType::fp8_e4m3;
       a.cache.k_scale = kNaN;
     }},
    {"workspace_heads_per_rank_differs", ErrorCode::inconsistent, "workspace", nullptr, nullptr,
     StepSetup::H},
    {"workspace_max_rows_too_small", ErrorCode::shape_mismatch, "workspace.max_rows", nullptr,
     nullptr, StepSetup::H / StepSetup::W, 8},
};

INSTANTIATE_TEST_SUITE_P(Catalogue, DcpStepValidation, ::testing::ValuesIn(kStepCases),
                         [](const auto& info) { return info.param.name; });

// --- parsing, construction and the layout kernels ---

TEST(Validation, ParseBadStrings) {
  expect_error([] { parse_dtype("fp16", "--dtype"); }, ErrorCode::invalid_argument, "--dtype");
  expect_error([] { parse_dtype("", "kv_dtype"); }, ErrorCode::invalid_argument, "kv_dtype");
  expect_error([] { parse_dtype("BF16", "--dtype"); }, ErrorCode::invalid_argument, "--dtype");
  expect_error([] { parse_mask("causl", "--mask"); }, ErrorCode::invalid_argument, "--mask");
  expect_error([] { parse_mask("", "mask"); }, ErrorCode::invalid_argument, "mask");
  expect_error([] { parse_combine("allreduce", "--combine"); }, ErrorCode::invalid_argument,
               "--combine");
  expect_error([] { parse_combine("a2a ", "--combine"); }, ErrorCode::invalid_argument,
               "--combine");
  try {
    parse_dtype("fp16", "--dtype");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp16"), std::string::npos) << e.what();
  }
  // and the good ones
  EXPECT_EQ(parse_dtype("fp32", "x"), DType::f32);
  EXPECT_EQ(parse_dtype("f32", "x"), DType::f32);
  EXPECT_EQ(parse_dtype("bf16", "x"), DType::bf16);
  EXPECT_EQ(parse_dtype("fp8", "x"), DType::fp8_e4m3);
  EXPECT_EQ(parse_dtype("fp8_e4m3", "x"), DType::fp8_e4m3);
  EXPECT_EQ(parse_mask("causal", "x"), Mask::causal);
  EXPECT_EQ(parse_mask("full", "x"), Mask::full);
  EXPECT_EQ(parse_combine("ag_rs", "x"), Combine::ag_rs);
  EXPECT_EQ(parse_combine("a2a", "x"), Combine::a2a);
  EXPECT_EQ(parse_dtype(to_string(DType::bf16), "x"), DType::bf16);
  EXPECT_EQ(parse_mask(to_string(Mask::full), "x"), Mask::full);
  EXPECT_EQ(parse_combine(to_string(Combine::a2a), "x"), Combine::a2a);
}

// validate_block_ids (make_plan does not read the table): the fullest rank's columns and ids,
// named by row and column.
TEST(Validation, BlockIds) {
  DecodeSetup s;
  EXPECT_NO_THROW(validate_block_ids(s.batch, s.config));
  {
    Batch b = s.batch;  // 3 columns: request 0 needs 4 blocks on rank 0
    b.max_blocks = 3;
    b.block_table = {0, 1, 2, 4, 5, -1};
    expect_error([&] { validate_block_ids(b, s.config); }, ErrorCode::shape_mismatch,
                 "block_table row 0");
  }
  {
    Batch b = s.batch;
    b.block_table[1] = -3;
    expect_error([&] { validate_block_ids(b, s.config); }, ErrorCode::out_of_range,
                 "block_table[0][1]");
  }
  {
    Batch b = s.batch;
    b.block_table[5] = 12;
    expect_error([&] { validate_block_ids(b, s.config); }, ErrorCode::out_of_range,
                 "block_table[1][0]");
  }
  {
    // Rank 1 reads a prefix of what rank 0 reads, and is refused alike.
    Batch b = s.batch;
    b.block_table[3] = 99;  // request 0's 4th block: rank 1 holds 50 tokens, reads it too
    PlanConfig c = s.config;
    c.sharding.rank = 1;
    expect_error([&] { validate_block_ids(b, c); }, ErrorCode::out_of_range, "block_table[0][3]");
  }
}

// A decode runs a plan or a schedule: exactly one of them.
TEST(Validation, DecodeTakesExactlyOneOfPlanAndSchedule) {
  DecodeSetup s;
  auto backend = make_cpu_backend(1);
  const Plan plan = make_plan(s.batch, s.config);
  Schedule schedule(*backend, s.config, capacity_of(plan));
  schedule.update(plan, nullptr);
  DecodeArgs a = s.args(plan);
  a.schedule = &schedule;
  expect_error([&] { backend->decode(a, nullptr); }, ErrorCode::invalid_argument, "schedule");
  a.plan = nullptr;
  a.schedule = nullptr;
  expect_error([&] { backend->decode(a, nullptr); }, ErrorCode::invalid_argument, "plan");
  EXPECT_TRUE(s.outputs_untouched());
  // A schedule never written has no plan to run.
  Schedule unwritten(*backend, s.config, capacity_of(plan));
  a.schedule = &unwritten;
  expect_error([&] { backend->decode(a, nullptr); }, ErrorCode::invalid_argument, "schedule");
  EXPECT_TRUE(s.outputs_untouched());
  // A schedule lives in its backend's memory: another backend (another GPU) does not take it.
  a.schedule = &schedule;
  auto other = make_cpu_backend(1);
  expect_error([&] { other->decode(a, nullptr); }, ErrorCode::inconsistent, "schedule");
  EXPECT_TRUE(s.outputs_untouched());
  EXPECT_NO_THROW(backend->decode(a, nullptr));
}

TEST(Validation, InProcessGroupAndCommunicator) {
  expect_error([] { InProcessGroup g(0); }, ErrorCode::invalid_argument, "world");
  expect_error([] { InProcessGroup g(-2); }, ErrorCode::invalid_argument, "world");
  InProcessGroup g(2);
  expect_error([&] { InProcessCommunicator c(g, 2); }, ErrorCode::out_of_range, "rank");
  expect_error([&] { InProcessCommunicator c(g, -1); }, ErrorCode::out_of_range, "rank");
}

TEST(Validation, DcpWorkspace) {
  auto be = make_cpu_backend(1);
  expect_error([&] { DcpWorkspace ws(*be, 0, 4, 2, DType::bf16, 0); }, ErrorCode::invalid_argument,
               "world");
  expect_error([&] { DcpWorkspace ws(*be, 2, -1, 2, DType::bf16, 0); }, ErrorCode::invalid_argument,
               "max_rows");
  expect_error([&] { DcpWorkspace ws(*be, 2, 4, 0, DType::bf16, 0); }, ErrorCode::invalid_argument,
               "heads_per_rank");
  // Sizes that would wrap (2^55 rows of 2 x 8 heads): refused, not allocated as 0 bytes.
  expect_error([&] { DcpWorkspace ws(*be, 2, std::int64_t(1) << 55, 8, DType::bf16, 0); },
               ErrorCode::out_of_range, "max_rows");
}

// A schedule plans on the device by the config's divisions and must plan exactly as make_plan:
// it refuses every config make_plan refuses (a block size of 0 once divided by zero).
TEST(Validation, ScheduleRefusesTheConfigsMakePlanRefuses) {
  auto be = make_cpu_backend(1);
  const PlanConfig good{{1, 0, 1}, 4, 16, 64, be->device_model(), 0};
  const ScheduleCapacity cap{2, 4, 8, 64, 4, 8};
  Schedule ok(*be, good, cap);
  const std::pair<std::function<void(PlanConfig&)>, const char*> bad[] = {
      {[](PlanConfig& c) { c.block_size = 0; }, "block_size"},
      {[](PlanConfig& c) { c.num_heads = 0; }, "num_heads"},
      {[](PlanConfig& c) { c.sharding.world = 0; }, "world"},
      {[](PlanConfig& c) { c.sharding.rank = 5; }, "rank"},
      {[](PlanConfig& c) { c.sharding.interleave = 3; }, "interleave"},
      {[](PlanConfig& c) { c.model.min_split_tokens = 0; }, "model.min_split_tokens"},
      {[](PlanConfig& c) { c.kv_chunk_blocks = -1; }, "kv_chunk_blocks"},
  };
  for (const auto& [change, argument] : bad) {
    PlanConfig c = good;
    change(c);
    std::string got;
    try {
      validate_config(c);
    } catch (const Error& e) {
      got = e.argument();
    }
    ASSERT_FALSE(got.empty()) << argument;
    for (auto make : {std::function<void()>([&] { Schedule s(*be, c, cap); }),
                      std::function<void()>([&] { capacity_for_limits(c, 2, 4, 8); })}) {
      try {
        make();
        ADD_FAILURE() << argument << ": accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.argument(), got) << e.what();
      }
    }
  }
}

TEST(Validation, SizesThatWouldWrapAreRefused) {
  PlanConfig c{{1, 0, 1}, 128, 16, 64, {132, 64, 256}, 1};
  expect_error([&] { capacity_for_limits(c, 4, std::int64_t(1) << 40, 1 << 30); },
               ErrorCode::out_of_range, "max_rows");
  expect_error([] { decode_workspace_bytes(-1, 16); }, ErrorCode::invalid_argument, "partial_rows");
  expect_error([] { decode_workspace_bytes(std::int64_t(1) << 62, 1 << 30); },
               ErrorCode::out_of_range, "partial_rows");
  expect_error([] { HostKvCache cache(DType::bf16, -1, 64); }, ErrorCode::invalid_argument,
               "cache.num_blocks");
  expect_error([] { HostKvCache cache(DType::f32, std::int64_t(1) << 50, 64); },
               ErrorCode::out_of_range, "cache.num_blocks");
  // Negative extents or a product past 2^62 elements (numel() would wrap to a small number).
  float v[8] = {}, s[8] = {};
  auto merge = [&](std::vector<std::int64_t> vs, std::vector<std::int64_t> ss,
                   std::vector<std::int64_t> os, std::vector<std::int64_t> ls) {
    validate(MergeStatesArgs{TensorRef(v, DType::f32, vs), TensorRef(s, DType::f32, ss),
                             TensorRef(v, DType::f32, os), TensorRef(s, DType::f32, ls)});
  };
  expect_error(
      [&] {
        merge({1, -1, -1, 4}, {1, -1, -1}, {-1, -1, 4}, {-1, -1});
      },
      ErrorCode::shape_mismatch, "v");
  const std::int64_t big = std::int64_t(1) << 32;
  expect_error(
      [&] {
        merge({2, big, big, 1}, {2, big, big}, {big, big, 1}, {big, big});
      },
      ErrorCode::out_of_range, "v");
  // Rows are int32.
  Batch b;
  b.query_start_loc = {0, 1};
  b.total_len = {5};
  b.num_tokens = std::int64_t(1) << 40;
  expect_error([&] { validate_layout(b); }, ErrorCode::out_of_range, "num_tokens");
}

TEST(Validation, NamesTheArgumentThatIsWrong) {
  auto be = make_cpu_backend(1);
  float x[8] = {};
  expect_error(
      [&] {
        be->combine_rescale(
            {0, 0, TensorRef(x, DType::f32, {0, 1, 1}),
             TensorRef(x, DType::f32, {1, 1, kLatentDim}),
             TensorRef(x, DType::f32, {0, 1, 1, kLatentDim}), TensorRef(x, DType::f32, {1, 1})},
            nullptr);
      },
      ErrorCode::invalid_argument, "world");
  Schedule s(*be, {{1, 0, 1}, 4, 16, 64, be->device_model(), 0}, {2, 4, 8, 64, 4, 8});
  std::int32_t qsl[3] = {0, 1, 2}, lens[2] = {5, 5};
  expect_error(
      [&] {
        s.plan_on_device({TensorRef(qsl, DType::i32, {3}), TensorRef(lens, DType::i32, {}), -1},
                         nullptr);
      },
      ErrorCode::shape_mismatch, "seq_lens");
}

// The row views of a batch validate it first: an inconsistent one once wrote past their vectors.
TEST(Validation, RowViewsOfABadBatch) {
  Batch b;
  b.query_start_loc = {0, 3};
  b.total_len = {5};
  b.num_tokens = 1;
  expect_error([&] { row_requests(b); }, ErrorCode::inconsistent, "num_tokens");
  expect_error([&] { row_global_bounds(b); }, ErrorCode::inconsistent, "num_tokens");
  expect_error([&] { is_uniform(b); }, ErrorCode::inconsistent, "num_tokens");
}

TEST(Validation, ScenarioSpec) {
  testing::ScenarioSpec s;
  s.world = 2;
  s.heads = 3;
  expect_error([&] { testing::make_scenario(s); }, ErrorCode::invalid_argument, "heads");
  s.heads = 4;
  s.interleave = 3;
  expect_error([&] { testing::make_scenario(s); }, ErrorCode::invalid_argument, "interleave");
  s.interleave = 1;
  s.q_dtype = DType::fp8_e4m3;
  expect_error([&] { testing::make_scenario(s); }, ErrorCode::dtype_mismatch, "q_dtype");
}

TEST(Validation, HostKvCache) {
  expect_error([] { HostKvCache c(DType::bf16, 4, 16, 0.5f); }, ErrorCode::invalid_argument,
               "cache.k_scale");
  expect_error([] { HostKvCache c(DType::fp8_e4m3, 4, 16, -1.0f); }, ErrorCode::invalid_argument,
               "cache.k_scale");
  expect_error([] { HostKvCache c(DType::bf16, 0, 16); }, ErrorCode::invalid_argument,
               "cache.num_blocks");
  expect_error([] { HostKvCache c(DType::bf16, 4, 0); }, ErrorCode::invalid_argument,
               "cache.block_size");
}

TEST(Validation, CombineAndLayoutKernels) {
  auto be = make_cpu_backend(1);
  const int N = 3, H = 6, W = 4;  // 6 heads are not divisible by 4 ranks
  std::vector<float> po(std::size_t(N) * H * kLatentDim, 1.0f), pl(std::size_t(N) * H, 0.0f);
  std::vector<std::uint8_t> send(std::size_t(W) * N * H * kPackedRow * 4, kSentinel);
  const auto before = send;
  expect_error(
      [&] {
        be->combine_pack({W, TensorRef(po.data(), DType::f32, {N, H, kLatentDim}),
                          TensorRef(pl.data(), DType::f32, {N, H}),
                          TensorRef(send.data(), DType::f32, {W, N, 1, kPackedRow})},
                         nullptr);
      },
      ErrorCode::shape_mismatch, "partial_out");
  std::vector<float> glse(std::size_t(W) * N * H, 0.0f), lse_out(std::size_t(N) * H);
  expect_error(
      [&] {
        be->combine_rescale({W, 0, TensorRef(glse.data(), DType::f32, {W, N, H}),
                             TensorRef(po.data(), DType::f32, {N, H, kLatentDim}),
                             TensorRef(send.data(), DType::f32, {W, N, 1, kLatentDim}),
                             TensorRef(lse_out.data(), DType::f32, {N, 1})},
                            nullptr);
      },
      ErrorCode::shape_mismatch, "partial_out");
  expect_error(
      [&] {
        be->combine_rescale({2, 2, TensorRef(glse.data(), DType::f32, {2, N, H}),
                             TensorRef(po.data(), DType::f32, {N, H, kLatentDim}),
                             TensorRef(send.data(), DType::f32, {2, N, 3, kLatentDim}),
                             TensorRef(lse_out.data(), DType::f32, {N, 3})},
                            nullptr);
      },
      ErrorCode::out_of_range, "rank");
  expect_error(
      [&] {
        be->combine_merge({TensorRef(send.data(), DType::fp8_e4m3, {2, N, 3, kPackedRow}),
                           TensorRef(po.data(), DType::f32, {N, 3, kLatentDim}),
                           TensorRef(lse_out.data(), DType::f32, {N, 3}),
                           -1,
                           {}},
                          nullptr);
      },
      ErrorCode::dtype_mismatch, "recv");
  expect_error(  // a bf16 payload has 514 slots per row, not 513
      [&] {
        be->combine_merge({TensorRef(send.data(), DType::bf16, {2, N, 3, kPackedRow}),
                           TensorRef(po.data(), DType::f32, {N, 3, kLatentDim}),
                           TensorRef(lse_out.data(), DType::f32, {N, 3}),
                           -1,
                           {}},
                          nullptr);
      },
      ErrorCode::shape_mismatch, "recv");
  expect_error(
      [&] {
        be->combine_merge({TensorRef(po.data(), DType::f32, {2, N, 3, kPackedRow}),
                           TensorRef(send.data(), DType::f32, {N, 3, kLatentDim}),
                           TensorRef(lse_out.data(), DType::f32, {N, 2}),
                           -1,
                           {}},
                          nullptr);
      },
      ErrorCode::shape_mismatch, "lse");
  // The own partial (CombineMergeArgs::own): a rank of the exchange, in recv's row layout.
  auto merge_own = [&](int own_rank, TensorRef own) {
    return [&, own_rank, own] {
      be->combine_merge({TensorRef(po.data(), DType::f32, {2, N, 3, kPackedRow}),
                         TensorRef(send.data(), DType::f32, {N, 3, kLatentDim}),
                         TensorRef(lse_out.data(), DType::f32, {N, 3}), own_rank, own},
                        nullptr);
    };
  };
  const TensorRef own(pl.data(), DType::f32, {N, 3, kPackedRow});
  expect_error(merge_own(2, own), ErrorCode::out_of_range, "own_rank");
  expect_error(merge_own(-1, own), ErrorCode::out_of_range, "own_rank");
  expect_error(merge_own(1, TensorRef(pl.data(), DType::f32, {N, 3, kLatentDim})),
               ErrorCode::shape_mismatch, "own");
  expect_error(merge_own(0, TensorRef(pl.data(), DType::bf16, {N, 3, kPackedRow})),
               ErrorCode::dtype_mismatch, "own");
  expect_error(merge_own(0, {}), ErrorCode::shape_mismatch, "own");
  expect_error(
      [&] {
        be->unpack_query({TensorRef(po.data(), DType::f32, {2, N, 1, kHeadDim}),
                          TensorRef(send.data(), DType::f32, {N, 3, kHeadDim})},
                         nullptr);
      },
      ErrorCode::shape_mismatch, "q");
  expect_error(
      [&] {
        be->convert({TensorRef(po.data(), DType::f32, {N, H}),
                     TensorRef(send.data(), DType::bf16, {N, H + 1})},
                    nullptr);
      },
      ErrorCode::shape_mismatch, "dst");
  expect_error(
      [&] {
        be->convert(
            {TensorRef(po.data(), DType::bf16, {N, H}), TensorRef(send.data(), DType::f32, {N, H})},
            nullptr);
      },
      ErrorCode::dtype_mismatch, "src");
  EXPECT_EQ(send, before);
}

TEST(Validation, ErrorMessageFormat) {
  const Error e(ErrorCode::shape_mismatch, "q", "9 rows", "2 rows");
  EXPECT_EQ(std::string(e.what()), "q (shape mismatch): expected 9 rows, got 2 rows");
  EXPECT_EQ(e.expected(), "9 rows");
  EXPECT_EQ(e.actual(), "2 rows");
  for (auto c : {ErrorCode::invalid_argument, ErrorCode::shape_mismatch, ErrorCode::dtype_mismatch,
                 ErrorCode::out_of_range, ErrorCode::inconsistent, ErrorCode::unsupported,
                 ErrorCode::backend_failure}) {
    EXPECT_STRNE(to_string(c), "unknown");
  }
}

// A block id the host never checked (a device table) reads no memory on any backend: its keys
// are NaN, so exactly the rows that see them come out NaN and the others stay finite.
TEST(DecodeBlockIds, BadIdInTheDecodeTableGivesNaNRowsOnly) {
  DecodeSetup s;
  auto backend = make_cpu_backend(1);
  const Plan plan = make_plan(s.batch, s.config);
  zero_used_pages(*backend, s);
  std::vector<std::int32_t> bad = s.batch.block_table;
  bad[std::size_t(s.batch.max_blocks)] = 99;  // request 1's first block
  DecodeArgs a = s.args(plan);
  a.block_table.data = bad.data();
  backend->decode(a, nullptr);
  const auto* lse = reinterpret_cast<const float*>(s.lse.data());
  for (std::int64_t row = 0; row < plan.num_real_rows; ++row) {
    const bool request1 = row >= s.batch.query_start_loc[1] && row < s.batch.query_start_loc[2];
    EXPECT_EQ(std::isnan(lse[row * DecodeSetup::H]), request1) << "row " << row;
  }
}

}  // namespace
}  // namespace dcpmla
