// The agent's step watchdog (pure logic: read from src/): progress resets
// its clock, a round silences it, and past the timeout it tells a stalled
// collective (every rank in one place) from ranks stuck behind their peers.
#include "runtime/agent/step_watchdog.hpp"

#include <gtest/gtest.h>

namespace sigma::runtime::agent {
namespace {

using Kind = StepWatchdog::Verdict::Kind;
using Positions = std::vector<std::optional<StepPosition>>;

// One tick as the Coordinator makes it: the positions are judged once due.
StepWatchdog::Verdict check(StepWatchdog& w, bool watching, uint64_t progress, const Positions& at,
                            double t) {
  return w.due(watching, progress, t) ? StepWatchdog::judge(at) : StepWatchdog::Verdict{};
}

TEST(StepWatchdog, NothingIsSaidBeforeTheTimeoutAndProgressStartsItAgain) {
  StepWatchdog w(5);
  const Positions at{StepPosition{3, false}, StepPosition{3, true}};
  EXPECT_EQ(check(w, true, 3, at, 0).kind, Kind::none);
  EXPECT_EQ(check(w, true, 3, at, 4.9).kind, Kind::none);
  EXPECT_EQ(check(w, true, 4, at, 4.5).kind, Kind::none);  // a step done: 5 s from here
  EXPECT_EQ(check(w, true, 4, at, 9.4).kind, Kind::none);
  EXPECT_EQ(check(w, true, 4, at, 9.5).kind, Kind::behind);
}

TEST(StepWatchdog, ARoundOrAJobNotStartedIsNotWatched) {
  StepWatchdog w(5);
  const Positions at{StepPosition{3, false}, StepPosition{3, true}};
  for (double t = 0; t < 20; t += 1) EXPECT_EQ(check(w, false, 3, at, t).kind, Kind::none) << t;
  // Watching again: the timeout counts from the last tick it was not.
  EXPECT_EQ(check(w, true, 3, at, 23.9).kind, Kind::none);
  EXPECT_EQ(check(w, true, 3, at, 24).kind, Kind::behind);
}

TEST(StepWatchdog, TheRanksBehindThePeersAreNamedByTheirPosition) {
  StepWatchdog w(2);
  // Rank 1 is inside step 7's collective that ranks 0 and 2 finished.
  const Positions at{StepPosition{7, true}, StepPosition{7, false}, StepPosition{7, true}};
  check(w, true, 7, at, 0);
  const auto v = check(w, true, 7, at, 2);
  EXPECT_EQ(v.kind, Kind::behind);
  EXPECT_EQ(v.lowest, (StepPosition{7, false}));
  EXPECT_EQ(v.step, 7);
  // A rank that never beat is behind every position, in step 0.
  const Positions silent{std::nullopt, StepPosition{0, true}};
  StepWatchdog w2(2);
  check(w2, true, 0, silent, 0);
  const auto s = check(w2, true, 0, silent, 2);
  EXPECT_EQ(s.kind, Kind::behind);
  EXPECT_FALSE(s.lowest.has_value());
  EXPECT_EQ(s.step, 0);
}

TEST(StepWatchdog, EveryRankInOnePlaceIsAStalledCollectiveAndTheClockStartsAgain) {
  StepWatchdog w(2);
  const Positions at{StepPosition{4, false}, StepPosition{4, false}};
  check(w, true, 4, at, 0);
  const auto v = check(w, true, 4, at, 2.5);
  EXPECT_EQ(v.kind, Kind::every_rank_stalled);
  EXPECT_EQ(v.step, 4);
  EXPECT_EQ(check(w, true, 4, at, 4.4).kind, Kind::none);  // 2 s from the verdict, not from 0
  EXPECT_EQ(check(w, true, 4, at, 4.5).kind, Kind::every_rank_stalled);
}

TEST(StepWatchdog, OffWithNoTimeoutAndSilentWithNobodyWorking) {
  StepWatchdog off(0);
  const Positions at{StepPosition{1, false}, StepPosition{2, false}};
  check(off, true, 1, at, 0);
  EXPECT_EQ(check(off, true, 1, at, 1e6).kind, Kind::none);
  StepWatchdog w(1);
  check(w, true, 9, {}, 0);
  EXPECT_EQ(check(w, true, 9, {}, 5).kind, Kind::none);
}

}  // namespace
}  // namespace sigma::runtime::agent
