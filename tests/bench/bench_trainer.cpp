// The main job's trainer with libsigma's features on against the same trainer
// with them off, side by side in one run (4 workers under sigmarun on the
// cpu vendor, the demo's model, the same steps):
//  - on: guardrails every step, a memory-tier snapshot every 5 steps kept 4
//    deep, a disk checkpoint every 50 steps, the autotuner sampling every
//    step, telemetry in every heartbeat;
//  - off: no guardrails, no autotuner, no snapshot and no disk checkpoint
//    after the first (the session's heartbeats remain: the trainer has no
//    launcher without it).
// Throughput is the tokens of the steps over the time between rank 0's first
// and last step (start-up excluded), from each job's report.json. Also
// reported: MFU against the measured GEMM rate, and the planner's predicted
// step time (given the GEMM and whole-model rates measured alone on a core,
// and the links the trainer measured through the HAL) against the measured
// median step of the features-off side, which is what the planner prices
// (trainer.jsonl); the features' cost is the on/off ratio.
//
// Time to first step after a SIGKILL: the same model under sigmarun (one
// warm spare, a memory-tier snapshot every step) and under torchrun (Debian
// python3-torch: `python3 -m torch.distributed.run --nproc_per_node=4
// --max_restarts=3 --monitor_interval=0.1`, its best: a 0.1 s monitor and a
// torch.save checkpoint every step, the same interval as the memory tier;
// Debian's torchrun also needs `--redirects 2 --tee 2 --log_dir DIR`, without
// which it fails in its log set-up), rank 1 killed when it starts step 30:
// from the kill to the end of step 30 on the restarted job.
//
// With SIGMA_BENCH_PREVIOUS naming another build folder (an earlier commit
// built the same way), BM_ThisBuildVsPrevious runs the features-on job and
// the kill with that build's sigmarun and moe_trainer beside this one's,
// interleaved, and reports the ratios; without it, that row says so.
//
//   ./build/default/bin/bench_trainer --benchmark_counters_tabular=true
//   SIGMA_BENCH_PREVIOUS=/path/to/old/build/default ./build/default/bin/bench_trainer
//       --benchmark_filter=ThisBuildVsPrevious --benchmark_counters_tabular=true   (one line)
#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kSteps = 120;

// The build whose sigmarun and trainer run: this one, or SIGMA_BENCH_PREVIOUS's.
struct Build {
  std::string sigmarun, trainer;
};
const Build kCurrent{SIGMARUN, MOE_TRAINER};

const Build* previous_build() {
  static const Build* b = []() -> const Build* {
    const char* dir = std::getenv("SIGMA_BENCH_PREVIOUS");
    if (dir == nullptr || *dir == '\0') return nullptr;
    return new Build{std::string(dir) + "/bin/sigmarun", std::string(dir) + "/bin/moe_trainer"};
  }();
  return b;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (std::freopen("/dev/null", "w", stderr) == nullptr) ::_exit(126);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

const std::string& text() {
  static const std::string path = [] {
    const std::string p = fs::temp_directory_path() / "bench-trainer-kjv.txt";
    if (!fs::exists(p)) {
      std::vector<std::string> a{"sh", "-c", "bible gen1:1-rev22:21 > " + p};
      if (run(a) != 0)
        std::fprintf(stderr, "bench_trainer: the bible program (Debian bible-kjv) is missing\n");
    }
    return p;
  }();
  return path;
}

struct Figures {
  double tokens_per_s = 0, mfu = 0, median_step_s = 0, predicted_step_s = 0;
};

// One worker alone on a core: the trainer's own measurements.
struct Rates {
  double gemm = 0, model = 0;
};

Figures job(bool features, const Rates& rates, int workers, const Build& build = kCurrent) {
  const std::string dir = fs::temp_directory_path() / ("bench-trainer-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::vector<std::string> args{build.sigmarun,  "--nproc",    std::to_string(workers), "--job-dir", dir,
                                "--no-progress", "--no-report"};
  if (features) {
    args.insert(args.end(), {"--snapshot-every", "5", "--snapshot-keep", "4", "--checkpoint-every", "50",
                             "--checkpoint-async"});
  } else {
    args.insert(args.end(), {"--snapshot-every", "1000000"});
  }
  args.insert(args.end(),
              {"--", build.trainer, "--data", text(), "--steps", std::to_string(kSteps), "--gemm-gflops",
               std::to_string(rates.gemm), "--model-gflops", std::to_string(rates.model)});
  if (!features) args.insert(args.end(), {"--no-guardrails", "--no-autotune"});
  Figures f;
  if (run(args) != 0) return f;
  std::ifstream in(dir + "/report.json");
  const json r = json::parse(in);
  const json& steps = r["series"]["steps"];
  // Tokens of the steps after the first over the time they took.
  const double t0 = steps.front()["t"].get<double>(), t1 = steps.back()["t"].get<double>();
  double tokens = 0, flops = 0, peak = 0;
  std::vector<double> secs;
  for (size_t i = 1; i < steps.size(); ++i) {
    tokens += steps[i].value("tokens", 0.0);
    flops += steps[i].value("flops", 0.0);
    peak = steps[i].value("peak_flops", 0.0);
    secs.push_back(steps[i]["seconds"].get<double>());
  }
  f.tokens_per_s = tokens / (t1 - t0);
  f.mfu = peak > 0 ? flops / (t1 - t0) / peak : 0;
  std::sort(secs.begin(), secs.end());
  f.median_step_s = secs[secs.size() / 2];
  std::ifstream log(dir + "/trainer.jsonl");
  std::string line;
  if (std::getline(log, line)) f.predicted_step_s = json::parse(line).value("predicted_step_s", 0.0);
  fs::remove_all(dir);
  return f;
}

// The GEMM and whole-model rates of one worker alone on a core.
Rates measure_rates() {
  Rates rates;
  for (auto [flag, to] :
       {std::pair{"--measure-gemm", &rates.gemm}, std::pair{"--measure-model", &rates.model}}) {
    const std::string out = fs::temp_directory_path() / "bench-trainer-rate.txt";
    std::vector<std::string> a{"sh", "-c", std::string(MOE_TRAINER) + " " + flag + " > " + out};
    run(a);
    std::ifstream(out) >> *to;
  }
  return rates;
}

void BM_TrainerFeaturesOnVsOff(benchmark::State& state) {
  const Rates rates = measure_rates();
  std::vector<double> on, off, off_step, planned;
  Figures last_on;
  bool on_first = true;
  for (auto _ : state) {
    // Interleaved, and the order alternates (on then off, off then on), so
    // neither drift on the machine nor a warm page cache favours a side.
    const int workers = static_cast<int>(state.range(0));
    Figures a, b;
    if (on_first) {
      a = job(true, rates, workers);
      b = job(false, rates, workers);
    } else {
      b = job(false, rates, workers);
      a = job(true, rates, workers);
    }
    on_first = !on_first;
    if (a.tokens_per_s <= 0 || b.tokens_per_s <= 0) {
      state.SkipWithError("a trainer job failed (see a run without --no-report)");
      return;
    }
    on.push_back(a.tokens_per_s);
    off.push_back(b.tokens_per_s);
    off_step.push_back(b.median_step_s);
    planned.push_back(b.predicted_step_s);
    last_on = a;
  }
  state.counters["on_tokens_per_s"] = median(on);
  state.counters["off_tokens_per_s"] = median(off);
  state.counters["on_over_off"] = median(on) / median(off);
  state.counters["mfu_on"] = last_on.mfu;
  state.counters["gemm_gflops"] = rates.gemm;
  state.counters["model_gflops"] = rates.model;
  state.counters["step_s_off"] = median(off_step);
  state.counters["step_s_planned"] = median(planned);
  state.counters["planned_over_off"] = median(planned) / median(off_step);
}
// 4 workers share the 2 cores (the demo's shape: every collective waits for
// a scheduling round); 2 have a core each (a worker per device, as a
// cluster runs them). Runs of one side vary by ±7 % here: five interleaved
// pairs, medians.
BENCHMARK(BM_TrainerFeaturesOnVsOff)
    ->ArgName("workers")
    ->Arg(4)
    ->Arg(2)
    ->Iterations(5)
    ->Unit(benchmark::kSecond)
    ->UseRealTime();

constexpr int kKillStep = 30, kKillSteps = 60;

// From "kill T" to the first "step kKillStep T" after it, over every PREFIX.* log.
double recovery_s(const std::string& dir, const std::string& prefix) {
  double kill = -1, back = -1;
  std::vector<std::pair<int, double>> steps;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().rfind(prefix + ".", 0) != 0) continue;
    std::ifstream in(e.path());
    std::string word;
    while (in >> word) {
      double t = 0;
      if (word == "kill") {
        in >> kill;
      } else if (word == "step") {
        int n = 0;
        in >> n >> t;
        steps.emplace_back(n, t);
      }
    }
  }
  for (auto [n, t] : steps)
    if (n == kKillStep && t > kill && (back < 0 || t < back)) back = t;
  return kill > 0 && back > 0 ? back - kill : -1;
}

double sigmarun_recovery(const Build& build = kCurrent) {
  const std::string dir = fs::temp_directory_path() / ("bench-trainer-kill-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<std::string> args{build.sigmarun,
                                "--nproc",
                                "4",
                                "--spares",
                                "1",
                                "--job-dir",
                                dir + "/job",
                                "--no-progress",
                                "--no-report",
                                "--heartbeat-timeout",
                                "1",
                                "--",
                                build.trainer,
                                "--data",
                                text(),
                                "--steps",
                                std::to_string(kKillSteps),
                                "--gemm-gflops",
                                "100",
                                "--model-gflops",
                                "50",
                                "--kill-at",
                                std::to_string(kKillStep),
                                "--kill-device",
                                "1",
                                "--progress-log",
                                dir + "/progress"};
  const double s = run(args) == 0 ? recovery_s(dir, "progress") : -1;
  fs::remove_all(dir);
  return s;
}

double torchrun_recovery() {
  const std::string dir =
      fs::temp_directory_path() / ("bench-trainer-torchrun-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir + "/ckpt");
  const int port = 20000 + static_cast<int>(::getpid() % 20000);
  std::vector<std::string> args{"/usr/bin/python3",
                                "-m",
                                "torch.distributed.run",
                                "--nproc_per_node=4",
                                "--max_restarts=3",
                                "--monitor_interval=0.1",
                                "--master_port=" + std::to_string(port),
                                "--redirects",
                                "2",
                                "--tee",
                                "2",
                                "--log_dir",
                                dir + "/logs",
                                TORCHRUN_MOE,
                                text(),
                                std::to_string(kKillSteps),
                                "1",
                                dir + "/ckpt",
                                dir + "/progress",
                                std::to_string(kKillStep),
                                "1"};
  const double s = run(args) == 0 ? recovery_s(dir, "progress") : -1;
  fs::remove_all(dir);
  return s;
}

void BM_TimeToFirstStepAfterKill(benchmark::State& state) {
  std::vector<double> ours, theirs;
  for (auto _ : state) {
    ours.push_back(sigmarun_recovery());
    theirs.push_back(torchrun_recovery());
    if (ours.back() < 0 || theirs.back() < 0) {
      state.SkipWithError("a job did not recover (sigmarun, or torchrun without python3-torch)");
      return;
    }
  }
  std::sort(ours.begin(), ours.end());
  std::sort(theirs.begin(), theirs.end());
  state.counters["sigmarun_s"] = ours[ours.size() / 2];
  state.counters["torchrun_best_s"] = theirs[theirs.size() / 2];
  state.counters["torchrun_over_sigmarun"] = theirs[theirs.size() / 2] / ours[ours.size() / 2];
}
BENCHMARK(BM_TimeToFirstStepAfterKill)->Iterations(3)->Unit(benchmark::kSecond)->UseRealTime();

// This build against SIGMA_BENCH_PREVIOUS's in one run: the features-on job
// (4 workers) and the time to the first step after a kill, each pair
// interleaved with the order alternating. A ratio above 1 is this build
// ahead (throughput) / behind (recovery time) in the ratio's own terms.
void BM_ThisBuildVsPrevious(benchmark::State& state) {
  const Build* prev = previous_build();
  if (prev == nullptr) {
    state.SkipWithError("SIGMA_BENCH_PREVIOUS names no earlier build");
    return;
  }
  const Rates rates = measure_rates();
  std::vector<double> ours, theirs, back_ours, back_theirs;
  bool ours_first = true;
  for (auto _ : state) {
    for (const bool mine : {ours_first, !ours_first}) {
      (mine ? ours : theirs).push_back(job(true, rates, 4, mine ? kCurrent : *prev).tokens_per_s);
      (mine ? back_ours : back_theirs).push_back(sigmarun_recovery(mine ? kCurrent : *prev));
    }
    ours_first = !ours_first;
    if (ours.back() <= 0 || theirs.back() <= 0 || back_ours.back() < 0 || back_theirs.back() < 0) {
      state.SkipWithError("a job failed or did not recover (this build or the previous one)");
      return;
    }
  }
  state.counters["tokens_per_s"] = median(ours);
  state.counters["previous_tokens_per_s"] = median(theirs);
  state.counters["throughput_this_over_previous"] = median(ours) / median(theirs);
  state.counters["kill_to_step_s"] = median(back_ours);
  state.counters["previous_kill_to_step_s"] = median(back_theirs);
  state.counters["recovery_previous_over_this"] = median(back_theirs) / median(back_ours);
}
BENCHMARK(BM_ThisBuildVsPrevious)->Iterations(5)->Unit(benchmark::kSecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
