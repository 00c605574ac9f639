// Recovery from a killed and from a hung worker: sigmarun vs torchrun, the
// same tiny data-parallel job (2 ranks, 4096 floats, one all-reduce and 10 ms
// of "compute" per step), the same fault at the same step, in one run.
//
// Measured from the fault (the worker logs CLOCK_MONOTONIC just before it
// signals itself) until the job completes the step the fault interrupted
// (it had reached the one before), plus the steps run twice.
//
// torchrun is Debian python3-torch's `python3 -m torch.distributed.run
// --nproc_per_node=2 --max_restarts=3`, gloo, torch.save checkpoints, in two
// configurations side by side:
//  - default: its 5 s monitor interval, a checkpoint every 20 steps, torch's
//    default process-group timeout (30 minutes). Its hang case is cut off at
//    a cap: nothing in torchrun notices a stopped worker sooner.
//  - best: --monitor_interval=0.1, a checkpoint every step, and a process
//    group timeout of 1 s (sigmarun's heartbeat timeout), which is what
//    finds the hang: the survivor's all-reduce raises, it exits, torchrun
//    restarts the job.
// sigmarun: one warm spare, memory-tier snapshots every step, heartbeat
// timeout 1 s.
//
// With SIGMA_BENCH_PREVIOUS naming another build folder (an earlier commit
// built with its sigmarun, runtime_worker and plugins), that build's
// sigmarun runs the same cases in the same run, and BM_Ratio reports
// previous / current: a change to recovery is measured against what it
// replaced, on the same machine at the same time.
//
// A run that does not recover is a failure, counted as such: it never
// enters a median (the default torchrun's hang, which never recovers, is
// reported at its cap, a lower bound, and says so).
//
//   ./build/default/bin/bench_recovery --benchmark_counters_tabular=true
//   SIGMA_BENCH_PREVIOUS=/path/to/old/build/default ./build/default/bin/bench_recovery
#include <benchmark/benchmark.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 150, kKillStep = 50, kCheckpointEvery = 20;
// torchrun stops a failed job by SIGTERM, then SIGKILL after 30 s: a stopped
// worker ignores the first, so even its best hang recovery takes over 30 s.
constexpr double kHangCapS = 90;

struct Outcome {
  bool recovered = false;
  double recovery_s = 0;
  int recomputed = 0;
};

std::map<std::string, std::vector<double>> g_results;

// Runs argv in its own process group; kills the group after cap_s.
int run(std::vector<std::string> args, double cap_s) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    std::freopen("/dev/null", "w", stdout);
    std::freopen("/dev/null", "w", stderr);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  for (;;) {
    if (::waitpid(pid, &status, WNOHANG) == pid) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > cap_s) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(-pid, SIGKILL);  // stragglers of the group (a stopped worker)
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Reads every "PREFIX.*" log (one per process slot): "kill T" and "step N T".
// Back: the first step after the fault (index >= the killed step) completed
// after it. Recomputed: steps some slot completed both before and after the
// fault (a restarted or rolled-back process running them again).
Outcome analyse(const std::string& dir, const std::string& stem) {
  double kill_t = -1;
  std::vector<std::vector<std::pair<double, int>>> logs;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().rfind(stem + ".", 0) != 0) continue;
    std::ifstream f(e.path());
    logs.emplace_back();
    for (std::string line; std::getline(f, line);) {
      std::istringstream is(line);
      std::string what;
      is >> what;
      if (what == "kill") is >> kill_t;
      if (what == "step") {
        int n;
        double t;
        is >> n >> t;
        logs.back().emplace_back(t, n);
      }
    }
  }
  Outcome o;
  if (kill_t < 0) return o;
  int killed_step = 0;
  for (const auto& log : logs) {
    for (auto [t, n] : log) {
      if (t < kill_t) killed_step = std::max(killed_step, n + 1);
    }
  }
  double back = -1;
  std::map<int, int> redone;
  for (const auto& log : logs) {
    std::map<int, int> before;
    for (auto [t, n] : log) {
      if (t < kill_t) {
        before[n] = 1;
      } else {
        if (before.count(n)) redone[n] = 1;
        if (n >= killed_step && (back < 0 || t < back)) back = t;
      }
    }
  }
  o.recovered = back > 0;
  o.recovery_s = back - kill_t;
  o.recomputed = static_cast<int>(redone.size());
  return o;
}

std::string fresh_dir(const std::string& name) {
  const std::string d =
      (fs::temp_directory_path() / ("bench-recovery-" + std::to_string(::getpid()) + "-" + name)).string();
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// The build whose sigmarun runs: this one, or SIGMA_BENCH_PREVIOUS's.
struct Build {
  std::string sigmarun, worker;
};
const Build kCurrent{SIGMARUN, RUNTIME_WORKER};

const Build* previous_build() {
  static const Build* b = []() -> const Build* {
    const char* dir = std::getenv("SIGMA_BENCH_PREVIOUS");
    if (dir == nullptr || *dir == '\0') return nullptr;
    return new Build{std::string(dir) + "/bin/sigmarun", std::string(dir) + "/bin/runtime_worker"};
  }();
  return b;
}

Outcome sigmarun_once(bool hang, const Build& build) {
  const std::string d = fresh_dir("sigmarun");
  std::vector<std::string> args{build.sigmarun,
                                "--nproc",
                                "2",
                                "--spares",
                                "1",
                                "--job-dir",
                                d + "/job",
                                "--no-progress",
                                "--heartbeat-timeout",
                                "1",
                                "--",
                                build.worker,
                                "--steps",
                                std::to_string(kSteps),
                                "--step-ms",
                                "10",
                                "--kill-at",
                                std::to_string(kKillStep),
                                "--kill-device",
                                "1",
                                "--log",
                                d + "/progress"};
  if (hang) {
    args.push_back("--kill-signal");
    args.push_back("STOP");
  }
  if (run(args, 120) != 0) return {};
  return analyse(d, "progress");
}

bool have_torch() {
  static const int ok = std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1");
  return ok == 0;
}

// torchrun's two configurations (see the top of this file).
struct TorchrunConfig {
  const char* name;
  const char* monitor_interval_s;
  int checkpoint_every;
  const char* pg_timeout_s;  // nullptr: torch's default
};
constexpr TorchrunConfig kTorchrunDefault{"torchrun", "5", kCheckpointEvery, nullptr};
constexpr TorchrunConfig kTorchrunBest{"torchrun_best", "0.1", 1, "1"};

Outcome torchrun_once(bool hang, const TorchrunConfig& c) {
  const std::string d = fresh_dir("torchrun");
  fs::create_directories(d + "/ckpt");
  const int port = 20000 + static_cast<int>(::getpid() % 20000);
  std::vector<std::string> args{"/usr/bin/python3",
                                "-m",
                                "torch.distributed.run",
                                "--nproc_per_node=2",
                                "--max_restarts=3",
                                std::string("--monitor_interval=") + c.monitor_interval_s,
                                "--master_port=" + std::to_string(port),
                                "--redirects",
                                "2",
                                "--tee",
                                "2",
                                "--log_dir",
                                d + "/logs",
                                TORCHRUN_WORKER,
                                std::to_string(kSteps),
                                "10",
                                std::to_string(c.checkpoint_every),
                                d + "/ckpt",
                                d + "/progress",
                                std::to_string(kKillStep),
                                "1",
                                hang ? "STOP" : "KILL"};
  if (c.pg_timeout_s != nullptr) args.push_back(c.pg_timeout_s);
  run(args, hang ? kHangCapS : 180);
  return analyse(d, "progress");
}

// Medians over the runs that recovered; the others are counted as failures.
// `cap_s` > 0: when none recovered, the median is that cap, a lower bound.
void report(benchmark::State& state, const std::string& key, const std::vector<Outcome>& runs,
            double cap_s = 0) {
  std::vector<double> times;
  double recomputed = 0;
  for (const Outcome& o : runs) {
    if (!o.recovered) continue;
    times.push_back(o.recovery_s);
    recomputed += o.recomputed;
  }
  std::sort(times.begin(), times.end());
  const bool bound = times.empty() && cap_s > 0;
  const double median = bound ? cap_s : times.empty() ? 0 : times[times.size() / 2];
  g_results[key] = bound ? std::vector<double>{cap_s} : times;
  state.counters["recovery_s_median"] = median;
  state.counters["recovery_s_max"] = bound ? cap_s : times.empty() ? 0 : times.back();
  state.counters["recomputed_steps"] = times.empty() ? 0 : recomputed / static_cast<double>(times.size());
  state.counters["recovered"] = static_cast<double>(times.size());
  state.counters["failed"] = static_cast<double>(runs.size() - times.size());
  state.counters["median_is_cap_lower_bound"] = bound ? 1 : 0;
}

// Arg previous: 0 this build's sigmarun, 1 SIGMA_BENCH_PREVIOUS's.
void BM_Sigmarun(benchmark::State& state) {
  const bool hang = state.range(0) == 1, previous = state.range(1) == 1;
  const Build* build = previous ? previous_build() : &kCurrent;
  if (build == nullptr) {
    state.SkipWithError("SIGMA_BENCH_PREVIOUS names no earlier build");
    return;
  }
  std::vector<Outcome> runs;
  for (auto _ : state) {
    const Outcome o = sigmarun_once(hang, *build);
    if (!o.recovered) {
      state.SkipWithError("sigmarun did not recover (see the job folder)");
      return;
    }
    runs.push_back(o);
    state.SetIterationTime(o.recovery_s);
  }
  report(state, std::string(previous ? "sigmarun_previous/" : "sigmarun/") + (hang ? "hang" : "kill"), runs);
}

void BM_Torchrun(benchmark::State& state) {
  const bool hang = state.range(0) == 1;
  const TorchrunConfig& c = state.range(1) == 1 ? kTorchrunBest : kTorchrunDefault;
  if (!have_torch()) {
    state.SkipWithError("no /usr/bin/python3 with torch (Debian python3-torch)");
    return;
  }
  std::vector<Outcome> runs;
  for (auto _ : state) {
    const Outcome o = torchrun_once(hang, c);
    runs.push_back(o);
    state.SetIterationTime(o.recovered ? o.recovery_s : kHangCapS);
  }
  // The default's hang is never noticed: its row is the cap, a lower bound.
  report(state, std::string(c.name) + (hang ? "/hang" : "/kill"), runs,
         hang && c.checkpoint_every > 1 ? kHangCapS : 0);
}

// The ratio of medians, each torchrun configuration over sigmarun. The
// default's hang row is bounded by the cap (a lower bound on torchrun's
// time); the best's by its 1 s process-group timeout plus the restart.
void BM_Ratio(benchmark::State& state) {
  for (auto _ : state) {
  }
  auto median = [](const std::vector<double>& v) { return v.empty() ? 0.0 : v[v.size() / 2]; };
  for (const char* fault : {"kill", "hang"}) {
    const double s = median(g_results[std::string("sigmarun/") + fault]);
    for (const char* peer : {"torchrun", "torchrun_best"}) {
      const double t = median(g_results[std::string(peer) + "/" + fault]);
      state.counters[std::string(fault) + "_" + peer + "_over_sigmarun"] = s > 0 ? t / s : 0;
    }
    // Above 1: this build recovers faster than the previous one.
    const double p = median(g_results[std::string("sigmarun_previous/") + fault]);
    if (p > 0) state.counters[std::string(fault) + "_previous_over_sigmarun"] = s > 0 ? p / s : 0;
  }
}

// Args: hang (0 kill, 1 stop), previous (0 this build, 1 SIGMA_BENCH_PREVIOUS).
BENCHMARK(BM_Sigmarun)
    ->Args({0, 0})
    ->Args({0, 1})
    ->Args({1, 0})
    ->Args({1, 1})
    ->ArgNames({"hang", "previous"})
    ->Iterations(5)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
// Args: hang (0 kill, 1 stop), best (0 torchrun's defaults, 1 its best).
BENCHMARK(BM_Torchrun)
    ->Args({0, 0})
    ->Args({0, 1})
    ->Args({1, 1})
    ->ArgNames({"hang", "best"})
    ->Iterations(5)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Torchrun)
    ->Args({1, 0})
    ->ArgNames({"hang", "best"})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Ratio)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
