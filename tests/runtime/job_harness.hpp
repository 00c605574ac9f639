// What the sigmarun tests share: a job run with real processes in a
// folder of its own (removed when the test passes), its report, journal
// and workers' logs, and the sim vendor's arguments.
#pragma once

#include <sigma/sim.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Job folders of the current test, removed when it passes.
inline std::vector<std::string> g_dirs;

class CleanUp : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Passed()) {
      for (const auto& d : g_dirs) fs::remove_all(d);
    }
    g_dirs.clear();
  }
};

inline const bool g_cleanup_installed = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new CleanUp);
  return true;
}();

inline std::string job_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "sigmarun-" + std::to_string(::getpid()) + "-" + name;
  fs::remove_all(d);
  return d;
}

struct JobRun {
  int exit_code = -1;
  json report;
  std::vector<json> journal;
  std::string dir;
  double wall_s = 0;
};

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Starts args[0] with args; returns its pid.
inline pid_t spawn(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

// A sigmarun job of `worker` in `dir` (a new one, or a rerun in the folder
// of one that paused), waited for.
inline JobRun run_job(const std::string& dir, std::vector<std::string> agent_args,
                      std::vector<std::string> worker_args, const std::string& worker) {
  JobRun r;
  r.dir = dir;
  std::vector<std::string> args{SIGMARUN, "--job-dir", r.dir, "--no-progress"};
  args.insert(args.end(), agent_args.begin(), agent_args.end());
  args.push_back("--");
  args.push_back(worker);
  args.insert(args.end(), worker_args.begin(), worker_args.end());
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = spawn(std::move(args));
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (fs::exists(r.dir + "/report.json")) r.report = json::parse(read_file(r.dir + "/report.json"));
  // A sanitizer report in a worker would only look like one more fault to
  // the agent: it must fail the test instead.
  if (fs::exists(r.dir + "/logs")) {
    for (const auto& e : fs::directory_iterator(r.dir + "/logs")) {
      const std::string text = read_file(e.path().string());
      EXPECT_EQ(text.find("Sanitizer"), std::string::npos) << e.path() << ":\n" << text;
      EXPECT_EQ(text.find("runtime error:"), std::string::npos) << e.path() << ":\n" << text;
    }
  }
  g_dirs.push_back(r.dir);
  std::ifstream j(r.dir + "/incidents.jsonl");
  for (std::string line; std::getline(j, line);) r.journal.push_back(json::parse(line));
  return r;
}

// The agent's arguments for the sim vendor on `scenario`, device d being the
// scenario's device d, its clock `time_scale` times the wall clock's (0: the
// scenario's own) and the health monitor told so.
inline std::vector<std::string> on_sim(const std::string& scenario, double time_scale = 0) {
  std::string opts = "scenario=" + scenario + ";rank={device}";
  std::vector<std::string> args{"--vendor", "sim"};
  if (time_scale > 0) {
    opts += ";time_scale=" + std::to_string(time_scale);
    args.insert(args.end(), {"--health-time-scale", std::to_string(time_scale)});
  }
  args.insert(args.end(), {"--vendor-options", opts});
  return args;
}

// `a` then `b`.
inline std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

inline std::string logs(const JobRun& r) {
  std::string out = "report: " + r.report.dump(1) + "\n";
  for (const auto& j : r.journal) out += j.dump() + "\n";
  for (const auto& e : fs::directory_iterator(r.dir + "/logs")) {
    out += "---- " + e.path().filename().string() + "\n" + read_file(e.path().string());
  }
  return out;
}

// The journal's faults and health changes replayed through the cluster
// simulator: it must decide as the agent did, decision for decision.
inline void expect_replayed(const JobRun& r) {
  const auto replay = sigma::sim::parse_journal(read_file(r.dir + "/incidents.jsonl"), r.dir);
  ASSERT_GT(replay.faults + replay.health_changes, 0u);
  ASSERT_FALSE(replay.journalled.empty());
  const auto sim = sigma::sim::run(replay.scenario);
  EXPECT_EQ(sigma::sim::compare_decisions(replay.journalled, sim.policies.at(0).decisions), "") << logs(r);
}

}  // namespace
