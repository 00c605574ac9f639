// The agent's step-time ledger (pure logic: read from src/): the slowest
// rank's time is a step's, recent steps wait for late ranks, and a slow
// step is charged by what it took beyond the median.
#include "runtime/agent/step_times.hpp"

#include <gtest/gtest.h>

namespace sigma::runtime::agent {
namespace {

TEST(StepTimes, AStepTakesItsSlowestRanksTimeWhicheverRankReportsLast) {
  StepTimes t;
  EXPECT_EQ(t.finished(7, 2.0), 0);
  EXPECT_EQ(t.finished(7, 0.5), 0);  // a faster rank after the slow one
  EXPECT_EQ(t.median(), 0);          // not settled yet: a late rank could still count
  EXPECT_EQ(t.settle_all(), 0);
  EXPECT_EQ(t.median(), 2.0);
}

TEST(StepTimes, OnlyStepsOlderThanTheRecentOnesSettle) {
  StepTimes t;
  for (uint64_t s = 0; s < StepTimes::kRecent; ++s) t.finished(s, 1.0);
  EXPECT_EQ(t.median(), 0);  // all kRecent still open
  t.finished(StepTimes::kRecent, 3.0);
  EXPECT_EQ(t.median(), 1.0);  // step 0 settled, the newest still open
  t.settle_all();
  EXPECT_EQ(t.median(), 1.0);  // 64 at 1 s and one at 3 s
}

TEST(StepTimes, ASlowStepIsChargedWhatItTookBeyondTheMedianOnceTenAreKnown) {
  StepTimes t;
  double charged = 0;
  charged += t.finished(0, 5.0);  // slow, but with nothing to compare it to
  for (uint64_t s = 1; s < 10; ++s) charged += t.finished(s, 1.0);
  charged += t.settle_all();
  EXPECT_EQ(charged, 0);
  // Eleven settled now, ten at 1 s: the median is 1 s; 4 s is 3 s slow,
  // 1.4 s is not slow at all (under 1.5 x the median).
  charged = t.finished(10, 4.0) + t.finished(11, 1.4) + t.settle_all();
  EXPECT_DOUBLE_EQ(charged, 3.0);
}

TEST(StepTimes, TheMedianIsOverABoundedWindowOfTheNewestSettledSteps) {
  StepTimes t;
  uint64_t s = 0;
  for (size_t i = 0; i < StepTimes::kWindow; ++i) t.finished(s++, 10.0);
  for (size_t i = 0; i < StepTimes::kWindow; ++i) t.finished(s++, 1.0);
  t.settle_all();
  EXPECT_EQ(t.median(), 1.0);  // the ten-second steps have left the window
}

}  // namespace
}  // namespace sigma::runtime::agent
