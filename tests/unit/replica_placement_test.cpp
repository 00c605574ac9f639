// Where the memory tier keeps each rank's replicas, without processes:
// domains in, holders out.
#include <sigma/error.hpp>
#include <sigma/replica_placement.hpp>

#include <gtest/gtest.h>

#include <set>

namespace sigma::checkpoint {
namespace {

// Every rank's holders are other ranks, each rank holds exactly one replica
// per slot, and a placement that says it crosses domains does.
void expect_sound(const ReplicaPlacement& p, const std::vector<uint32_t>& domain) {
  for (uint32_t j = 0; j < p.replicas(); ++j) {
    std::set<uint32_t> holders;
    for (uint32_t r = 0; r < p.world(); ++r) {
      const uint32_t h = p.holder(r, j);
      EXPECT_NE(h, r) << "rank " << r << " replica " << j;
      EXPECT_EQ(p.source(h, j), r) << "rank " << r << " replica " << j;
      holders.insert(h);
      if (j < p.crossing()) {
        EXPECT_NE(domain[h], domain[r]) << "rank " << r << " replica " << j;
      }
      for (uint32_t k = 0; k < j; ++k)
        EXPECT_NE(p.holder(r, k), h) << "rank " << r << ": two replicas on one";
    }
    EXPECT_EQ(holders.size(), p.world()) << "replica " << j << " is not one per rank";
  }
}

// Along each replica's exchange, every cycle of ranks holds one that
// receives first (else each would wait on the next), and senders-first
// alternate with receivers-first (at most two in a row, where an odd cycle
// closes), so the exchange runs in parallel, not in series.
void expect_no_deadlock(const ReplicaPlacement& p) {
  for (uint32_t j = 0; j < p.replicas(); ++j) {
    std::vector<bool> seen(p.world());
    for (uint32_t start = 0; start < p.world(); ++start) {
      if (seen[start]) continue;
      bool receiver = false;
      size_t senders_in_a_row = 0, worst = 0;
      for (uint32_t r = start; !seen[r]; r = p.holder(r, j)) {
        seen[r] = true;
        receiver |= !p.sends_first(r, j);
        senders_in_a_row = p.sends_first(r, j) ? senders_in_a_row + 1 : 0;
        worst = std::max(worst, senders_in_a_row);
      }
      EXPECT_TRUE(receiver) << "replica " << j << ": a cycle from rank " << start << " only sends first";
      EXPECT_LE(worst, 2u) << "replica " << j << ": the exchange would run in series";
    }
  }
}

TEST(ReplicaPlacement, TheRingKeepsRankRsReplicaOnTheNextRankAndAlternatesEvenAndOdd) {
  const auto p = ReplicaPlacement::ring(4);
  ASSERT_EQ(p.replicas(), 1u);
  EXPECT_FALSE(p.cross_domain());
  for (uint32_t r = 0; r < 4; ++r) {
    EXPECT_EQ(p.holder(r, 0), (r + 1) % 4);
    EXPECT_EQ(p.sends_first(r, 0), r % 2 == 0);
  }
  EXPECT_EQ(ReplicaPlacement::ring(1).replicas(), 0u);  // a world of one has nobody to hold a copy
}

TEST(ReplicaPlacement, TwoNodesOfTwoPutEveryReplicaInTheOtherNode) {
  const std::vector<uint32_t> domain{0, 0, 1, 1};
  const auto p = ReplicaPlacement::across(domain, 1);
  ASSERT_TRUE(p.cross_domain());
  EXPECT_EQ(p.holder(0, 0), 2u);
  EXPECT_EQ(p.holder(1, 0), 3u);
  EXPECT_EQ(p.holder(2, 0), 0u);
  EXPECT_EQ(p.holder(3, 0), 1u);
  expect_sound(p, domain);
  expect_no_deadlock(p);
}

TEST(ReplicaPlacement, EightPerNodeAcrossSixteenNodesCrossesWithOneAndTwoReplicas) {
  std::vector<uint32_t> domain;
  for (uint32_t r = 0; r < 128; ++r) domain.push_back(r / 8);
  for (uint32_t replicas : {1u, 2u}) {
    const auto p = ReplicaPlacement::across(domain, replicas);
    ASSERT_TRUE(p.cross_domain());
    ASSERT_EQ(p.replicas(), replicas);
    expect_sound(p, domain);
    expect_no_deadlock(p);
    // Two replicas: in two different nodes, so two lost nodes still leave one.
    for (uint32_t r = 0; replicas == 2 && r < 128; ++r) {
      EXPECT_NE(domain[p.holder(r, 0)], domain[p.holder(r, 1)]);
    }
  }
}

TEST(ReplicaPlacement, RanksOfANodeNeedNotBeNeighboursNorNodesEqual) {
  // A spare from node 2 took rank 1; nodes of 3, 2 and 2 ranks.
  const std::vector<uint32_t> domain{0, 2, 0, 1, 1, 0, 2};
  for (uint32_t replicas : {1u, 2u}) {
    const auto p = ReplicaPlacement::across(domain, replicas);
    ASSERT_TRUE(p.cross_domain());
    expect_sound(p, domain);
    expect_no_deadlock(p);
  }
}

TEST(ReplicaPlacement, OneHostFallsBackToTheRingAndSaysSo) {
  const std::vector<uint32_t> domain(5, 7);
  for (uint32_t replicas : {1u, 2u}) {
    const auto p = ReplicaPlacement::across(domain, replicas);
    EXPECT_FALSE(p.cross_domain());
    EXPECT_EQ(p.replicas(), replicas);
    EXPECT_EQ(p.holder(4, 0), 0u);
    expect_sound(p, domain);
    expect_no_deadlock(p);
  }
  // A domain holding more than half of the ranks cannot be crossed either.
  EXPECT_FALSE(ReplicaPlacement::across({0, 0, 0, 1}, 1).cross_domain());
}

TEST(ReplicaPlacement, TwoNodesWithTwoReplicasCrossWithTheFirstOnly) {
  const std::vector<uint32_t> domain{0, 0, 0, 1, 1, 1};
  const auto p = ReplicaPlacement::across(domain, 2);
  EXPECT_EQ(p.replicas(), 2u);
  EXPECT_EQ(p.crossing(), 1u);
  EXPECT_FALSE(p.cross_domain());
  expect_sound(p, domain);
  expect_no_deadlock(p);
}

TEST(ReplicaPlacement, OddWorldsAndOddCyclesStillHaveAReceiverInEveryCycle) {
  for (uint32_t n = 2; n <= 13; ++n) {
    std::vector<uint32_t> domain;
    for (uint32_t r = 0; r < n; ++r) domain.push_back(r);  // every rank its own node
    for (uint32_t replicas : {1u, 2u}) {
      const auto p = ReplicaPlacement::across(domain, replicas);
      SCOPED_TRACE("world " + std::to_string(n) + ", " + std::to_string(replicas) + " replicas");
      expect_sound(p, domain);
      expect_no_deadlock(p);
    }
  }
}

TEST(ReplicaPlacement, AReplicaCountOtherThanOneOrTwoIsRefused) {
  EXPECT_THROW(ReplicaPlacement::across({0, 1}, 0), Error);
  EXPECT_THROW(ReplicaPlacement::across({0, 1}, 3), Error);
}

}  // namespace
}  // namespace sigma::checkpoint
