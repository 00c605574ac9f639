// One rank of the stopped-peer test: all-reduces or all-gathers in a loop. Rank 0 also
// waits for the store's "abort" key on a second thread and then aborts the
// communicator, as a host's control thread does when a peer fails. Writes
// what rank 0 saw to DIR/result-0 as "key=value" lines.
//   cpu_abort_worker RANK WORLD DIR all_reduce|all_gather
#include <sigma/bootstrap.hpp>
#include <sigma/hal.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <thread>

using namespace sigma;
using namespace std::chrono_literals;

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: cpu_abort_worker RANK WORLD DIR all_reduce|all_gather\n";
    return 2;
  }
  const uint32_t rank = static_cast<uint32_t>(std::atoi(argv[1]));
  const uint32_t world = static_cast<uint32_t>(std::atoi(argv[2]));
  const std::string dir = argv[3];
  const bool gather = std::string(argv[4]) == "all_gather";
  try {
    auto store = std::make_shared<bootstrap::FileStore>(dir + "/store");
    auto plugin = hal::Plugin::load("cpu");
    // 16 MiB of f32 a rank: an all-gather sends it whole, more than the
    // sockets' buffers hold.
    const uint64_t n = 4u << 20;
    hal::Buffer buf(plugin, 0, n * 4 * (gather ? world : 1));
    // In place: this rank's block of the gathered output is its input.
    const auto op = gather ? hal::coll_args(HAL_COLL_ALL_GATHER, HAL_DTYPE_F32, n,
                                            static_cast<char*>(buf.data()) + rank * n * 4, buf.data())
                           : hal::coll_args(HAL_COLL_ALL_REDUCE, HAL_DTYPE_F32, n, buf.data(), buf.data());
    bootstrap::HalBootstrap bs(store, "main/");
    hal_comm_create_args_t a{};
    a.struct_size = sizeof(a);
    a.rank = rank;
    a.world_size = world;
    a.bootstrap = bs.table();
    a.timeout_ns = 30'000'000'000ull;
    hal::Communicator comm(plugin, a);
    std::atomic<int64_t> aborted_ns{0};
    std::thread control;
    if (rank == 0) {
      control = std::thread([&] {
        if (!store->get("abort", 120s)) return;
        aborted_ns = std::chrono::steady_clock::now().time_since_epoch().count();
        comm.abort();
      });
    }
    std::ofstream out(dir + "/result-" + std::to_string(rank) + ".tmp");
    for (int i = 0;; ++i) {
      try {
        comm.run(op, 60s);
      } catch (const Error& e) {
        const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
        out << "code=" << code_name(e.code()) << "\nerror=" << e.what() << "\n"
            << "after_abort_s=" << (aborted_ns ? (now - aborted_ns.load()) * 1e-9 : -1.0) << "\n";
        break;
      }
      if (i == 0) store->set("ready/" + std::to_string(rank), {1});
    }
    out.close();
    if (control.joinable()) control.join();
    std::rename((dir + "/result-" + std::to_string(rank) + ".tmp").c_str(),
                (dir + "/result-" + std::to_string(rank)).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "fatal: " << e.what() << "\n";
    return 1;
  }
}
