// The agent's recovery logic without processes: events and a clock go in,
// the commands that come out are checked. Every incident kind the
// multi-process sigmarun tests cover is here, each with the actions it
// must produce, and the faults at the edges the old agent got wrong.
#include "coordinator_job.hpp"

namespace {

using namespace sigma::runtime;
using namespace sigma::runtime::agent;
using namespace sigma::runtime::agent::testing;

// Devices 0 and 1 run `steps` steps, then device 1's process ends.
void crash_device_1(Job& j, uint64_t steps) {
  j.start();
  j.steps({0, 1}, 0, steps);
  j.clear();
  j.exit(1);
}

TEST(Coordinator, AFaultFreeJobAssignsTheLowestDevicesAndEndsDone) {
  Job j(options(2, 1));
  for (uint32_t d = 0; d < 3; ++d) EXPECT_EQ(j.spawned(d), 1u) << "one spawn per device, device " << d;
  EXPECT_EQ(j.spawned(3), 0u);
  j.start();
  ASSERT_EQ(j.sent<protocol::Assign>(0).size(), 1u);
  ASSERT_EQ(j.sent<protocol::Assign>(1).size(), 1u);
  EXPECT_TRUE(j.sent<protocol::Assign>(2).empty()) << "device 2 is the spare";
  EXPECT_EQ(j.sent<protocol::Assign>(1)[0].rank, 1u);
  EXPECT_STREQ(name(j.sent<protocol::Assign>(1)[0].restore), "none");
  j.steps({0, 1}, 0, 10);
  j.msg(0, protocol::Done{10});
  j.msg(1, protocol::Done{10});
  j.at(j.t + 0.1);
  EXPECT_TRUE(j.c.finished());
  EXPECT_EQ(j.c.status(), "done");
  EXPECT_EQ(j.sent<protocol::Goodbye>(2).size(), 1u) << "the spare is let go too";
  EXPECT_FALSE(j.c.over()) << "the processes are still there";
  for (uint32_t d = 0; d < 3; ++d) j.exit(d, exited(0));
  EXPECT_TRUE(j.c.over());
  const auto rep = j.c.report(j.t);
  EXPECT_EQ(rep["steps"], 10);
  EXPECT_TRUE(rep["incidents"].empty());
}

TEST(Coordinator, ACrashedRankIsReplacedByTheSpareFromItsNeighboursReplica) {
  Job j(options(2, 1));
  j.start();
  j.steps({0, 1}, 0, 6);
  j.clear();
  j.exit(1);
  ASSERT_EQ(j.sent<protocol::Abort>(0).size(), 1u) << "the survivor leaves its collective";
  ASSERT_EQ(j.records("fault").size(), 1u);
  j.report(0, {5, 6}, {5, 6});
  j.at(j.t + 0.01);
  const auto a0 = j.sent<protocol::Assign>(0), a2 = j.sent<protocol::Assign>(2);
  ASSERT_EQ(a0.size(), 1u);
  ASSERT_EQ(a2.size(), 1u) << "the spare takes the lost rank";
  EXPECT_EQ(a2[0].rank, 1u);
  EXPECT_STREQ(name(a2[0].restore), "memory");
  EXPECT_EQ(a2[0].index, 6u);
  ASSERT_EQ(a2[0].handoff.size(), 1u);
  EXPECT_EQ(a2[0].handoff[0], (std::pair<uint32_t, uint32_t>{0, 1}));
  // Rank 0's holder is the replacement: its first step's snapshot serves it.
  EXPECT_TRUE(a2[0].refresh.empty());
  j.join(0, a0[0]);
  j.join(2, a2[0]);
  j.at(j.t + 0.01);
  EXPECT_EQ(j.records("rejoined").size(), 1u);
  EXPECT_EQ(j.records("recovered").size(), 1u) << "nothing to recompute: back at the reached step";
  EXPECT_FALSE(j.c.recovering());
  EXPECT_FALSE(j.killed(0));
}

// Rank 2 crashes while snapshot 6 is being exchanged; rank 0's copy to its
// holder, rank 1, was cut (rank 1 reports rank 0's replica at 5 only).
// Restoring 6, rank 0 sends its 6 to rank 1 before rank 2's state goes to
// the spare: a second fault just after the rejoin still finds it.
TEST(Coordinator, ARestoreSendsASurvivorsSnapshotToAHolderWhoseExchangeTheFaultCut) {
  Job j(options(3, 1));
  j.start();
  j.steps({0, 1, 2}, 0, 6);
  j.clear();
  j.exit(2);
  j.report(0, {5, 6}, {5, 6});
  j.report(1, {5, 6}, {5});
  j.at(j.t + 0.01);
  const auto a = j.sent<protocol::Assign>(3);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].index, 6u);
  EXPECT_EQ(a[0].handoff, (std::vector<std::pair<uint32_t, uint32_t>>{{0, 2}}));
  EXPECT_EQ(a[0].refresh, (std::vector<std::pair<uint32_t, uint32_t>>{{0, 1}}));
}

// --straggler-steps: the monitor's straggler rule waits for that many
// steps, the other health settings as before.
TEST(Coordinator, TheStragglerRuleWaitsForTheStepsTheOptionsSay) {
  AgentOptions o = options(2, 1);
  EXPECT_EQ(Job(o).c.monitor().config().straggler_min_steps, sigma::health::Config{}.straggler_min_steps);
  o.straggler_min_steps = 5;
  o.heartbeat_timeout_s = 7;
  Job j(o);
  EXPECT_EQ(j.c.monitor().config().straggler_min_steps, 5u);
  EXPECT_EQ(j.c.monitor().config().heartbeat_timeout_s, 7);
}

TEST(Coordinator, ACrashedDeviceIsValidatedAgainAndWaitsAsASpareWhenAllowed) {
  AgentOptions o = options(2, 1);
  o.readmit_crashed = 1;
  Job j(o);
  crash_device_1(j, 6);
  ASSERT_EQ(j.records("readmit").size(), 1u);
  bool respawned = false;
  for (const auto& x : j.log)
    if (const auto* s = std::get_if<SpawnWorker>(&x)) respawned |= s->device == 1;
  EXPECT_TRUE(respawned) << "a fresh worker self-tests the crashed device";
  EXPECT_EQ(j.c.phase(1), Phase::starting);
  // The round goes on with the spare as before.
  j.report(0, {5, 6}, {5, 6});
  j.at(j.t + 0.01);
  ASSERT_EQ(j.sent<protocol::Assign>(2).size(), 1u);
  j.join(0, j.sent<protocol::Assign>(0)[0]);
  j.join(2, j.sent<protocol::Assign>(2)[0]);
  j.at(j.t + 0.01);
  EXPECT_FALSE(j.c.recovering());
  // It passes its self-test and is the spare now.
  j.hello(1);
  EXPECT_EQ(j.c.phase(1), Phase::spare);
  EXPECT_EQ(j.c.spares(), 1u);
  // A second crash of the same device is not readmitted (once allowed).
  j.steps({0, 2}, 6, 8);
  j.clear();
  j.exit(2);  // the spare that took rank 1 crashes: device 1 takes it back
  j.report(0, {7, 8}, {7, 8});
  j.at(j.t + 0.01);
  ASSERT_EQ(j.sent<protocol::Assign>(1).size(), 1u);
  j.join(0, j.sent<protocol::Assign>(0)[0]);
  j.join(1, j.sent<protocol::Assign>(1)[0]);
  j.at(j.t + 0.01);
  j.steps({0, 1}, 8, 9);
  j.clear();
  j.exit(1);
  EXPECT_TRUE(j.records("readmit").empty()) << "device 1 was readmitted once already";
}

// Whether a fault may be validated again is the fault's kind: a process
// that could not start (whatever its words) may; a process lost with its
// node agent is a lost device and may not.
TEST(Coordinator, AProcessLostWithItsNodeIsALostDeviceAndIsNotValidatedAgain) {
  AgentOptions o = options(2, 2);
  o.readmit_crashed = 2;
  Job j(o);
  j.start();
  j.steps({0, 1}, 0, 4);
  j.clear();
  j.exit(1, protocol::ProcessEnd::lost_with_node(0));
  ASSERT_EQ(j.records("fault").size(), 1u);
  EXPECT_EQ(j.records("fault")[0]["cause"], "process lost with its node agent 0");
  EXPECT_TRUE(j.records("readmit").empty()) << "its device went with its node";
  EXPECT_EQ(j.spawned(1), 0u);
  // The spare that takes rank 1 fails to start, in words that say "lost":
  // a process that went, validated again.
  j.report(0, {4}, {4});
  j.at(j.t + 0.01);
  ASSERT_EQ(j.sent<protocol::Assign>(2).size(), 1u);
  j.exit(2, protocol::ProcessEnd::not_started("its program was lost from the node's disk"));
  ASSERT_EQ(j.records("readmit").size(), 1u);
  EXPECT_EQ(j.records("readmit")[0].value("device", 99), 2);
  EXPECT_EQ(j.spawned(2), 1u) << "a fresh worker self-tests the device";
  EXPECT_EQ(j.spawned(1), 0u);
}

// A survivor's report often arrives before its peer's exit is reaped: the
// round is named after the fault, and the report is kept as how it was
// first seen.
TEST(Coordinator, ARoundFirstSeenAsASurvivorsReportIsNamedAfterTheFault) {
  Job j(options(2, 1));
  j.start();
  j.steps({0, 1}, 0, 6);
  j.clear();
  j.report(0, {6}, {6});
  ASSERT_EQ(j.records("recovery_started").size(), 1u);
  j.exit(1);
  j.at(j.t + 0.01);
  ASSERT_EQ(j.sent<protocol::Assign>(2).size(), 1u);
  // A third cause in the same round is added after the fault's.
  j.exit(2);
  const nlohmann::json r = j.c.report(j.t);
  ASSERT_EQ(r["incidents"].size(), 1u);
  EXPECT_EQ(
      r["incidents"][0]["cause"],
      "device 1 (rank 1): process killed by signal Killed (first seen as: rank 0 reported: aborted: the "
      "communicator was aborted); then device 2 (rank 1): process killed by signal Killed");
}

// A second fault just after the rejoin, while the job recomputes up to the
// step it had reached: a survivor whose collective failed reports before
// the rank whose device is gone. Its report starts the next round and
// stands for it: the survivor already waits for an assignment, so it is
// neither killed for not answering the abort nor left out of the next one.
TEST(Coordinator, ASurvivorsReportWhileTheJobRecomputesStartsTheNextRoundAndStandsForIt) {
  Job j(options(3, 2));
  j.start();
  j.steps({0, 1, 2}, 0, 6);
  j.clear();
  j.exit(2);
  j.report(0, {5}, {5});
  j.report(1, {5}, {5});
  j.at(j.t + 0.01);
  for (uint32_t d : {0u, 1u, 3u}) {
    ASSERT_EQ(j.sent<protocol::Assign>(d).size(), 1u) << d;
    j.join(d, j.sent<protocol::Assign>(d)[0]);
  }
  j.at(j.t + 0.01);
  ASSERT_EQ(j.records("rejoined").size(), 1u);
  ASSERT_TRUE(j.c.recovering()) << "step 5 runs again before the reached step 6";
  j.clear();
  j.report(0, {5}, {5});
  EXPECT_EQ(j.records("recovery_started").size(), 1u) << "a report after the rejoin is a new fault";
  j.report(1, {5}, {5}, sigma::Code::device_lost);
  j.report(3, {5}, {5});
  j.at(j.t + 0.01);
  const auto a0 = j.sent<protocol::Assign>(0), a4 = j.sent<protocol::Assign>(4);
  ASSERT_EQ(a0.size(), 1u) << "the survivor's first report stands";
  ASSERT_EQ(a4.size(), 1u) << "the second spare takes rank 1";
  EXPECT_EQ(a4[0].rank, 1u);
  EXPECT_EQ(a0[0].generation, 3u);
  for (uint32_t d : {0u, 3u, 4u}) j.join(d, j.sent<protocol::Assign>(d).back());
  const double assigned = j.t;
  for (double t = assigned + 0.5; t < assigned + 8; t += 0.5) {
    j.beat({0, 3, 4}, 5, false);
    j.at(t);
  }
  EXPECT_EQ(j.records("rejoined").size(), 1u);
  EXPECT_FALSE(j.killed(0));
  EXPECT_FALSE(j.killed(3));
}

TEST(Coordinator, ACrashedDeviceStaysCordonedByDefault) {
  Job j(options(2, 1));
  j.start();
  j.steps({0, 1}, 0, 3);
  j.clear();
  j.exit(1);
  EXPECT_TRUE(j.records("readmit").empty());
  EXPECT_EQ(j.c.phase(1), Phase::dead);
  j.report(0, {3}, {3});
  j.at(j.t + 0.01);
  j.at(j.t + 5);
  EXPECT_EQ(j.spawned(1), 0u) << "nothing is started on the cordoned device";
  ASSERT_EQ(j.sent<protocol::Assign>(2).size(), 1u) << "the spare takes rank 1";
  EXPECT_EQ(j.sent<protocol::Assign>(2)[0].rank, 1u);
}

TEST(Coordinator, ASilentWorkerIsHungAfterTheHeartbeatTimeoutAndKilled) {
  Job j(options(2, 1));
  j.start();
  j.steps({0, 1}, 0, 3);
  j.clear();
  const double last_beat = j.t;
  j.only_beat({0, 2}, 3, 4.0);  // device 1 falls silent
  ASSERT_TRUE(j.killed(1));
  // Killed once the 3 s heartbeat timeout passed (one 0.5 s tick late at most), not before.
  EXPECT_GE(j.kill_t.at(1) - last_beat, 3.0);
  EXPECT_LE(j.kill_t.at(1) - last_beat, 3.5);
  EXPECT_FALSE(j.killed(0));
  const auto f = j.records("fault");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0]["cause"].get<std::string>().find("hung"), std::string::npos) << f[0];
  EXPECT_EQ(j.sent<protocol::Abort>(0).size(), 1u);
}

// A worker the agent had to kill (here: hung) is validated again once its
// process is gone, when readmission is allowed: a stuck process is not a
// dead chip.
TEST(Coordinator, AKilledHungWorkersDeviceIsValidatedAgainOnceItsProcessIsGone) {
  AgentOptions o = options(2, 1);
  o.readmit_crashed = 1;
  Job j(o);
  j.start();
  j.steps({0, 1}, 0, 3);
  j.clear();
  j.only_beat({0, 2}, 3, 4.0);  // device 1 falls silent
  ASSERT_TRUE(j.killed(1));
  EXPECT_TRUE(j.records("readmit").empty()) << "not while its process may still run";
  j.exit(1);
  ASSERT_EQ(j.records("readmit").size(), 1u);
  EXPECT_EQ(j.c.phase(1), Phase::starting) << "a fresh worker self-tests it";
}

TEST(Coordinator, ARankBehindItsPeersInAStuckCollectiveIsKilledByTheWatchdog) {
  auto o = options(3, 1);
  o.step_timeout_s = 10;
  Job j(o);
  j.start();
  j.steps({0, 1, 2}, 0, 4);
  j.clear();
  const double from = j.t;
  for (double t = from + 1; t < from + 12; t += 1) {
    j.beat({0, 2}, 4, true);  // done with step 4's own work, waiting in its collective
    j.beat({1}, 4, false);    // still inside step 4
    j.beat({3}, -1, false);
    j.at(t);
  }
  EXPECT_TRUE(j.killed(1));
  EXPECT_FALSE(j.killed(0));
  EXPECT_FALSE(j.killed(2));
  const auto f = j.records("fault");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0]["cause"].get<std::string>().find("stuck in a collective of step 4"), std::string::npos)
      << f[0];
}

TEST(Coordinator, EveryRankStalledInTheSameStepIsAbortedAndRetriedWithNobodyKilled) {
  auto o = options(2, 0);
  o.step_timeout_s = 10;
  Job j(o);
  j.start();
  j.steps({0, 1}, 0, 2);
  j.clear();
  const double from = j.t;
  for (double t = from + 1; t < from + 12; t += 1) {
    j.beat({0, 1}, 2, false);
    j.at(t);
  }
  EXPECT_EQ(j.records("stalled").size(), 1u);
  EXPECT_EQ(j.sent<protocol::Abort>(0).size(), 1u);
  EXPECT_EQ(j.sent<protocol::Abort>(1).size(), 1u);
  EXPECT_FALSE(j.killed(0));
  EXPECT_FALSE(j.killed(1));
  // Retried: both report, and the same devices get generation 2 with their
  // own ranks, restored from their own snapshots of step 2.
  j.report(0, {2}, {2});
  j.report(1, {2}, {2});
  j.at(j.t + 0.01);
  for (uint32_t d = 0; d < 2; ++d) {
    const auto a = j.sent<protocol::Assign>(d);
    ASSERT_EQ(a.size(), 1u) << "device " << d;
    EXPECT_EQ(a[0].generation, 2u);
    EXPECT_EQ(a[0].rank, d);
    EXPECT_STREQ(name(a[0].restore), "memory");
    EXPECT_EQ(a[0].index, 2u);
  }
  EXPECT_EQ(j.spawned(0) + j.spawned(1), 0u) << "nobody was restarted";
}

TEST(Coordinator, ADeviceThatReportsItselfLostIsKilledAndReplaced) {
  Job j(options(2, 1));
  j.start();
  j.steps({0, 1}, 0, 3);
  j.clear();
  j.report(1, {3}, {3}, sigma::Code::device_lost);
  EXPECT_TRUE(j.killed(1));
  const auto f = j.records("fault");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0]["cause"].get<std::string>().find("lost"), std::string::npos);
  j.report(0, {3}, {3});
  j.at(j.t + 0.01);
  ASSERT_EQ(j.sent<protocol::Assign>(2).size(), 1u);
  EXPECT_STREQ(name(j.sent<protocol::Assign>(2)[0].restore), "memory");
}

TEST(Coordinator, AThermalRunawayIsMigratedAtAStepBoundaryWithNothingRecomputed) {
  Job j(options(2, 1));
  j.start();
  j.steps({0, 1}, 0, 2);
  j.clear();
  // Device 1 heats past the warning threshold while it trains.
  const hal_telemetry_sample_t hot = temperature(93);
  for (int i = 0; i < 5; ++i) {
    j.t += 0.1;
    j.msg(1, protocol::Heartbeat{2, false, {hot}, HAL_OK, {}});
    j.beat({0, 2}, 2, false);
    j.take(j.c.tick(j.t));
  }
  ASSERT_EQ(j.records("migration_started").size(), 1u);
  const auto stop = j.sent<protocol::StopAfter>(0);
  ASSERT_EQ(stop.size(), 1u);
  EXPECT_EQ(j.c.phase(1), Phase::retiring);
  // Both stop after the boundary and report; the spare takes rank 1 from
  // memory at the boundary, the suspect is retired.
  const uint64_t b = static_cast<uint64_t>(stop[0].step);
  j.steps({0, 1}, 2, b + 1);
  j.report(0, {b + 1}, {b + 1});
  j.report(1, {b + 1}, {b + 1});
  j.at(j.t + 0.01);
  const auto a2 = j.sent<protocol::Assign>(2);
  ASSERT_EQ(a2.size(), 1u);
  EXPECT_EQ(a2[0].rank, 1u);
  EXPECT_EQ(a2[0].index, b + 1);
  EXPECT_EQ(j.sent<protocol::Retire>(1).size(), 1u);
  EXPECT_TRUE(j.records("fault").empty()) << "a migration is not a fault";
}

TEST(Coordinator, TwoNeighboursLostTogetherFallBackToTheCommonDiskCheckpoint) {
  Job j(options(4, 2));
  j.start();
  j.steps({0, 1, 2, 3}, 0, 8);
  for (uint32_t d = 0; d < 4; ++d) j.msg(d, protocol::Checkpointed{4});
  j.clear();
  j.exit(1);
  j.exit(2);                                         // rank 1's replica lived on rank 2
  j.report(0, {8}, {8}, sigma::Code::aborted, {4});  // a survivor's report says what it holds on disk
  j.report(3, {8}, {8}, sigma::Code::aborted, {4});
  j.at(j.t + 0.01);
  const auto a = j.sent<protocol::Assign>(0);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_STREQ(name(a[0].restore), "disk");
  EXPECT_EQ(a[0].index, 4u);
  EXPECT_EQ(j.sent<protocol::Assign>(4).size(), 1u);
  EXPECT_EQ(j.sent<protocol::Assign>(5).size(), 1u);
  EXPECT_EQ(j.records("recovery_started").size(), 2u) << "one round, two casualties";
  EXPECT_EQ(j.records("assigned").size(), 1u);
}

// A survivor whose report no longer lists a checkpoint (a rollback
// discarded it) is not restored from it.
TEST(Coordinator, ACheckpointASurvivorNoLongerHoldsIsNotPlannedFrom) {
  Job j(options(4, 2));
  j.start();
  j.steps({0, 1, 2, 3}, 0, 8);
  for (uint32_t d = 0; d < 4; ++d) {
    j.msg(d, protocol::Checkpointed{4});
    j.msg(d, protocol::Checkpointed{8});
  }
  j.clear();
  j.exit(1);
  j.exit(2);
  j.report(0, {8}, {8}, sigma::Code::aborted, {4});  // step 8's checkpoint went with a rollback
  j.report(3, {8}, {8}, sigma::Code::aborted, {4, 8});
  j.at(j.t + 0.01);
  const auto a = j.sent<protocol::Assign>(0);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_STREQ(name(a[0].restore), "disk");
  EXPECT_EQ(a[0].index, 4u);
}

TEST(Coordinator, WithNoSpareLeftTheJobPausesAndSaysWhatARerunResumesFrom) {
  Job j(options(2, 0));
  j.start();
  j.steps({0, 1}, 0, 4);
  j.exit(1);
  j.report(0, {4}, {4});
  j.at(j.t + 0.01);
  EXPECT_TRUE(j.c.finished());
  EXPECT_EQ(j.c.status(), "paused");
  EXPECT_EQ(j.c.exit_code(), 3);
  EXPECT_NE(j.c.reason().find("no disk checkpoints are taken (set --checkpoint-every)"), std::string::npos)
      << j.c.reason();
  EXPECT_EQ(j.sent<protocol::Goodbye>(0).size(), 1u);
}

// A crashed device readmitted for validation (--readmit-crashed) is the
// spare a paused round waits for: the job does not end a moment before it
// is back.
TEST(Coordinator, WithNoSpareLeftTheRoundWaitsForAReadmittedDeviceStillValidating) {
  AgentOptions o = options(2, 0);
  o.readmit_crashed = 1;
  Job j(o);
  crash_device_1(j, 4);
  ASSERT_EQ(j.records("readmit").size(), 1u);
  j.report(0, {4}, {4});
  const double reported = j.t;
  for (double t = reported + 0.5; t < reported + 5; t += 0.5) {
    j.beat({0}, 4, false);
    j.at(t);
  }
  EXPECT_FALSE(j.c.finished()) << j.c.reason();
  EXPECT_TRUE(j.sent<protocol::Assign>(0).empty()) << "no device for rank 1 yet";
  j.hello(1);
  ASSERT_EQ(j.records("scheduler").back().value("action", ""), "resume");
  j.at(j.t + 0.01);
  const auto a = j.sent<protocol::Assign>(1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].rank, 1u);
  EXPECT_STREQ(name(a[0].restore), "memory") << "rank 0 holds rank 1's snapshot";
  EXPECT_EQ(a[0].index, 4u);
  j.join(0, j.sent<protocol::Assign>(0).at(0));
  j.join(1, a[0]);
  j.steps({0, 1}, 4, 6);
  EXPECT_FALSE(j.c.recovering());
  EXPECT_FALSE(j.c.finished());
}

TEST(Coordinator, APausedRoundEndsWhenTheDeviceItWaitsForFailsOrStaysSilent) {
  for (const bool silent : {false, true}) {
    AgentOptions o = options(2, 0);
    o.readmit_crashed = 1;
    o.validate_timeout_s = 10;
    Job j(o);
    j.start();
    j.steps({0, 1}, 0, 4);
    j.exit(1);
    j.report(0, {4}, {4});
    const double paused = j.t;
    if (!silent) {
      j.hello(1, false, "gemm rel err 1.0");
      j.at(j.t + 0.01);
      EXPECT_TRUE(j.c.finished()) << "failed its self-test: nothing to wait for";
    } else {
      for (double t = paused + 0.5; !j.c.finished() && t < paused + 20; t += 0.5) {
        j.beat({0}, 4, false);
        j.at(t);
      }
      EXPECT_GE(j.t - paused, 10.0) << "waited the validation timeout";
      EXPECT_LE(j.t - paused, 10.5);
    }
    EXPECT_EQ(j.c.status(), "paused");
    EXPECT_EQ(j.c.exit_code(), 3);
  }
}

TEST(Coordinator, AJobAllowedToShrinkGoesOnWithFewerRanksButNotBelowItsFloor) {
  auto o = options(3, 0);
  o.allow_shrink = true;
  o.min_world = 2;
  Job j(o);
  j.start();
  j.steps({0, 1, 2}, 0, 4);
  j.exit(2);
  j.report(0, {4}, {4});
  j.report(1, {4}, {4});
  j.at(j.t + 0.01);
  const auto a = j.sent<protocol::Assign>(0);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[1].world, 2u);
  EXPECT_EQ(a[1].rank, 0u);
  EXPECT_EQ(a[1].generation, 2u);
  EXPECT_STREQ(name(a[1].restore), "memory");
  EXPECT_EQ(a[1].index, 4u);
  const auto b = j.sent<protocol::Assign>(1);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[1].world, 2u);
  EXPECT_EQ(b[1].rank, 1u);
  EXPECT_EQ(j.sent<protocol::Assign>(2).size(), 1u) << "the lost device gets no place in the smaller world";
  EXPECT_EQ(j.c.world_size(), 2u);
  j.join(0, a[1]);
  j.join(1, j.sent<protocol::Assign>(1)[1]);
  j.steps({0, 1}, 4, 6);
  j.exit(1);
  j.report(0, {6}, {6});
  j.at(j.t + 0.01);
  EXPECT_EQ(j.c.status(), "paused") << "the floor is 2 ranks";
  EXPECT_EQ(j.c.exit_code(), 3);
  EXPECT_EQ(j.sent<protocol::Assign>(0).size(), 2u) << "no third generation below the floor";
}

TEST(Coordinator, ASpareThatDiesDuringItsHandOffIsReplacedAndNoSurvivorIsKilled) {
  Job j(options(2, 2));
  j.start();
  j.steps({0, 1}, 0, 4);
  j.exit(1);
  j.report(0, {4}, {4});
  j.at(j.t + 0.01);
  ASSERT_EQ(j.sent<protocol::Assign>(2).size(), 1u);
  j.clear();
  j.exit(2);              // the spare dies in the hand-off...
  j.report(0, {4}, {4});  // ...and the survivor's new communicator fails with it
  const double from = j.t;
  for (double t = from; t < from + 10; t += 0.5) {
    j.beat({0, 3}, 4, false);
    j.at(t);  // long past the abort grace
  }
  EXPECT_FALSE(j.killed(0)) << "a survivor is never killed for waiting on the agent";
  const auto a3 = j.sent<protocol::Assign>(3);
  ASSERT_EQ(a3.size(), 1u) << "the second spare takes the rank";
  EXPECT_STREQ(name(a3[0].restore), "memory");
  EXPECT_FALSE(j.c.finished()) << "not paused: a spare was left";
}

TEST(Coordinator, ASpareThatHangsInItsHandOffIsReplacedAfterTheRecoveryTimeout) {
  Job j(options(3, 2));
  j.start();
  j.steps({0, 1, 2}, 0, 4);
  j.exit(1);
  j.report(0, {4}, {4});
  j.report(2, {4}, {4});
  j.at(j.t + 0.01);
  ASSERT_EQ(j.sent<protocol::Assign>(3).size(), 1u);
  j.join(0, j.sent<protocol::Assign>(0).back());
  j.clear();
  // The spare (device 3) keeps beating but never joins; rank 2, which
  // hands rank 1's replica to it, waits on it and does not join either.
  const double assigned = j.t;
  for (double t = assigned + 1; t < assigned + 22; t += 1) {
    j.beat({0, 2, 3, 4}, 4, false);
    j.at(t);
  }
  ASSERT_EQ(j.records("recovery_overdue").size(), 1u);
  ASSERT_TRUE(j.killed(3)) << "the spare that did not join is the culprit";
  // After the 20 s recovery timeout (one 1 s tick late at most), not before.
  EXPECT_GE(j.kill_t.at(3) - assigned, 20.0);
  EXPECT_LE(j.kill_t.at(3) - assigned, 21.0);
  EXPECT_FALSE(j.killed(2)) << "the survivor waiting on it is not";
  EXPECT_FALSE(j.killed(0));
  const auto f = j.records("fault");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0]["cause"].get<std::string>().find("did not join generation 2"), std::string::npos) << f[0];
  EXPECT_EQ(j.sent<protocol::Abort>(0).size(), 1u);
  EXPECT_EQ(j.sent<protocol::Abort>(2).size(), 1u);
  j.report(0, {4}, {4});
  j.report(2, {4}, {4});
  j.at(j.t + 0.01);
  const auto a4 = j.sent<protocol::Assign>(4);
  ASSERT_EQ(a4.size(), 1u) << "the next spare";
  EXPECT_EQ(a4[0].rank, 1u);
}

TEST(Coordinator, SurvivorsLateWithNoSpareToBlameAreAbortedAndAskedAgainNotKilled) {
  Job j(options(2, 1));
  j.start();
  j.steps({0, 1}, 0, 4);
  j.exit(1);
  j.report(0, {4}, {4});
  j.at(j.t + 0.01);
  j.join(2, j.sent<protocol::Assign>(2).back());  // the spare joined; the survivor did not
  j.clear();
  const double assigned = j.t;
  for (double t = assigned + 1; t < assigned + 22; t += 1) {
    j.beat({0, 2}, 4, false);
    j.at(t);
  }
  ASSERT_EQ(j.records("recovery_overdue").size(), 1u);
  EXPECT_FALSE(j.killed(0));
  EXPECT_EQ(j.sent<protocol::Abort>(0).size(), 1u);
  EXPECT_EQ(j.sent<protocol::Abort>(2).size(), 1u);
  j.report(2, {4}, {4});
  // Rank 0 cannot leave: after the abort grace it is the one replaced, and
  // with no spare left the job pauses saying so.
  for (double t = j.t + 1; j.t < assigned + 30; t += 1) {
    j.beat({0, 2}, 4, false);
    j.at(t);
  }
  EXPECT_TRUE(j.killed(0));
  EXPECT_FALSE(j.killed(2));
  EXPECT_EQ(j.c.status(), "paused");
}

// Survivors that do not answer the abort go together: one kill each, at
// the grace, not one grace after another.
TEST(Coordinator, EverySurvivorThatDoesNotAnswerTheAbortIsKilledAtTheSameGrace) {
  Job j(options(3, 3));
  j.start();
  j.steps({0, 1, 2}, 0, 4);
  j.clear();
  j.exit(1);
  const double fault = j.t;
  for (double t = fault + 0.5; t < fault + 12; t += 0.5) {
    j.beat({0, 2, 3, 4, 5}, 4, false);  // the survivors and the spares
    j.at(t);
  }
  ASSERT_TRUE(j.killed(0));
  ASSERT_TRUE(j.killed(2));
  EXPECT_EQ(j.kill_t.at(0), j.kill_t.at(2));
  EXPECT_LE(j.kill_t.at(0) - fault, 5.5);
  const auto f = j.records("fault");
  ASSERT_EQ(f.size(), 3u);
  for (size_t i : {1u, 2u})
    EXPECT_NE(f[i]["cause"].get<std::string>().find("did not answer the abort"), std::string::npos) << f[i];
}

TEST(Coordinator, WhenNoRankCanJoinTheRecoveryPausesWithTheReasonAfterThreeTries) {
  Job j(options(2, 1));
  j.start();
  j.steps({0, 1}, 0, 4);
  j.exit(1);
  j.report(0, {4}, {4});
  j.at(j.t + 0.01);
  for (int attempt = 0; attempt < 3 && !j.c.finished(); ++attempt) {
    // Nobody joins (say the store's folder is full): every rank keeps
    // beating, none says why.
    const double from = j.t;
    for (double t = from + 1; t < from + 22; t += 1) {
      j.beat({0, 2}, 4, false);
      j.at(t);
    }
    j.report(0, {4}, {4});
    j.report(2, {}, {});
    j.at(j.t + 0.01);
  }
  EXPECT_TRUE(j.c.finished());
  EXPECT_EQ(j.c.status(), "paused");
  EXPECT_NE(j.c.reason().find("recovery failed 3 times"), std::string::npos) << j.c.reason();
  EXPECT_NE(j.c.reason().find("no rank joined generation"), std::string::npos) << j.c.reason();
}

TEST(Coordinator, ACrashBeforeTheFirstSnapshotIsAFreshStart) {
  Job j(options(2, 1));
  j.start();
  j.exit(1);
  j.report(0, {}, {});
  j.at(j.t + 0.01);
  const auto a = j.sent<protocol::Assign>(2);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_STREQ(name(a[0].restore), "none");
  EXPECT_FALSE(j.c.finished());
}

TEST(Coordinator, ACrashInTheLastStepBringsTheFinishedRanksBackInsteadOfLosingThem) {
  Job j(options(2, 1));
  j.start();
  j.steps({0, 1}, 0, 9);
  j.steps({0}, 9, 10);
  j.msg(0, protocol::Done{10});  // rank 0 finished; rank 1 dies in its last snapshot
  j.clear();
  j.exit(1);
  ASSERT_EQ(j.sent<protocol::Abort>(0).size(), 1u) << "the finished rank is asked back";
  EXPECT_EQ(j.c.phase(0), Phase::active);
  j.report(0, {9, 10}, {9});
  j.at(j.t + 0.01);
  const auto a2 = j.sent<protocol::Assign>(2);
  ASSERT_EQ(a2.size(), 1u);
  EXPECT_STREQ(name(a2[0].restore), "memory");
  EXPECT_EQ(a2[0].index, 9u);
  j.join(0, j.sent<protocol::Assign>(0).back());
  j.join(2, a2[0]);
  j.steps({0, 2}, 9, 10);
  j.msg(0, protocol::Done{10});
  j.msg(2, protocol::Done{10});
  j.at(j.t + 0.01);
  EXPECT_EQ(j.c.status(), "done");
  EXPECT_EQ(j.records("recovered").size(), 1u);
}

TEST(Coordinator, ADoneThatCrossesTheAbortKeepsTheRankInTheRound) {
  Job j(options(2, 1));
  j.start();
  j.steps({0, 1}, 0, 10);
  j.exit(1);
  ASSERT_EQ(j.sent<protocol::Abort>(0).size(), 1u);
  j.msg(0, protocol::Done{10});  // sent before the abort reached it
  EXPECT_EQ(j.c.phase(0), Phase::active);
  j.at(j.t + 0.01);
  EXPECT_TRUE(j.sent<protocol::Assign>(2).empty()) << "its report is still to come";
  j.report(0, {10}, {10});
  j.at(j.t + 0.01);
  ASSERT_EQ(j.sent<protocol::Assign>(2).size(), 1u);
  EXPECT_STREQ(name(j.sent<protocol::Assign>(2)[0].restore), "memory");
}

TEST(Coordinator, AFinishedRankThatAlreadyLeftIsReplacedWhenAPeerFailsInTheLastSteps) {
  Job j(options(2, 2));
  j.start();
  j.steps({0, 1}, 0, 9);
  for (uint32_t d = 0; d < 2; ++d) j.msg(d, protocol::Checkpointed{8});
  j.steps({0}, 9, 10);
  j.msg(0, protocol::Done{10});
  j.exit(0, exited(0));  // it left without waiting for the goodbye
  j.clear();
  j.exit(1);
  EXPECT_EQ(j.records("fault").size(), 2u) << "the finished rank that left is lost too";
  j.at(j.t + 0.01);
  const auto a2 = j.sent<protocol::Assign>(2), a3 = j.sent<protocol::Assign>(3);
  ASSERT_EQ(a2.size(), 1u);
  ASSERT_EQ(a3.size(), 1u);
  EXPECT_STREQ(name(a2[0].restore), "disk");
  EXPECT_EQ(a2[0].index, 8u);
}

TEST(Coordinator, AFailingDiskIsAStorageIncidentNotARecovery) {
  Job j(options(2, 0));
  j.start();
  j.steps({0, 1}, 0, 4);
  j.clear();
  j.msg(0, protocol::StorageFailed{4, "No space left on device"});
  j.at(j.t + 0.01);
  EXPECT_EQ(j.records("storage_failed").size(), 1u);
  EXPECT_TRUE(j.records("recovery_started").empty());
  EXPECT_FALSE(j.c.recovering());
  j.exit(1);
  j.report(0, {4}, {4});
  j.at(j.t + 0.01);
  EXPECT_EQ(j.c.status(), "paused");
  EXPECT_NE(j.c.reason().find("the disk tier failed 1 time(s)"), std::string::npos) << j.c.reason();
}

TEST(Coordinator, AStopRequestEndsAtAStepBoundaryWithAResumableJob) {
  Job j(options(2, 0));
  j.start();
  j.steps({0, 1}, 0, 4);
  for (uint32_t d = 0; d < 2; ++d) j.msg(d, protocol::Checkpointed{4});
  j.clear();
  j.take(j.c.stop_requested(SIGTERM, j.t));
  const auto s = j.sent<protocol::StopAfter>(0);
  ASSERT_EQ(s.size(), 1u);
  j.steps({0, 1}, 4, static_cast<uint64_t>(s[0].step) + 1);
  j.report(0, {}, {});
  j.report(1, {}, {});
  j.at(j.t + 0.01);
  EXPECT_EQ(j.c.status(), "stopped");
  EXPECT_EQ(j.c.exit_code(), 128 + SIGTERM);
  EXPECT_NE(j.c.reason().find("the disk checkpoint of step 4 is kept"), std::string::npos) << j.c.reason();
}

TEST(Coordinator, APlainProgramThatExitsZeroIsDone) {
  Job j(options(2, 0));
  j.exit(0, exited(0));
  j.exit(1, exited(0));
  j.at(0.5);
  EXPECT_EQ(j.c.status(), "done");
  EXPECT_EQ(j.c.exit_code(), 0);
  EXPECT_TRUE(j.c.over());
}

// The decision reads how it ended, not the words: an end that only says
// "exited with status 0" (a node agent that did not say how) is a fault.
TEST(Coordinator, AnEndWhoseKindIsUnknownIsAFaultWhateverItsWordsSay) {
  Job j(options(2, 0));
  j.exit(0, protocol::ProcessEnd{protocol::ProcessEnd::How::unknown, 0, "exited with status 0"});
  j.exit(1, exited(0));
  j.at(0.5);
  EXPECT_EQ(j.records("exited_without_session").size(), 1u);
  ASSERT_EQ(j.records("fault").size(), 1u);
  EXPECT_EQ(j.records("fault")[0].value("device", 99), 0);
  EXPECT_NE(j.c.status(), "done");
}

TEST(Coordinator, AJobFolderWithEveryRanksCheckpointResumesFromTheNewest) {
  Job j(options(2, 0), DiskHoldings{{0, {4, 8}}, {1, {4, 8, 12}}});
  j.start();
  const auto a = j.sent<protocol::Assign>(1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_STREQ(name(a[0].restore), "disk");
  EXPECT_EQ(a[0].index, 8u);
  EXPECT_EQ(j.records("resumed").size(), 1u);
}

}  // namespace
