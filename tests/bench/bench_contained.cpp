// Contained vs exact recovery, side by side in one run: the same
// model-parallel x data-parallel job (tests/runtime/contained_worker: 2
// replicas of 2 ranks, 8 micro-batches a step, 20 ms of "compute" for all
// of them, a 1 MiB optimizer buffer), the same fault (rank 2 SIGKILLed at
// step 40), under `sigmarun --replica-size 2` with `--recovery exact` and
// `--recovery contained`, each with a fault-free run of its own mode beside
// it. Both modes run the same groups and micro-batches: only the recovery
// differs.
//
// Reported per mode: steps/s over the whole job (the window holds the
// fault), the same per CPU-second of every process of the job (on two
// cores a stopped replica frees cores for the others), and the fault's cost
// against the mode's fault-free run. A run that does not end done is a
// failure, never a figure.
//
//   ./build/default/bin/bench_contained
#include <benchmark/benchmark.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 240, kKillStep = 40;

struct Figures {
  double wall_s = 0, cpu_s = 0;
};
std::map<std::string, Figures> g_runs;

double cpu_of_children() {
  rusage u{};
  ::getrusage(RUSAGE_CHILDREN, &u);
  auto s = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  };
  return s(u.ru_utime) + s(u.ru_stime);
}

// One sigmarun job; false when it did not end done.
bool job(const std::string& mode, bool fault, Figures& f) {
  const std::string dir =
      (fs::temp_directory_path() /
       ("sigma-bench-contained-" + std::to_string(::getpid()) + "-" + mode + (fault ? "-fault" : "")))
          .string();
  fs::remove_all(dir);
  std::vector<std::string> args{SIGMARUN,
                                "--job-dir",
                                dir,
                                "--no-progress",
                                "--no-report",
                                "--nproc",
                                "4",
                                "--spares",
                                "2",
                                "--devices-per-node",
                                "2",
                                "--replica-size",
                                "2",
                                "--recovery",
                                mode,
                                "--vendor",
                                "sim",
                                "--",
                                CONTAINED_WORKER,
                                "--steps",
                                std::to_string(kSteps),
                                "--microbatches",
                                "8",
                                "--step-ms",
                                "20",
                                "--moments",
                                "262144"};
  if (fault) args.insert(args.end(), {"--kill-at", std::to_string(kKillStep), "--kill-device", "2"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const double cpu0 = cpu_of_children();
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    std::freopen("/dev/null", "w", stderr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  f.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  f.cpu_s = cpu_of_children() - cpu0;
  const bool done = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (done) fs::remove_all(dir);
  return done;
}

void BM_Job(benchmark::State& state, const std::string& mode, bool fault) {
  for (auto _ : state) {
    Figures f;
    if (!job(mode, fault, f)) {
      state.SkipWithError("the job did not end done (its folder is kept)");
      return;
    }
    state.SetIterationTime(f.wall_s);
    state.counters["steps_per_s"] = kSteps / f.wall_s;
    state.counters["steps_per_cpu_s"] = kSteps / f.cpu_s;
    g_runs[mode + (fault ? "/fault" : "/clean")] = f;
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  for (const char* mode : {"exact", "contained"}) {
    for (bool fault : {false, true}) {
      const std::string name = std::string("Recovery/") + mode + (fault ? "/fault" : "/clean");
      benchmark::RegisterBenchmark(name.c_str(),
                                   [mode, fault](benchmark::State& st) { BM_Job(st, mode, fault); })
          ->Iterations(1)
          ->UseManualTime()
          ->Unit(benchmark::kSecond);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  auto per = [](const Figures& f) { return kSteps / f.wall_s; };
  auto per_cpu = [](const Figures& f) { return kSteps / f.cpu_s; };
  if (g_runs.size() == 4) {
    const auto &ef = g_runs["exact/fault"], &cf = g_runs["contained/fault"];
    const auto &ec = g_runs["exact/clean"], &cc = g_runs["contained/clean"];
    std::printf(
        "\n%d steps, rank 2 killed at step %d; steps/s (per CPU-second of the whole job):\n"
        "  exact:     fault-free %.1f (%.1f), with the fault %.1f (%.1f): the fault cost %.2f s\n"
        "  contained: fault-free %.1f (%.1f), with the fault %.1f (%.1f): the fault cost %.2f s\n"
        "  with the fault, contained / exact: %.2f in steps/s, %.2f per CPU-second\n",
        kSteps, kKillStep, per(ec), per_cpu(ec), per(ef), per_cpu(ef), ef.wall_s - ec.wall_s, per(cc),
        per_cpu(cc), per(cf), per_cpu(cf), cf.wall_s - cc.wall_s, per(cf) / per(ef),
        per_cpu(cf) / per_cpu(ef));
  }
  return 0;
}
