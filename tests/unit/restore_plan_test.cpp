// The recovery's choice of state, without processes: what each rank holds
// in, the tier, index and hand-offs out.
#include "runtime/agent/restore_plan.hpp"

#include <gtest/gtest.h>

namespace sigma::runtime::recovery {
namespace {

using Pairs = std::vector<std::pair<uint32_t, uint32_t>>;

using Replicas = std::map<uint32_t, std::set<uint64_t>>;

RankHoldings survivor(std::set<uint64_t> own, Replicas replicas, std::set<uint64_t> disk = {}) {
  return {true, std::move(own), std::move(replicas), std::move(disk)};
}
RankHoldings replaced(std::set<uint64_t> disk = {}) { return {false, {}, {}, std::move(disk)}; }

TEST(RestorePlan, AKilledRankComesBackFromItsSuccessorsReplica) {
  // Rank 1 of 3 died after every rank snapshotted 59 and 60; rank 2 holds
  // rank 1's replicas.
  const auto p = plan_restore(
      {survivor({59, 60}, {{2, {59, 60}}}), replaced(), survivor({59, 60}, {{1, {59, 60}}})}, 61);
  ASSERT_TRUE(p.has_value());
  EXPECT_STREQ(name(p->tier), "memory");
  EXPECT_EQ(p->index, 60u);
  EXPECT_EQ(p->handoff, (Pairs{{2, 1}}));
}

TEST(RestorePlan, TheNewestIndexEveryoneHoldsWinsWhenOneRankIsBehind) {
  // Rank 0 had not snapshotted 60 yet when rank 2 died.
  const auto p =
      plan_restore({survivor({59}, {{2, {59, 60}}}), survivor({59, 60}, {{0, {59, 60}}}), replaced()}, 61);
  ASSERT_TRUE(p.has_value());
  EXPECT_STREQ(name(p->tier), "memory");
  EXPECT_EQ(p->index, 59u);
  EXPECT_EQ(p->handoff, (Pairs{{0, 2}}));
}

TEST(RestorePlan, TwoNeighboursLostTogetherFallBackToDisk) {
  // Ranks 1 and 2 died: rank 1's replica died with rank 2.
  const auto p = plan_restore(
      {survivor({69, 70}, {{2, {69, 70}}}, {20, 40, 60}), replaced({20, 40, 60}), replaced({20, 40})}, 71);
  ASSERT_TRUE(p.has_value());
  EXPECT_STREQ(name(p->tier), "disk");
  EXPECT_EQ(p->index, 40u);  // the newest every rank committed
  EXPECT_TRUE(p->handoff.empty());
}

TEST(RestorePlan, AFaultBeforeTheFirstSnapshotIsAFreshStart) {
  // A rank died while the job was joining: nobody has a snapshot, nobody
  // finished a step, there is no checkpoint: start from step 0.
  const auto p = plan_restore({survivor({}, {}), replaced(), survivor({}, {})}, 0);
  ASSERT_TRUE(p.has_value());
  EXPECT_STREQ(name(p->tier), "none");
  EXPECT_EQ(p->index, 0u);
}

TEST(RestorePlan, StateThatExistsNowhereIsLostNotRestartedFromZero) {
  // Steps were done, but no state is common to every rank.
  EXPECT_FALSE(plan_restore({survivor({50}, {}), replaced(), replaced()}, 51).has_value());
  EXPECT_FALSE(plan_restore({replaced()}, 10).has_value());  // a world of one has no replica
  EXPECT_FALSE(plan_restore({}, 0).has_value());
}

// When nothing can be planned, the words say what memory held: the steps
// the survivors have in common, and each replaced rank's replicas.
TEST(RestorePlan, WhatMemoryHeldIsSaidWhenNothingCanBeRestored) {
  const std::vector<RankHoldings> ranks{survivor({40, 41}, {{2, {40}}}), survivor({40, 41}, {{3, {41}}}),
                                        replaced(), survivor({41}, {})};
  EXPECT_FALSE(plan_restore(ranks, 42).has_value());
  EXPECT_EQ(describe_memory(ranks),
            "the survivors' own snapshots in common: steps 41; rank 2 replaced: steps 40 on rank 0");
  EXPECT_EQ(
      describe_memory({survivor({50}, {}), replaced(), replaced()}),
      "the survivors' own snapshots in common: steps 50; rank 1 replaced: no survivor keeps a replica of "
      "it; rank 2 replaced: no survivor keeps a replica of it");
}

// Ranks 0,1 | 2,3 in two nodes, each rank's replica two places on. Rank 3
// was lost; a fault cut rank 2's exchange of step 40 to rank 0. Restoring
// 40, rank 2 sends its 40 to rank 0; rank 1's holder is the replacement,
// which the first step's snapshot serves; rank 0's holder has its 40.
TEST(RestorePlan, ARestoreRefreshesEveryHolderThatLacksTheStep) {
  const auto where = checkpoint::ReplicaPlacement::across({0, 0, 1, 2}, 1);
  const std::vector<RankHoldings> ranks{survivor({39, 40}, {{2, {38, 39}}}),
                                        survivor({39, 40}, {{3, {39, 40}}}),
                                        survivor({39, 40}, {{0, {39, 40}}}), replaced()};
  const auto p = plan_restore(ranks, 41);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->index, 40u);
  EXPECT_EQ(refresh_moves(ranks, 40, where), (Pairs{{2, 0}}));
  EXPECT_TRUE(refresh_moves({survivor({7}, {{1, {7}}}), survivor({7}, {{0, {7}}})}, 7,
                            checkpoint::ReplicaPlacement::ring(2))
                  .empty())
      << "every holder has it";
}

TEST(RestorePlan, AWorldOfOneRestoresItsOwnSnapshotOrDisk) {
  auto p = plan_restore({survivor({7}, {})}, 8);
  ASSERT_TRUE(p.has_value());
  EXPECT_STREQ(name(p->tier), "memory");
  EXPECT_EQ(p->index, 7u);
  p = plan_restore({replaced({5})}, 8);
  ASSERT_TRUE(p.has_value());
  EXPECT_STREQ(name(p->tier), "disk");
  EXPECT_EQ(p->index, 5u);
}

TEST(RestorePlan, AWholeNodeLostComesBackFromTheReplicasInTheOtherNode) {
  // Ranks 0,1 on one node, 2,3 on another; each rank's replica on the rank
  // two places on (in the other node). The second node is lost.
  const auto p = plan_restore({survivor({9, 10}, {{2, {9, 10}}}, {4}), survivor({9, 10}, {{3, {9, 10}}}, {4}),
                               replaced({4}), replaced({4})},
                              11);
  ASSERT_TRUE(p.has_value());
  EXPECT_STREQ(name(p->tier), "memory");
  EXPECT_EQ(p->index, 10u);
  EXPECT_EQ(p->handoff, (Pairs{{0, 2}, {1, 3}}));
}

TEST(RestorePlan, TheSecondReplicaServesWhenTheFirstsHolderIsLostToo) {
  // Two replicas each: rank 1's first is on rank 2 (lost with it), its
  // second on rank 3, which holds it one step behind.
  const auto p = plan_restore({survivor({9, 10}, {}), replaced(), replaced(),
                               survivor({9, 10}, {{1, {9}}, {2, {9, 10}}}), survivor({9, 10}, {{2, {10}}})},
                              11);
  ASSERT_TRUE(p.has_value());
  EXPECT_STREQ(name(p->tier), "memory");
  EXPECT_EQ(p->index, 9u);  // the newest step of rank 1 a survivor holds
  EXPECT_EQ(p->handoff, (Pairs{{3, 1}, {3, 2}}));
}

TEST(RestorePlan, AReplicaOfTheRankItselfOrOfAnotherRankNeverCounts) {
  // Rank 1 is replaced; the only replicas are of rank 0 and held by the
  // replaced rank itself: no memory restore.
  const auto p = plan_restore({survivor({5}, {{0, {5}}}, {3}), replaced({3})}, 6);
  ASSERT_TRUE(p.has_value());
  EXPECT_STREQ(name(p->tier), "disk");
  RankHoldings self = replaced({3});
  self.replicas[1] = {5};
  const auto q = plan_restore({survivor({5}, {}, {3}), self}, 6);
  ASSERT_TRUE(q.has_value());
  EXPECT_STREQ(name(q->tier), "disk");
}

}  // namespace
}  // namespace sigma::runtime::recovery
