// A small model-parallel x data-parallel job for contained recovery's
// tests: the world is replicas of a group of G ranks; position p of a
// replica holds shard p of the parameters (`--size` floats) with its
// momentum and a larger optimizer buffer (`--moments` floats: what a
// hand-off moves besides the weights). A step has `--microbatches` M
// micro-batches, shared among the live replicas (Session::microbatches).
// Each micro-batch couples the shards through an all-reduce over the
// replica (the model-parallel exchange), then each shard's gradient is
// summed over the data-parallel group, divided by M and applied with
// momentum. The same global batch every step whichever replicas are live:
// only the order of the sums differs.
//
//   contained_worker --steps N [--size K] [--moments K2] [--microbatches M]
//                    [--step-ms MS] [--kill-at STEP --kill-device D]
//
// --step-ms: a step's compute time for all M micro-batches (a replica
// sleeps its share of it)
//
// Each rank appends to JOB_DIR/steps-rank-R.txt, per committed step, "step
// S batch B live L loss X mb m1 m2 ..." (the micro-batches this replica
// computed), and writes JOB_DIR/final-rank-R.bin (parameters, momentum).
// --kill-at: the process on device D sends itself SIGKILL when it starts
// step STEP (the first time only).
#include <sigma/host_staging.hpp>
#include <sigma/runtime.hpp>

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Args {
  uint64_t steps = 60, size = 1024, moments = 0;
  uint32_t microbatches = 8;
  double step_ms = 0;
  int64_t kill_at = -1;
  uint32_t kill_device = 0;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) {
      std::cerr << "contained_worker: " << k << " needs a value\n";
      std::exit(2);
    }
    const std::string v = argv[++i];
    if (k == "--steps")
      a.steps = std::stoull(v);
    else if (k == "--size")
      a.size = std::stoull(v);
    else if (k == "--moments")
      a.moments = std::stoull(v);
    else if (k == "--microbatches")
      a.microbatches = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--step-ms")
      a.step_ms = std::stod(v);
    else if (k == "--kill-at")
      a.kill_at = std::stoll(v);
    else if (k == "--kill-device")
      a.kill_device = static_cast<uint32_t>(std::stoul(v));
    else {
      std::cerr << "contained_worker: unknown argument " << k << "\n";
      std::exit(2);
    }
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    sigma::runtime::Session s;
    const uint32_t device = static_cast<uint32_t>(std::atoi(std::getenv("SIGMA_DEVICE")));
    const std::string dir = std::getenv("SIGMA_JOB_DIR");
    const auto n = static_cast<int64_t>(a.size);
    std::vector<float> params(a.size), momentum(a.size, 0.0f),
        moments(std::max<uint64_t>(a.moments, 1), 0.0f);
    // +1: the step's loss travels with the gradient.
    std::vector<float> grad(a.size + 1);
    sigma::hal::HostStaging staging(s.plugin());  // the model-parallel exchange's buffer
    std::vector<sigma::checkpoint::TensorView> views{
        {"params", HAL_DTYPE_F32, {n}, params.data()},
        {"momentum", HAL_DTYPE_F32, {n}, momentum.data()},
        {"moments", HAL_DTYPE_F32, {static_cast<int64_t>(moments.size())}, moments.data()}};
    s.set_state(views);
    sigma::runtime::Loop loop;
    loop.total_steps = a.steps;
    loop.on_generation = [&](uint64_t next) {
      staging.release();  // an aborted exchange may have held it
      if (next != 0) return;
      // A fresh start: the shard's first values depend on its position.
      const float p = static_cast<float>(s.replicas().position);
      for (uint64_t i = 0; i < a.size; ++i) params[i] = 0.5f * std::sin(0.001f * static_cast<float>(i) + p);
      std::fill(momentum.begin(), momentum.end(), 0.0f);
      std::fill(moments.begin(), moments.end(), 0.0f);
    };
    loop.step = [&](uint64_t step, uint64_t batch) {
      if (static_cast<int64_t>(step) == a.kill_at && device == a.kill_device) {
        std::fprintf(stderr, "contained_worker: device %u kills itself at step %llu\n", device,
                     static_cast<unsigned long long>(step));
        std::fflush(stderr);
        ::kill(::getpid(), SIGKILL);
      }
      const auto& layout = s.replicas();
      const auto mine = s.microbatches(a.microbatches);
      std::fill(grad.begin(), grad.end(), 0.0f);
      for (uint32_t mb : mine) {
        // This shard's part of the micro-batch's activation, summed over
        // the replica's shards: the model-parallel exchange.
        float act = 0;
        const float x = 0.01f * static_cast<float>(batch) + 0.1f * static_cast<float>(mb);
        for (uint64_t i = 0; i < a.size; i += 7)
          act += params[i] * std::cos(x + 0.003f * static_cast<float>(i));
        std::vector<float> whole{act};
        staging.all_reduce(s.replica_comm(), whole.data(), 1, HAL_DTYPE_F32, HAL_REDUCE_SUM,
                           std::chrono::seconds(60));
        for (uint64_t i = 0; i < a.size; ++i)
          grad[i] += 0.01f * std::sin(params[i] * 3.0f + 0.05f * whole[0] + x);
        grad[a.size] += whole[0] * whole[0];
      }
      // Compute time in proportion to the micro-batches this replica takes.
      if (a.step_ms > 0)
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(
            a.step_ms * static_cast<double>(mine.size()) / static_cast<double>(a.microbatches)));
      s.data_parallel_all_reduce(grad.data(), grad.size(), HAL_DTYPE_F32);  // nothing applied before it
      const float inv = 1.0f / static_cast<float>(a.microbatches);
      for (uint64_t i = 0; i < a.size; ++i) {
        momentum[i] = 0.9f * momentum[i] + grad[i] * inv;
        params[i] -= 0.1f * momentum[i];
      }
      for (float& m : moments) m = 0.99f * m + 0.01f;
      sigma::runtime::StepOutcome out;
      const double loss = grad[a.size] * inv;
      out.report.loss = loss;
      std::ofstream log(dir + "/steps-rank-" + std::to_string(s.rank()) + ".txt", std::ios::app);
      log << "step " << step << " batch " << batch << " live " << layout.live.size() << " loss " << loss
          << " mb";
      for (uint32_t mb : mine) log << " " << mb;
      log << "\n";
      return out;
    };
    const auto done = s.run(loop);
    if (!done) return 0;
    std::ofstream f(dir + "/final-rank-" + std::to_string(s.rank()) + ".bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(params.data()),
            static_cast<std::streamsize>(a.size * sizeof(float)));
    f.write(reinterpret_cast<const char*>(momentum.data()),
            static_cast<std::streamsize>(a.size * sizeof(float)));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "contained_worker: %s\n", e.what());
    return 1;
  }
}
