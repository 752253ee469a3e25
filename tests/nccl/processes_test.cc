// Way (b) across processes: one process per GPU, the NCCL unique id handed over through a file
// (rank 0 writes it, the others wait for it) or through an environment variable. Each rank is
// the nccl_rank_process helper, which checks its own collectives. Skipped with fewer than 2 GPUs.
// The same helper also joins a PeerCommunicator over its NCCL one (one process per GPU, CUDA IPC)
// and checks it; skipped too where the GPUs have no peer access.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "dcpmla/nccl_comm.h"
#include "dcpmla/peer_comm.h"
#include "multigpu_support.h"

extern char** environ;

namespace dcpmla {
namespace {

using multigpu_testing::world;

// Starts the helper with the given arguments and extra environment entries ("NAME=value").
pid_t spawn_rank(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  std::vector<std::string> all = {DCPMLA_NCCL_RANK_PROCESS};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings(env);
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data());
  if (rc != 0) throw std::runtime_error("posix_spawn failed: " + std::to_string(rc));
  return pid;
}

// Exit statuses of the processes (-1: killed after the deadline, -2: did not exit normally).
std::vector<int> wait_all(const std::vector<pid_t>& pids, std::chrono::seconds limit) {
  std::vector<int> status(pids.size(), -3);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::size_t done = 0;
  while (done < pids.size()) {
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (status[i] != -3) continue;
      int ws = 0;
      if (waitpid(pids[i], &ws, WNOHANG) == pids[i]) {
        status[i] = WIFEXITED(ws) ? WEXITSTATUS(ws) : -2;
        ++done;
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (std::size_t i = 0; i < pids.size(); ++i) {
        if (status[i] != -3) continue;
        kill(pids[i], SIGKILL);
        waitpid(pids[i], nullptr, 0);
        status[i] = -1;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return status;
}

std::vector<std::string> rank_args(int W, int r) {
  return {"--world", std::to_string(W), "--rank", std::to_string(r), "--device", std::to_string(r)};
}

TEST(NcclProcesses, UniqueIdThroughAFile) {
  DCPMLA_REQUIRE_GPUS(2);
  const int W = world();
  const std::string file =
      (std::filesystem::temp_directory_path() / ("dcpmla-nccl-id-" + std::to_string(::getpid())))
          .string();
  std::filesystem::remove(file);
  std::vector<pid_t> pids;
  // The readers start first: they wait for the file rank 0 writes.
  for (int r = W - 1; r >= 0; --r) {
    auto args = rank_args(W, r);
    args.insert(args.end(), {"--id-file", file});
    if (r == 0) args.push_back("--create-id");
    pids.push_back(spawn_rank(args, {}));
  }
  const auto status = wait_all(pids, std::chrono::seconds(120));
  for (std::size_t i = 0; i < status.size(); ++i) EXPECT_EQ(status[i], 0) << "process " << i;
  std::filesystem::remove(file);
}

// Every rank from the environment variable, with `extra` arguments; the exit statuses.
std::vector<int> run_ranks_with_id_env(const std::vector<std::string>& extra) {
  const int W = world();
  const std::string id = "DCPMLA_NCCL_ID=" + nccl_unique_id_to_hex(new_nccl_unique_id());
  std::vector<pid_t> pids;
  for (int r = 0; r < W; ++r) {
    auto args = rank_args(W, r);
    args.insert(args.end(), {"--id-env", "DCPMLA_NCCL_ID"});
    args.insert(args.end(), extra.begin(), extra.end());
    pids.push_back(spawn_rank(args, {id}));
  }
  return wait_all(pids, std::chrono::seconds(120));
}

TEST(NcclProcesses, UniqueIdThroughAnEnvironmentVariable) {
  DCPMLA_REQUIRE_GPUS(2);
  // This process makes the id (and serves NCCL's bootstrap root) but joins no group itself.
  const auto status = run_ranks_with_id_env({});
  for (std::size_t i = 0; i < status.size(); ++i) EXPECT_EQ(status[i], 0) << "rank " << i;
}

#define DCPMLA_REQUIRE_PEER_ACCESS()                                                         \
  if (!PeerGroup::supported(first_devices(world()))) {                                       \
    GTEST_SKIP() << "no peer access between every pair of the first " << world() << " GPUs"; \
  }                                                                                          \
  static_assert(true, "")

// Each rank checks the collectives through NCCL, then through the PeerCommunicator it joins over
// the NCCL one: one at a time and back to back.
TEST(NcclProcesses, PeerCommunicatorAcrossProcesses) {
  DCPMLA_REQUIRE_GPUS(2);
  DCPMLA_REQUIRE_PEER_ACCESS();
  const auto status = run_ranks_with_id_env({"--peer"});
  for (std::size_t i = 0; i < status.size(); ++i) EXPECT_EQ(status[i], 0) << "rank " << i;
}

// Rank 1 passes another chunk capacity: every rank's join throws (none waits for the others).
TEST(NcclProcesses, PeerJoinRejectsUnequalCapacities) {
  DCPMLA_REQUIRE_GPUS(2);
  DCPMLA_REQUIRE_PEER_ACCESS();
  const auto status = run_ranks_with_id_env({"--peer-capacity-of-rank1", "4096"});
  for (std::size_t i = 0; i < status.size(); ++i) EXPECT_EQ(status[i], 0) << "rank " << i;
}

}  // namespace
}  // namespace dcpmla
