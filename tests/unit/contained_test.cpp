// Contained recovery's decisions (pure logic: read from src/): each kind
// of incident produces the actions it must -- a crash, a hang, a lost
// device, faults in two replicas, a fault in a replica already out, the
// last healthy replica failing (the exact round), a spare dying during the
// hand-off, the donor dying during it, the coordinator's own exact round
// -- and the micro-batches of a step
// are each computed once whichever replicas are live.
#include "runtime/agent/contained.hpp"

#include <gtest/gtest.h>

#include <algorithm>

namespace sigma::runtime::agent::contained {
namespace {

// Ranks 0..3 in replicas of two (EP 2): {0,1} {2,3} ...
std::vector<uint32_t> replicas_of_two(uint32_t replicas) {
  std::vector<uint32_t> of(2 * replicas);
  for (uint32_t r = 0; r < of.size(); ++r) of[r] = r / 2;
  return of;
}

template <class T>
std::vector<T> all_of(const Actions& actions) {
  std::vector<T> found;
  for (const Action& a : actions)
    if (const T* x = std::get_if<T>(&a)) found.push_back(*x);
  return found;
}

template <class T>
T only(const Actions& actions) {
  const auto found = all_of<T>(actions);
  EXPECT_EQ(found.size(), 1u);
  return found.empty() ? T{} : found[0];
}

using V = std::vector<uint32_t>;

// Brings replica `q` (ranks 2q, 2q+1) from a crash of rank 2q to waiting
// for its hand-off: the other rank leaves its collective, the spare is ready.
Actions stop_and_replace(Machine& m, uint32_t q, double t) {
  m.fault(2 * q, Machine::FaultKind::process_ended, "killed", t);
  m.rank_out(2 * q + 1, t + 0.1);
  return m.spare_ready(2 * q, t + 1);
}

// A hand-off under way: every rank says it has started; the rejoining
// `ranks` replay to step `replayed`, which brings the rejoin.
Reform catch_up(Machine& m, const Reform& handoff, const V& ranks, uint64_t replayed, double t) {
  m.reformed(handoff.epoch, t);
  Actions a;
  for (uint32_t r : ranks) a = m.replayed(r, replayed, t + 0.1);
  const auto rejoin = only<Reform>(a);
  EXPECT_TRUE(rejoin.rejoin);
  EXPECT_EQ(rejoin.rejoining, handoff.rejoining);
  return rejoin;
}

TEST(ContainedShare, EveryMicroBatchIsComputedOnceWhicheverReplicasAreLive) {
  for (const V& live : {V{0, 1, 2, 3}, V{0, 2, 3}, V{1}, V{0, 3}}) {
    std::vector<uint32_t> seen;
    for (uint32_t q : live) {
      const auto mine = share_of(10, live, q);
      EXPECT_TRUE(std::is_sorted(mine.begin(), mine.end()));
      seen.insert(seen.end(), mine.begin(), mine.end());
    }
    std::sort(seen.begin(), seen.end());
    V every(10);
    for (uint32_t i = 0; i < 10; ++i) every[i] = i;
    EXPECT_EQ(seen, every);
  }
  EXPECT_EQ(share_of(4, {0, 1}, 1), (V{1, 3}));
  EXPECT_EQ(share_of(4, {1}, 1), (V{0, 1, 2, 3}));  // replica 0 out: replica 1 takes its micro-batches
  EXPECT_THROW(share_of(4, {0, 2}, 1), std::invalid_argument);
}

TEST(Contained, ReplicasOfDifferentSizesAreRefused) {
  EXPECT_THROW(Machine({0, 0, 1}, {}), std::invalid_argument);
  EXPECT_THROW(Machine({}, {}), std::invalid_argument);
}

TEST(Contained, ACrashStopsOnlyItsReplicaWhichTakesADonorsStateAndRejoins) {
  Machine m(replicas_of_two(2), {});
  m.step_done(10, 1);
  auto a = m.fault(3, Machine::FaultKind::process_ended, "device 3 (rank 3): process killed", 2);
  const auto stop = only<StopRanks>(a);
  EXPECT_EQ(stop.replica, 1u);
  EXPECT_EQ(stop.ranks, (V{2, 3}));
  const auto replace = only<ReplaceRank>(a);
  EXPECT_EQ(replace.rank, 3u);
  EXPECT_FALSE(replace.device_gone);
  // Replica 0 goes on alone at once, taking replica 1's micro-batches.
  const auto now = only<Reform>(a);
  EXPECT_EQ(now.live, (V{0}));
  EXPECT_TRUE(now.rejoining.empty());
  EXPECT_FALSE(now.boundary.has_value());
  EXPECT_EQ(m.stage(1), Stage::stopping);
  EXPECT_EQ(m.live(), (V{0}));

  EXPECT_TRUE(all_of<Reform>(m.rank_out(2, 2.1)).empty());
  EXPECT_EQ(m.stage(1), Stage::waiting);  // its spare is not ready yet
  for (uint64_t s = 11; s <= 20; ++s) m.step_done(s, 2 + static_cast<double>(s - 10) / 10);
  a = m.spare_ready(3, 3.5);
  const auto back = only<Reform>(a);
  EXPECT_EQ(back.live, (V{0, 1}));
  EXPECT_EQ(back.rejoining, (V{1}));
  EXPECT_EQ(back.donor, 0u);
  EXPECT_EQ(back.boundary, 22u);  // past what replica 0 has done
  EXPECT_GT(back.epoch, now.epoch);
  EXPECT_EQ(m.stage(1), Stage::handing);

  // The stream starts at the end of step 22; replica 1 replays replica 0's
  // exchanges, and rejoins once within the slack of the live set.
  m.step_done(30, 3.8);
  m.reformed(back.epoch, 3.85);
  EXPECT_TRUE(all_of<Reform>(m.replayed(2, 26, 3.9)).empty()) << "rank 3 has replayed nothing yet";
  EXPECT_TRUE(all_of<Reform>(m.replayed(3, 26, 3.9)).empty()) << "4 steps behind: not yet";
  EXPECT_EQ(m.stage(1), Stage::handing);
  const auto rejoin = catch_up(m, back, {2, 3}, 28, 3.9);
  EXPECT_EQ(rejoin.boundary, 32u) << "past what the live set has done";
  EXPECT_EQ(rejoin.live, (V{0, 1}));
  m.reformed(rejoin.epoch, 4);
  EXPECT_EQ(m.stage(1), Stage::healthy);
  EXPECT_EQ(m.live(), (V{0, 1}));
  EXPECT_EQ(m.degraded_steps(), 20u);
  ASSERT_EQ(m.incidents().size(), 1u);
  const auto& i = m.incidents()[0];
  EXPECT_EQ(i["replica"], 1);
  EXPECT_EQ(i["end"], "rejoined");
  EXPECT_EQ(i["degraded_steps"], 20);
  EXPECT_EQ(i["donor"], 0);
  EXPECT_DOUBLE_EQ(i["rejoined_s"].get<double>(), 4);
  // Steps with every replica in are not degraded.
  m.step_done(40, 5);
  EXPECT_EQ(m.degraded_steps(), 20u);
}

// A replay no faster than the live set's steps never gets within the
// slack: after the catch-up limit the replica rejoins anyway (the live set
// waits for it at the boundary), and the journal says why.
TEST(Contained, AReplicaWhoseReplayNeverCatchesUpRejoinsAfterTheCatchUpLimit) {
  Options o;
  o.catch_up_limit_s = 5;
  Machine m(replicas_of_two(2), o);
  m.step_done(10, 1);
  m.fault(3, Machine::FaultKind::process_ended, "killed", 2);
  m.rank_out(2, 2.1);
  const auto handoff = only<Reform>(m.spare_ready(3, 2.5));
  m.reformed(handoff.epoch, 3);
  // The live set stays 10 steps ahead of the replay for 5 s.
  double t = 3;
  for (uint64_t s = 20; t < 7.9; ++s, t += 0.1) {
    m.step_done(s + 10, t);
    EXPECT_TRUE(all_of<Reform>(m.replayed(2, s, t)).empty());
    EXPECT_TRUE(all_of<Reform>(m.replayed(3, s, t)).empty())
        << "at " << t << " s: still behind, within the limit";
  }
  m.step_done(80, 8.1);
  const Actions a = m.replayed(2, 70, 8.1);  // the first report past the limit
  const auto rejoin = only<Reform>(a);
  EXPECT_TRUE(rejoin.rejoin);
  EXPECT_EQ(rejoin.boundary, 82u) << "past what the live set has done: it waits there";
  bool said = false;
  for (const Action& x : a)
    if (const Note* n = std::get_if<Note>(&x)) said |= n->entry.value("event", "") == "catch_up_limit";
  EXPECT_TRUE(said);
  m.reformed(rejoin.epoch, 9);
  EXPECT_EQ(m.stage(1), Stage::healthy);
  EXPECT_EQ(m.incidents().at(0)["catch_up"], "limit");
}

TEST(Contained, AHungRankIsKilledAndALostDeviceIsNotUsedAgain) {
  Machine m(replicas_of_two(2), {});
  auto a = m.fault(1, Machine::FaultKind::hung, "no heartbeat", 1);
  EXPECT_EQ(only<KillRank>(a).rank, 1u);
  EXPECT_EQ(only<StopRanks>(a).replica, 0u);
  EXPECT_EQ(only<Reform>(a).live, (V{1}));
  a = m.fault(0, Machine::FaultKind::device_lost, "device lost", 1.5);
  EXPECT_TRUE(only<ReplaceRank>(a).device_gone);
  EXPECT_TRUE(all_of<Reform>(a).empty());  // the replica was already out
  EXPECT_EQ(m.stage(0), Stage::waiting);
  m.spare_ready(1, 2);
  EXPECT_EQ(m.stage(0), Stage::waiting);  // rank 0 still has no process
  a = m.spare_ready(0, 2.5);
  EXPECT_EQ(only<Reform>(a).donor, 1u);
}

TEST(Contained, ARankThatDoesNotLeaveItsCollectiveIsKilledAfterTheGrace) {
  Machine m(replicas_of_two(2), {.abort_grace_s = 5, .boundary_lead = 2});
  m.fault(0, Machine::FaultKind::process_ended, "killed", 10);
  EXPECT_TRUE(m.tick(14).empty());
  const auto a = m.tick(15.5);
  EXPECT_EQ(only<KillRank>(a).rank, 1u);
  EXPECT_EQ(only<ReplaceRank>(a).rank, 1u);
  EXPECT_EQ(m.stage(0), Stage::waiting);
}

TEST(Contained, FaultsInTwoReplicasLeaveTheThirdSteppingAndBothRejoinInTurn) {
  Machine m(replicas_of_two(3), {});
  m.fault(0, Machine::FaultKind::process_ended, "killed", 1);
  const auto a = m.fault(5, Machine::FaultKind::process_ended, "killed", 1.2);
  EXPECT_EQ(only<Reform>(a).live, (V{1}));
  EXPECT_EQ(m.live(), (V{1}));
  m.rank_out(1, 1.3);
  m.rank_out(4, 1.3);
  const auto first = only<Reform>(m.spare_ready(0, 2));
  EXPECT_EQ(first.rejoining, (V{0}));
  EXPECT_EQ(first.donor, 1u);
  // One hand-off at a time: replica 2 waits for replica 0's.
  EXPECT_TRUE(all_of<Reform>(m.spare_ready(5, 2.1)).empty());
  EXPECT_EQ(m.stage(2), Stage::waiting);
  const auto rejoin0 = catch_up(m, first, {0, 1}, first.boundary.value() + 1, 2.5);
  const auto second = only<Reform>(m.reformed(rejoin0.epoch, 3));
  EXPECT_EQ(second.rejoining, (V{2}));
  EXPECT_EQ(second.live, (V{0, 1, 2}));
  m.reformed(catch_up(m, second, {4, 5}, second.boundary.value() + 1, 3.5).epoch, 4);
  EXPECT_EQ(m.live(), (V{0, 1, 2}));
  EXPECT_EQ(m.incidents().size(), 2u);
}

TEST(Contained, TheLastHealthyReplicaFailingRunsTheExactRound) {
  Machine m(replicas_of_two(2), {});
  m.fault(2, Machine::FaultKind::process_ended, "killed", 1);
  auto a = m.fault(0, Machine::FaultKind::process_ended, "device 0: killed", 2);
  const auto exact = only<ExactRound>(a);
  EXPECT_NE(exact.cause.find("no healthy replica left"), std::string::npos) << exact.cause;
  EXPECT_TRUE(all_of<Reform>(a).empty());
  EXPECT_TRUE(m.exact());
  // While it runs, faults are the exact round's.
  EXPECT_TRUE(m.fault(1, Machine::FaultKind::process_ended, "killed", 2.5).empty());
  ASSERT_EQ(m.incidents().size(), 1u);
  EXPECT_EQ(m.incidents()[0]["end"], "exact round");
  const auto before = m.epoch();
  m.exact_done(10);
  EXPECT_FALSE(m.exact());
  EXPECT_EQ(m.live(), (V{0, 1}));
  EXPECT_GT(m.epoch(), before);
}

// The coordinator's own exact round (a stalled step) while replica 1 takes
// its hand-off: the hand-off's incident ends in it, and the round ends as
// a fall-back does.
TEST(Contained, AnExactRoundOfTheCoordinatorsOwnTakesTheReplicaThatIsOut) {
  Machine m(replicas_of_two(2), {});
  stop_and_replace(m, 1, 1);
  ASSERT_EQ(m.stage(1), Stage::handing);
  const auto a = m.exact_round("every rank stalled in step 10", 5);
  EXPECT_EQ(only<ExactRound>(a).cause, "every rank stalled in step 10");
  EXPECT_TRUE(m.exact());
  EXPECT_TRUE(m.exact_round("again", 6).empty()) << "one round at a time";
  ASSERT_EQ(m.incidents().size(), 1u);
  EXPECT_EQ(m.incidents()[0]["end"], "exact round");
  m.exact_done(10);
  EXPECT_EQ(m.live(), (V{0, 1}));
  EXPECT_EQ(m.stage(1), Stage::healthy);
}

TEST(Contained, WithOneReplicaEveryFaultIsTheExactRounds) {
  Machine m({0, 0}, {});
  const auto a = m.fault(1, Machine::FaultKind::hung, "no heartbeat", 1);
  EXPECT_EQ(only<KillRank>(a).rank, 1u);
  EXPECT_NE(only<ExactRound>(a).cause.find("one replica"), std::string::npos);
  EXPECT_TRUE(all_of<StopRanks>(a).empty());
}

TEST(Contained, ASpareDyingInTheHandOffVoidsItAndTheReplicaWaitsForAnother) {
  Machine m(replicas_of_two(2), {});
  m.step_done(5, 0.5);
  const auto handoff = only<Reform>(stop_and_replace(m, 1, 1));
  EXPECT_EQ(m.stage(1), Stage::handing);
  // The spare on rank 2 dies before the boundary.
  auto a = m.fault(2, Machine::FaultKind::process_ended, "spare killed", 2);
  EXPECT_EQ(only<ReplaceRank>(a).rank, 2u);
  const auto superseded = only<Reform>(a);
  EXPECT_EQ(superseded.live, (V{0}));  // the rejoin is off: replica 0 stays alone
  EXPECT_GT(superseded.epoch, handoff.epoch);
  // Its other rank leaves the hand-off it waits in before the next one.
  EXPECT_EQ(only<StopRanks>(a).ranks, (V{2, 3}));
  EXPECT_EQ(m.stage(1), Stage::stopping);
  m.rank_out(3, 2.05);
  EXPECT_EQ(m.stage(1), Stage::waiting);
  // A late report of the voided epoch changes nothing.
  m.reformed(handoff.epoch, 2.1);
  EXPECT_EQ(m.stage(1), Stage::waiting);
  const auto again = only<Reform>(m.spare_ready(2, 3));
  EXPECT_EQ(again.rejoining, (V{1}));
  m.reformed(catch_up(m, again, {2, 3}, again.boundary.value() + 1, 3.5).epoch, 4);
  EXPECT_EQ(m.live(), (V{0, 1}));
  ASSERT_EQ(m.incidents().size(), 1u);
  EXPECT_EQ(m.incidents()[0]["end"], "rejoined");
}

TEST(Contained, TheDonorFailingInTheHandOffHandsItToAnotherHealthyReplica) {
  Machine m(replicas_of_two(3), {});
  const auto first = only<Reform>(stop_and_replace(m, 2, 1));
  EXPECT_EQ(first.donor, 0u);
  auto a = m.fault(0, Machine::FaultKind::process_ended, "donor killed", 2);
  EXPECT_EQ(only<Reform>(a).live, (V{1}));  // replica 1 alone at once
  const auto stopped = all_of<StopRanks>(a);
  ASSERT_EQ(stopped.size(), 2u);
  EXPECT_EQ(stopped[1].replica, 2u) << "replica 2 leaves the hand-off from replica 0";
  m.rank_out(4, 2.1);
  a = m.rank_out(5, 2.1);
  const auto reforms = all_of<Reform>(a);
  ASSERT_EQ(reforms.size(), 1u);
  EXPECT_EQ(reforms[0].rejoining, (V{2}));
  EXPECT_EQ(reforms[0].donor, 1u);  // and replica 2 takes its state instead
  EXPECT_EQ(reforms[0].live, (V{1, 2}));
}

TEST(Contained, TheDonorFailingWithNoOtherHealthyReplicaRunsTheExactRound) {
  Machine m(replicas_of_two(2), {});
  stop_and_replace(m, 1, 1);
  const auto a = m.fault(1, Machine::FaultKind::process_ended, "donor killed", 2);
  EXPECT_EQ(all_of<ExactRound>(a).size(), 1u);
  EXPECT_TRUE(m.exact());
}

}  // namespace
}  // namespace sigma::runtime::agent::contained

namespace sigma::runtime::agent::contained {
namespace {

// A rank whose collective broke reports before the agent sees the fault
// behind it (a peer's process ending): its replica stops with it out but
// not lost, and the rank the fault then takes is the one replaced.
TEST(Contained, AReportBeforeItsPeersFaultStopsTheReplicaAndLosesOnlyThePeer) {
  Machine m(replicas_of_two(2), {});
  m.step_done(10, 1);
  auto a = m.reported(3, "rank 3 reported: the collective failed", 2);
  EXPECT_EQ(only<StopRanks>(a).replica, 1u);
  EXPECT_TRUE(all_of<ReplaceRank>(a).empty()) << "the reporting rank is alive";
  EXPECT_EQ(only<Reform>(a).live, (V{0}));
  EXPECT_EQ(m.stage(1), Stage::stopping);
  a = m.fault(2, Machine::FaultKind::process_ended, "killed", 2.1);
  EXPECT_EQ(only<ReplaceRank>(a).rank, 2u);
  EXPECT_TRUE(all_of<Reform>(a).empty()) << "the live set is already without replica 1";
  EXPECT_EQ(m.stage(1), Stage::waiting);
  a = m.spare_ready(2, 3);
  const auto handoff = only<Reform>(a);
  EXPECT_EQ(handoff.rejoining, (V{1}));
  EXPECT_EQ(handoff.donor, 0u);
}

// A report with nothing lost: the replica takes a donor's state at once.
TEST(Contained, AReplicaStoppedByReportsAloneIsHandedStateWithNoSpare) {
  Machine m(replicas_of_two(2), {});
  m.step_done(4, 1);
  m.reported(0, "rank 0 reported", 2);
  const auto a = m.reported(1, "rank 1 reported", 2.1);
  EXPECT_EQ(only<Reform>(a).rejoining, (V{0}));
  EXPECT_EQ(only<Reform>(a).donor, 1u);
  EXPECT_EQ(m.stage(0), Stage::handing);
}

// A rank that reports during its hand-off (its groups could not form):
// the hand-off is void, its replica's ranks are stopped and handed state
// again; the last healthy replica reporting runs the exact round.
TEST(Contained, AReportInTheHandOffVoidsItAndTheLastHealthyReplicasReportFallsBack) {
  Machine m(replicas_of_two(2), {});
  m.step_done(4, 1);
  stop_and_replace(m, 1, 2);
  ASSERT_EQ(m.stage(1), Stage::handing);
  auto a = m.reported(2, "rank 2 reported: no hand-off", 3);
  EXPECT_EQ(only<StopRanks>(a).replica, 1u);
  EXPECT_EQ(m.stage(1), Stage::stopping);
  EXPECT_EQ(only<Reform>(a).live, (V{0})) << "a new epoch over the live set supersedes the rejoin";
  m.rank_out(3, 3.1);
  EXPECT_EQ(m.stage(1), Stage::handing) << "nothing lost: handed state again";
  m.reported(0, "rank 0 reported", 4);
  EXPECT_TRUE(m.exact());
}

}  // namespace
}  // namespace sigma::runtime::agent::contained
