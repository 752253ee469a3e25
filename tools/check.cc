// `dcpmla check`: one line per SPEC section 6 test vector (expected, computed, pass/fail), then
// the SPEC batches run end to end across W = 2 simulated ranks on the CPU backend, compared with
// the double-precision reference, and the negative control that must fail that comparison.
#include "check.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <thread>

#include "cli.h"
#include "commands.h"
#include "dcpmla/cpu_backend.h"
#include "dcpmla/merge.h"
#include "dcpmla/plan.h"
#include "dcpmla/sharding.h"
#include "dcpmla/testing/runner.h"
#include "dcpmla/testing/scenario.h"

namespace dcpmla::tool {
namespace {

// [93, 94, ..., 100, 40] as "[93..100, 40]": runs of 4 or more consecutive values are shortened.
template <class T>
std::string list(const std::vector<T>& v) {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < v.size();) {
    std::size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    if (j - i >= 3) {
      parts.push_back(fmt::format("{}..{}", v[i], v[j]));
    } else {
      for (std::size_t k = i; k <= j; ++k) parts.push_back(fmt::format("{}", v[k]));
    }
    i = j + 1;
  }
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

template <class T>
std::vector<T> range(T first, T last) {
  std::vector<T> v;
  for (T x = first; x <= last; ++x) v.push_back(x);
  return v;
}

std::vector<std::int64_t> concat(std::vector<std::int64_t> a, const std::vector<std::int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A batch with enough blocks for every rank (block ids 0, 1, ... per request, any cache size).
Batch make_batch(const std::vector<int>& q_lens, const std::vector<std::int64_t>& total_lens,
                 Mask mask, int block_size) {
  Batch b;
  b.query_start_loc.push_back(0);
  std::int64_t max_t = 0;
  for (std::size_t i = 0; i < q_lens.size(); ++i) {
    b.query_start_loc.push_back(b.query_start_loc.back() + q_lens[i]);
    b.total_len.push_back(total_lens[i]);
    b.mask.push_back(mask);
    max_t = std::max(max_t, total_lens[i]);
  }
  b.max_blocks = std::int32_t((max_t + block_size - 1) / block_size);
  for (std::size_t i = 0; i < q_lens.size(); ++i) {
    for (std::int32_t k = 0; k < b.max_blocks; ++k) b.block_table.push_back(k);
  }
  return b;
}

Plan plan_for(const Batch& batch, int world, int rank, int block_size = 64) {
  return make_plan(batch, {Sharding{world, rank, 1}, 16, block_size, batch.max_blocks, {}});
}

class Checks {
 public:
  template <class T>
  void equal(const std::string& name, const T& expected, const T& got) {
    add(name, show(expected), show(got), expected == got);
  }
  void add(std::string name, std::string expected, std::string got, bool pass) {
    rows_.push_back({std::move(name), std::move(expected), std::move(got), pass});
  }
  std::vector<CheckRow>& rows() { return rows_; }

 private:
  template <class T>
  static std::string show(const std::vector<T>& v) {
    return list(v);
  }
  template <class T>
  static std::string show(const T& v) {
    return fmt::format("{}", v);
  }
  std::vector<CheckRow> rows_;
};

void sharding_vectors(Checks& c) {
  for (auto [W, I] : {std::pair{4, 1}, std::pair{2, 4}}) {
    const Sharding sh{W, 0, I};
    std::vector<std::int64_t> got;
    for (int r = 0; r < W; ++r) got.push_back(sh.local_len_of(r, 10));
    c.equal(fmt::format("local_len W={} I={} L=10", W, I),
            W == 4 ? std::vector<std::int64_t>{3, 3, 2, 2} : std::vector<std::int64_t>{6, 4}, got);
  }

  // Visible local keys per row come from the plan (row_local_bound), never local(T) - offset.
  const Batch b10 = make_batch({3}, {10}, Mask::causal, 64);
  const std::vector<std::vector<std::int32_t>> want = {{4, 5, 5}, {4, 4, 5}};
  std::vector<std::vector<std::int32_t>> correct;
  for (int r = 0; r < 2; ++r) {
    correct.push_back(plan_for(b10, 2, r).row_local_bound);
    c.equal(fmt::format("visible local keys W=2 T=10 Q=3, rank {}", r), want[std::size_t(r)],
            correct.back());
  }
  for (int r = 0; r < 2; ++r) {
    const Sharding sh{2, r, 1};
    std::vector<std::int32_t> wrong;
    for (int j = 0; j < 3; ++j) wrong.push_back(std::int32_t(sh.local_len(10) - (3 - 1 - j)));
    const std::vector<std::int32_t> spec_wrong = {3, 4, 5};
    c.add(fmt::format("  wrong local(T)-(Q-1-j), rank {} (must differ)", r),
          fmt::format("{} != {}", list(spec_wrong), list(want[std::size_t(r)])), list(wrong),
          wrong == spec_wrong && wrong != correct[std::size_t(r)]);
  }

  const Batch b128 = make_batch({4}, {128}, Mask::causal, 64);
  c.equal("visible local keys W=2 T=128 Q=4, row 0 rank 1", std::int32_t(62),
          plan_for(b128, 2, 1).row_local_bound[0]);

  const std::vector<std::int32_t> bt = {7, 3, 9};
  const int owner = Sharding{8, 0, 1}.owner(1000);
  const std::int64_t slot = Sharding{8, owner, 1}.slot(1000, bt, 64);
  c.add("slot bs=64 W=8 I=1 p=1000 bt=[7, 3, 9]", "owner 0, slot 253",
        fmt::format("owner {}, slot {}", owner, slot), owner == 0 && slot == 253);
}

void batch_vectors(Checks& c) {
  {
    const Batch p = make_batch({3, 1}, {31, 35}, Mask::causal, 64);
    c.equal("ragged (3,1) T=[31,35]: row requests", std::vector<std::int32_t>{0, 0, 0, 1},
            row_requests(p));
    c.equal("ragged (3,1) T=[31,35]: bounds", std::vector<std::int64_t>{29, 30, 31, 35},
            row_global_bounds(p));
    const Batch full = make_batch({3, 1}, {31, 35}, Mask::full, 64);
    c.equal("ragged (3,1) T=[31,35]: non-causal bounds", std::vector<std::int64_t>{31, 31, 31, 35},
            row_global_bounds(full));
  }
  {
    // Engine warm-up with 7 drafts: 9 query rows, 2 requests. Accepted, and not uniform.
    const Batch b = make_batch({8, 1}, {100, 40}, Mask::causal, 64);
    const Plan p = plan_for(b, 2, 0);
    c.equal("warm-up (8,1) T=[100,40]: bounds", concat(range<std::int64_t>(93, 100), {40}),
            row_global_bounds(b));
    c.add("warm-up (8,1): 9 rows vs 2 requests accepted", "9 rows, 2 requests, ragged",
          fmt::format("{} rows, {} requests, {}", p.num_rows, p.num_requests,
                      is_uniform(b) ? "uniform" : "ragged"),
          p.num_rows == 9 && p.num_requests == 2 && !is_uniform(b));
  }
  {
    const Batch p = make_batch({8, 2}, {100, 40}, Mask::causal, 64);
    const auto want = concat(range<std::int64_t>(93, 100), {39, 40});
    c.equal("ragged (8,2) T=[100,40]: bounds", want, row_global_bounds(p));
    c.add("ragged (8,2): 10 tokens, 2 requests", "ragged (not 5+5)",
          is_uniform(p) ? "uniform" : "ragged", !is_uniform(p));
    // What viewing the 10 tokens as 2 x 5 would do: it must differ from the correct bounds.
    const auto wrong = row_global_bounds(make_batch({5, 5}, {100, 40}, Mask::causal, 64));
    const auto spec_wrong = concat(range<std::int64_t>(96, 100), range<std::int64_t>(36, 40));
    c.add("  wrong 5+5 view of (8,2) (must not happen)",
          fmt::format("{} != correct", list(spec_wrong)), list(wrong),
          wrong == spec_wrong && wrong != want);
  }
}

void merge_vectors(Checks& c) {
  struct Case {
    const char* name;
    float o[2][2];
    float l[2];
    float want_o[2];
    float want_l;
  };
  const float ln3 = std::log(3.0f), ln4 = std::log(4.0f), inf = INFINITY;
  const Case cases[] = {
      {"merge (O=[1,0], L=ln3) + (O=[0,1], L=0)", {{1, 0}, {0, 1}}, {ln3, 0}, {0.75f, 0.25f}, ln4},
      {"merge (O=[1,0], L=ln3) + empty (L=-inf, O=[123,NaN])",
       {{1, 0}, {123, NAN}},
       {ln3, -inf},
       {1, 0},
       ln3},
      {"merge empty + empty", {{0, 0}, {0, 0}}, {-inf, -inf}, {0, 0}, -inf},
      {"merge (O=[1,0], L=ln3) + a NaN key read (O=[0,1], L=NaN)",
       {{1, 0}, {0, 1}},
       {ln3, NAN},
       {NAN, NAN},
       NAN},
  };
  // Equal, or both NaN.
  auto same = [](float got, float want) {
    return std::isnan(want) ? std::isnan(got) : std::abs(got - want) <= 1e-6f;
  };
  auto show_l = [](float l) {
    if (l == -INFINITY) return std::string("-inf");
    if (std::abs(l - std::log(3.0f)) < 1e-6f) return fmt::format("ln3={:.6f}", l);
    if (std::abs(l - std::log(4.0f)) < 1e-6f) return fmt::format("ln4={:.6f}", l);
    return fmt::format("{:.6f}", l);
  };
  for (const auto& k : cases) {
    float out[2];
    const float l =
        merge::merge_partials(2, &k.o[0][0], 2, k.l, 1, 2, out, [](float x) { return x; });
    bool ok = (k.want_l == -inf) ? l == -inf : same(l, k.want_l);
    for (int d = 0; d < 2; ++d) ok = ok && same(out[d], k.want_o[d]);
    c.add(k.name, fmt::format("O=[{}, {}] L={}", k.want_o[0], k.want_o[1], show_l(k.want_l)),
          fmt::format("O=[{}, {}] L={}", out[0], out[1], show_l(l)), ok);
  }
}

void end_to_end(Checks& c, int threads) {
  testing::ScenarioSpec spec;
  spec.world = 2;
  spec.heads = 16;
  spec.block_size = 64;
  spec.kv_dtype = DType::bf16;
  spec.q_dtype = DType::bf16;
  spec.extra_blocks = 3;  // unused pages, NaN-poisoned by the runner
  spec.seed = 2024;
  const int per_rank = std::max(1, threads / spec.world);
  const testing::BackendFactory cpu = [&](int) { return make_cpu_backend(per_rank); };
  const auto tol = testing::tolerance_for(spec);
  const std::string bound = fmt::format("|dO| <= {:.0e}, |dLSE| <= {:.0e}", tol.out, tol.lse);

  struct Run {
    const char* name;
    std::vector<int> q;
    std::vector<std::int64_t> t;
    int padding;
    Combine combine;
  };
  const Run runs[] = {
      {"start-up (8,1) T=[100,40]", {8, 1}, {100, 40}, 0, Combine::ag_rs},
      {"ragged (3,1) T=[31,35]", {3, 1}, {31, 35}, 0, Combine::ag_rs},
      {"ragged (8,2) T=[100,40]", {8, 2}, {100, 40}, 0, Combine::ag_rs},
      {"ragged (8,2) T=[100,40]", {8, 2}, {100, 40}, 0, Combine::a2a},
      {"short (4,1) T=[4,2] + 2 padding rows", {4, 1}, {4, 2}, 2, Combine::a2a},
  };
  for (const auto& r : runs) {
    spec.padding_rows = r.padding;
    const testing::Scenario sc = testing::make_fixed_scenario(spec, r.q, r.t);
    testing::RunOptions opt;
    opt.combine = r.combine;
    opt.kv_chunk_blocks = 1;  // split KV too, so the split merge is exercised
    const auto cmp =
        testing::compare(sc, testing::run_dcp(sc, cpu, opt), testing::run_reference(sc), tol);
    c.add(fmt::format("DCP W=2 {} {}", to_string(r.combine), r.name), bound,
          fmt::format("|dO| = {:.1e}, |dLSE| = {:.1e}{}", cmp.max_out_error, cmp.max_lse_error,
                      cmp.padding_exact ? "" : ", padding not exact"),
          cmp.pass);
  }

  // Negative control: every row bounded at T (sees the future drafts) must fail the comparison
  // by far more than the tolerance.
  spec.padding_rows = 0;
  const testing::Scenario sc = testing::make_fixed_scenario(spec, std::vector<int>{8, 2},
                                                            std::vector<std::int64_t>{100, 40});
  testing::RunOptions opt;
  opt.see_future = true;
  const auto bad =
      testing::compare(sc, testing::run_dcp(sc, cpu, opt), testing::run_reference(sc), tol);
  constexpr double kFactor = 5.0;
  c.add("negative control (8,2): rows bounded at T",
        fmt::format("FAIL vs reference, |dO| > {:.0f} x {:.0e}", kFactor, tol.out),
        fmt::format("{}, |dO| = {:.2f}", bad.pass ? "matched" : "FAIL", bad.max_out_error),
        !bad.pass && bad.max_out_error > kFactor * tol.out);
}

}  // namespace

std::vector<CheckRow> run_checks(const CheckOptions& options) {
  Checks c;
  sharding_vectors(c);
  batch_vectors(c);
  merge_vectors(c);
  const int threads = options.threads > 0
                          ? options.threads
                          : std::clamp(int(std::thread::hardware_concurrency()), 1, 8);
  end_to_end(c, threads);

  auto& rows = c.rows();
  if (options.print) {
    std::size_t wn = 4, we = 8, wg = 8;
    for (const auto& r : rows) {
      wn = std::max(wn, r.name.size());
      we = std::max(we, r.expected.size());
      wg = std::max(wg, r.got.size());
    }
    fmt::print(
        "dcpmla check: SPEC section 6 test vectors, then DCP runs (W=2, H=16, bf16 cache, "
        "block size 64, NaN-poisoned unused pages) against the reference\n\n");
    fmt::print("{:<{}}  {:<{}}  {:<{}}  {}\n", "check", wn, "expected", we, "computed", wg,
               "result");
    for (const auto& r : rows) {
      fmt::print("{:<{}}  {:<{}}  {:<{}}  {}\n", r.name, wn, r.expected, we, r.got, wg,
                 r.pass ? "pass" : "FAIL");
    }
  }
  return rows;
}

Runner add_check(CLI::App& app) {
  auto o = std::make_shared<CheckOptions>();
  app.add_option("--threads", o->threads, "CPU threads in total for the DCP runs (0 = up to 8)")
      ->check(non_negative_int());
  return [o] {
    const auto start = std::chrono::steady_clock::now();
    const auto rows = run_checks(*o);
    const auto failed = std::count_if(rows.begin(), rows.end(), [](auto& r) { return !r.pass; });
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print("\n{}: {} of {} checks passed ({:.2f} s)\n", failed ? "FAIL" : "PASS",
               rows.size() - std::size_t(failed), rows.size(), secs);
    return failed ? 1 : 0;
  };
}

}  // namespace dcpmla::tool
