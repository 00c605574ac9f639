// A recovery round's own state (pure logic: read from src/): a second
// fault joins the round short of its rejoin and voids its assignment, a
// round first seen as a survivor's report takes the fault's name, the third
// failed assignment pauses (the scheduler's pause lifts with its resume),
// a rejoin charges what the round cost, and every
// round leaves its incident record, closed or not.
#include "runtime/agent/recovery_round.hpp"

#include <gtest/gtest.h>

namespace sigma::runtime::agent {
namespace {

TEST(RecoveryRound, AFaultStartsARoundAndASecondOneJoinsItVoidingTheAssignment) {
  RecoveryRound r;
  EXPECT_FALSE(r.active());
  EXPECT_TRUE(r.fault("device 1 (rank 1): process killed", 9.5, false, 10, 40));
  EXPECT_TRUE(r.waiting_for_reports());
  EXPECT_EQ(r.reached(), 40u);
  EXPECT_DOUBLE_EQ(r.fault_s(), 9.5);
  r.assigned(11, 38, RestoreTier::memory);
  EXPECT_FALSE(r.waiting_for_reports());
  // The spare dies in its hand-off: the same round, reports kept, assigned again later.
  EXPECT_FALSE(r.fault("device 4 (rank 1): process killed", 11.5, false, 11.5, 41));
  EXPECT_TRUE(r.waiting_for_reports());
  EXPECT_EQ(r.cause(), "device 1 (rank 1): process killed; then device 4 (rank 1): process killed");
  EXPECT_EQ(r.reached(), 40u);  // still the step the first fault interrupted
  EXPECT_DOUBLE_EQ(r.fault_s(), 9.5);
  EXPECT_EQ(r.incident_count(), 1u);
}

TEST(RecoveryRound, ARoundFirstSeenAsAReportIsNamedAfterTheFault) {
  RecoveryRound r;
  r.fault("rank 0 reported: peer closed", 5, true, 5, 12);
  r.fault("device 1 (rank 1): process killed", 4.9, false, 5.1, 12);
  EXPECT_EQ(r.cause(), "device 1 (rank 1): process killed (first seen as: rank 0 reported: peer closed)");
  r.fault("device 2 (rank 2): hung", 5.2, false, 5.2, 12);
  EXPECT_EQ(r.cause(),
            "device 1 (rank 1): process killed (first seen as: rank 0 reported: peer closed); then device 2 "
            "(rank 2): hung");
}

TEST(RecoveryRound, TheThirdFailedAssignmentPausesTheRound) {
  RecoveryRound r;
  r.fault("x", 0, false, 0, 3);
  for (uint32_t i = 1; i < RecoveryRound::kMaxFailedAssignments; ++i) {
    r.assignment_failed("no rank joined");
    EXPECT_FALSE(r.paused()) << i;
  }
  r.assignment_failed("no rank joined generation 4 within 20 s");
  EXPECT_TRUE(r.paused());
  EXPECT_EQ(r.pause_reason(), "recovery failed 3 times; the last: no rank joined generation 4 within 20 s");
  // A new round after this one is over starts with none failed.
  r.assigned(1, 0, RestoreTier::none);
  r.rejoined(2, 5, 0, 0);
  r.recovered(3);
  r.fault("y", 4, false, 4, 3);
  EXPECT_FALSE(r.paused());
}

TEST(RecoveryRound, TheSchedulersPauseIsLiftedByItsResumeButAGiveUpIsNot) {
  RecoveryRound r;
  r.fault("x", 0, false, 0, 3);
  r.pause("no spare left", 1.5);
  EXPECT_TRUE(r.paused());
  EXPECT_DOUBLE_EQ(r.paused_s(), 1.5);
  r.resume();  // a readmitted device passed validation and took the rank
  EXPECT_FALSE(r.paused());
  for (uint32_t i = 0; i < RecoveryRound::kMaxFailedAssignments; ++i) r.assignment_failed("no rank joined");
  r.resume();
  EXPECT_TRUE(r.paused());
  r.pause("no spare left", 9);
  EXPECT_NE(r.pause_reason().find("recovery failed 3 times"), std::string::npos) << r.pause_reason();
}

TEST(RecoveryRound, ARejoinChargesDetectionRestartRestoreAndRecomputation) {
  RecoveryRound r;
  r.fault("device 1 (rank 1): hung", 10, false, 13, 50);
  EXPECT_FALSE(r.abort_overdue(15, 2));
  EXPECT_TRUE(r.abort_overdue(15.5, 2));
  r.assigned(14, 45, RestoreTier::disk);
  EXPECT_FALSE(r.assignment_overdue(34, 20));
  EXPECT_TRUE(r.assignment_overdue(34.5, 20));
  const auto c = r.rejoined(16, 3, 0.5, 1.25);
  EXPECT_TRUE(r.rejoined());
  EXPECT_DOUBLE_EQ(c.detection_s, 3);
  EXPECT_DOUBLE_EQ(c.restart_s, 16 - 13 - 1.25);
  EXPECT_DOUBLE_EQ(c.restore_s, 1.25);
  EXPECT_EQ(c.recomputed_steps, 5u);
  r.recovered(18);
  EXPECT_FALSE(r.active());
  ASSERT_EQ(r.incidents().size(), 1u);
  const auto& i = r.incidents()[0];
  EXPECT_EQ(i["generation"], 3);
  EXPECT_EQ(i["restore"], "disk");
  EXPECT_EQ(i["index"], 45);
  EXPECT_EQ(i["recomputed_steps"], 5);
  EXPECT_DOUBLE_EQ(i["back_at_reached_step_s"].get<double>(), 8);
  EXPECT_DOUBLE_EQ(i["detected_s"].get<double>(), 13);
}

TEST(RecoveryRound, AFaultWhileRecomputingClosesTheRoundUnfinishedAndStartsAnother) {
  RecoveryRound r;
  r.fault("a", 1, false, 1, 20);
  r.assigned(2, 18, RestoreTier::memory);
  r.rejoined(3, 2, 0, 0);
  EXPECT_TRUE(r.fault("b", 4, false, 4, 19));  // recomputing: a new round
  ASSERT_EQ(r.incidents().size(), 1u);
  EXPECT_TRUE(r.incidents()[0]["back_at_reached_step_s"].is_null());
  EXPECT_EQ(r.incident_count(), 2u);
  EXPECT_EQ(r.reached(), 19u);
  // The job ends mid-round: its record is kept as it stands.
  r.close();
  EXPECT_FALSE(r.active());
  ASSERT_EQ(r.incidents().size(), 2u);
  EXPECT_EQ(r.incidents()[1]["cause"], "b");
  EXPECT_FALSE(r.incidents()[1].contains("back_at_reached_step_s"));
}

TEST(RecoveryRound, AMigrationIsAProactiveRoundToTheBoundary) {
  RecoveryRound r;
  r.migration("migration of device 1 (rank 1) before it fails", 30, 61, "temperature rising");
  EXPECT_TRUE(r.waiting_for_reports());
  EXPECT_EQ(r.reached(), 61u);
  r.close();
  const auto& i = r.incidents().at(0);
  EXPECT_EQ(i["proactive"], true);
  EXPECT_EQ(i["warning"], "temperature rising");
  EXPECT_DOUBLE_EQ(i["fault_s"].get<double>(), 30);
}

}  // namespace
}  // namespace sigma::runtime::agent
