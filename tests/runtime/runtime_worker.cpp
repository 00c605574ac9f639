// A small deterministic data-parallel job for the sigmarun tests: every rank
// holds the same parameters and a momentum buffer, computes a gradient that
// depends on (parameters, step, rank), all-reduces it and applies SGD with
// momentum. Same seed and steps: the same final bytes, whatever failed on
// the way, as long as recovery is exact.
//
//   runtime_worker --steps N [--size K] [--step-ms MS]
//                  [--kill-at STEP --kill-device D [--kill-signal KILL|STOP|NONE]
//                   [--kill-after-reduce] [--kill-delay-ms MS]]...
//                  [--rollback-at STEP --rollback-to INDEX]
//                  [--log PREFIX] [--start-delay-ms MS] [--wait-for-rank]
//
// The gradient depends on the step's data batch (Session::batch_of: the
// step itself until a rollback skips a window). --rollback-at: every rank
// decides, once, at step STEP, to roll back to snapshot INDEX and skip the
// batches of steps [INDEX, STEP] (run with --snapshot-keep covering it).
// "Once" is a state item kept on rollback; a second item counts the steps
// applied along the path that counts. Both, per rank, go to
// JOB_DIR/items-rank-R.txt at the end ("applied A rolled R").
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
// seconds), for the recovery benchmark. --wait-for-rank: the rank asked
// before the state is set (Session::wait_for_rank, as torch.distributed's
// init_process_group needs it); on a fresh start a one-element all-reduce
// runs before join and must give the world size.
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
#include <stdexcept>
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

// --wait-for-rank: the rank before the state; a fresh start's communicator
// already works, a restoring worker's peers are in the restore.
void rank_before_state(sigma::runtime::Session& s) {
  s.wait_for_rank();
  std::fprintf(stderr, "runtime_worker: rank %u of %u before join, restore %s\n", s.rank(), s.world_size(),
               s.restore_pending() ? "pending" : "none");
  if (s.restore_pending()) return;
  float one = 1.0f;
  s.all_reduce(&one, 1, HAL_DTYPE_F32);
  if (one != static_cast<float>(s.world_size()))
    throw std::runtime_error("the all-reduce before join gave " + std::to_string(one));
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t steps = 100, size = 4096;
  double step_ms = 0, start_delay_ms = 0;
  std::vector<Kill> kills;
  std::string log_prefix;
  int64_t rollback_at = -1;
  uint64_t rollback_to = 0;
  bool wait_for_rank = false;
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
    else if (a == "--rollback-at")
      rollback_at = std::stoll(next());
    else if (a == "--rollback-to")
      rollback_to = std::stoull(next());
    else if (a == "--start-delay-ms")
      start_delay_ms = std::stod(next());
    else if (a == "--wait-for-rank")
      wait_for_rank = true;
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
    if (wait_for_rank) rank_before_state(s);
    const uint32_t device = static_cast<uint32_t>(std::atoi(std::getenv("SIGMA_DEVICE")));
    std::vector<float> params(size), momentum(size, 0.0f), grad(size);
    for (uint64_t i = 0; i < size; ++i) params[i] = 0.5f * std::sin(0.001f * static_cast<float>(i));
    s.set_state({{"params", HAL_DTYPE_F32, {static_cast<int64_t>(size)}, params.data()},
                 {"momentum", HAL_DTYPE_F32, {static_cast<int64_t>(size)}, momentum.data()}});
    uint64_t applied = 0, rolled = 0;  // non-tensor state: steps applied; the rollback taken
    auto counter = [](const char* name, uint64_t& v, bool kept) {
      sigma::runtime::StateItem it;
      it.name = name;
      it.max_bytes = sizeof v;
      it.save = [&v] { return std::string(reinterpret_cast<const char*>(&v), sizeof v); };
      it.restore = [&v](std::string_view b) {
        if (b.size() == sizeof v) std::memcpy(&v, b.data(), sizeof v);
      };
      it.kept_on_rollback = kept;
      return it;
    };
    s.add_state_item(counter("applied", applied, false));
    s.add_state_item(counter("rolled", rolled, true));
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
    sigma::runtime::Loop loop;
    loop.total_steps = steps;
    loop.step = [&](uint64_t step, uint64_t batch) {
      fire(step, false);
      sigma::runtime::StepOutcome out;
      if (static_cast<int64_t>(step) == rollback_at && rolled == 0) {
        rolled = 1;  // every rank alike, and once: the item stays through the rollback
        out.rollback = sigma::runtime::Rollback{rollback_to, rollback_to, step + 1, "the test's rollback"};
        return out;
      }
      const float r = static_cast<float>(s.rank());
      for (uint64_t i = 0; i < size; ++i) {
        grad[i] = 0.01f * std::sin(params[i] * 3.0f + 0.01f * static_cast<float>(batch) + 0.1f * r);
      }
      if (step_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(step_ms));
      s.all_reduce(grad.data(), size, HAL_DTYPE_F32);  // staged through the session's kept buffer
      const float inv = 1.0f / static_cast<float>(s.world_size());
      for (uint64_t i = 0; i < size; ++i) {
        momentum[i] = 0.9f * momentum[i] + grad[i] * inv;
        params[i] -= 0.1f * momentum[i];
      }
      ++applied;
      fire(step, true);
      if (log) {
        std::fprintf(log, "step %llu %.6f\n", static_cast<unsigned long long>(step), mono());
        std::fflush(log);
      }
      return out;
    };
    const auto done = s.run(loop);
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
    std::ofstream(std::string(std::getenv("SIGMA_JOB_DIR")) + "/items-rank-" + std::to_string(s.rank()) +
                  ".txt")
        << "applied " << applied << " rolled " << rolled << "\n";
    std::fprintf(stderr, "runtime_worker: device %u rank %u done after %llu steps\n", device, s.rank(),
                 static_cast<unsigned long long>(*done));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "runtime_worker: %s\n", e.what());
    return 1;
  }
}
