// The scheduler's decisions: lifecycle, spare sizing against a direct
// Poisson computation, proactive migration at a step boundary, replacement
// with the right restore tier, and both degraded modes.
#include <sigma/scheduler.hpp>

#include <gtest/gtest.h>

#include <cmath>

namespace sigma::scheduler {
namespace {

using K = Action::Kind;

std::vector<K> kinds(const std::vector<Action>& a) {
  std::vector<K> out;
  for (const Action& x : a) out.push_back(x.kind);
  return out;
}

// n devices validated and admitted; the job started on the first `world`.
Scheduler started(uint32_t n, Config c) {
  Scheduler s(c);
  for (uint32_t d = 0; d < n; ++d) {
    s.add_device(d, 0);
    s.validation_done(d, true, "self_test ok, probe ok", 0);
  }
  s.start(1);
  return s;
}

TEST(SpareSizing, MatchesADirectPoissonComputation) {
  FailureModel m;
  m.failures_per_device_hour = 1e-3;
  m.repair_hours = 24;
  m.job_hours = 24 * 30;
  m.target_risk = 0.01;
  const SparePlan p = size_spares(1024, m);
  // Mean in repair at once: 1024 * 1e-3 * 24 = 24.576; 30 windows.
  const double mean = 24.576;
  auto risk = [&](uint32_t s) {
    double cdf = 0, term = std::exp(-mean);
    for (uint32_t k = 0; k <= s; ++k) {
      if (k > 0) term *= mean / k;
      cdf += term;
    }
    return 1 - std::pow(cdf, 30.0);
  };
  EXPECT_LE(risk(p.spares), 0.01);
  EXPECT_GT(risk(p.spares - 1), 0.01);
  EXPECT_NEAR(p.risk, risk(p.spares), 1e-9);
  EXPECT_NEAR(p.expected_failures, 1024 * 1e-3 * 720, 1e-6);
  EXPECT_NE(p.rule.find("Poisson"), std::string::npos);
  // More failures need more spares; no failures need none.
  m.failures_per_device_hour = 5e-3;
  EXPECT_GT(size_spares(1024, m).spares, p.spares);
  m.failures_per_device_hour = 0;
  EXPECT_EQ(size_spares(1024, m).spares, 0u);
}

// Past ~745 devices in repair at once, exp(-mean) is 0 in double precision;
// the sizing must still find the pool (it once answered "every device").
TEST(SpareSizing, ALargeClusterWithHundredsInRepairGetsAPoolNearItsMean) {
  FailureModel m;
  m.failures_per_device_hour = 6e-4;
  m.repair_hours = 24;
  m.job_hours = 24 * 30;
  m.target_risk = 0.01;
  const SparePlan p = size_spares(131072, m);
  const double mean = 131072 * 6e-4 * 24;  // 1887
  EXPECT_GT(p.spares, mean);
  EXPECT_LT(p.spares, mean + 6 * std::sqrt(mean));
  EXPECT_LE(p.risk, 0.01);
}

TEST(SpareSizing, ImpossibleModelsAreRefused) {
  FailureModel m;
  m.failures_per_device_hour = -1;
  EXPECT_THROW(size_spares(8, m), Error);
  m.failures_per_device_hour = 1e-4;
  m.repair_hours = 0;
  EXPECT_THROW(size_spares(8, m), Error);
  m.repair_hours = 4;
  m.target_risk = 1;
  EXPECT_THROW(size_spares(8, m), Error);
}

TEST(Scheduler, OnlyValidatedDevicesAreAdmittedAndAssigned) {
  Scheduler s({2});
  EXPECT_EQ(kinds(s.add_device(7, 0)), (std::vector<K>{K::validate}));
  EXPECT_EQ(s.state(7), DeviceState::validating);
  s.add_device(8, 0);
  s.add_device(9, 0);
  EXPECT_EQ(kinds(s.validation_done(8, false, "GEMM mismatch 3.2e-2", 0)), (std::vector<K>{K::cordon}));
  EXPECT_EQ(s.state(8), DeviceState::cordoned);
  s.validation_done(7, true, "", 0);
  EXPECT_THROW(s.start(0), Error) << "one device for a world of two";
  s.validation_done(9, true, "", 0);
  auto a = s.start(0);
  EXPECT_EQ(kinds(a), (std::vector<K>{K::assign, K::assign}));
  EXPECT_EQ(s.device_of(0), 7u);
  EXPECT_EQ(s.device_of(1), 9u);
  EXPECT_THROW(s.validation_done(7, true, "", 0), Error) << "not validating any more";
  EXPECT_THROW(s.state(42), Error);
}

TEST(Scheduler, AWarningMigratesToASpareAtTheNextStepBoundary) {
  Scheduler s = started(4, {2});
  EXPECT_EQ(s.spares(), (std::vector<uint32_t>{2, 3}));
  EXPECT_TRUE(s.on_warning(1, "temperature trend: crosses 95 C in ~120 s", 5).empty());
  EXPECT_EQ(s.state(1), DeviceState::suspect);
  EXPECT_EQ(s.pending_migration(1), 2u);
  EXPECT_EQ(s.spares(), (std::vector<uint32_t>{3})) << "the target is reserved";
  const auto a = s.at_step_boundary(17, 6);
  ASSERT_EQ(kinds(a), (std::vector<K>{K::migrate, K::cordon}));
  EXPECT_EQ(a[0].rank, 1u);
  EXPECT_EQ(a[0].device, 1u);
  EXPECT_EQ(a[0].to_device, 2u);
  EXPECT_EQ(a[0].tier, "memory");
  EXPECT_NE(a[0].reason.find("step 17"), std::string::npos);
  EXPECT_EQ(s.device_of(1), 2u);
  EXPECT_EQ(s.state(1), DeviceState::cordoned);
  // Repaired, validated: a spare again.
  EXPECT_EQ(kinds(s.on_repaired(1, 100)), (std::vector<K>{K::validate}));
  EXPECT_EQ(kinds(s.validation_done(1, true, "", 101)), (std::vector<K>{K::admit}));
  EXPECT_EQ(s.spares(), (std::vector<uint32_t>{1, 3}));
}

TEST(Scheduler, AWarningThatCalmsDownCancelsTheMigration) {
  Scheduler s = started(3, {2});
  s.on_warning(0, "straggler", 1);
  s.on_calm(0, 2);
  EXPECT_EQ(s.state(0), DeviceState::in_use);
  EXPECT_TRUE(s.at_step_boundary(3, 3).empty());
  EXPECT_EQ(s.device_of(0), 0u);
}

TEST(Scheduler, AHardFaultAbortsReplacesAndRestoresFromTheFreshestTier) {
  Scheduler s = started(4, {3});
  auto a = s.on_fault(1, "process exited: killed by SIGKILL", true, 9);
  ASSERT_EQ(kinds(a), (std::vector<K>{K::abort_communicators, K::cordon, K::replace, K::restore}));
  EXPECT_EQ(a[2].rank, 1u);
  EXPECT_EQ(a[2].to_device, 3u);
  EXPECT_EQ(a[3].tier, "memory");
  EXPECT_EQ(s.device_of(1), 3u);
  // No spare left, no shrinking allowed: paused, and nothing is lost.
  Scheduler t = started(3, {3});
  a = t.on_fault(2, "heartbeat lost", false, 1);
  ASSERT_EQ(kinds(a), (std::vector<K>{K::abort_communicators, K::cordon, K::pause}));
  EXPECT_TRUE(t.paused());
  EXPECT_NE(a[2].reason.find("does not allow shrinking"), std::string::npos);
  t.on_repaired(2, 50);
  a = t.validation_done(2, true, "", 51);
  ASSERT_EQ(kinds(a), (std::vector<K>{K::admit, K::replace, K::restore, K::resume}));
  EXPECT_EQ(a[2].tier, "disk");
  EXPECT_FALSE(t.paused());
  EXPECT_EQ(t.device_of(2), 2u);
}

TEST(Scheduler, WithoutSparesAShrinkableJobShrinksDownToItsFloor) {
  Config c{4};
  c.allow_shrink = true;
  c.min_world_size = 3;
  Scheduler s = started(4, c);
  auto a = s.on_fault(1, "device lost", true, 1);
  ASSERT_EQ(kinds(a), (std::vector<K>{K::abort_communicators, K::cordon, K::shrink, K::restore}));
  EXPECT_EQ(s.world_size(), 3u);
  EXPECT_EQ(s.device_of(1), 2u) << "ranks above the lost one move down";
  EXPECT_EQ(s.device_of(2), 3u);
  EXPECT_FALSE(s.device_of(3).has_value());
  a = s.on_fault(0, "device lost", true, 2);
  EXPECT_EQ(kinds(a).back(), K::pause) << "never below min_world_size";
  EXPECT_EQ(s.world_size(), 3u);
}

TEST(Scheduler, ASpareThatWarnsOrFailsIsCordonedAndAFaultOnASuspectUsesItsReservedSpare) {
  Scheduler s = started(4, {2});
  EXPECT_EQ(kinds(s.on_warning(3, "ecc rate", 1)), (std::vector<K>{K::cordon}));
  s.on_warning(0, "trend", 2);
  EXPECT_EQ(s.pending_migration(0), 2u);
  auto a = s.on_fault(0, "device lost before the boundary", true, 3);
  ASSERT_EQ(kinds(a), (std::vector<K>{K::abort_communicators, K::cordon, K::replace, K::restore}));
  EXPECT_EQ(a[2].to_device, 2u);
  EXPECT_TRUE(s.at_step_boundary(4, 4).empty());
  EXPECT_EQ(s.history().size(), 8u + 2u + 1u + 4u) << "validate + admit x4, assign x2, cordon, the fault";
}

}  // namespace
}  // namespace sigma::scheduler
