// The exact rounds of a simulated job (src/sim/exact_rounds.hpp, pure):
// the agent's RecoveryRound fed the engine's clock -- a fault begins a
// round, a second one short of the rejoin joins it, one while the job
// recomputes begins the next (the reached step kept), and each round that
// gets back to its reached step gives its recovery time.
#include "sim/exact_rounds.hpp"

#include <gtest/gtest.h>

namespace sigma::sim::detail {
namespace {

using runtime::RestoreTier;

TEST(ExactRounds, ARoundRunsFromItsFaultToBackAtTheReachedStep) {
  ExactRounds r;
  EXPECT_TRUE(r.fault("gpu fell off the bus", 100, 1, 40));
  EXPECT_FALSE(r.recomputing_to());
  r.assigned(161, 38, RestoreTier::memory);
  r.rejoined(166, 60, 5);
  ASSERT_TRUE(r.recomputing_to());
  EXPECT_EQ(*r.recomputing_to(), 40u);
  r.back(186);
  EXPECT_FALSE(r.recomputing_to());
  EXPECT_EQ(r.rounds(), 1u);
  EXPECT_EQ(r.joined(), 0u);
  const LatencyFigures f = r.recovery();
  EXPECT_EQ(f.count, 1u);
  EXPECT_DOUBLE_EQ(f.p50_s, 86);
  EXPECT_DOUBLE_EQ(f.max_s, 86);
}

TEST(ExactRounds, AFaultBeforeTheRejoinJoinsTheRoundInProgress) {
  ExactRounds r;
  EXPECT_TRUE(r.fault("a", 100, 1, 40));
  r.assigned(161, 38, RestoreTier::memory);
  EXPECT_FALSE(r.fault("b", 163, 1, 38)) << "short of the rejoin: the same round";
  r.assigned(225, 38, RestoreTier::memory);
  r.rejoined(230, 60, 5);
  EXPECT_EQ(*r.recomputing_to(), 40u) << "the step the first fault found";
  r.back(250);
  EXPECT_EQ(r.rounds(), 1u);
  EXPECT_EQ(r.joined(), 1u);
  EXPECT_DOUBLE_EQ(r.recovery().max_s, 150) << "from the round's first fault";
}

TEST(ExactRounds, AFaultWhileTheJobRecomputesBeginsTheNextRoundAndKeepsTheReachedStep) {
  ExactRounds r;
  r.fault("a", 100, 1, 40);
  r.assigned(161, 30, RestoreTier::disk);
  r.rejoined(466, 60, 300);
  EXPECT_TRUE(r.fault("b", 500, 1, 33)) << "after the rejoin: a new round";
  EXPECT_FALSE(r.recomputing_to());
  r.assigned(561, 32, RestoreTier::memory);
  r.rejoined(566, 60, 5);
  EXPECT_EQ(*r.recomputing_to(), 40u) << "the furthest the job got, not where it was rolled back to";
  r.back(646);
  EXPECT_EQ(r.rounds(), 2u);
  EXPECT_EQ(r.joined(), 0u);
  const LatencyFigures f = r.recovery();
  EXPECT_EQ(f.count, 1u) << "the first round never got back: it has no recovery time";
  EXPECT_DOUBLE_EQ(f.max_s, 146);
}

TEST(ExactRounds, StagesOutOfOrderChangeNothing) {
  ExactRounds r;
  r.rejoined(10, 1, 1);
  r.back(11);
  r.assigned(12, 0, RestoreTier::none);
  EXPECT_EQ(r.rounds(), 0u);
  r.fault("a", 20, 1, 5);
  r.rejoined(25, 1, 1);  // not assigned yet
  EXPECT_FALSE(r.recomputing_to());
  r.back(26);
  EXPECT_EQ(r.recovery().count, 0u);
}

}  // namespace
}  // namespace sigma::sim::detail
