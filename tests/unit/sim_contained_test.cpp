// Contained recovery in the simulator (src/sim/contained_job.hpp, pure):
// the runtime's contained machine fed a job's events, its actions turned
// into costs -- a fault stops its replica and the live set re-forms and
// runs its step again, a replacement up starts a hand-off at a boundary,
// the transfer and the replay lead to the rejoin, a second replica failing
// with no healthy one left falls back to the exact round, and a timer of a
// hand-off made void changes nothing.
#include "sim/contained_job.hpp"

#include <gtest/gtest.h>

namespace sigma::sim::detail {
namespace {

// comm_s(n) = 1 + 0.5 n; a state moved in 2 s; a replacement up in 5 s.
ContainedCosts costs() { return {1, 0.5, 2, 5}; }

TEST(ContainedJob, AFaultStopsItsReplicaAndTheLiveSetReformsAndRunsItsStepAgain) {
  ContainedJob job(8, 4, costs());
  const Effects e = job.fault({5}, false, false, "software bug", 1, 100, 1005);
  EXPECT_FALSE(e.exact);
  EXPECT_EQ(e.contained, 1u);
  EXPECT_TRUE(e.redo_step);
  EXPECT_DOUBLE_EQ(e.detect_s, 1);
  EXPECT_DOUBLE_EQ(e.reform_s, 1.5);  // one live replica in each data-parallel group
  ASSERT_EQ(e.timers.size(), 1u);     // the process restarts where it was
  EXPECT_EQ(e.timers[0].kind, Timer::Kind::spare_ready);
  EXPECT_EQ(e.timers[0].id, 5u);
  EXPECT_DOUBLE_EQ(e.timers[0].at_s, 1005 + 1 + 5);
  EXPECT_DOUBLE_EQ(job.pace(), 0.5);
  EXPECT_TRUE(job.out(4));
  EXPECT_FALSE(job.out(3));
  EXPECT_FALSE(job.next_step());  // nothing waits for a boundary before the rank is up
}

TEST(ContainedJob, AReplicaTakesLiveStateAtABoundaryReplaysAndRejoins) {
  ContainedJob job(8, 4, costs());
  const Effects f = job.fault({5}, false, false, "software bug", 1, 100, 1005);
  EXPECT_TRUE(job.timer(f.timers.at(0), 100, 1011).timers.empty());
  ASSERT_EQ(job.next_step(), 102u);  // two steps past the live set's

  const Effects boundary = job.at_step(102, 1047);
  ASSERT_EQ(boundary.timers.size(), 1u);
  EXPECT_EQ(boundary.timers[0].kind, Timer::Kind::transferred);
  EXPECT_DOUBLE_EQ(boundary.timers[0].at_s, 1047 + 3 + 2);  // the replica's communicator, then the state
  EXPECT_FALSE(job.next_step());                            // while the state moves

  // The state is in before the live set finished another step: the replica
  // replays from the next one.
  EXPECT_EQ(job.timer(boundary.timers[0], 102, 1050).rejoins, 0u);
  ASSERT_EQ(job.next_step(), 103u);
  EXPECT_EQ(job.at_step(103, 1067).rejoins, 0u);
  ASSERT_EQ(job.next_step(), 106u);  // the rejoin's boundary: caught up, two steps of lead

  const Effects back = job.at_step(106, 1127);
  EXPECT_EQ(back.rejoins, 1u);
  EXPECT_DOUBLE_EQ(back.reform_s, 2);  // both replicas in each group again
  EXPECT_FALSE(back.redo_step);
  EXPECT_DOUBLE_EQ(job.pace(), 1);
  EXPECT_FALSE(job.out(5));
  EXPECT_FALSE(job.next_step());
}

TEST(ContainedJob, WithNoHealthyReplicaLeftTheExactRoundRestoresEveryReplicaOut) {
  ContainedJob job(8, 4, costs());
  job.fault({1}, false, true, "faulty gpu", 1, 10, 100);
  const Effects e = job.fault({6}, true, false, "nccl watchdog", 5, 10, 101);
  EXPECT_TRUE(e.exact);
  EXPECT_NE(e.exact_cause.find("no healthy replica left"), std::string::npos) << e.exact_cause;
  EXPECT_DOUBLE_EQ(e.detect_s, 5);
  std::vector<uint32_t> ranks = e.exact_ranks;
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  EXPECT_EQ(ranks,
            (std::vector<uint32_t>{1, 6}));  // replica 0 waited for a spare: rank 1 alone lost its memory
  EXPECT_TRUE(job.exact());
  EXPECT_DOUBLE_EQ(job.pace(), 1);  // the exact round stalls the whole job
  EXPECT_TRUE(job.fault({2}, false, true, "faulty gpu", 1, 10, 102).timers.empty());  // it joins the round
  job.exact_done(200);
  EXPECT_FALSE(job.exact());
  EXPECT_FALSE(job.out(1));
  EXPECT_EQ(job.fault({2}, false, true, "faulty gpu", 1, 20, 300).contained, 1u);  // contained again
}

TEST(ContainedJob, ATransferOfAHandOffMadeVoidByItsDonorsFaultChangesNothing) {
  ContainedJob job(6, 2, costs());  // three replicas of two
  job.fault({2}, false, true, "faulty gpu", 1, 10, 100);
  job.replaced(2, 101);
  job.timer({106, Timer::Kind::spare_ready, 2, 0}, 10, 106);
  ASSERT_EQ(job.next_step(), 12u);
  const Effects boundary = job.at_step(12, 130);
  ASSERT_EQ(boundary.timers.size(), 1u);
  // The donor (the lowest healthy replica, 0) fails while the state moves:
  // the hand-off is void, replica 1 waits for the next.
  const Effects donor = job.fault({0}, false, true, "faulty gpu", 1, 12, 131);
  EXPECT_FALSE(donor.exact);
  EXPECT_DOUBLE_EQ(job.pace(), 1.0 / 3);
  const Effects stale = job.timer(boundary.timers[0], 13, 135);
  EXPECT_EQ(stale.rejoins, 0u);
  EXPECT_TRUE(stale.timers.empty());
  EXPECT_TRUE(job.out(2));
  EXPECT_TRUE(job.out(0));
}

}  // namespace
}  // namespace sigma::sim::detail
