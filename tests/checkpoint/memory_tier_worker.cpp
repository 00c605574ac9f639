// One rank of the memory tier's tests: "memory_tier_worker CASE RANK WORLD
// DIR", over real Gloo (the cpu vendor) meeting through a file store in DIR.
//  - ring: world 3; snapshots 1..3 of a state overwritten right after each;
//    rank 1 hands its replica of rank 0's snapshot 3 to rank 2; each rank
//    checks the bytes and writes what it holds.
//  - placed: world 6 in three nodes of two ({0,0,1,1,2,2}), two replicas
//    each, placed across the nodes; snapshots 1..3; then, as if node 1
//    were lost, rank 2's state comes from its second holder and rank 3's
//    from its first, each received by the rank itself; each rank writes
//    the replicas it holds, by whose they are.
//  - refresh: world 3 on the ring; snapshots 1..2 exchanged, then 3 taken
//    with no exchange (as if a fault had cut it); a refresh sends each
//    rank's 3 to its successor, which keeps it as a replica; then rank 1
//    hands rank 0's 3 to rank 2, which checks the bytes.
//  - kill: world 2; both snapshot 1 and settle it; at snapshot 2 rank 1
//    SIGKILLs itself as soon as the exchange is posted; rank 0 aborts,
//    abandons, and writes what it holds.
//  - kill-next: the same, and rank 0 takes snapshot 3 after the abort.
#include <sigma/bootstrap.hpp>
#include <sigma/memory_tier.hpp>

#include "../parallel/rank_main.hpp"

#include <signal.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

using namespace sigma;

namespace {

constexpr auto kTimeout = std::chrono::seconds(60);
// 64 MiB and a little: an exchange that cannot finish before a kill lands,
// handed off in pieces of 16 MiB and a short last one.
constexpr size_t kFloats = (16 << 20) + 37;

// Rank r's state at snapshot i: every float a function of (r, i, position).
void fill(std::vector<float>& v, uint32_t rank, uint64_t index) {
  for (size_t k = 0; k < v.size(); ++k)
    v[k] = static_cast<float>((uint64_t{rank} * 1000) + index) + static_cast<float>(k % 7);
}

bool holds(const std::vector<float>& v, uint32_t rank, uint64_t index) {
  std::vector<float> want(v.size());
  fill(want, rank, index);
  return v == want;
}

std::vector<checkpoint::TensorView> views_of(std::vector<float>& v) {
  return {checkpoint::TensorView("state", HAL_DTYPE_F32, {static_cast<int64_t>(v.size())}, v.data())};
}

void write_held(const std::string& path, const checkpoint::MemoryTier& tier) {
  std::ofstream out(path);
  out << "own";
  for (uint64_t i : tier.own_indices()) out << " " << i;
  out << "\nreplica";
  for (uint64_t i : tier.replica_indices()) out << " " << i;
  out << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  return test::rank_main(argc, argv, [](const test::RankCase& c) {
    const std::string& name = c.name;
    const std::string& dir = c.dir;
    const uint32_t rank = c.rank, world = c.world;
    auto plugin = hal::Plugin::load("cpu");
    bootstrap::HalBootstrap boot(c.store, "ring/");
    hal_comm_create_args_t ca{};
    ca.struct_size = sizeof(ca);
    ca.rank = rank;
    ca.world_size = world;
    ca.bootstrap = boot.table();
    ca.timeout_ns = static_cast<uint64_t>(std::chrono::nanoseconds(kTimeout).count());
    auto comm = std::make_unique<hal::Communicator>(plugin, ca);
    checkpoint::MemoryTier tier({.keep = 2});
    std::vector<float> state(kFloats);
    const auto views = views_of(state);
    if (name == "ring") {
      for (uint64_t i = 1; i <= 3; ++i) {
        fill(state, rank, i);
        tier.snapshot(i, views, *comm, rank, world);
        fill(state, rank, 99);  // training goes on: the copy was taken before snapshot() returned
      }
      // Snapshot 3's exchange may still be in flight; the hand-off waits for
      // it. Rank 1 holds rank 0's snapshot 3 and hands it to rank 2.
      std::vector<float> theirs(kFloats);
      tier.handoff(3, {{1, 0, 2}}, views_of(theirs), *comm, rank);
      std::ofstream out(dir + "/ring-" + std::to_string(rank));
      const uint32_t owner = rank == 2 ? 0 : rank;  // whose state rank 2 now holds as its own
      if (rank == 2) out << "handed " << (holds(theirs, 0, 3) ? "ok" : "wrong") << "\n";
      std::fill(state.begin(), state.end(), 0.0f);
      out << "own " << (tier.restore_own(3, views) && holds(state, owner, 3) ? "ok" : "wrong") << "\n";
      write_held(dir + "/held-" + std::to_string(rank), tier);
    } else if (name == "placed") {
      const auto where = checkpoint::ReplicaPlacement::across({0, 0, 1, 1, 2, 2}, 2);
      std::vector<float> small(kFloats / 256);
      const auto small_views = views_of(small);
      for (uint64_t i = 1; i <= 3; ++i) {
        fill(small, rank, i);
        tier.snapshot(i, small_views, *comm, rank, where);
      }
      tier.flush();
      std::ofstream held(dir + "/held-" + std::to_string(rank));
      for (const auto& [of, steps] : tier.replicas_held()) {
        held << "of " << of << ":";
        for (uint64_t i : steps) held << " " << i;
        held << "\n";
      }
      std::fill(small.begin(), small.end(), 0.0f);
      tier.handoff(3, {{where.holder(2, 1), 2, 2}, {where.holder(3, 0), 3, 3}}, small_views, *comm, rank);
      if (rank == 2 || rank == 3)
        std::ofstream(dir + "/handed-" + std::to_string(rank))
            << (holds(small, rank, 3) ? "ok" : "wrong") << "\n";
    } else if (name == "refresh") {
      for (uint64_t i = 1; i <= 2; ++i) {
        fill(state, rank, i);
        tier.snapshot(i, views, *comm, rank, world);
      }
      tier.flush();
      fill(state, rank, 3);
      tier.snapshot(3, views, *comm, rank, checkpoint::ReplicaPlacement::ring(1));  // kept here only
      write_held(dir + "/before-" + std::to_string(rank), tier);
      tier.handoff(3, {{0, 0, 1, true}, {1, 1, 2, true}, {2, 2, 0, true}}, views, *comm, rank);
      write_held(dir + "/held-" + std::to_string(rank), tier);
      std::vector<float> theirs(kFloats);
      tier.handoff(3, {{1, 0, 2}}, views_of(theirs), *comm, rank);
      if (rank == 2) std::ofstream(dir + "/handed-2") << (holds(theirs, 0, 3) ? "ok" : "wrong") << "\n";
    } else if (name == "kill" || name == "kill-next") {
      fill(state, rank, 1);
      tier.snapshot(1, views, *comm, rank, world);
      tier.drop_after(1);  // waits for the exchange of 1: both ranks hold each other's
      fill(state, rank, 2);
      try {
        tier.snapshot(2, views, *comm, rank, world);
      } catch (const Error& e) {
        // Rank 1 died while this rank still posted its pieces (a loaded
        // machine): the same cut exchange, seen sooner.
        if (rank == 1) throw;
        std::cerr << "rank 0: snapshot 2's exchange failed as it was posted: " << e.what() << "\n";
      }
      if (rank == 1) {
        std::ofstream(dir + "/pid-1") << ::getpid() << "\n";
        ::raise(SIGKILL);  // the posted exchange of 2 dies with it
      }
      // Rank 1 is gone (dead or a zombie) before rank 0 looks: waited for,
      // not guessed with a sleep.
      for (int i = 0; i < 2000; ++i) {
        int pid = 0;
        std::ifstream(dir + "/pid-1") >> pid;
        std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
        std::string line;
        std::getline(stat, line);
        const auto paren = line.rfind(')');
        if (pid > 0 && (!stat || (paren != std::string::npos && line.substr(paren + 2, 1) == "Z"))) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      tier.settle();  // never blocks, whatever state the exchange is in
      comm->abort();  // what a session does when a peer is gone
      if (name == "kill-next") {
        // As a rank that went on to its next snapshot before it saw the
        // cut (its own exchange with another peer was fine): snapshot 3 is
        // kept, its exchange fails at once on the aborted communicator.
        try {
          tier.flush();  // the cut exchange of 2 seen and dropped, as settle() drops one
        } catch (const Error& e) {
          std::cerr << "rank 0: snapshot 2's exchange failed: " << e.what() << "\n";
        }
        fill(state, rank, 3);
        try {
          tier.snapshot(3, views, *comm, rank, world);
        } catch (const Error& e) {
          std::cerr << "rank 0: snapshot 3's exchange failed: " << e.what() << "\n";
        }
      }
      tier.abandon();
      write_held(dir + "/held-" + std::to_string(rank), tier);
    } else {
      throw Error(Code::invalid_argument, "no case " + name);
    }
  });
}
