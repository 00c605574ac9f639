// One rank of the killed-peer test: all-reduces in a loop until the
// communicator fails, then aborts it, rebuilds a communicator with the
// survivors and checks an all-reduce there. Writes what it saw to
// DIR/result-RANK as "key=value" lines.
//   cpu_rank_worker RANK WORLD DIR
#include <sigma/bootstrap.hpp>
#include <sigma/hal.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>

using namespace sigma;
using namespace std::chrono_literals;

namespace {

hal_coll_args_t all_reduce(hal::Buffer& b, uint64_t count) {
  return hal::coll_args(HAL_COLL_ALL_REDUCE, HAL_DTYPE_F32, count, b.data(), b.data());
}

hal_comm_create_args_t comm_args(uint32_t rank, uint32_t world, const bootstrap::HalBootstrap& bs) {
  hal_comm_create_args_t a{};
  a.struct_size = sizeof(a);
  a.rank = rank;
  a.world_size = world;
  a.bootstrap = bs.table();
  a.timeout_ns = 30'000'000'000ull;
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: cpu_rank_worker RANK WORLD DIR\n";
    return 2;
  }
  const uint32_t rank = static_cast<uint32_t>(std::atoi(argv[1]));
  const uint32_t world = static_cast<uint32_t>(std::atoi(argv[2]));
  const std::string dir = argv[3];
  std::ofstream out(dir + "/result-" + std::to_string(rank) + ".tmp");
  // Where this rank is, flushed at once: a rank that hangs tells the test
  // which step it never left.
  std::ofstream phase_file(dir + "/phase-" + std::to_string(rank));
  auto phase = [&](const char* what) { phase_file << what << std::endl; };
  try {
    auto store = std::make_shared<bootstrap::FileStore>(dir + "/store");
    auto plugin = hal::Plugin::load("cpu");
    const uint64_t n = 4u << 20;  // 16 MiB of f32: each all-reduce takes a while
    hal::Buffer buf(plugin, 0, n * 4);
    std::vector<float> ones(n, 1.0f);
    buf.copy_from_host(ones.data(), n * 4);
    Code seen = Code::ok;
    double detect_s = 0;
    {
      bootstrap::HalBootstrap bs(store, "main/");
      phase("create");
      hal::Communicator comm(plugin, comm_args(rank, world, bs));
      phase("all-reduce loop");
      for (int i = 0;; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        try {
          // The configured bound: a collective that takes longer is a hang.
          comm.run(all_reduce(buf, n), 10s);
        } catch (const Error& e) {
          seen = e.code();
          detect_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          out << "error=" << e.what() << "\n";
          break;
        }
        if (i == 0) store->set("ready/" + std::to_string(rank), {1});
      }
      phase("abort");
      comm.abort();
      out << "async_error=" << hal_status_name(comm.async_error()) << "\n";
      phase("destroy");
    }
    out << "code=" << code_name(seen) << "\n"
        << "detect_s=" << detect_s << "\n";
    // The survivors (every rank but the last) carry on without it.
    bootstrap::HalBootstrap bs2(store, "survivors/");
    phase("create survivors");
    hal::Communicator comm2(plugin, comm_args(rank, world - 1, bs2));
    // Element i of rank r holds r + 1 + i % 7: the survivors' sum is
    // world*(world-1)/2 + (world-1)*(i % 7) in the first 1024 elements, and
    // the element past them is left as it was.
    constexpr uint64_t kSurvivorCount = 1024;
    std::vector<float> mine(kSurvivorCount + 1);
    for (uint64_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<float>(rank + 1 + i % 7);
    buf.copy_from_host(mine.data(), mine.size() * 4);
    phase("survivors all-reduce");
    comm2.run(all_reduce(buf, kSurvivorCount), 10s);
    phase("done");
    std::vector<float> got(mine.size());
    buf.copy_to_host(got.data(), got.size() * 4);
    uint64_t wrong = 0;
    for (uint64_t i = 0; i < kSurvivorCount; ++i)
      wrong += got[i] != static_cast<float>(world * (world - 1) / 2 + (world - 1) * (i % 7));
    wrong += got[kSurvivorCount] != mine[kSurvivorCount];
    out << "survivors_sum=" << got[0] << "\n"
        << "survivors_wrong_elements=" << wrong << "\n";
    out.close();
    std::rename((dir + "/result-" + std::to_string(rank) + ".tmp").c_str(),
                (dir + "/result-" + std::to_string(rank)).c_str());
    return 0;
  } catch (const std::exception& e) {
    out << "fatal=" << e.what() << "\n";
    return 1;
  }
}
