// `dcpmla attend` end to end: case directories written here (both KV forms, W = 1 and 2, fp32,
// bf16 and fp8 caches) must give the reference result within tolerance and exactly the result of
// the direct in-process run; malformed directories must give an error naming the file or field,
// exit status 2 and no output files.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>

#include "attend.h"
#include "case_writer.h"
#include "check.h"
#include "cli.h"
#include "dcpmla/cpu_backend.h"
#include "dcpmla/error.h"
#include "dcpmla/testing/runner.h"
#include "dcpmla/testing/scenario.h"
#include "npy.h"

namespace dcpmla::testing {
namespace {
namespace fs = std::filesystem;
using tool::npy::Dtype;

struct CaseSetup {
  int world;
  DType kv;
  KvForm form;
  int interleave = 1;
  Combine combine = Combine::ag_rs;
};

std::string name_of(const CaseSetup& s);
void PrintTo(const CaseSetup& s, std::ostream* os) {
  *os << name_of(s);
}

std::string name_of(const CaseSetup& s) {
  return fmt::format("W{}_I{}_{}_{}_{}", s.world, s.interleave, to_string(s.kv),
                     s.form == KvForm::latents ? "kv" : "caches", to_string(s.combine));
}

// A ragged speculative batch with a non-causal request, a request shorter than W + Q (rows that
// see nothing on a rank), a long one spanning many blocks, and padding rows.
testing::Scenario scenario(const CaseSetup& s) {
  testing::ScenarioSpec spec;
  spec.world = s.world;
  spec.interleave = s.interleave;
  spec.heads = 8;
  spec.block_size = 16;
  spec.kv_dtype = s.kv;
  spec.q_dtype = s.kv == DType::f32 ? DType::f32 : DType::bf16;
  spec.padding_rows = 2;
  spec.seed = 7 + std::uint64_t(s.world);
  const std::vector<int> q = {8, 2, 3, 4, 1};
  const std::vector<std::int64_t> t = {100, 40, 7, 4, 130};
  const std::vector<Mask> m = {Mask::causal, Mask::causal, Mask::full, Mask::causal, Mask::causal};
  return testing::make_fixed_scenario(spec, q, t, m);
}

// Every request's KV in chunks of 2 blocks (AttendOptions::kv_chunk_blocks).
constexpr int kChunkBlocks = 2;

testing::RunResult as_run(const tool::AttendResult& r) {
  return {r.out, r.lse};
}

class ToolsAttend : public ::testing::TestWithParam<CaseSetup> {};

TEST_P(ToolsAttend, MatchesReferenceAndDirectRun) {
  const CaseSetup s = GetParam();
  const testing::Scenario sc = scenario(s);
  const fs::path dir = temp_dir("attend_" + name_of(s));
  write_case(sc, dir, s.form);

  const tool::Case c = tool::load_case(dir);
  EXPECT_EQ(c.kv.has_value(), s.form == KvForm::latents);
  const auto got = tool::run_case(c, {s.combine, 2, kChunkBlocks});
  ASSERT_EQ(got.rows, sc.batch.rows());
  ASSERT_EQ(got.heads, sc.spec.heads);

  const auto tol = testing::tolerance_for(sc.spec);
  const auto cmp = testing::compare(sc, as_run(got), testing::run_reference(sc), tol);
  EXPECT_TRUE(cmp.pass) << "max|dO| " << cmp.max_out_error << " max|dLSE| " << cmp.max_lse_error
                        << " padding exact " << cmp.padding_exact;

  testing::RunOptions direct;
  direct.combine = s.combine;
  direct.kv_chunk_blocks = kChunkBlocks;
  const auto want = testing::run_dcp(
      sc, [](int) { return make_cpu_backend(1); }, direct);
  const auto agree = testing::agreement(as_run(got), want);
  EXPECT_TRUE(agree.bit_identical)
      << "max|dO| " << agree.max_out_diff << " max|dLSE| " << agree.max_lse_diff;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ToolsAttend,
    ::testing::Values(
        CaseSetup{1, DType::f32, KvForm::latents}, CaseSetup{1, DType::f32, KvForm::rank_caches},
        CaseSetup{1, DType::bf16, KvForm::latents}, CaseSetup{1, DType::bf16, KvForm::rank_caches},
        CaseSetup{2, DType::f32, KvForm::latents}, CaseSetup{2, DType::f32, KvForm::rank_caches},
        CaseSetup{2, DType::bf16, KvForm::latents}, CaseSetup{2, DType::bf16, KvForm::rank_caches},
        CaseSetup{2, DType::fp8_e4m3, KvForm::latents, 2, Combine::a2a},
        CaseSetup{2, DType::fp8_e4m3, KvForm::rank_caches, 2, Combine::a2a},
        CaseSetup{4, DType::bf16, KvForm::rank_caches, 4, Combine::a2a}),
    [](const auto& info) { return name_of(info.param); });

// ---------------------------------------------------------------- the command line

std::string tool_path() {
  return DCPMLA_TOOL_PATH;
}

// Runs the dcpmla binary; returns its exit status and puts stdout + stderr in `log`.
int run_tool(const std::string& args, std::string* log = nullptr) {
  const fs::path log_path = temp_dir("log") / "log.txt";
  const int status =
      std::system(fmt::format("'{}' {} > '{}' 2>&1", tool_path(), args, log_path.string()).c_str());
  if (log) {
    std::ifstream in(log_path);
    *log = std::string(std::istreambuf_iterator<char>(in), {});
  }
  fs::remove_all(log_path.parent_path());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(ToolsAttendCli, WritesOutAndLse) {
  const CaseSetup s{2, DType::bf16, KvForm::latents};
  const testing::Scenario sc = scenario(s);
  const fs::path dir = temp_dir("cli_case"), out = temp_dir("cli_out") / "sub";
  write_case(sc, dir, s.form);
  std::string log;
  ASSERT_EQ(run_tool(fmt::format("attend --case '{}' --out '{}' --threads 2 --kv-chunk-blocks 2",
                                 dir.string(), out.string()),
                     &log),
            0)
      << log;
  EXPECT_NE(log.find("wrote"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(dir / "out.npy"));  // --out was given
  const auto o = tool::npy::read(out / "out.npy");
  const auto l = tool::npy::read(out / "lse.npy");
  EXPECT_EQ(o.dtype, Dtype::f4);
  EXPECT_EQ(o.shape, (std::vector<std::int64_t>{sc.batch.rows(), 8, 512}));
  EXPECT_EQ(l.shape, (std::vector<std::int64_t>{sc.batch.rows(), 8}));
  const auto direct = tool::run_case(tool::load_case(dir), {Combine::ag_rs, 2, kChunkBlocks});
  EXPECT_EQ(o.values<float>().size(), direct.out.size());
  EXPECT_TRUE(
      testing::agreement({o.values<float>(), l.values<float>()}, as_run(direct)).bit_identical);
  // Padding rows: O = 0, LSE = -inf.
  const auto lse = l.values<float>();
  EXPECT_TRUE(std::isinf(lse.back()) && lse.back() < 0);

  // Without --out the result goes into the case directory.
  ASSERT_EQ(run_tool(fmt::format("attend --case '{}' --quiet --combine a2a", dir.string()), &log),
            0)
      << log;
  EXPECT_TRUE(log.empty()) << log;
  EXPECT_TRUE(fs::exists(dir / "out.npy") && fs::exists(dir / "lse.npy"));
  fs::remove_all(dir);
  fs::remove_all(out.parent_path());
}

TEST(ToolsAttendCli, QScaleMultipliesTheScores) {
  const testing::Scenario sc = scenario({2, DType::f32, KvForm::latents});
  const fs::path a = temp_dir("qscale_a"), b = temp_dir("qscale_b");
  write_case(sc, a, KvForm::latents);
  write_case(sc, b, KvForm::latents);
  auto cfg = case_config(sc);
  cfg["softmax_scale"] = sc.spec.softmax_scale / 4;
  cfg["q_scale"] = 4.0;
  std::ofstream(b / "config.json") << cfg.dump();
  const auto ra = tool::run_case(tool::load_case(a), {Combine::ag_rs, 2, kChunkBlocks});
  const auto rb = tool::run_case(tool::load_case(b), {Combine::ag_rs, 2, kChunkBlocks});
  const auto agree = testing::agreement(as_run(ra), as_run(rb));
  EXPECT_LT(agree.max_out_diff, 1e-5);
  EXPECT_LT(agree.max_lse_diff, 1e-5);
  fs::remove_all(a);
  fs::remove_all(b);
}

// ---------------------------------------------------------------- malformed cases

void edit_config(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json cfg;
  std::ifstream(dir / "config.json") >> cfg;
  edit(cfg);
  std::ofstream(dir / "config.json") << cfg.dump();
}

template <class T>
void write_npy(const fs::path& path, Dtype dtype, std::vector<std::int64_t> shape, T fill) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<T> data(std::size_t(n), fill);
  tool::npy::write(path, dtype, shape, data.data());
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

struct Malformed {
  const char* name;
  KvForm form;
  std::function<void(const fs::path&)> mutate;
  std::vector<std::string> message;  // substrings of the error
};

TEST(ToolsAttendCli, MalformedCasesAreRejected) {
  // Base case: W = 2, bf16 cache, H = 8, 5 requests with 18 tokens + 2 padding rows, sum T = 281.
  const testing::Scenario sc = scenario({2, DType::bf16, KvForm::latents});
  const auto rows = sc.batch.rows();
  const std::vector<Malformed> cases = {
      {"no config",
       KvForm::latents,
       [](auto& d) { fs::remove(d / "config.json"); },
       {"config.json", "no such file"}},
      {"bad json",
       KvForm::latents,
       [](auto& d) { write_text(d / "config.json", "{\"world\": 2,"); },
       {"config.json", "valid JSON"}},
      {"no world",
       KvForm::latents,
       [](auto& d) { edit_config(d, [](auto& c) { c.erase("world"); }); },
       {"config.json: world", "required"}},
      {"string world",
       KvForm::latents,
       [](auto& d) { edit_config(d, [](auto& c) { c["world"] = "2"; }); },
       {"config.json: world", "an integer >= 1", "\"2\""}},
      {"heads not multiple",
       KvForm::latents,
       [](auto& d) { edit_config(d, [](auto& c) { c["world"] = 3; }); },
       {"config.json: heads", "multiple of world 3"}},
      {"repeated field",
       KvForm::latents,
       [](auto& d) {
         std::string text;
         std::getline(std::ifstream(d / "config.json"), text, '\0');
         write_text(d / "config.json", "{\"world\": 1, " + text.substr(1));
       },
       {"config.json: world", "a field given once"}},
      {"unknown field",
       KvForm::latents,
       [](auto& d) { edit_config(d, [](auto& c) { c["softmax-scale"] = 1; }); },
       {"config.json: softmax-scale", "unknown field"}},
      {"negative scale",
       KvForm::latents,
       [](auto& d) { edit_config(d, [](auto& c) { c["softmax_scale"] = -0.5; }); },
       {"config.json: softmax_scale", "> 0"}},
      {"bad dtype",
       KvForm::latents,
       [](auto& d) { edit_config(d, [](auto& c) { c["kv_dtype"] = "fp16"; }); },
       {"config.json: kv_dtype", "fp16"}},
      {"k_scale on bf16",
       KvForm::latents,
       [](auto& d) { edit_config(d, [](auto& c) { c["k_scale"] = 0.5; }); },
       {"config.json: k_scale", "fp8 only"}},
      {"bad interleave",
       KvForm::latents,
       [](auto& d) { edit_config(d, [](auto& c) { c["interleave"] = 3; }); },
       {"config.json: interleave", "divisor of block_size 16"}},
      {"mask list length",
       KvForm::latents,
       [](auto& d) { edit_config(d, [](auto& c) {
                       c["mask"] = {"causal", "full"};
                     }); },
       {"config.json: mask", "5 entries"}},
      {"mask value",
       KvForm::latents,
       [](auto& d) { edit_config(d, [](auto& c) { c["mask"] = "bidirectional"; }); },
       {"config.json: mask", "causal or full"}},
      {"num_tokens too small",
       KvForm::latents,
       [](auto& d) { edit_config(d, [](auto& c) { c["num_tokens"] = 3; }); },
       {"config.json: num_tokens", ">= query_start_loc.npy[B] = 18"}},
      {"no query",
       KvForm::latents,
       [](auto& d) { fs::remove(d / "query.npy"); },
       {"query.npy", "no such file"}},
      {"query heads",
       KvForm::latents,
       [rows](auto& d) {
         write_npy<float>(d / "query.npy", Dtype::f4, {rows, 4, 576}, 0.f);
       },
       {"query.npy", fmt::format("({}, 8, 576)", rows), fmt::format("({}, 4, 576)", rows)}},
      {"query dtype",
       KvForm::latents,
       [rows](auto& d) {
         write_npy<std::int32_t>(d / "query.npy", Dtype::i4, {rows, 8, 576}, 0);
       },
       {"query.npy", "float32 ('<f4')", "int32"}},
      {"query truncated",
       KvForm::latents,
       [](auto& d) { fs::resize_file(d / "query.npy", fs::file_size(d / "query.npy") - 4); },
       {"query.npy", "truncated"}},
      {"query fortran",
       KvForm::latents,
       [](auto& d) {
         // Flip the header's fortran_order to True in place (same length: "False" -> "True ").
         std::fstream f(d / "query.npy", std::ios::in | std::ios::out | std::ios::binary);
         std::string head(128, '\0');
         f.read(head.data(), 128);
         const auto at = head.find("False");
         head.replace(at, 5, "True ");
         f.seekp(0);
         f.write(head.data(), 128);
       },
       {"query.npy", "fortran_order True"}},
      {"qsl dtype",
       KvForm::latents,
       [](auto& d) { write_npy<float>(d / "query_start_loc.npy", Dtype::f4, {6}, 0.f); },
       {"query_start_loc.npy", "int32 ('<i4') or int64 ('<i8')", "float32"}},
      {"qsl not increasing",
       KvForm::latents,
       [](auto& d) {
         const std::vector<std::int32_t> v = {0, 8, 8, 13, 17, 18};
         tool::npy::write(d / "query_start_loc.npy", Dtype::i4, std::vector<std::int64_t>{6},
                          v.data());
       },
       {"query_start_loc.npy[2]", "Q >= 1"}},
      {"seq_lens length",
       KvForm::latents,
       [](auto& d) { write_npy<std::int64_t>(d / "seq_lens.npy", Dtype::i8, {4}, 100); },
       {"seq_lens.npy", "(5,)", "(4,)"}},
      {"seq_lens below Q",
       KvForm::latents,
       [](auto& d) {
         const std::vector<std::int64_t> v = {100, 1, 7, 4, 130};
         tool::npy::write(d / "seq_lens.npy", Dtype::i8, std::vector<std::int64_t>{5}, v.data());
       },
       {"seq_lens.npy[1]", "Q = 2"}},
      {"kv rows",
       KvForm::latents,
       [](auto& d) {
         write_npy<float>(d / "kv.npy", Dtype::f4, {280, 576}, 0.f);
       },
       {"kv.npy", "(281, 576)", "(280, 576)"}},
      {"both forms",
       KvForm::latents,
       [](auto& d) {
         write_npy<std::int32_t>(d / "block_table.npy", Dtype::i4, {5, 5}, 0);
       },
       {"kv.npy / block_table.npy", "exactly one KV form"}},
      {"no kv", KvForm::latents, [](auto& d) { fs::remove(d / "kv.npy"); }, {"kv.npy", "neither"}},
      {"no cache rank 1",
       KvForm::rank_caches,
       [](auto& d) { fs::remove(d / "cache_rank1.npy"); },
       {"cache_rank1.npy", "no such file"}},
      {"cache dtype",
       KvForm::rank_caches,
       [&sc](auto& d) {
         write_npy<float>(d / "cache_rank0.npy", Dtype::f4, {sc.num_blocks, 16, 576}, 0.f);
       },
       {"cache_rank0.npy", "uint16 ('<u2') for kv_dtype bf16"}},
      {"cache block size",
       KvForm::rank_caches,
       [&sc](auto& d) {
         write_npy<std::uint16_t>(d / "cache_rank1.npy", Dtype::u2, {sc.num_blocks, 64, 576}, 0);
       },
       {"cache_rank1.npy", "block_size = 16", "64, 576)"}},
      {"block id out of range",
       KvForm::rank_caches,
       [&sc](auto& d) {
         write_npy<std::int32_t>(d / "block_table.npy", Dtype::i4, {5, sc.batch.max_blocks},
                                 std::int32_t(sc.num_blocks));
       },
       {"block_table.npy[0][0]", fmt::format("[0, {})", sc.num_blocks)}},
      {"block table rows",
       KvForm::rank_caches,
       [](auto& d) {
         write_npy<std::int32_t>(d / "block_table.npy", Dtype::i4, {4, 8}, 0);
       },
       {"block_table.npy", "B = 5 from seq_lens.npy", "(4, 8)"}},
      {"block table narrow",
       KvForm::rank_caches,
       [](auto& d) {
         write_npy<std::int32_t>(d / "block_table.npy", Dtype::i4, {5, 1}, 0);
       },
       {"block_table.npy row 0", "1 columns"}},
      {"extra rank cache",
       KvForm::rank_caches,
       [](auto& d) { fs::copy_file(d / "cache_rank0.npy", d / "cache_rank2.npy"); },
       {"cache_rank2.npy", "world 2"}},
      {"no block table",
       KvForm::rank_caches,
       [](auto& d) { fs::remove(d / "block_table.npy"); },
       {"block_table.npy", "cache_rank0.npy"}},
  };
  for (const auto& m : cases) {
    SCOPED_TRACE(m.name);
    const fs::path dir = temp_dir("bad");
    write_case(sc, dir, m.form);
    m.mutate(dir);
    try {
      tool::run_case(tool::load_case(dir), {});
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      for (const auto& part : m.message) {
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
            << "'" << part << "' not in: " << e.what();
      }
    }
    std::string log;
    EXPECT_EQ(run_tool(fmt::format("attend --case '{}'", dir.string()), &log), 2) << log;
    EXPECT_NE(log.find("dcpmla: error:"), std::string::npos) << log;
    EXPECT_FALSE(fs::exists(dir / "out.npy") || fs::exists(dir / "lse.npy"));
    fs::remove_all(dir);
  }
}

// No requests at all, only padding rows (a CUDA-graph warm-up step): O = 0, LSE = -inf.
TEST(ToolsAttendCli, PaddingOnlyBatch) {
  for (const KvForm form : {KvForm::latents, KvForm::rank_caches}) {
    const fs::path dir = temp_dir("padding_only");
    std::ofstream(dir / "config.json")
        << R"({"world": 2, "heads": 2, "softmax_scale": 0.1, "block_size": 16,
               "kv_dtype": "bf16", "num_tokens": 3, "_note": "padding rows only"})";
    write_npy<float>(dir / "query.npy", Dtype::f4, {3, 2, 576}, NAN);  // padding: never read
    write_npy<std::int64_t>(dir / "query_start_loc.npy", Dtype::i8, {1}, 0);
    write_npy<std::int32_t>(dir / "seq_lens.npy", Dtype::i4, {0}, 0);
    if (form == KvForm::latents) {
      write_npy<float>(dir / "kv.npy", Dtype::f4, {0, 576}, 0.0f);
    } else {
      write_npy<std::int32_t>(dir / "block_table.npy", Dtype::i4, {0, 0}, 0);
      for (int r = 0; r < 2; ++r) {
        write_npy<std::uint16_t>(dir / fmt::format("cache_rank{}.npy", r), Dtype::u2, {1, 16, 576},
                                 std::uint16_t(0x7fc0));
      }
    }
    std::string log;
    ASSERT_EQ(run_tool(fmt::format("attend --case '{}' --quiet", dir.string()), &log), 0) << log;
    const auto out = tool::npy::read(dir / "out.npy").values<float>();
    const auto lse = tool::npy::read(dir / "lse.npy").values<float>();
    ASSERT_EQ(out.size(), 3u * 2 * 512);
    ASSERT_EQ(lse.size(), 3u * 2);
    for (float x : out) EXPECT_EQ(x, 0.0f);
    for (float x : lse) EXPECT_TRUE(std::isinf(x) && x < 0);
    fs::remove_all(dir);
  }
}

TEST(ToolsAttendCli, BadCommandLinesExitWithStatus2) {
  std::string log;
  EXPECT_EQ(run_tool("attend --case /nonexistent/dcpmla-case", &log), 2);
  EXPECT_NE(log.find("--case"), std::string::npos) << log;
  const testing::Scenario sc = scenario({1, DType::f32, KvForm::latents});
  const fs::path dir = temp_dir("bad_cli");
  write_case(sc, dir, KvForm::latents);
  EXPECT_EQ(run_tool(fmt::format("attend --case '{}' --combine ring", dir.string()), &log), 2);
  EXPECT_NE(log.find("--combine"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(dir / "out.npy"));
  fs::remove_all(dir);
}

// Every command-line error, from any subcommand: one line in the project's format, exit status 2.
TEST(ToolsCli, EveryBadCommandLineIsOneLineWithStatus2) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"demo --dcp 0", "--dcp (invalid argument): expected an integer in [1, 1024], got '0'"},
      {"demo --requests 0", "--requests (invalid argument): expected an integer >= 1, got '0'"},
      {"attend --case x --threads -5", "--threads (invalid argument): expected an integer >= 0"},
      {"attend --case x --kv-chunk-blocks -1", "--kv-chunk-blocks (invalid argument)"},
      {"attend", "--case (invalid argument): expected a value, got none"},
      {"demo --threads -1", "--threads (invalid argument): expected an integer >= 0, got '-1'"},
      {"check --threads x", "--threads (invalid argument): expected an integer >= 0, got 'x'"},
      {"demo --block-size 2147483647",
       "--block-size (invalid argument): expected a demo that fits"},
      {"demo --heads 1000000", "--heads (invalid argument): expected a demo that fits"},
      {"demo --max-context 2147483647", "--max-context (invalid argument): expected a demo that"},
      {"demo --dcp", "--dcp (invalid argument): expected a value, got none"},
      {"demo --dcp 2 --heads 3", "--heads (invalid argument): expected a positive multiple of"},
      {"demo --interleave 3", "--interleave (invalid argument): expected a divisor of"},
      {"demo --max-drafts 7 --max-context 3", "--max-context (invalid argument): expected >= 1"},
      {"demo --no-such-option", "--no-such-option (invalid argument)"},
      {"", "command (invalid argument): expected one of demo, check, attend, got none"},
      {"demo --dtype fp9", "--dtype (invalid argument): expected one of"},
  };
  for (const auto& [args, want] : cases) {
    std::string log;
    EXPECT_EQ(run_tool(args, &log), 2) << args << ": " << log;
    EXPECT_EQ(log.rfind("dcpmla: error: " + want, 0), 0u) << args << ": " << log;
    EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << args << ": " << log;
  }
  std::string help;
  EXPECT_EQ(run_tool("demo --help", &help), 0);
  EXPECT_NE(help.find("--max-context"), std::string::npos) << help;
}

// Form (a): the tool allocates the rank caches; a block size that cannot fit is refused first,
// naming the field.
TEST(ToolsCli, OversizedRankCachesAreRefusedBeforeAllocating) {
  const testing::Scenario sc = scenario({1, DType::f32, KvForm::latents});
  const fs::path dir = temp_dir("huge_blocks");
  write_case(sc, dir, KvForm::latents);
  std::string config;
  {
    std::ifstream in(dir / "config.json");
    config = std::string(std::istreambuf_iterator<char>(in), {});
  }
  const auto at = config.find("\"block_size\"");
  ASSERT_NE(at, std::string::npos);
  const auto colon = config.find(':', at), end = config.find_first_of(",}", colon);
  config.replace(colon + 1, end - colon - 1, " 67108864");
  std::ofstream(dir / "config.json") << config;
  std::string log;
  EXPECT_EQ(run_tool(fmt::format("attend --case '{}'", dir.string()), &log), 2) << log;
  EXPECT_EQ(log.rfind("dcpmla: error: config.json: block_size (invalid argument): expected rank "
                      "caches that fit",
                      0),
            0u)
      << log;
  EXPECT_FALSE(fs::exists(dir / "out.npy"));
  fs::remove_all(dir);
}

// attend writes out.npy and lse.npy both or neither: an lse.npy that cannot be replaced leaves
// an earlier out.npy as it was.
TEST(ToolsCli, OutputsAreWrittenBothOrNeither) {
  const CaseSetup s{1, DType::f32, KvForm::latents};
  const testing::Scenario sc = scenario(s);
  const fs::path dir = temp_dir("both_or_neither");
  write_case(sc, dir, s.form);
  std::ofstream(dir / "out.npy") << "earlier";
  fs::create_directories(dir / "lse.npy");
  std::string log;
  EXPECT_EQ(run_tool(fmt::format("attend --case '{}'", dir.string()), &log), 2) << log;
  EXPECT_NE(log.find("lse.npy (backend failure): expected a regular file or nothing"),
            std::string::npos)
      << log;
  std::ifstream in(dir / "out.npy");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "earlier");
  for (const auto& entry : fs::directory_iterator(dir)) {
    EXPECT_EQ(entry.path().string().find(".tmp"), std::string::npos) << entry.path();
  }
  fs::remove_all(dir);
}

// An error message never spans two lines, whatever the input quoted in it holds.
TEST(ToolsCli, ErrorsAreOneLine) {
  EXPECT_EQ(tool::one_line("a\nb\tc\r\x01"), "a\\nb\\tc\\r\\x01");
}

// A config.json nested far deeper than any real one is refused with an excerpt of the value;
// quoting it must not recurse once per level (which overflowed the stack).
TEST(ToolsAttendCli, DeeplyNestedConfigIsRefused) {
  const testing::Scenario sc = scenario({1, DType::f32, KvForm::latents});
  const fs::path dir = temp_dir("deep_config");
  write_case(sc, dir, KvForm::latents);
  constexpr std::size_t kDepth = 400000;
  const std::string nested = std::string(kDepth, '[') + std::string(kDepth, ']');
  for (const std::string& text : {nested, "{\"world\": " + nested + "}"}) {
    write_text(dir / "config.json", text);
    try {
      tool::load_case(dir);
      ADD_FAILURE() << "a nested config.json was accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("[[[[[[[["), std::string::npos) << msg;
      EXPECT_LT(msg.size(), 300u) << msg;
    }
  }
  fs::remove_all(dir);
}

TEST(ToolsCheck, EveryVectorPasses) {
  const auto rows = tool::run_checks({.threads = 2, .print = false});
  EXPECT_GE(rows.size(), 25u);
  for (const auto& r : rows)
    EXPECT_TRUE(r.pass) << r.name << ": expected " << r.expected << ", got " << r.got;
  std::string log;
  EXPECT_EQ(run_tool("check", &log), 0) << log;
  EXPECT_NE(log.find("PASS"), std::string::npos) << log;
}

}  // namespace
}  // namespace dcpmla::testing
