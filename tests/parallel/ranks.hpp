// Ranks as real processes: the test starts `world` copies of a worker
// program ("WORKER CASE RANK WORLD DIR"), each with its own communicators
// over real Gloo (the cpu vendor) meeting through a file store in DIR, and
// reads what each wrote there. The cpu vendor connects one communicator at
// a time per process, so ranks are processes, as in a job.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace sigma::test {

// Starts the ranks and waits for them (each at most `limit`, then killed).
// Returns the folder they wrote in. With `statuses` the wait statuses are
// stored there for the caller to judge; without, a rank that failed is a
// test failure naming it and its stderr.
inline std::string run_ranks(const std::string& worker, const std::string& name, uint32_t world,
                             std::chrono::seconds limit = std::chrono::seconds(120),
                             std::vector<int>* statuses = nullptr,
                             const std::function<void(const std::string& dir)>& prepare = {}) {
  static std::atomic<int> serial{0};
  const std::string dir =
      ::testing::TempDir() + "sigma-ranks-" + std::to_string(::getpid()) + "-" + std::to_string(serial++);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  if (prepare) prepare(dir);  // files the ranks read at start
  std::vector<pid_t> pids;
  for (uint32_t r = 0; r < world; ++r) {
    std::vector<std::string> args = {worker, name, std::to_string(r), std::to_string(world), dir};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    const std::string err = dir + "/stderr-" + std::to_string(r);
    posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = -1;
    EXPECT_EQ(::posix_spawn(&pid, worker.c_str(), &fa, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    pids.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (uint32_t r = 0; r < world; ++r) {
    int st = 0;
    while (::waitpid(pids[r], &st, WNOHANG) != pids[r]) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pids[r], SIGKILL);
        ::waitpid(pids[r], &st, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (statuses) {
      statuses->push_back(st);
      continue;
    }
    std::ifstream in(dir + "/stderr-" + std::to_string(r));
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
        << name << ": rank " << r << " ended with status " << st << "; its stderr:\n"
        << text;
  }
  return dir;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), {});
}

}  // namespace sigma::test
