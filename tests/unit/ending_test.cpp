// How the agent stops and ends a job (pure logic: read from src/): a stop
// waits for a step boundary only while the job trains and only until its
// deadline, a second request stops at once, and workers still there after
// the goodbye are killed after a grace that a signal shortens.
#include "runtime/agent/ending.hpp"

#include "runtime/agent/job_exit.hpp"

#include <gtest/gtest.h>

#include <csignal>

namespace sigma::runtime::agent {
namespace {

TEST(Ending, AStopWhileTrainingWaitsForTheBoundaryUntilItsDeadline) {
  Ending e;
  EXPECT_FALSE(e.stopping());
  EXPECT_EQ(e.requested(SIGTERM, true, 10), Ending::Stop::at_boundary);
  EXPECT_TRUE(e.stopping());
  EXPECT_STREQ(e.signal_name(), "SIGTERM");
  EXPECT_FALSE(e.stop_due(false, 10 + Ending::kStopDeadlineS));  // at the deadline, not past it
  EXPECT_TRUE(e.stop_due(false, 10 + Ending::kStopDeadlineS + 0.01));
  EXPECT_TRUE(e.stop_due(true, 11));  // every rank stopped: no need to wait
  EXPECT_FALSE(e.finished());
}

TEST(Ending, ASecondRequestOrAJobNotTrainingStopsNow) {
  Ending twice;
  EXPECT_EQ(twice.requested(SIGINT, true, 0), Ending::Stop::at_boundary);
  EXPECT_EQ(twice.requested(SIGINT, true, 1), Ending::Stop::now);
  EXPECT_STREQ(twice.signal_name(), "SIGINT");
  Ending idle;
  EXPECT_EQ(idle.requested(SIGTERM, false, 0), Ending::Stop::now);  // validating or recovering
  Ending ended;
  ended.end("done", "", job_exit::done, 0);
  EXPECT_EQ(ended.requested(SIGTERM, true, 1), Ending::Stop::now);
}

TEST(Ending, TheEndKeepsItsStatusReasonAndCode) {
  Ending e;
  EXPECT_EQ(e.status(), "done");
  EXPECT_EQ(e.code(), 0);
  e.requested(SIGTERM, true, 0);
  e.end("stopped", "stopped by SIGTERM after 7 steps", job_exit::stopped_by(SIGTERM), 1);
  EXPECT_TRUE(e.finished());
  EXPECT_EQ(e.status(), "stopped");
  EXPECT_EQ(e.why(), "stopped by SIGTERM after 7 steps");
  EXPECT_EQ(e.code(), 128 + SIGTERM);
}

TEST(Ending, WorkersStillThereAfterTheGoodbyeAreKilledAfterTheGraceAndAgainAfterAnother) {
  Ending e;
  EXPECT_FALSE(e.stragglers_due(100));  // not ended: nothing to kill
  e.end("done", "", job_exit::done, 20);
  EXPECT_FALSE(e.stragglers_due(20 + Ending::kGoodbyeGraceS));
  EXPECT_TRUE(e.stragglers_due(20 + Ending::kGoodbyeGraceS + 0.5));
  EXPECT_FALSE(e.stragglers_due(31));  // the grace starts again from the kill
  EXPECT_TRUE(e.stragglers_due(30.5 + Ending::kGoodbyeGraceS + 0.5));
  Ending stopped;
  stopped.requested(SIGTERM, false, 0);
  stopped.end("stopped", "", job_exit::stopped_by(SIGTERM), 0);
  EXPECT_FALSE(stopped.stragglers_due(Ending::kStoppedGraceS));
  EXPECT_TRUE(stopped.stragglers_due(Ending::kStoppedGraceS + 0.5));
}

}  // namespace
}  // namespace sigma::runtime::agent
