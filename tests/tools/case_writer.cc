#include "case_writer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "dcpmla/numeric.h"
#include "dcpmla/sharding.h"
#include "npy.h"

namespace dcpmla::testing {
namespace fs = std::filesystem;

nlohmann::json case_config(const testing::Scenario& sc) {
  const auto& s = sc.spec;
  nlohmann::json cfg = {
      {"world", s.world},
      {"interleave", s.interleave},
      {"heads", s.heads},
      {"softmax_scale", s.softmax_scale},
      {"block_size", s.block_size},
      {"kv_dtype", to_string(s.kv_dtype)},
      {"q_dtype", to_string(s.q_dtype)},
  };
  if (s.kv_dtype == DType::fp8_e4m3) cfg["k_scale"] = s.k_scale;
  nlohmann::json masks = nlohmann::json::array();
  for (int b = 0; b < sc.batch.num_requests(); ++b) masks.push_back(to_string(sc.batch.mask_of(b)));
  cfg["mask"] = masks;
  if (sc.batch.num_tokens >= 0) cfg["num_tokens"] = sc.batch.num_tokens;
  return cfg;
}

void write_case(const testing::Scenario& sc, const fs::path& dir, KvForm form) {
  using tool::npy::Dtype;
  const auto& s = sc.spec;
  const Batch& batch = sc.batch;
  const auto B = std::int64_t(batch.num_requests());
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << case_config(sc).dump(2) << "\n";

  const std::vector<std::int64_t> q_shape{batch.rows(), s.heads, kHeadDim};
  tool::npy::write(dir / "query.npy", Dtype::f4, q_shape, sc.q.data());
  const std::vector<std::int64_t> qsl_shape{B + 1}, lens_shape{B};
  tool::npy::write(dir / "query_start_loc.npy", Dtype::i4, qsl_shape, batch.query_start_loc.data());
  tool::npy::write(dir / "seq_lens.npy", Dtype::i8, lens_shape, batch.total_len.data());

  if (form == KvForm::latents) {
    std::vector<float> kv;
    for (const auto& r : sc.kv) kv.insert(kv.end(), r.begin(), r.end());
    const std::vector<std::int64_t> shape{std::int64_t(kv.size() / kHeadDim), kHeadDim};
    tool::npy::write(dir / "kv.npy", Dtype::f4, shape, kv.data());
    return;
  }
  const std::vector<std::int64_t> bt_shape{B, batch.max_blocks};
  tool::npy::write(dir / "block_table.npy", Dtype::i4, bt_shape, batch.block_table.data());
  const std::size_t elements = std::size_t(sc.num_blocks) * s.block_size * kHeadDim;
  const std::vector<std::int64_t> cache_shape{sc.num_blocks, s.block_size, kHeadDim};
  for (int r = 0; r < s.world; ++r) {
    const Sharding sh{s.world, r, s.interleave};
    // Unused pages hold NaN; every owned position is encoded at its slot.
    std::vector<float> f32;
    std::vector<std::uint16_t> bf16;
    std::vector<std::uint8_t> fp8;
    switch (s.kv_dtype) {
      case DType::f32:
        f32.assign(elements, NAN);
        break;
      case DType::bf16:
        bf16.assign(elements, float_to_bf16(NAN));
        break;
      default:
        fp8.assign(elements, std::uint8_t(0x7f));
        break;
    }
    for (int b = 0; b < batch.num_requests(); ++b) {
      for (std::int64_t p = 0; p < batch.total_len[b]; ++p) {
        const std::int64_t slot = sh.slot(p, batch.block_row(b), s.block_size);
        if (slot < 0) continue;
        for (int d = 0; d < kHeadDim; ++d) {
          const float x = sc.kv[std::size_t(b)][std::size_t(p) * kHeadDim + d];
          const std::size_t i = std::size_t(slot) * kHeadDim + d;
          switch (s.kv_dtype) {
            case DType::f32:
              f32[i] = x;
              break;
            case DType::bf16:
              bf16[i] = float_to_bf16(x);
              break;
            default:
              fp8[i] = float_to_fp8_e4m3(x / s.k_scale);
              break;
          }
        }
      }
    }
    const fs::path path = dir / fmt::format("cache_rank{}.npy", r);
    switch (s.kv_dtype) {
      case DType::f32:
        tool::npy::write(path, Dtype::f4, cache_shape, f32.data());
        break;
      case DType::bf16:
        tool::npy::write(path, Dtype::u2, cache_shape, bf16.data());
        break;
      default:
        tool::npy::write(path, Dtype::u1, cache_shape, fp8.data());
        break;
    }
  }
}

fs::path temp_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / fmt::format("dcpmla-tools-{}-{}", ::getpid(), name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace dcpmla::testing
