// A small deterministic data-parallel job for the sigmarun tests: every rank
// holds the same parameters and a momentum buffer, computes a gradient that
// depends on (parameters, step, rank), all-reduces it and applies SGD with
// momentum. Same seed and steps: the same final bytes, whatever failed on
// the way, as long as recovery is exact.
//
//   runtime_worker --steps N [--size K] [--step-ms MS]
//                  [--kill-at STEP --kill-device D [--kill-signal KILL|STOP|NONE]
//                   [--kill-after-reduce] [--kill-delay-ms MS]]...
//                  [--log PREFIX] [--start-delay-ms MS]
//
// --kill-at: the process on device D sends itself the signal when it starts
// step STEP (the first time only: a replacement on another device does not),
// or with --kill-after-reduce once that step's all-reduce and update are
// done (its peers can then finish the step without it); --kill-delay-ms
// waits that long first. NONE sends nothing: only the delay, a rank that is
// slow once (with --kill-after-reduce, slow to reach its step's checkpoint).
// At the end each rank writes JOB_DIR/final-rank-R.bin (parameters then
// momentum). --log: each process appends "step N T" after each step and
// "kill T" before signalling itself to PREFIX.dDEVICE (T: CLOCK_MONOTONIC
// seconds), for the recovery benchmark.
#include <sigma/runtime.hpp>

#include <time.h>
#include <unistd.h>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Kill {
  uint64_t step;
  uint32_t device;
  int signal;
  bool after_reduce = false;  // at the end of the step's compute, after its all-reduce
  double delay_ms = 0;        // ... and this long after
};

}  // namespace

int main(int argc, char** argv) {
  uint64_t steps = 100, size = 4096;
  double step_ms = 0, start_delay_ms = 0;
  std::vector<Kill> kills;
  std::string log_prefix;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "runtime_worker: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--steps")
      steps = std::stoull(next());
    else if (a == "--size")
      size = std::stoull(next());
    else if (a == "--step-ms")
      step_ms = std::stod(next());
    else if (a == "--log")
      log_prefix = next();
    else if (a == "--start-delay-ms")
      start_delay_ms = std::stod(next());
    else if (a == "--kill-at")
      kills.push_back({std::stoull(next()), 0, SIGKILL});
    else if (a == "--kill-device" && !kills.empty())
      kills.back().device = static_cast<uint32_t>(std::stoul(next()));
    else if (a == "--kill-after-reduce" && !kills.empty())
      kills.back().after_reduce = true;
    else if (a == "--kill-delay-ms" && !kills.empty())
      kills.back().delay_ms = std::stod(next());
    else if (a == "--kill-signal" && !kills.empty()) {
      const std::string sig = next();
      kills.back().signal = sig == "STOP" ? SIGSTOP : sig == "NONE" ? 0 : SIGKILL;
    } else {
      std::cerr << "runtime_worker: unknown argument " << a << "\n";
      return 2;
    }
  }
  try {
    if (start_delay_ms > 0)  // lets a test's stranger reach the agent first
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(start_delay_ms));
    sigma::runtime::Session s;
    const uint32_t device = static_cast<uint32_t>(std::atoi(std::getenv("SIGMA_DEVICE")));
    std::vector<float> params(size), momentum(size, 0.0f), grad(size);
    for (uint64_t i = 0; i < size; ++i) params[i] = 0.5f * std::sin(0.001f * static_cast<float>(i));
    s.set_state({{"params", HAL_DTYPE_F32, {static_cast<int64_t>(size)}, params.data()},
                 {"momentum", HAL_DTYPE_F32, {static_cast<int64_t>(size)}, momentum.data()}});
    sigma::hal::PluginPtr plugin = s.plugin();
    sigma::hal::Buffer buf(plugin, 0, size * sizeof(float));
    std::FILE* log =
        log_prefix.empty() ? nullptr : std::fopen((log_prefix + ".d" + std::to_string(device)).c_str(), "a");
    auto mono = [] {
      timespec ts{};
      ::clock_gettime(CLOCK_MONOTONIC, &ts);
      return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
    };
    auto fire = [&](uint64_t step, bool after_reduce) {
      for (const Kill& k : kills) {
        if (k.step == step && k.device == device && k.after_reduce == after_reduce) {
          std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(k.delay_ms));
          std::fprintf(stderr, "runtime_worker: device %u sends itself signal %d at step %llu\n", device,
                       k.signal, static_cast<unsigned long long>(step));
          std::fflush(stderr);
          if (log) {
            std::fprintf(log, "kill %.6f\n", mono());
            std::fflush(log);
          }
          if (k.signal != 0) ::kill(::getpid(), k.signal);
        }
      }
    };
    auto done = s.run(steps, [&](uint64_t step) {
      fire(step, false);
      const float r = static_cast<float>(s.rank());
      for (uint64_t i = 0; i < size; ++i) {
        grad[i] = 0.01f * std::sin(params[i] * 3.0f + 0.01f * static_cast<float>(step) + 0.1f * r);
      }
      if (step_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(step_ms));
      buf.copy_from_host(grad.data(), size * sizeof(float));
      s.comm().run(sigma::hal::coll_args(HAL_COLL_ALL_REDUCE, HAL_DTYPE_F32, size, buf.data(), buf.data()),
                   std::chrono::seconds(30));
      buf.copy_to_host(grad.data(), size * sizeof(float));
      const float inv = 1.0f / static_cast<float>(s.world_size());
      for (uint64_t i = 0; i < size; ++i) {
        momentum[i] = 0.9f * momentum[i] + grad[i] * inv;
        params[i] -= 0.1f * momentum[i];
      }
      fire(step, true);
      if (log) {
        std::fprintf(log, "step %llu %.6f\n", static_cast<unsigned long long>(step), mono());
        std::fflush(log);
      }
    });
    if (!done) {
      std::fprintf(stderr, "runtime_worker: device %u retired by the agent\n", device);
      return 0;
    }
    const std::string out =
        std::string(std::getenv("SIGMA_JOB_DIR")) + "/final-rank-" + std::to_string(s.rank()) + ".bin";
    std::ofstream f(out, std::ios::binary);
    f.write(reinterpret_cast<const char*>(params.data()), static_cast<std::streamsize>(size * sizeof(float)));
    f.write(reinterpret_cast<const char*>(momentum.data()),
            static_cast<std::streamsize>(size * sizeof(float)));
    std::fprintf(stderr, "runtime_worker: device %u rank %u done after %llu steps\n", device, s.rank(),
                 static_cast<unsigned long long>(*done));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "runtime_worker: %s\n", e.what());
    return 1;
  }
}
