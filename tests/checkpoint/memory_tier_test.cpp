// The memory tier over real Gloo communicators (the cpu vendor), one
// process per rank: the exchange (on the ring, or placed across nodes) runs behind the training loop and
// still delivers each rank's snapshot intact, and an exchange cut by a
// killed peer leaves the replicas that had arrived, never a partial one.
#include "../parallel/ranks.hpp"

#include <sigma/hal.hpp>
#include <sigma/memory_tier.hpp>
#include <sigma/replica_placement.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include <fstream>
#include <sstream>

namespace sigma::test {
namespace {

std::string text_of(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(MemoryTier, SnapshotsExchangedBehindTheLoopArriveIntactAndHandOff) {
  const std::string dir = run_ranks(SIGMA_MEMORY_TIER_WORKER, "ring", 3);
  for (int r = 0; r < 3; ++r) {
    const std::string ring = text_of(dir + "/ring-" + std::to_string(r));
    EXPECT_NE(ring.find("own ok"), std::string::npos) << "rank " << r << ": " << ring;
  }
  EXPECT_NE(text_of(dir + "/ring-2").find("handed ok"), std::string::npos);
  // keep = 2: the two newest replicas, and one more own (the newest's
  // exchange is checked at the next snapshot); rank 2's own state is now
  // rank 0's snapshot 3 alone.
  EXPECT_EQ(text_of(dir + "/held-0"), "own 1 2 3\nreplica 2 3\n");
  EXPECT_EQ(text_of(dir + "/held-1"), "own 1 2 3\nreplica 2 3\n");
  EXPECT_EQ(text_of(dir + "/held-2"), "own 3\nreplica 2 3\n");
}

TEST(MemoryTier, ReplicasPlacedAcrossNodesArriveAtTheirHoldersAndAnyHolderHandsOff) {
  const auto where = checkpoint::ReplicaPlacement::across({0, 0, 1, 1, 2, 2}, 2);
  ASSERT_TRUE(where.cross_domain());
  const std::string dir = run_ranks(SIGMA_MEMORY_TIER_WORKER, "placed", 6);
  for (uint32_t r = 0; r < 6; ++r) {
    // Rank r holds the two newest snapshots of each rank it holds for (the
    // hand-off reads replicas; it does not take them).
    std::string want;
    std::map<uint32_t, int> sources;
    for (uint32_t j = 0; j < 2; ++j) sources[where.source(r, j)] = 1;
    for (const auto& [of, one] : sources) want += "of " + std::to_string(of) + ": 2 3\n";
    EXPECT_EQ(text_of(dir + "/held-" + std::to_string(r)), want) << "rank " << r;
    for (uint32_t j = 0; j < 2; ++j)
      EXPECT_NE(where.source(r, j) / 2, r / 2) << "rank " << r << " holds its own node's";
  }
  EXPECT_EQ(text_of(dir + "/handed-2"), "ok\n");
  EXPECT_EQ(text_of(dir + "/handed-3"), "ok\n");
}

// A snapshot lent out (contained recovery's donor streams it) keeps its
// bytes while the tier takes, drops and reuses snapshots around it.
// A fault cut the exchange of snapshot 3: every rank holds its own 3, no
// holder has it. The refresh of a memory restore sends each to its holder,
// which keeps it as a replica (the bytes checked by handing one off).
TEST(MemoryTier, ARefreshGivesEachHolderTheSnapshotItLacked) {
  const std::string dir = run_ranks(SIGMA_MEMORY_TIER_WORKER, "refresh", 3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(text_of(dir + "/before-" + std::to_string(r)), "own 1 2 3\nreplica 1 2\n") << "rank " << r;
    EXPECT_EQ(text_of(dir + "/held-" + std::to_string(r)), "own 1 2 3\nreplica 2 3\n") << "rank " << r;
  }
  EXPECT_EQ(text_of(dir + "/handed-2"), "ok\n");
}

TEST(MemoryTier, ALentSnapshotIsNeverWrittenAgain) {
  auto plugin = hal::Plugin::load("cpu");
  hal_comm_create_args_t ca{};
  ca.struct_size = sizeof(ca);
  ca.world_size = 1;
  hal::Communicator comm(plugin, ca);
  checkpoint::MemoryTier tier({.keep = 1});
  std::vector<uint32_t> state(1 << 16);
  const std::vector<checkpoint::TensorView> views{
      checkpoint::TensorView("state", HAL_DTYPE_I32, {static_cast<int64_t>(state.size())}, state.data())};
  std::fill(state.begin(), state.end(), 1u);
  tier.snapshot(1, views, comm, 0, 1);
  const auto image = tier.own_image(1);
  ASSERT_NE(image, nullptr);
  ASSERT_GE(image->size(), state.size() * 4);
  for (uint32_t i = 2; i <= 5;
       ++i) {  // keep 1: each snapshot drops the one two before, whose buffer is reused
    std::fill(state.begin(), state.end(), i);
    tier.snapshot(i, views, comm, 0, 1);
  }
  EXPECT_EQ(tier.own_indices(), (std::vector<uint64_t>{4, 5}));
  EXPECT_EQ(tier.own_image(1), nullptr);
  const auto* lent = static_cast<const uint32_t*>(image->data());
  EXPECT_TRUE(std::all_of(lent, lent + state.size(), [](uint32_t x) { return x == 1u; }));
  std::fill(state.begin(), state.end(), 0u);
  ASSERT_TRUE(tier.restore_own(5, views));
  EXPECT_EQ(state.front(), 5u);
  EXPECT_EQ(state.back(), 5u);
}

TEST(MemoryTier, AnExchangeCutByAKilledPeerIsNotCountedAsAReplica) {
  std::vector<int> statuses;
  const std::string dir = run_ranks(SIGMA_MEMORY_TIER_WORKER, "kill", 2, std::chrono::seconds(60), &statuses);
  ASSERT_EQ(statuses.size(), 2u);
  EXPECT_TRUE(WIFEXITED(statuses[0]) && WEXITSTATUS(statuses[0]) == 0) << text_of(dir + "/stderr-0");
  EXPECT_TRUE(WIFSIGNALED(statuses[1]) && WTERMSIG(statuses[1]) == SIGKILL);
  // Its own snapshot 2 was copied before the exchange; rank 1's never arrived.
  EXPECT_EQ(text_of(dir + "/held-0"), "own 1 2\nreplica 1\n");
}

// The same, and rank 0 drops the cut exchange and takes its snapshot 3,
// as a rank does that goes on to its next snapshot before it sees the cut
// (its exchange with another peer was fine). It still holds its own
// snapshot 1, the newest of rank 1's it keeps, so the two have a step in
// common to restore.
TEST(MemoryTier, ARankThatTakesItsNextSnapshotBeforeSeeingTheCutKeepsTheStepItsHolderHas) {
  std::vector<int> statuses;
  const std::string dir =
      run_ranks(SIGMA_MEMORY_TIER_WORKER, "kill-next", 2, std::chrono::seconds(60), &statuses);
  ASSERT_EQ(statuses.size(), 2u);
  EXPECT_TRUE(WIFEXITED(statuses[0]) && WEXITSTATUS(statuses[0]) == 0) << text_of(dir + "/stderr-0");
  EXPECT_EQ(text_of(dir + "/held-0"), "own 1 2 3\nreplica 1\n");
}

}  // namespace
}  // namespace sigma::test
