// Real processes: one killed with SIGKILL in the middle of a save (half the
// data written, data durable but no manifest, manifest durable but not yet
// renamed), and one whose disk fills up. The previous checkpoint must stay
// intact and loadable, nothing half-written may be taken for complete, and
// the full disk must be a clear error.
#include <sigma/checkpoint.hpp>

#include "state.hpp"

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <fcntl.h>

#include <array>
#include <filesystem>
#include <fstream>

extern char** environ;

namespace sigma::checkpoint {
namespace {

using testing::meta_for;
using testing::State;

struct Exit {
  int code = -1, signal = 0;
  std::string out;
};

Exit run_worker(const std::string& dir, uint64_t step, const std::string& crash_at,
                const std::string& max_bytes = "") {
  std::vector<std::string> args = {SIGMA_CHECKPOINT_WORKER, dir, std::to_string(step)};
  if (!max_bytes.empty()) args.push_back(max_bytes);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  if (!crash_at.empty()) env.push_back("SIGMA_CHECKPOINT_CRASH_AT=" + crash_at);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string out_path = dir + ".out";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, SIGMA_CHECKPOINT_WORKER, &fa, nullptr, argv.data(), envp.data()), 0);
  posix_spawn_file_actions_destroy(&fa);
  int st = 0;
  waitpid(pid, &st, 0);
  Exit x;
  if (WIFEXITED(st)) x.code = WEXITSTATUS(st);
  if (WIFSIGNALED(st)) x.signal = WTERMSIG(st);
  std::ifstream in(out_path);
  std::getline(in, x.out, '\0');
  return x;
}

Options options(const std::string& dir) { return testing::test_options(dir); }

TEST(CheckpointCrash, AKillAnywhereInASaveLeavesThePreviousCheckpointLoadable) {
  for (const char* at : {"data", "manifest", "rename"}) {
    const std::string dir = ::testing::TempDir() + "ckpt-crash-" + at + "-" + std::to_string(::getpid());
    std::filesystem::remove_all(dir);
    ASSERT_EQ(run_worker(dir, 1, "").code, 0);  // a good base
    ASSERT_EQ(run_worker(dir, 2, "").code, 0);  // and a good delta
    const Exit x = run_worker(dir, 3, at);
    EXPECT_EQ(x.signal, SIGKILL) << at;
    // The half-written save is invisible: step 3 is not listed...
    Engine e(options(dir));
    std::vector<uint64_t> steps;
    for (const auto& s : e.list()) steps.push_back(s.step);
    EXPECT_EQ(steps, (std::vector<uint64_t>{2, 1})) << at;
    // ...step 2 loads whole, and a new engine cleaned the leftovers up.
    State back(0);
    const RestoreResult r = e.restore(back.views(), nullptr);
    EXPECT_EQ(r.step, 2u) << at;
    EXPECT_TRUE(r.refused.empty()) << at;
    EXPECT_TRUE(back == State(2)) << at;
    for (const auto& f : std::filesystem::directory_iterator(dir + "/job"))
      EXPECT_NE(f.path().filename().string().rfind(".tmp", 0), 0u) << f.path();
    // And the job goes on: step 3 saves for real now.
    EXPECT_EQ(run_worker(dir, 3, "").code, 0) << at;
  }
}

TEST(CheckpointCrash, AFullDiskIsAClearErrorAndLosesNothing) {
  const std::string dir = ::testing::TempDir() + "ckpt-full-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  ASSERT_EQ(run_worker(dir, 1, "").code, 0);
  // 4 KB per file: less than even the delta against the reloaded base (7 KB).
  const Exit x = run_worker(dir, 2, "", "4000");
  EXPECT_EQ(x.code, 3) << x.out;  // failed cleanly, the tensors untouched
  EXPECT_NE(x.out.find("data.bin"), std::string::npos) << x.out;
  EXPECT_NE(x.out.find("File too large"), std::string::npos) << x.out;
  Engine e(options(dir));
  State back(0);
  EXPECT_EQ(e.restore(back.views(), nullptr).step, 1u);
  EXPECT_TRUE(back == State(1));
}

}  // namespace
}  // namespace sigma::checkpoint
