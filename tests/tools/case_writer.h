// Writes a simulation scenario as a `dcpmla attend` case directory (docs/attend-format.md), with
// the KV in either form: global latents (a) or block tables plus rank caches encoded here, on
// the host, independently of the backend's write_kv (b).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>

#include "dcpmla/testing/scenario.h"

namespace dcpmla::testing {

enum class KvForm { latents, rank_caches };

// The config.json of a scenario (every field the format knows, so tests can edit it).
nlohmann::json case_config(const testing::Scenario& sc);

// Creates dir (replacing what is there) and writes config.json, query.npy, query_start_loc.npy,
// seq_lens.npy and the KV files of `form`.
void write_case(const testing::Scenario& sc, const std::filesystem::path& dir, KvForm form);

// A fresh, empty directory under the system temp dir, unique to this process and name.
std::filesystem::path temp_dir(const std::string& name);

}  // namespace dcpmla::testing
