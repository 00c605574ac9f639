// A follower agent's decisions (pure logic: read from src/): the root's
// messages, its workers' ends and the clock in, the exact commands out.
#include "runtime/agent/follower.hpp"
#include "runtime/agent/job_exit.hpp"

#include <gtest/gtest.h>

#include <csignal>

namespace sigma::runtime::agent {
namespace {

using namespace follow;

template <class C>
std::vector<C> all(const Commands& cs) {
  std::vector<C> out;
  for (const auto& c : cs)
    if (const auto* x = std::get_if<C>(&c)) out.push_back(*x);
  return out;
}

template <class M>
std::vector<M> to_root(const Commands& cs) {
  std::vector<M> out;
  for (const auto& r : all<ToRoot>(cs))
    if (const auto* m = std::get_if<M>(&r.message)) out.push_back(*m);
  return out;
}

// A follower with device 3's worker started as pid 300.
Follower started_one() {
  Follower f(1);
  f.connected(42);
  f.message(protocol::Spawn{3, {{"SIGMA_RANK", "1"}}}, 0);
  f.started(3, 300);
  return f;
}

TEST(Follower, ItGreetsTheRootAsItsNodeWithItsPid) {
  Follower f(2);
  const Commands c = f.connected(42);
  ASSERT_EQ(c.size(), 2u);
  const auto hello = to_root<protocol::NodeHello>(c);
  ASSERT_EQ(hello.size(), 1u);
  EXPECT_EQ(hello[0].version, protocol::kVersion);
  EXPECT_EQ(hello[0].node, 2u);
  EXPECT_EQ(hello[0].pid, 42);
  EXPECT_EQ(all<Note>(c)[0].entry["event"], "joined_root");
}

TEST(Follower, AWorkerStartsWithOnlyTheEnvironmentAFollowerLetsThrough) {
  Follower f(1);
  const Commands c =
      f.message(protocol::Spawn{3, {{"SIGMA_RANK", "1"}, {"LD_PRELOAD", "/tmp/evil.so"}, {"PATH", "/x"}}}, 0);
  ASSERT_EQ(c.size(), 2u);
  const auto notes = all<Note>(c);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].entry["event"], "refused_env");
  EXPECT_EQ(notes[0].entry["names"], nlohmann::json({"LD_PRELOAD", "PATH"}));
  const auto start = all<StartWorker>(c);
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].device, 3u);
  EXPECT_EQ(start[0].env, (EnvList{{"SIGMA_RANK", "1"}}));
  EXPECT_EQ(f.workers(), 0u) << "a worker counts once the host has started it";
}

TEST(Follower, EveryLaunchAndEveryEndIsToldToTheRoot) {
  Follower f(1);
  const Commands launched = f.started(3, 300);
  const auto l = to_root<protocol::Launched>(launched);
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].device, 3u);
  EXPECT_EQ(l[0].pid, 300);
  EXPECT_EQ(f.workers(), 1u);
  EXPECT_TRUE(f.exited(301, protocol::ProcessEnd::of_wait_status(0)).empty()) << "not a worker";
  const Commands ended = f.exited(300, {protocol::ProcessEnd::How::signalled, SIGKILL, {}});
  const auto e = to_root<protocol::Exited>(ended);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].device, 3u);
  EXPECT_EQ(e[0].end.how, protocol::ProcessEnd::How::signalled);
  EXPECT_EQ(e[0].end.code, SIGKILL);
  EXPECT_EQ(all<Note>(ended)[0].entry["status"], "killed by signal Killed");
  EXPECT_EQ(f.workers(), 0u);
  // One that could not be started is an end too, with the reason.
  const auto ns = to_root<protocol::Exited>(f.not_started(4, "no such program"));
  ASSERT_EQ(ns.size(), 1u);
  EXPECT_EQ(ns[0].device, 4u);
  EXPECT_EQ(ns[0].end.how, protocol::ProcessEnd::How::not_started);
  EXPECT_EQ(ns[0].end.words, "no such program");
}

TEST(Follower, AKillReachesOnlyTheNamedDevicesWorker) {
  Follower f = started_one();
  f.started(5, 500);
  const auto s = all<SignalPid>(f.message(protocol::Kill{5, SIGTERM}, 1));
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].pid, 500);
  EXPECT_EQ(s[0].signal, SIGTERM);
  EXPECT_TRUE(f.message(protocol::Kill{9, SIGKILL}, 1).empty()) << "no worker of device 9 here";
}

TEST(Follower, AfterTheGoodbyeItEndsWithTheRootsCodeOnceItsWorkersAreGone) {
  Follower f = started_one();
  const Commands bye = f.message(protocol::NodeGoodbye{3, "paused: no spare left"}, 100);
  EXPECT_EQ(all<Note>(bye)[0].entry["reason"], "paused: no spare left");
  EXPECT_EQ(f.code(), 3);
  EXPECT_FALSE(f.over()) << "its worker is still there";
  EXPECT_TRUE(f.tick(100 + Follower::kGoodbyeGrace_s - 0.5).empty()) << "the worker has time to leave";
  const auto k = all<SignalPid>(f.tick(100 + Follower::kGoodbyeGrace_s + 0.5));
  ASSERT_EQ(k.size(), 1u);
  EXPECT_EQ(k[0].pid, 300);
  EXPECT_EQ(k[0].signal, SIGKILL);
  f.exited(300, {protocol::ProcessEnd::How::signalled, SIGKILL, {}});
  EXPECT_TRUE(f.over());
  EXPECT_EQ(f.code(), 3);
  EXPECT_TRUE(f.root_closed(120).empty()) << "the root closing after its goodbye is no loss";
}

TEST(Follower, ALostRootKillsTheWorkersAtOnceAndTheJobIsUnrecoverableHere) {
  Follower f = started_one();
  const Commands c = f.root_closed(7);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(all<Note>(c)[0].entry["event"], "root_lost");
  const auto k = all<SignalPid>(c);
  ASSERT_EQ(k.size(), 1u);
  EXPECT_EQ(k[0].pid, 300);
  EXPECT_EQ(k[0].signal, SIGKILL);
  EXPECT_EQ(f.code(), job_exit::unrecoverable);
  EXPECT_FALSE(f.over());
  f.exited(300, {protocol::ProcessEnd::How::signalled, SIGKILL, {}});
  EXPECT_TRUE(f.over());
}

TEST(Follower, ARootMessageThatDoesNotDecodeIsJournalledAndChangesNothing) {
  Follower f = started_one();
  const Commands c = f.bad_message("protocol: spawn.device: missing", "{\"type\":\"spawn\"}");
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(all<Note>(c)[0].entry["event"], "bad_message");
  EXPECT_EQ(all<Note>(c)[0].entry["message"], "{\"type\":\"spawn\"}");
  EXPECT_EQ(f.code(), -1);
  EXPECT_EQ(f.workers(), 1u);
}

}  // namespace
}  // namespace sigma::runtime::agent
