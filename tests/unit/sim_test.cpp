// The cluster simulator: determinism, conservation of accelerator-seconds,
// a hand-computed case, the tiers the restore planner picks, proactive
// migration through the real health monitor, and refused inputs.
#include <sigma/error.hpp>
#include <sigma/sim.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace sim = sigma::sim;

namespace {

std::string model_path() { return std::string(SIGMA_SOURCE_DIR) + "/data/failure-model.json"; }

sim::Scenario base(uint32_t accelerators, double days) {
  sim::Scenario s;
  s.failures = sim::load_failure_model(model_path());
  s.accelerators = accelerators;
  s.days = days;
  s.policies = sim::standard_policies();
  return s;
}

const sim::Policy& standard(const std::string& name) {
  static const auto all = sim::standard_policies();
  for (const auto& p : all)
    if (p.name == name) return p;
  throw std::runtime_error("no policy " + name);
}

// A day on `accelerators` of one node each with only the scripted
// failures, repairs outlasting it, under the hand policy: a `spare_fraction`
// of spares, disk checkpoints every 3600 s of progress (free), detection
// 10 s, a full restart 100 s, a restore 50 s.
sim::Scenario hand_job(uint32_t accelerators, double spare_fraction,
                       std::vector<sim::ScriptedFailure> script) {
  auto s = base(accelerators, 1);
  s.per_node = 1;
  s.failures.rate_multiplier = 0;
  s.failures.straggler_per_accelerator_day = s.failures.slow_link_per_accelerator_day = 0;
  s.failures.repair_hours = 48;
  s.script = std::move(script);
  sim::Policy p;
  p.name = "hand";
  p.spares = sim::SpareRule::fraction;
  p.spare_fraction = spare_fraction;
  p.disk_every_s = 3600;
  p.disk_stall_s = 0;
  p.disk_restore_s = 50;
  p.crash_detect_s = 10;
  p.full_restart = true;
  p.restart_s = 100;
  s.policies = {p};
  return s;
}

std::string write(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / ("sigma_sim_test." + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::ofstream(path) << text;
  return path.string();
}

}  // namespace

TEST(ClusterSim, TheSameSeedGivesTheSameResultByteForByte) {
  const auto s = base(512, 20);
  const std::string a = sim::to_json({sim::run(s)}), b = sim::to_json({sim::run(s)});
  EXPECT_EQ(a, b);
  auto other = s;
  other.seed = 2;
  EXPECT_NE(a, sim::to_json({sim::run(other)}));
}

TEST(ClusterSim, EveryAcceleratorSecondIsBookedOnce) {
  sim::SweepAxes axes;
  axes.rate_multiplier = {2, 10};
  axes.precursor_fraction = {0.0, 0.6};
  axes.precursor_lead_min = {5, 120};
  axes.repair_hours = {4, 72};
  for (const auto& r : sim::sweep(base(256, 10), axes)) {
    const double total = 256.0 * 10 * 86400;
    for (const auto& p : r.policies) {
      EXPECT_NEAR(p.ledger.total(), total, total * 1e-9) << p.policy;
      EXPECT_GE(p.ledger.productive, 0) << p.policy;
      EXPECT_NEAR(p.utilization * total, p.ledger.productive, total * 1e-9);
      EXPECT_LE(p.utilization, p.ettr + 1e-12) << p.policy;  // spares and repairs are in the denominator
    }
  }
}

// 4 accelerators, one spare, one job of 3 ranks for a day; device 0 dies
// at t = 5000 s. Disk checkpoints every 3600 s of progress (free), detection
// 10 s, a full restart 100 s, a restore 50 s; the repair outlasts the day.
TEST(ClusterSim, OneFailureWithKnownCostsGivesTheHandComputedLedger) {
  const auto r = sim::run(hand_job(4, 0.25, {{5000, 0, "faulty_gpu", false}})).policies.at(0);
  const double kept = 3600 + (86400 - 5160);  // progress: the checkpoint, then after the stall
  EXPECT_EQ(r.world, 3u);
  EXPECT_EQ(r.spares, 1u);
  EXPECT_EQ(r.incidents, 1u);
  EXPECT_EQ(r.restores_disk, 1u);
  EXPECT_DOUBLE_EQ(r.ledger.productive, 3 * kept);
  EXPECT_DOUBLE_EQ(r.ledger.lost_work, 3 * 1400.0);
  EXPECT_DOUBLE_EQ(r.ledger.detection, 30);
  EXPECT_DOUBLE_EQ(r.ledger.restart, 300);
  EXPECT_DOUBLE_EQ(r.ledger.restore, 150);
  EXPECT_DOUBLE_EQ(r.ledger.spare, 5000);           // device 3 waited until it replaced device 0
  EXPECT_DOUBLE_EQ(r.ledger.repair, 86400 - 5000);  // device 0 from its failure on
  EXPECT_DOUBLE_EQ(r.ettr, kept / 86400);
  // The agent's round: from the fault to back at step 500 after recomputing
  // 1400 s of it from 5160 s.
  EXPECT_EQ(r.joined, 0u);
  EXPECT_EQ(r.recovery.count, 1u);
  EXPECT_DOUBLE_EQ(r.recovery.max_s, 6560 - 5000);
}

// A collective of the same job hangs at 5005 s, half-way through step
// 500, while every process still beats: the agent's step watchdog
// (--step-timeout 20) fires 20 s after step 499 completed, 15 s after the
// hang; then the full restart and the restore as above, and the job is
// back at step 500 when the 1400 s since the checkpoint have run again.
TEST(ClusterSim, AHungCollectiveIsFoundByTheStepWatchdogFromTheLastCompletedStep) {
  auto s = hand_job(4, 0.25, {{5005, 0, "nccl_watchdog_timeout", false}});
  s.policies[0].hang_detect_s = 600;  // not used: the watchdog decides
  s.policies[0].step_timeout_s = 20;
  const auto r = sim::run(s).policies.at(0);
  EXPECT_EQ(r.incidents, 1u);
  EXPECT_DOUBLE_EQ(r.ledger.detection, 3 * 15.0);
  EXPECT_DOUBLE_EQ(r.recovery.max_s, 15 + 100 + 50 + 1400.0) << "back at step 500 once 3600-5000 s ran again";
}

// The same job with two spares; device 1 dies too, at 5050 s, while the
// round for device 0 re-forms: as in sigmarun, the second fault joins the
// round (one incident), which starts its stages over -- seen at 5060 s,
// re-formed at 5160 s, restored at 5210 s -- and is back at step 500 once
// the 1400 s since the checkpoint have run again.
TEST(ClusterSim, ASecondFailureDuringTheRoundJoinsItAsTheAgentsRoundDoes) {
  const auto r = sim::run(hand_job(5, 0.4, {{5000, 0, "faulty_gpu", false}, {5050, 1, "faulty_gpu", false}}))
                     .policies.at(0);
  EXPECT_EQ(r.world, 3u);
  EXPECT_EQ(r.incidents, 1u);
  EXPECT_EQ(r.joined, 1u);
  EXPECT_EQ(r.restores_disk, 2u) << "each fault's plan";
  EXPECT_DOUBLE_EQ(r.ledger.detection, 3 * (10.0 + 10));
  EXPECT_DOUBLE_EQ(r.ledger.restart, 3 * (40.0 + 100));  // the first restart cut short at 5050 s
  EXPECT_DOUBLE_EQ(r.ledger.restore, 3 * 50.0);
  EXPECT_EQ(r.recovery.count, 1u);
  EXPECT_DOUBLE_EQ(r.recovery.max_s, 5210 + 1400 - 5000);
  EXPECT_DOUBLE_EQ(r.ettr, (3600 + (86400 - 5210)) / 86400.0);
}

// Contained recovery with known costs: two replicas of four; a process of
// replica 1 crashes mid-step at 1005 s. The live replica runs its step
// again (5 s lost), stalls 1 s to see the fault and 1 s to re-form, then
// steps at half pace; the crashed process is up again at 1011 s; the
// hand-off's boundary is step 102 (1047 s), the state is in at 1050 s, the
// replay at step 103 (1067 s) names the rejoin at step 106 (1127 s), and
// the groups re-form once more (1 s). Nothing is restored, nothing stops
// the job, and the replica's idle half is the ledger's `degraded`.
TEST(ClusterSim, AContainedFaultStopsOnlyItsReplicaAndGivesTheHandComputedLedger) {
  sim::Scenario s;
  s.accelerators = 10;
  s.per_node = 2;
  s.days = 1728 / 86400.0;
  s.step_s = 10;
  s.failures.rate_multiplier = 0;
  s.failures.straggler_per_accelerator_day = s.failures.slow_link_per_accelerator_day = 0;
  s.failures.categories = {{"software_bug", sim::Scope::software, 1, false}};
  s.script = {{1005, 5, "software_bug", false}};
  sim::Policy p = standard("libsigma-contained");
  p.spares = sim::SpareRule::count;
  p.spare_count = 2;
  p.replica_size = 4;
  p.memory_tier = false;
  p.disk_every_s = 1e9;
  p.crash_detect_s = 1;
  p.comm_fixed_s = 1;
  p.comm_per_member_s = 0;
  p.handoff_s = 2;
  p.spare_ready_s = 5;
  p.migrate_on_warning = false;
  s.policies = {p};
  const auto r = sim::run(s).policies.at(0);
  EXPECT_EQ(r.world, 8u);
  EXPECT_EQ(r.contained, 1u);
  EXPECT_EQ(r.rejoins, 1u);
  EXPECT_EQ(r.exact_fallbacks, 0u);
  EXPECT_EQ(r.incidents, 0u);
  EXPECT_EQ(r.restores_memory + r.restores_disk, 0u);
  EXPECT_DOUBLE_EQ(r.ledger.lost_work, 8 * 5.0);
  EXPECT_DOUBLE_EQ(r.ledger.detection, 8 * 1.0);
  EXPECT_DOUBLE_EQ(r.ledger.restart, 8 * 2.0);
  EXPECT_DOUBLE_EQ(r.ledger.degraded, 8 * 0.5 * (1127 - 1007));
  EXPECT_DOUBLE_EQ(r.ledger.productive, 8 * 1660.0);
  EXPECT_DOUBLE_EQ(r.ledger.spare, 2 * 1728.0);
  EXPECT_NEAR(r.ledger.total(), 10 * 1728.0, 1e-6);
  EXPECT_DOUBLE_EQ(r.ettr, 1660 / 1728.0);
  EXPECT_GT(r.events, 0u);
}

// A whole node lost takes both its ranks (replica 1's) to spares: one
// contained incident, no restore from memory or disk; a fault in each
// replica at once falls back to the exact round, after which faults are
// contained again.
TEST(ClusterSim, ANodeLostIsContainedAndTwoReplicasOutAtOnceTakeTheExactRound) {
  sim::Scenario s;
  s.accelerators = 12;
  s.per_node = 2;
  s.days = 0.1;
  s.failures.rate_multiplier = 0;
  s.failures.straggler_per_accelerator_day = s.failures.slow_link_per_accelerator_day = 0;
  s.failures.repair_hours = 100;
  s.failures.categories = {{"psu", sim::Scope::node, 1, false}, {"bug", sim::Scope::software, 1, false}};
  sim::Policy p = standard("libsigma-contained");
  p.spares = sim::SpareRule::count;
  p.spare_count = 4;
  p.replica_size = 4;
  p.snapshot_from_model = false;
  p.migrate_on_warning = false;
  s.policies = {p};
  s.script = {{1000, 4, "psu", false}};
  auto r = sim::run(s).policies.at(0);
  EXPECT_EQ(r.world, 8u);
  EXPECT_EQ(r.contained, 1u);
  EXPECT_EQ(r.rejoins, 1u);
  EXPECT_EQ(r.incidents, 0u);
  EXPECT_EQ(r.restores_memory + r.restores_disk, 0u);
  EXPECT_DOUBLE_EQ(r.ledger.repair, 2 * (s.days * 86400 - 1000));

  s.script = {{1000, 1, "bug", false}, {1001, 6, "bug", false}, {3000, 2, "bug", false}};
  r = sim::run(s).policies.at(0);
  EXPECT_EQ(r.exact_fallbacks, 1u);
  EXPECT_EQ(r.incidents, 1u);
  EXPECT_EQ(r.restores_memory, 1u);
  EXPECT_EQ(r.contained, 2u);  // replica 0's first fault, then the one after the exact round
  EXPECT_EQ(r.rejoins, 1u);
  EXPECT_NEAR(r.ledger.total(), 12 * s.days * 86400, 1e-3);
}

// The restore planner decides the tier: a lone device's rank is restored
// from its ring successor's replica; a node failure takes the successors
// with it (ranks are consecutive on a node), so the disk it is.
TEST(ClusterSim, ThePlannerRestoresANodesLossFromReplicasInAnotherNodeAndNotFromTheRing) {
  auto s = base(32, 1);
  s.failures.rate_multiplier = 0;
  s.policies = {standard("libsigma")};
  s.policies[0].spares = sim::SpareRule::fraction;
  s.policies[0].spare_fraction = 0.3;
  ASSERT_TRUE(s.policies[0].replicas_across_nodes);
  s.script = {{20000, 3, "faulty_gpu", false}};
  auto r = sim::run(s).policies.at(0);
  EXPECT_EQ(r.restores_memory, 1u);
  EXPECT_EQ(r.restores_disk, 0u);
  s.script = {{20000, 3, "power_supply", false}};  // node 0: devices 0-7
  r = sim::run(s).policies.at(0);
  EXPECT_EQ(r.restores_memory, 1u) << "each of node 0's ranks has its replica in node 1";
  EXPECT_EQ(r.restores_disk, 0u);
  EXPECT_GT(r.ledger.repair, 8 * (86400 - 20000) - 1);
  // On the ring, rank r's replica is on r + 1: the same node for 7 of 8.
  s.policies[0].replicas_across_nodes = false;
  r = sim::run(s).policies.at(0);
  EXPECT_EQ(r.restores_memory, 0u);
  EXPECT_EQ(r.restores_disk, 1u);
}

// A failure with a precursor: the synthetic temperature ramp reaches the
// real health monitor, the real scheduler migrates the rank at a step
// boundary, and the failure lands on a device the job has left.
TEST(ClusterSim, APrecursorLeadsToAMigrationAndTheFailureMissesTheJob) {
  auto s = base(16, 1);
  s.failures.rate_multiplier = 0;
  s.failures.precursor_lead_min = 30;
  s.policies = {standard("libsigma"), standard("reactive")};
  for (auto& p : s.policies) {
    p.spares = sim::SpareRule::fraction;
    p.spare_fraction = 0.25;
  }
  s.script = {{40000, 2, "faulty_gpu", true}};
  const auto r = sim::run(s);
  const auto& ours = r.policies.at(0);
  EXPECT_EQ(ours.migrations, 1u);
  EXPECT_EQ(ours.averted, 1u);
  EXPECT_EQ(ours.incidents, 0u);
  EXPECT_DOUBLE_EQ(ours.ledger.lost_work, 0);
  const auto& reactive = r.policies.at(1);  // watches no telemetry
  EXPECT_EQ(reactive.migrations, 0u);
  EXPECT_EQ(reactive.incidents, 1u);
  EXPECT_GT(reactive.ledger.lost_work, 0);
}

TEST(ClusterSim, SilentCorruptionRollsBackToStateFromBeforeIt) {
  auto s = base(16, 1);
  s.failures.rate_multiplier = 0;
  s.policies = {standard("libsigma")};
  s.policies[0].spares = sim::SpareRule::fraction;
  s.policies[0].spare_fraction = 0.25;
  s.script = {{30000, 5, "silent_data_corruption", false}};
  const auto r = sim::run(s).policies.at(0);
  EXPECT_EQ(r.incidents, 1u);
  EXPECT_EQ(r.restores_memory, 1u);
  // Found 20 s later; the newest snapshot from before it is at most 100 s older.
  EXPECT_GT(r.ledger.lost_work, 0);
  EXPECT_LE(r.ledger.lost_work, r.world * (20.0 + 100.0 + 1.0));
}

TEST(ClusterSim, TheStandardPoliciesRankAsExpectedOnAnEarlyLifeCluster) {
  const auto r = sim::run(base(2048, 30));
  ASSERT_EQ(r.policies.size(), 4u);
  const auto &reactive = r.policies[0], &paper = r.policies[1], &ours = r.policies[2],
             &contained = r.policies[3];
  EXPECT_GT(contained.ettr, ours.ettr);
  EXPECT_GT(ours.ettr, paper.ettr);
  EXPECT_GT(paper.ettr, reactive.ettr);
  EXPECT_GT(ours.failures, 100u);
  EXPECT_GT(ours.migrations, 0u);
  EXPECT_GT(contained.migrations, 0u);
  // Contained: faults stop a replica, not the job; the world is whole
  // replicas, the pool what is left over, its chance of running out said.
  EXPECT_GT(contained.contained, 100u);
  EXPECT_LT(contained.incidents, ours.incidents / 10);
  EXPECT_EQ(contained.world % standard("libsigma-contained").replica_size, 0u);
  EXPECT_GE(contained.spare_risk, 0);
  EXPECT_LE(contained.spare_risk, 1);
  EXPECT_GT(contained.ledger.degraded, 0);
}

TEST(ClusterSim, ScenarioFilesAreCheckedKeyByKeyWithFileAndLine) {
  const auto model = sim::load_failure_model(model_path());
  const std::string good = write("good.yaml",
                                 "seed: 3\naccelerators: 64\ndays: 2\nfailures:\n  rate_multiplier: 2\n"
                                 "policies:\n  - name: libsigma\n  - name: fast\n    base: reactive\n"
                                 "    restart_s: 60\nscript:\n  - {at_s: 100, device: 3, category: nic}\n");
  const auto s = sim::load_scenario(good, model);
  EXPECT_EQ(s.seed, 3u);
  EXPECT_EQ(s.accelerators, 64u);
  EXPECT_EQ(s.failures.rate_multiplier, 2);
  ASSERT_EQ(s.policies.size(), 2u);
  EXPECT_EQ(s.policies[1].name, "fast");
  EXPECT_EQ(s.policies[1].restart_s, 60);
  EXPECT_EQ(s.policies[1].disk_every_s, standard("reactive").disk_every_s);
  ASSERT_EQ(s.script.size(), 1u);
  auto refused = [&](const std::string& text, const std::string& want) {
    const std::string path = write("bad.yaml", text);
    try {
      sim::load_scenario(path, model);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const sigma::Error& e) {
      EXPECT_EQ(e.code(), sigma::Code::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  refused("accelerators: 64\ndays: -1\n", "bad.yaml:2: days");
  refused("accelerators: 64\nflux: 1\n", "bad.yaml:2: flux");
  refused("accelerators: 64\ndays: 3\ndays: 4\n", "bad.yaml:3: days: given twice");
  refused("policies:\n  - name: mine\n", "bad.yaml:2: policies[0].name: 'mine' is not a standard policy");
  refused("policies:\n  - name: libsigma\n    spares: many\n", "bad.yaml:3: policies[0].spares");
  refused("script:\n  - {at_s: 1, device: 0, category: gremlins}\n", "script[0].category");
  refused("failures:\n  model: missing.json\n", "bad.yaml:2: failures.model");
  refused("days: [1\n", "(syntax): end of sequence flow not found");
  refused("policies:\n  - name: mine\n    base: reactive\n    replica_size: 8\n",
          "bad.yaml:4: policies[0].replica_size: contained recovery replaces ranks");
  refused("policies:\n  - name: libsigma-contained\n    replica_size: -2\n",
          "bad.yaml:3: policies[0].replica_size");
}

TEST(ClusterSim, AFailureModelThatCannotBeReadIsRefusedWithTheField) {
  const std::string bad =
      write("model.json", R"({"llama3_interruptions": {"unexpected_by_cause": {"gremlins": 3}}})");
  try {
    sim::load_failure_model(bad);
    FAIL() << "accepted";
  } catch (const sigma::Error& e) {
    EXPECT_NE(std::string(e.what()).find("unexpected_by_cause.gremlins"), std::string::npos) << e.what();
  }
  EXPECT_THROW(sim::load_failure_model(write("syntax.json", "{")), sigma::Error);
  EXPECT_THROW(sim::load_failure_model("/nonexistent/model.json"), sigma::Error);
}

TEST(ClusterSim, ImpossibleScenariosAreRefused) {
  auto s = base(64, 1);
  s.script = {{10, 64, "nic", false}};
  EXPECT_THROW(sim::run(s), sigma::Error);
  s = base(64, 1);
  s.policies[0].spares = sim::SpareRule::fraction;
  s.policies[0].spare_fraction = 1.0;
  EXPECT_THROW(sim::run(s), sigma::Error);
  s = base(1, 1);
  EXPECT_THROW(sim::run(s), sigma::Error);
}

TEST(ControlPlane, TheHierarchyTakesTheSameEventsOffTheRootAndEscalatesOnlyWhatAGroupCannotSettle) {
  sim::ControlPlaneSpec spec;
  spec.accelerators = 512;
  spec.group_size = 64;  // 8 groups with 2 spares each
  spec.fault_rate_per_s = 0.02;
  spec.seconds = 2;
  const auto r = sim::control_plane(spec);
  ASSERT_EQ(r.size(), 2u);
  const auto& flat = r[0];
  const auto& tree = r[1];
  EXPECT_EQ(flat.mode, "flat");
  EXPECT_EQ(tree.controllers, 9u);
  // The same events decided in both: every report of a live device, every
  // fault on a rank that still had a device.
  EXPECT_EQ(flat.reports.count, tree.reports.count);
  EXPECT_GT(flat.reports.count, 512u * 19);
  EXPECT_EQ(flat.faults.count, tree.faults.count);
  EXPECT_GT(tree.faults.count, 5u);
  EXPECT_EQ(flat.escalations, 0u);
  EXPECT_GT(tree.escalations, 0u);
  EXPECT_LT(tree.escalations, tree.faults.count);
  // The root hears one summary per group instead of every heartbeat.
  EXPECT_LT(tree.root_events_per_s * 20, flat.root_events_per_s);
  for (const auto& x : r) {
    EXPECT_GT(x.reports.p50_s, 0);
    EXPECT_GE(x.reports.p99_s, x.reports.p50_s);
    EXPECT_GE(x.faults.p99_s, x.faults.p50_s);
    EXPECT_GT(x.busiest_utilisation, 0);
  }
  // A heartbeat's latency includes at least the hop to its controller.
  EXPECT_GE(flat.reports.p50_s, spec.root_hop_s);
  EXPECT_GE(tree.reports.p50_s, spec.hop_s);
  EXPECT_NE(sim::to_table(r).find("hierarchical"), std::string::npos);
  EXPECT_NE(sim::to_json(r).find("\"root_events_per_s\""), std::string::npos);
  spec.group_size = 0;
  EXPECT_THROW(sim::control_plane(spec), sigma::Error);
}

TEST(ClusterSim, AReplayedJournalMakesTheAgentsDecisionsAndADifferentOneIsNamed) {
  const std::string start = R"({"event":"start","t":0,"nproc":2,"spares":1,"nnodes":1})"
                            "\n";
  const std::string fault = R"({"event":"recovery_started","t":1,"reached_step":100})"
                            "\n"
                            R"({"event":"fault","t":1,"device":1,"cause":"killed"})"
                            "\n";
  auto replace = [](int to) {
    return R"({"event":"scheduler","t":1,"action":"replace","device":1,"rank":1,"to_device":)" +
           std::to_string(to) + "}\n" + R"({"event":"scheduler","t":1,"action":"restore","tier":"memory"})" +
           "\n";
  };
  const auto ok = sim::parse_journal(start + fault + replace(2), "job.jsonl");
  EXPECT_EQ(ok.faults, 1u);
  EXPECT_EQ(ok.scenario.accelerators, 3u);
  EXPECT_DOUBLE_EQ(ok.scenario.step_s, 0.01);
  const auto res = sim::run(ok.scenario);
  EXPECT_EQ(sim::compare_decisions(ok.journalled, res.policies[0].decisions), "");
  const auto wrong = sim::parse_journal(start + fault + replace(0), "job.jsonl");
  EXPECT_EQ(sim::compare_decisions(wrong.journalled, res.policies[0].decisions),
            "decision 1: the journal has replace device 1 rank 1 to device 0, the simulator replace device 1 "
            "rank 1 to device 2");
}

TEST(ClusterSim, AJournalItCannotReadIsRefusedWithTheLineAndField) {
  auto refused = [](const std::string& text, const std::string& want) {
    try {
      sim::parse_journal(text, "job.jsonl");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const sigma::Error& e) {
      EXPECT_EQ(e.code(), sigma::Code::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  const std::string start = R"({"event":"start","t":0,"nproc":2,"spares":1,"nnodes":1})"
                            "\n";
  refused("", "job.jsonl:0: event: no start line");
  refused("not json\n", "job.jsonl:1: (line): not a JSON object");
  refused(R"({"event":"fault","t":1,"device":0})", "job.jsonl:1: event: 'fault' before the start line");
  refused(start + R"({"event":"fault","t":1,"device":3})", "job.jsonl:2: device: out of range [0, 2]");
  refused(start + R"({"event":"fault","t":-1,"device":0})", "job.jsonl:2: t: out of range");
  refused(R"({"event":"start","t":0,"nproc":"2","spares":1,"nnodes":1})", "job.jsonl:1: nproc");
}

// 3 accelerators (2 ranks and a spare) for a day; device 0 straggles at
// twice the step time from t = 1000 s for an hour; steps of 10 s.
TEST(ClusterSim, AStragglerSlowsTheJobUntilItClearsOrItsRankMoves) {
  auto s = base(3, 1);
  s.per_node = 1;
  s.failures.rate_multiplier = 0;
  s.failures.straggler_per_accelerator_day = s.failures.slow_link_per_accelerator_day = 0;
  s.failures.straggler_slowdown = 2;
  s.failures.straggler_hours = 1;
  s.failures.repair_hours = 48;
  s.script = {{1000, 0, "", false, "straggler"}};
  sim::Policy p;
  p.name = "watch";
  p.spares = sim::SpareRule::count;
  p.spare_count = 1;
  p.disk_every_s = 1e9;
  p.disk_stall_s = 0;
  p.full_restart = false;
  p.migrate_s = 10;
  sim::Policy blind = p;
  blind.name = "blind";
  p.migrate_on_warning = true;
  s.policies = {blind, p};
  const auto r = sim::run(s);
  // Unwatched: the job runs at half pace for the hour.
  const auto& b = r.policies[0];
  EXPECT_DOUBLE_EQ(b.ledger.slow, 2 * 3600 * 0.5);
  EXPECT_DOUBLE_EQ(b.ledger.productive, 2 * (86400.0 - 1800));
  EXPECT_DOUBLE_EQ(b.ledger.spare, 86400);
  EXPECT_EQ(b.degradations, 1u);
  EXPECT_EQ(b.degradations_moved, 0u);
  // Watched: the Monitor's straggler rule fires on the 20th slow step
  // (t = 1380), the rank moves at the next step boundary (progress 1200,
  // t = 1400) in 10 s, and device 0 is out until the episode is over
  // (t = 4600), then a spare again.
  const auto& w = r.policies[1];
  EXPECT_DOUBLE_EQ(w.ledger.slow, 2 * 400 * 0.5);
  EXPECT_DOUBLE_EQ(w.ledger.migration, 2 * 10);
  EXPECT_DOUBLE_EQ(w.ledger.productive, 2 * (86400.0 - 200 - 10));
  EXPECT_DOUBLE_EQ(w.ledger.spare, 1400 + (86400 - 4600));
  EXPECT_DOUBLE_EQ(w.ledger.repair, 4600 - 1400);
  EXPECT_EQ(w.migrations, 1u);
  EXPECT_EQ(w.degradations_moved, 1u);
}
