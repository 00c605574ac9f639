// The agent under contained recovery, without processes: a fault stops only
// its replica (the others are told to re-form, never aborted), the stopped
// replica's ranks and its spare take a donor's state at a boundary and
// rejoin, the last healthy replica failing runs the exact round, a replica
// out is not waited for at the end, and the step watchdog leaves its ranks
// alone; a proactive migration is a hand-off of the suspect's replica.
#include "coordinator_job.hpp"

namespace {

using namespace sigma::runtime;
using namespace sigma::runtime::agent;
using namespace sigma::runtime::agent::testing;

using V = std::vector<uint32_t>;

// Four ranks in two replicas of two ({0,1} {2,3}), two spares (devices 4, 5).
Job contained_job(AgentOptions o = options(4, 2)) { return Job(o, {}, ContainedOptions{2}); }

TEST(CoordinatorContained, TheAssignmentSaysEveryRanksReplicaAndTheLiveSet) {
  Job j = contained_job();
  j.start();
  const auto a = j.sent<protocol::Assign>(3);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].replica_of, (V{0, 0, 1, 1}));
  EXPECT_EQ(a[0].live, (V{0, 1}));
  EXPECT_TRUE(a[0].contained);
  EXPECT_THROW(Job(options(4, 0), {}, ContainedOptions{3}), sigma::Error);
  AgentOptions shrink = options(4, 0);
  shrink.allow_shrink = true;
  EXPECT_THROW(Job(shrink, {}, ContainedOptions{2}), sigma::Error);
}

TEST(CoordinatorContained, ACrashStopsOnlyItsReplicaWhichRejoinsFromADonor) {
  Job j = contained_job();
  j.start();
  j.steps({0, 1, 2, 3}, 0, 5);
  j.clear();
  j.exit(3);
  // Replica 1's other rank leaves its collective; replica 0 re-forms alone.
  EXPECT_EQ(j.sent<protocol::Abort>(2).size(), 1u);
  for (uint32_t d : {0u, 1u}) {
    EXPECT_TRUE(j.sent<protocol::Abort>(d).empty()) << d;
    const auto r = j.sent<protocol::Reform>(d);
    ASSERT_EQ(r.size(), 1u) << d;
    EXPECT_EQ(r[0].live, (V{0}));
    EXPECT_FALSE(r[0].boundary.has_value());
  }
  EXPECT_TRUE(j.records("recovery_started").empty()) << "no round stops the world";
  EXPECT_EQ(j.records("replica_stopped").size(), 1u);
  ASSERT_NE(j.c.contained(), nullptr);
  EXPECT_EQ(j.c.contained()->stage(1), contained::Stage::stopping);

  // Replica 0 keeps stepping; the stopped rank reports; the spare is ready.
  j.steps({0, 1}, 5, 10);
  j.report(2, {4}, {4});
  j.clear();
  j.at(j.t + 0.1);
  const auto assigned = j.sent<protocol::Assign>(4);
  ASSERT_EQ(assigned.size(), 1u) << "the spare takes rank 3";
  EXPECT_EQ(assigned[0].rank, 3u);
  EXPECT_EQ(assigned[0].restore, RestoreTier::peer);
  ASSERT_EQ(j.sent<protocol::Assign>(2).size(), 1u) << "the stopped rank takes state too";
  protocol::Reform handoff;
  for (uint32_t d : {0u, 1u, 2u, 4u}) {
    const auto r = j.sent<protocol::Reform>(d);
    ASSERT_EQ(r.size(), 1u) << d;
    handoff = r[0];
  }
  EXPECT_EQ(handoff.live, (V{0, 1}));
  EXPECT_EQ(handoff.rejoining, (V{1}));
  EXPECT_EQ(handoff.donor, 0u);
  ASSERT_TRUE(handoff.boundary.has_value());
  EXPECT_GE(*handoff.boundary, 10u);
  EXPECT_EQ(handoff.domains.size(), 4u) << "the whole world's domains: every rank places its replicas anew";

  // Every rank starts it; the rejoining ranks replay replica 0's steps
  // until they are close enough to rejoin, which every rank carries out.
  for (uint32_t d : {0u, 1u, 2u, 4u}) j.msg(d, protocol::Reformed{handoff.epoch});
  EXPECT_EQ(j.c.contained()->stage(1), contained::Stage::handing) << "the stream has only started";
  j.clear();
  j.steps({2, 4}, *handoff.boundary + 1, *handoff.boundary + 3);
  protocol::Reform rejoin;
  for (uint32_t d : {0u, 1u, 2u, 4u}) {
    const auto r = j.sent<protocol::Reform>(d);
    ASSERT_EQ(r.size(), 1u) << d;
    rejoin = r[0];
  }
  EXPECT_TRUE(rejoin.rejoin);
  EXPECT_TRUE(j.sent<protocol::Assign>(4).empty()) << "the rejoin assigns nothing";
  for (uint32_t d : {0u, 1u, 2u}) j.msg(d, protocol::Reformed{rejoin.epoch});
  EXPECT_EQ(j.c.contained()->stage(1), contained::Stage::handing) << "the spare has not reformed yet";
  j.msg(4, protocol::Reformed{rejoin.epoch});
  EXPECT_EQ(j.c.contained()->stage(1), contained::Stage::healthy);
  EXPECT_EQ(j.records("replica_rejoined").size(), 1u);
  EXPECT_GE(j.c.contained()->degraded_steps(), 5u);
  EXPECT_EQ(j.c.phase(4), Phase::active);
  EXPECT_EQ(j.c.rank(4), 3);
}

// The layout alone (--replica-size under exact recovery): every assignment
// names the replicas, all live, and a fault takes the exact round.
TEST(CoordinatorContained, TheLayoutAloneNamesTheReplicasAndRecoversExactly) {
  Job j(options(4, 1), {}, ContainedOptions{2, 2, false});
  j.start();
  const auto a = j.sent<protocol::Assign>(3);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].replica_of, (V{0, 0, 1, 1}));
  EXPECT_EQ(a[0].live, (V{0, 1}));
  EXPECT_FALSE(a[0].contained) << "no Reform will come: a fault takes the exact round";
  EXPECT_EQ(j.c.contained(), nullptr);
  j.steps({0, 1, 2, 3}, 0, 5);
  j.exit(3);
  EXPECT_EQ(j.records("recovery_started").size(), 1u);
  EXPECT_TRUE(j.records("replica_stopped").empty());
}

TEST(CoordinatorContained, TheLastHealthyReplicaFailingRunsTheExactRound) {
  Job j = contained_job();
  j.start();
  j.steps({0, 1, 2, 3}, 0, 5);
  j.exit(3);
  j.clear();
  j.exit(0);
  EXPECT_EQ(j.records("recovery_started").size(), 1u);
  EXPECT_EQ(j.records("contained_fallback").size(), 1u);
  EXPECT_EQ(j.sent<protocol::Abort>(1).size(), 1u) << "the world's round aborts every survivor";
  EXPECT_TRUE(j.c.recovering());
  EXPECT_TRUE(j.c.contained()->exact());
}

// Both replicas' ranks report a failure (a corruption in both replicas'
// exchanges). Replica 1 stops and, stopped by reports alone, is handed
// replica 0's state; then replica 0's ranks report: no healthy replica is
// left. The exact round aborts them all, replica 1's ranks report again
// (their hand-off lost its donor), and the assignment makes every replica
// live again.
TEST(CoordinatorContained, WhenReportsStopEveryReplicaTheExactRoundAssignsThemAllLive) {
  Job j = contained_job();
  j.start();
  j.steps({0, 1, 2, 3}, 0, 5);
  for (uint32_t d : {2u, 3u}) j.report(d, {5}, {5}, sigma::Code::data_loss);
  EXPECT_EQ(j.records("recovery_started").size(), 0u) << "replica 1 stops alone";
  j.clear();
  for (uint32_t d : {0u, 1u}) j.report(d, {5}, {5}, sigma::Code::data_loss);
  EXPECT_EQ(j.records("contained_fallback").size(), 1u);
  ASSERT_TRUE(j.c.contained()->exact());
  for (uint32_t d : {2u, 3u}) j.report(d, {5}, {5});
  j.at(j.t + 0.1);
  for (uint32_t d : {0u, 1u, 2u, 3u}) {
    EXPECT_FALSE(j.killed(d)) << "device " << d << " reported: not a rank that does not answer";
    const auto a = j.sent<protocol::Assign>(d);
    ASSERT_EQ(a.size(), 1u) << "device " << d;
    EXPECT_EQ(a[0].live, (V{0, 1})) << "device " << d << ": the exact round's world holds every replica";
  }
}

// Rank 2's report stops replica 1 (rank 3 is still leaving its
// collective); then rank 0's report finds no healthy replica left. Rank 2
// waits in its recovery and reports no more: the exact round takes the
// report it made rather than killing it for not answering the abort.
TEST(CoordinatorContained, ARankWhoseReplicaStoppedIsNotKilledForWaitingInTheExactRound) {
  Job j = contained_job();
  j.start();
  j.steps({0, 1, 2, 3}, 0, 5);
  j.report(2, {5}, {5}, sigma::Code::data_loss);
  j.report(0, {5}, {5}, sigma::Code::data_loss);
  ASSERT_TRUE(j.c.contained()->exact());
  j.clear();
  for (uint32_t d : {1u, 3u}) j.report(d, {5}, {5});
  j.at(j.t + 0.1);  // the assignment goes out now, not after the abort's grace
  for (uint32_t d : {0u, 1u, 2u, 3u}) EXPECT_EQ(j.sent<protocol::Assign>(d).size(), 1u) << "device " << d;
  EXPECT_FALSE(j.killed(2));
}

TEST(CoordinatorContained, AReplicaOutIsNotWaitedForAtTheEnd) {
  AgentOptions o = options(4, 0);  // no spare: replica 1 stays out
  Job j = contained_job(o);
  j.start();
  j.steps({0, 1, 2, 3}, 0, 5);
  j.exit(3);
  j.report(2, {4}, {4});
  j.steps({0, 1}, 5, 10);
  j.msg(0, protocol::Done{10});
  j.msg(1, protocol::Done{10});
  j.at(j.t + 0.1);
  EXPECT_TRUE(j.c.finished());
  EXPECT_EQ(j.c.status(), "done");
  EXPECT_EQ(j.sent<protocol::Goodbye>(2).size(), 1u) << "the stopped rank is let go too";
}

// Device 3's process ends after step 2; rank 2 reports; replica 0 steps
// on to step 10.
void replica_1_out(Job& j) {
  j.start();
  j.steps({0, 1, 2, 3}, 0, 3);
  j.exit(3);
  j.report(2, {2}, {2});
  j.steps({0, 1}, 3, 10);
}

// Replica 0 stalls inside step 10 for 3 s; `waiting` (replica 1's) beat
// after step 2.
void stall_in_step_10(Job& j, const std::vector<uint32_t>& waiting) {
  j.clear();
  for (int i = 0; i < 6; ++i) {
    j.beat({0, 1}, 10, false);
    j.beat(waiting, 2, true);
    j.at(j.t + 0.5);
  }
}

TEST(CoordinatorContained, TheStepWatchdogLeavesAStoppedReplicaAlone) {
  AgentOptions o = options(4, 0);
  o.step_timeout_s = 2;
  Job j = contained_job(o);
  replica_1_out(j);
  // Replica 0 stalls inside step 10; rank 2, stopped, sits after step 2.
  stall_in_step_10(j, {2});
  EXPECT_FALSE(j.killed(2)) << "a stopped rank is not behind: it does not step";
  EXPECT_EQ(j.records("stalled").size(), 1u) << "the live replica's ranks all stalled at one place";
}

// An exact round of the coordinator's own -- here the step watchdog's: the
// live replica stalls in its step while replica 1 waits for its hand-off
// -- takes every replica: the assignment names them all live (a rank of
// replica 1 could not join one without it), and once the job is back
// every replica steps again.
TEST(CoordinatorContained, AStallWhileAReplicaIsOutTakesEveryReplicaIntoTheExactRound) {
  AgentOptions o = options(4, 2);
  o.step_timeout_s = 2;
  Job j = contained_job(o);
  replica_1_out(j);
  ASSERT_EQ(j.c.contained()->stage(1), contained::Stage::handing);
  stall_in_step_10(j, {2, 4});
  ASSERT_EQ(j.records("stalled").size(), 1u);
  EXPECT_TRUE(j.c.contained()->exact()) << "the machine knows the world stopped";
  j.report(0, {2}, {2});
  j.report(1, {2}, {2});
  j.report(2, {2}, {2});  // replica 1's ranks wait in the hand-off; rank 3's spare holds nothing
  j.report(4, {}, {});
  j.at(j.t + 0.1);
  for (uint32_t d : {0u, 1u, 2u, 4u}) {
    const auto a = j.sent<protocol::Assign>(d);
    ASSERT_FALSE(a.empty()) << "device " << d;
    EXPECT_EQ(a.back().live, (V{0, 1})) << "device " << d;
  }
  for (uint32_t d : {0u, 1u, 2u, 4u}) j.join(d, j.sent<protocol::Assign>(d).back());
  j.steps({0, 1, 2, 4}, 2, 12);
  EXPECT_FALSE(j.c.recovering());
  EXPECT_FALSE(j.c.contained()->exact());
  EXPECT_EQ(j.c.contained()->stage(1), contained::Stage::healthy);
}

TEST(CoordinatorContained, AStoppedRankThatDoesNotLeaveItsCollectiveIsKilledAndReplaced) {
  Job j = contained_job();
  j.start();
  j.steps({0, 1, 2, 3}, 0, 3);
  j.exit(3);
  j.clear();
  // 6 s: past the 5 s grace; rank 2 and the spares beat, rank 2 never reports.
  for (uint64_t s = 3; s < 63; s += 5) {
    j.steps({0, 1}, s, s + 5);
    j.beat({2, 4, 5}, 2, false);
  }
  EXPECT_TRUE(j.killed(2));
  const auto faults = j.records("fault");
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0]["device"], 2);
  EXPECT_NE(faults[0]["cause"].get<std::string>().find("did not leave its collectives"), std::string::npos);
  EXPECT_EQ(j.c.phase(2), Phase::dead);
}

// Device 3 (replica 1) heats past the warning threshold while it trains,
// every other device beating at `step`.
void heat_device_3(Job& j, int64_t step) {
  const hal_telemetry_sample_t hot = temperature(93);
  for (int i = 0; i < 5; ++i) {
    j.t += 0.1;
    j.msg(3, protocol::Heartbeat{step, false, {hot}, HAL_OK, {}});
    j.beat({0, 1, 2, 4, 5}, step, false);
    j.take(j.c.tick(j.t));
  }
}

TEST(CoordinatorContained, ASuspectDeviceMovesByItsReplicasHandOffNotByStoppingTheWorld) {
  Job j = contained_job();
  j.start();
  j.steps({0, 1, 2, 3}, 0, 5);
  j.clear();
  heat_device_3(j, 5);
  EXPECT_TRUE(j.records("migration_started").empty()) << "it waits for the live replicas to finish a step";
  EXPECT_FALSE(j.killed(3));
  j.steps({0, 1, 2, 3}, 5, 6);
  ASSERT_EQ(j.records("migration_started").size(), 1u);
  EXPECT_TRUE(j.records("recovery_started").empty()) << "no round stops the world";
  EXPECT_TRUE(j.sent<protocol::StopAfter>(0).empty());
  EXPECT_TRUE(j.killed(3)) << "the suspect is let go: its state lives in replica 0";
  EXPECT_EQ(j.c.phase(3), Phase::retiring);
  EXPECT_EQ(j.sent<protocol::Abort>(2).size(), 1u) << "its replica stops";
  EXPECT_TRUE(j.sent<protocol::Abort>(0).empty());
  const auto stopped = j.records("replica_stopped");
  ASSERT_EQ(stopped.size(), 1u);
  EXPECT_EQ(stopped[0]["replica"], 1);
  EXPECT_NE(stopped[0]["cause"].get<std::string>().find("migration of device 3"), std::string::npos);

  // Its end is expected; the stopped rank reports; the reserved spare takes
  // rank 3 from the donor.
  j.exit(3);
  EXPECT_TRUE(j.records("fault").empty()) << "a migration is not a fault";
  j.steps({0, 1}, 5, 8);
  j.report(2, {4}, {4});
  j.clear();
  j.at(j.t + 0.1);
  const auto assigned = j.sent<protocol::Assign>(4);
  ASSERT_EQ(assigned.size(), 1u);
  EXPECT_EQ(assigned[0].rank, 3u);
  EXPECT_EQ(assigned[0].restore, RestoreTier::peer);
  EXPECT_EQ(j.c.contained()->stage(1), contained::Stage::handing);
}

TEST(CoordinatorContained, AMigrationWaitsForEveryRanksFirstStep) {
  Job j = contained_job();
  j.start();
  heat_device_3(j, 0);
  EXPECT_TRUE(j.records("migration_started").empty()) << "the ranks are still forming their groups";
  EXPECT_FALSE(j.killed(3));
  j.steps({0, 1, 2, 3}, 0, 1);
  EXPECT_EQ(j.records("migration_started").size(), 1u);
  EXPECT_TRUE(j.records("recovery_started").empty());
  EXPECT_TRUE(j.killed(3));
}

TEST(CoordinatorContained, AMigrationWaitsWhileTheSuspectsReplicaIsTheOnlyOneStepping) {
  Job j = contained_job();
  j.start();
  j.steps({0, 1, 2, 3}, 0, 5);
  j.exit(0);  // replica 0 out: replica 1 steps alone
  j.report(1, {4}, {4});
  j.clear();
  heat_device_3(j, 5);
  EXPECT_TRUE(j.records("migration_started").empty());
  EXPECT_TRUE(j.records("recovery_started").empty()) << "a device that still works stops nothing";
  EXPECT_FALSE(j.killed(3));
  EXPECT_EQ(j.c.phase(3), Phase::active);
}

}  // namespace
