// sigmarun with real processes: a deterministic data-parallel worker killed
// (SIGKILL), hung (SIGSTOP), moved off a device that the sim vendor heats
// toward failure, and run out of spares. Every recovered run must end with
// exactly the bytes of a fault-free run.
#include <sigma/agent.hpp>
#include <sigma/bootstrap.hpp>
#include <sigma/checkpoint.hpp>
#include <sigma/sim.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "job_harness.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr uint64_t kSteps = 160;

// A sigmarun job in `dir` (a new one, or a rerun in the folder of one that
// paused), waited for.
JobRun run_in(const std::string& dir, std::vector<std::string> agent_args,
              std::vector<std::string> worker_args, const std::string& worker = RUNTIME_WORKER) {
  return run_job(dir, std::move(agent_args), std::move(worker_args), worker);
}

JobRun sigmarun(const std::string& name, std::vector<std::string> agent_args,
                std::vector<std::string> worker_args, const std::string& worker = RUNTIME_WORKER) {
  return run_in(job_dir(name), std::move(agent_args), std::move(worker_args), worker);
}

// A connection to the agent's socket in job folder `dir`, as any local
// process could make one; -1 when it cannot connect.
int connect_agent(const std::string& dir) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s/agent.sock", dir.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::vector<std::string> finals(const JobRun& r, uint32_t world) {
  std::vector<std::string> out;
  for (uint32_t k = 0; k < world; ++k)
    out.push_back(read_file(r.dir + "/final-rank-" + std::to_string(k) + ".bin"));
  return out;
}

const json* find_event(const JobRun& r, const std::string& event, const std::string& key = "",
                       const json& value = {}) {
  for (const auto& j : r.journal) {
    if (j.value("event", "") == event && (key.empty() || j.value(key, json()) == value)) return &j;
  }
  return nullptr;
}

// An independent fault-free reference for a job that went on with fewer
// ranks from step `from`: three ranks train to `from` and checkpoint it,
// then `world` ranks resume from that checkpoint and train to the end.
std::vector<std::string> clean_run_shrunk_at(const std::string& name, uint64_t from, uint32_t world) {
  const std::string dir = job_dir(name);
  const JobRun first =
      run_in(dir, {"--nproc", "3", "--spares", "0", "--checkpoint-every", std::to_string(from)},
             {"--steps", std::to_string(from)});
  EXPECT_EQ(first.exit_code, 0) << logs(first);
  const JobRun rest =
      run_in(dir, {"--nproc", std::to_string(world), "--spares", "0"}, {"--steps", std::to_string(kSteps)});
  EXPECT_EQ(rest.exit_code, 0) << logs(rest);
  const json* resumed = find_event(rest, "resumed");
  EXPECT_TRUE(resumed != nullptr && (*resumed)["index"] == from) << logs(rest);
  return finals(rest, world);
}

// A scenario file for this test, removed when it passes.
std::string scenario_file(const std::string& name, const std::string& faults) {
  const std::string path = ::testing::TempDir() + name + "-" + std::to_string(::getpid()) + ".yaml";
  g_dirs.push_back(path);
  std::ofstream(path) << "seed: 7\nduration_s: 3600\nworld_size: 5\nfaults:\n" << faults;
  return path;
}

// The CLOCK_MONOTONIC stamp a runtime_worker --log file holds from just
// before the worker signalled itself ("kill T"; the others are "step N T");
// -1 when there is none.
double signal_stamp(const std::string& log_file) {
  std::istringstream log(read_file(log_file));
  double stamp = -1;
  for (std::string what; log >> what;) {
    double t = 0;
    log >> t;
    if (what == "kill")
      stamp = t;
    else
      log >> t;
  }
  return stamp;
}

class Sigmarun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    JobRun r = sigmarun("baseline", {"--nproc", "3", "--spares", "1"}, {"--steps", std::to_string(kSteps)});
    ASSERT_EQ(r.exit_code, 0) << logs(r);
    baseline_wall_s_ = r.wall_s;
    baseline_ = new std::vector<std::string>(finals(r, 3));
    ASSERT_EQ((*baseline_)[0].size(), 2 * 4096 * sizeof(float));
    EXPECT_EQ((*baseline_)[0], (*baseline_)[1]) << "data-parallel replicas agree";
    EXPECT_EQ((*baseline_)[0], (*baseline_)[2]);
  }
  static void TearDownTestSuite() {
    delete baseline_;
    baseline_ = nullptr;
  }
  static void expect_exact(const JobRun& r) {
    ASSERT_NE(baseline_, nullptr);
    const auto f = finals(r, 3);
    for (uint32_t k = 0; k < 3; ++k)
      EXPECT_TRUE(f[k] == (*baseline_)[k]) << "rank " << k << " differs from the fault-free run";
  }
  // The job ended well, its last incident restored step `index` from disk
  // with nothing refused by the disk, and its end is the fault-free one's.
  static void expect_restored_from_disk(const JobRun& r, uint64_t index) {
    ASSERT_EQ(r.exit_code, 0) << logs(r);
    ASSERT_GE(r.report["incidents"].size(), 1u) << logs(r);
    const json& inc = r.report["incidents"].back();
    EXPECT_EQ(inc["restore"], "disk") << logs(r);
    EXPECT_EQ(inc["index"], index) << logs(r);
    EXPECT_EQ(find_event(r, "storage_failed"), nullptr) << logs(r);
    expect_exact(r);
  }
  static std::vector<std::string>* baseline_;
  static double baseline_wall_s_;  // the fault-free run's wall time, agent start to end

 public:
  static double clean_wall_s() { return baseline_wall_s_; }
  static void expect_exact_of(const JobRun& r) { expect_exact(r); }
};

std::vector<std::string>* Sigmarun::baseline_ = nullptr;
double Sigmarun::baseline_wall_s_ = 0;

TEST_F(Sigmarun, AFaultFreeRunReportsDoneWithNoIncidents) {
  JobRun r = sigmarun("clean", {"--nproc", "3", "--spares", "1", "--failure-rate", "0.001"},
                      {"--steps", std::to_string(kSteps)});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  EXPECT_EQ(r.report["status"], "done");
  EXPECT_EQ(r.report["steps"], kSteps);
  EXPECT_TRUE(r.report["incidents"].empty());
  EXPECT_EQ(r.report["generations"], 1);
  EXPECT_GT(r.report["ledger"]["idle_spares_device_s"].get<double>(), 0);
  EXPECT_NE(r.report["spare_advice"]["rule"].get<std::string>().find("Poisson"), std::string::npos);
  // What the agent read: every rank's step figures, heartbeats every 0.1 s
  // from each of the four workers (the spare too) for most of the run, and
  // the rates over the run's wall time.
  const json& in = r.report["control_plane"]["inbound"];
  EXPECT_GE(in["by_type"]["step"].get<uint64_t>(), 3 * kSteps) << in.dump(1);
  EXPECT_GE(in["by_type"]["hello"].get<uint64_t>(), 4u) << in.dump(1);
  const double wall = in["wall_s"].get<double>();
  EXPECT_GE(in["by_type"]["heartbeat"].get<double>(), 4 * 0.5 * wall / 0.1) << in.dump(1);
  EXPECT_EQ(in["by_source"]["workers"]["messages"], in["messages"]) << in.dump(1);  // one host
  EXPECT_GT(in["bytes"].get<uint64_t>(), 50 * in["messages"].get<uint64_t>()) << in.dump(1);
  EXPECT_NEAR(in["messages_per_s"].get<double>(), in["messages"].get<double>() / wall, 1e-6);
  expect_exact(r);
}

TEST_F(Sigmarun, AKilledWorkerIsReplacedByASpareFromTheMemoryTierWithinFiveSeconds) {
  // The worker stamps CLOCK_MONOTONIC just before it kills itself; the
  // agent's times count from clock_origin_monotonic_s. Detection and
  // recovery are measured from that stamp, not from the agent's own reap.
  const std::string dir = job_dir("kill");
  JobRun r = run_in(
      dir, {"--nproc", "3", "--spares", "1"},
      {"--steps", std::to_string(kSteps), "--kill-at", "60", "--kill-device", "1", "--log", dir + "/worker"});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  ASSERT_EQ(r.report["incidents"].size(), 1u) << logs(r);
  const json& inc = r.report["incidents"][0];
  EXPECT_EQ(inc["restore"], "memory") << logs(r);
  EXPECT_LE(inc["recomputed_steps"].get<uint64_t>(), 1u);
  const double kill_t = signal_stamp(dir + "/worker.d1");
  ASSERT_GT(kill_t, 0) << "the killed worker left no kill stamp";
  const double origin = r.report["clock_origin_monotonic_s"].get<double>();
  const double detected = origin + inc["detected_s"].get<double>() - kill_t;
  const double back =
      origin + inc["fault_s"].get<double>() + inc["back_at_reached_step_s"].get<double>() - kill_t;
  EXPECT_GT(detected, 0.0);
  EXPECT_LT(detected, 0.5);
  EXPECT_LT(back, 5.0);
  const json* replace = find_event(r, "scheduler", "action", "replace");
  ASSERT_NE(replace, nullptr);
  EXPECT_EQ((*replace)["rank"], 1);
  EXPECT_EQ((*replace)["to_device"], 3);
  expect_exact(r);
  expect_replayed(r);
}

// Session::wait_for_rank, as a torch.distributed program uses it: the rank
// before the state, a collective on a fresh start's communicator before
// join; the spare that replaces a killed rank learns its rank with the
// restore still pending, and the job ends exact.
TEST_F(Sigmarun, AWorkerThatAsksItsRankBeforeItsStateIsReplacedFromMemoryBitExactly) {
  const std::string dir = job_dir("rankfirst");
  JobRun r =
      run_in(dir, {"--nproc", "3", "--spares", "1"},
             {"--steps", std::to_string(kSteps), "--wait-for-rank", "--kill-at", "60", "--kill-device", "1"});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  ASSERT_EQ(r.report["incidents"].size(), 1u) << logs(r);
  EXPECT_EQ(r.report["incidents"][0]["restore"], "memory") << logs(r);
  EXPECT_NE(read_file(dir + "/logs/device-0.log").find("rank 0 of 3 before join, restore none"),
            std::string::npos)
      << logs(r);
  EXPECT_NE(read_file(dir + "/logs/device-3.log").find("rank 1 of 3 before join, restore pending"),
            std::string::npos)
      << logs(r);
  expect_exact(r);
}

// Session::run carries out a rollback the step decides: every rank goes
// back to its own snapshot and the window's data is never trained on again
// (the result differs from the fault-free run's), the items kept on
// rollback stay, the others come back, and it all travels with the state:
// a crash after the rollback ends with the uncrashed run's bytes, the
// spare that took the rank skipping the same window and counting the same
// steps.
TEST_F(Sigmarun, ARollbackTheLoopDecidesSkipsItsDataEverywhereAndSurvivesACrashBitExactly) {
  const std::vector<std::string> agent{"--nproc", "3", "--spares", "1", "--snapshot-keep", "8"};
  const std::vector<std::string> worker{"--steps", std::to_string(kSteps), "--rollback-at",
                                        "30",      "--rollback-to",        "26"};
  const JobRun rolled = sigmarun("loop-rollback", agent, worker);
  ASSERT_EQ(rolled.exit_code, 0) << logs(rolled);
  auto killed_args = worker;
  killed_args.insert(killed_args.end(), {"--kill-at", "50", "--kill-device", "1"});
  const JobRun killed = sigmarun("loop-rollback-kill", agent, killed_args);
  ASSERT_EQ(killed.exit_code, 0) << logs(killed);
  ASSERT_EQ(killed.report["incidents"].size(), 1u) << logs(killed);
  EXPECT_EQ(killed.report["incidents"][0]["restore"], "memory") << logs(killed);

  const auto a = finals(rolled, 3), b = finals(killed, 3);
  ASSERT_NE(baseline_, nullptr);
  EXPECT_FALSE(a[0] == (*baseline_)[0])
      << "the skipped batches changed nothing: was the rollback carried out?";
  EXPECT_EQ(a[0], a[1]);
  for (uint32_t k = 0; k < 3; ++k) {
    EXPECT_TRUE(a[k] == b[k]) << "rank " << k << " differs from the uncrashed rollback run";
    for (const JobRun* r : {&rolled, &killed})
      EXPECT_EQ(read_file(r->dir + "/items-rank-" + std::to_string(k) + ".txt"),
                "applied " + std::to_string(kSteps) + " rolled 1\n")
          << "rank " << k << " of " << r->dir;
  }
  // The rollback is said with the next finished step, on rank 0's series.
  EXPECT_NE(rolled.report.dump().find("rolled back: the test's rollback"), std::string::npos)
      << rolled.report.dump(1);
}

// The worker stamps CLOCK_MONOTONIC just before it stops itself (SIGSTOP):
// detection is measured from that stamp, as the kill test does, not from
// the agent's own idea of when the fault began.
TEST_F(Sigmarun, AHungWorkerIsFoundWithinTheHeartbeatTimeoutAndReplaced) {
  const std::string dir = job_dir("hang");
  JobRun r = run_in(dir, {"--nproc", "3", "--spares", "1", "--heartbeat-timeout", "1"},
                    {"--steps", std::to_string(kSteps), "--kill-at", "60", "--kill-device", "2",
                     "--kill-signal", "STOP", "--log", dir + "/worker"});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  ASSERT_EQ(r.report["incidents"].size(), 1u) << logs(r);
  const json& inc = r.report["incidents"][0];
  EXPECT_NE(inc["cause"].get<std::string>().find("hung"), std::string::npos) << inc.dump();
  const double stop_t = signal_stamp(dir + "/worker.d2");
  ASSERT_GT(stop_t, 0) << "the stopped worker left no stamp";
  const double origin = r.report["clock_origin_monotonic_s"].get<double>();
  const double detected = origin + inc["detected_s"].get<double>() - stop_t;
  // The 1 s timeout counts from the last heartbeat, up to one 0.1 s period
  // before the stop; then one poll of the agent.
  EXPECT_GT(detected, 0.8);
  EXPECT_LT(detected, 1.0 + 0.5);
  EXPECT_LT(origin + inc["fault_s"].get<double>() + inc["back_at_reached_step_s"].get<double>() - stop_t,
            1.0 + 0.5 + 2.0);
  EXPECT_EQ(inc["restore"], "memory");
  expect_exact(r);
}

TEST_F(Sigmarun, TwoFaultsCloseTogetherFallBackToDiskAndStillEndExact) {
  // Ranks 1 and 2 die together, right after the same all-reduce: rank 1's
  // memory replica was on rank 2, so its state is only on disk.
  JobRun r =
      sigmarun("two", {"--nproc", "3", "--spares", "2", "--checkpoint-every", "20"},
               {"--steps", std::to_string(kSteps), "--kill-at", "70", "--kill-device", "1",
                "--kill-after-reduce", "--kill-at", "70", "--kill-device", "2", "--kill-after-reduce"});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  ASSERT_GE(r.report["incidents"].size(), 1u);
  bool disk = false;
  for (const auto& inc : r.report["incidents"]) disk |= inc.value("restore", "") == "disk";
  EXPECT_TRUE(disk) << logs(r);
  expect_exact(r);
}

// Ring neighbours 1 and 2 lose their devices in the same collective, step
// 40's all-reduce (the collectives before step k: 6, then 5 a step), just
// after the checkpoint of step 40 was written: rank 1's memory replica died
// with rank 2, so the newest complete disk checkpoint must be used, whoever
// holds the rank now (rank 1's replacement reported before rank 2 failed).
TEST_F(Sigmarun, NeighboursLostInTheSameCollectiveRestoreTheNewestCompleteDiskCheckpoint) {
  for (const bool async : {false, true}) {
    SCOPED_TRACE(async ? "asynchronous checkpoints" : "synchronous checkpoints");
    const std::string name = async ? "lost2-async" : "lost2";
    std::vector<std::string> args{"--nproc", "3", "--spares", "2", "--checkpoint-every", "20"};
    if (async) args.push_back("--checkpoint-async");
    JobRun r = sigmarun(name,
                        args + on_sim(scenario_file(name,
                                                    "  - {kind: device_lost, device: 1, at_op: 206}\n"
                                                    "  - {kind: device_lost, device: 2, at_op: 206}\n")),
                        {"--steps", std::to_string(kSteps)});
    // Every rank's shard of step 40 was written before its all-reduce
    // (asynchronous: made durable before a rank reports), so step 40 is
    // the newest one every rank holds, and saved again after the restore.
    expect_restored_from_disk(r, 40);
  }
}

// The same, with the survivor slow to write its shard of step 40 (it
// pauses 2 s before its step ends): ranks 1 and 2 have written theirs,
// enter step 40's all-reduce, lose their devices and report before rank 0's
// shard is there. Each rank speaks for its own shard, so step 40 is still
// the newest every rank holds; and the steps after it are discarded before
// they run again, so that their checkpoints are written anew, not refused
// as existing.
TEST_F(Sigmarun, ASurvivorSlowToWriteItsShardStillRestoresTheStepItsLostPeersWrote) {
  const std::vector<std::string> agent{"--nproc",          "3",   "--spares", "2", "--checkpoint-every", "20",
                                       "--snapshot-every", "1000"};
  JobRun r = sigmarun("lost2-slow",
                      agent + on_sim(scenario_file("lost2-slow",
                                                   "  - {kind: device_lost, device: 1, at_op: 46}\n"
                                                   "  - {kind: device_lost, device: 2, at_op: 46}\n")),
                      {"--steps", std::to_string(kSteps), "--kill-at", "39", "--kill-device", "0",
                       "--kill-after-reduce", "--kill-delay-ms", "2000", "--kill-signal", "NONE"});
  EXPECT_EQ(r.report["incidents"].size(), 1u) << logs(r);
  expect_restored_from_disk(r, 40);
}

// The same with a memory snapshot every step and asynchronous checkpoints:
// rank 0's half of step 40's snapshot exchange (op 203, the second size
// swap) hangs after its peers have theirs, so they post the exchange, save
// their shards and lose their devices in step 40's all-reduce while rank
// 0 still waits. The abort ends rank 0's exchange; its step is done all
// the same, so it saves its shard of step 40 before it reports, and step
// 40 is restored.
TEST_F(Sigmarun, ASurvivorWhoseSnapshotExchangeFailsStillSavesTheStepItFinished) {
  const std::vector<std::string> agent{"--nproc",           "3", "--spares", "2", "--checkpoint-every", "20",
                                       "--checkpoint-async"};
  JobRun r = sigmarun("lost2-exchange",
                      agent + on_sim(scenario_file("lost2-exchange",
                                                   "  - {kind: hang, device: 0, at_op: 203}\n"
                                                   "  - {kind: device_lost, device: 1, at_op: 206}\n"
                                                   "  - {kind: device_lost, device: 2, at_op: 206}\n")),
                      {"--steps", std::to_string(kSteps)});
  EXPECT_EQ(r.report["incidents"].size(), 1u) << logs(r);
  expect_restored_from_disk(r, 40);
}

// Rank 2 dies before writing its shard of step 40, rank 1 just after
// writing its own (no memory snapshot since step 0, so neither lost rank's
// state is in a peer's memory): step 20 is the newest every rank holds, and
// ranks 0 and 1 hold shards of step 40 that describe steps about to run
// again. They are discarded with the restore, and step 40 is saved anew.
TEST_F(Sigmarun, AStepOnlySomeRanksWroteIsDiscardedWithTheRestoreAndSavedAgain) {
  JobRun r = sigmarun("partial40",
                      {"--nproc", "3", "--spares", "2", "--checkpoint-every", "20", "--snapshot-every",
                       "1000", "--checkpoint-keep", "100"},
                      {"--steps", std::to_string(kSteps), "--kill-at", "39", "--kill-device", "2",
                       "--kill-after-reduce", "--kill-at", "40", "--kill-device", "1"});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  ASSERT_EQ(r.report["incidents"].size(), 1u) << logs(r);
  const json& inc = r.report["incidents"].back();
  EXPECT_EQ(inc["restore"], "disk") << logs(r);
  EXPECT_EQ(inc["index"], 20) << logs(r);
  EXPECT_EQ(find_event(r, "storage_failed"), nullptr) << logs(r);
  for (int k = 0; k < 3; ++k)
    EXPECT_TRUE(fs::exists(r.dir + "/checkpoints/sigmarun/step-00000000000000000040/rank-0000" +
                           std::to_string(k) + "/manifest.sgck"))
        << k;
  expect_exact(r);
}

// One after the other: each is restored from memory, because a
// replacement snapshots in its first step, so that its ring successor
// holds a replica of it again.
TEST_F(Sigmarun, NeighboursLostOneAfterTheOtherAreBothRestoredFromMemory) {
  JobRun r = sigmarun("apart", {"--nproc", "3", "--spares", "2", "--checkpoint-every", "1000"},
                      {"--steps", std::to_string(kSteps), "--kill-at", "60", "--kill-device", "2",
                       "--kill-at", "62", "--kill-device", "1"});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  ASSERT_EQ(r.report["incidents"].size(), 2u) << logs(r);
  for (const auto& inc : r.report["incidents"]) EXPECT_EQ(inc.value("restore", ""), "memory") << logs(r);
  expect_exact(r);
}

// Four ranks in declared nodes of two (ranks 0,1 | 2,3 | spares 4,5): the
// memory tier keeps each rank's replica in the other node, so losing a
// whole node -- both devices in the same collective, or both processes
// killed in the same step -- restores both of its ranks from memory, with
// no disk, bit for bit as a fault-free run of four.
TEST_F(Sigmarun, AWholeDeclaredNodeLostAtOnceIsRestoredFromTheReplicasInAnotherNode) {
  const std::vector<std::string> agent{
      "--nproc", "4", "--spares", "2", "--devices-per-node", "2", "--checkpoint-every", "1000"};
  const std::vector<std::string> steps{"--steps", std::to_string(kSteps)};
  const JobRun clean = sigmarun("node-clean", agent, steps);
  ASSERT_EQ(clean.exit_code, 0) << logs(clean);
  const std::string scenario = ::testing::TempDir() + "node-lost-" + std::to_string(::getpid()) + ".yaml";
  g_dirs.push_back(scenario);
  std::ofstream(scenario) << "seed: 7\nduration_s: 3600\nworld_size: 6\nfaults:\n"
                             "  - {kind: device_lost, device: 2, at_op: 206}\n"
                             "  - {kind: device_lost, device: 3, at_op: 206}\n";
  const JobRun lost = sigmarun("node-lost", agent + on_sim(scenario), steps);
  const JobRun killed = sigmarun("node-killed", agent,
                                 steps + std::vector<std::string>{"--kill-at", "60", "--kill-device", "2",
                                                                  "--kill-at", "60", "--kill-device", "3"});
  for (const JobRun* r : {&lost, &killed}) {
    SCOPED_TRACE(r->dir);
    ASSERT_EQ(r->exit_code, 0) << logs(*r);
    ASSERT_GE(r->report["incidents"].size(), 1u) << logs(*r);
    for (const auto& inc : r->report["incidents"]) EXPECT_EQ(inc.value("restore", ""), "memory") << logs(*r);
    // Every hand-off comes from node 0's ranks to node 1's. Two processes
    // killed at the start of one step mostly die in one round; but the
    // second may be aborted before its own fault fires and lose itself in
    // the next generation (its probe, or the step once more when that round
    // was quick) -- still restored from node 0, where the ring would have
    // had only its fresh replacement.
    std::set<uint32_t> holders, receivers;
    const json* last = nullptr;
    for (const auto& j : r->journal) {
      if (j.value("event", "") != "assigned" || j.value("restore", "") != "memory") continue;
      EXPECT_EQ(j["replicas_across"], "node") << logs(*r);
      for (const auto& h : j["handoff"]) {
        holders.insert(h[0].get<uint32_t>());
        receivers.insert(h[1].get<uint32_t>());
      }
      last = &j;
    }
    ASSERT_NE(last, nullptr) << logs(*r);
    const std::set<uint32_t> node0{0, 1};
    EXPECT_TRUE(std::includes(node0.begin(), node0.end(), holders.begin(), holders.end())) << logs(*r);
    EXPECT_EQ(receivers, (std::set<uint32_t>{2, 3})) << logs(*r);
    EXPECT_EQ((*last)["domains"], json({0, 0, 2, 2})) << "ranks 2 and 3 now on the spares' node";
    EXPECT_EQ(finals(*r, 4), finals(clean, 4)) << logs(*r);
  }
}

// Without declared nodes the same double loss has no replica left (both
// copies were on the one host's ring): the tier says so in the assignment.
TEST_F(Sigmarun, OnOneUndeclaredHostTheReplicasShareItsDomainAndTheJournalSaysSo) {
  JobRun r = sigmarun("shared", {"--nproc", "3", "--spares", "1"},
                      {"--steps", "40", "--kill-at", "20", "--kill-device", "1"});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  const json* assigned = find_event(r, "assigned", "restore", "memory");
  ASSERT_NE(assigned, nullptr) << logs(r);
  EXPECT_EQ((*assigned)["replicas_across"], "shared") << logs(r);
  EXPECT_EQ((*assigned)["handoff"], json::array({json::array({2, 1})})) << "the ring successor holds it";
}

// A memory tier that does not fit the host's memory is refused before the
// first step, with its numbers, and nothing is restarted.
TEST_F(Sigmarun, AMemoryTierThatDoesNotFitTheHostIsRefusedBeforeTheJobStartsWithItsNumbers) {
  // 3 ranks x (2 own + 2 x 1 replica + 2) copies of a ~32 KiB state is over 0.5 MiB.
  JobRun r = sigmarun("unfit", {"--nproc", "3", "--spares", "1", "--tier-memory", "0.5"},
                      {"--steps", std::to_string(kSteps)});
  EXPECT_EQ(r.exit_code, 4) << logs(r);
  EXPECT_EQ(r.report["status"], "unrecoverable") << logs(r);
  const std::string why = r.report.value("reason", "");
  EXPECT_NE(why.find("the memory tier does not fit this host: its 3 rank(s) need 3 x 6 x "),
            std::string::npos)
      << logs(r);
  EXPECT_NE(why.find("SIGMA_TIER_MEMORY_BYTES is 0.5 MiB"), std::string::npos) << logs(r);
  EXPECT_EQ(find_event(r, "fault"), nullptr) << "a refusal is not a fault: " << logs(r);
  EXPECT_EQ(r.report["incidents"].size(), 0u) << logs(r);
  for (const auto& j : r.journal) EXPECT_NE(j.value("event", ""), "step") << logs(r);
}

TEST_F(Sigmarun, WithNoSpareLeftTheJobPausesAndSaysWhy) {
  JobRun r = sigmarun("nospare", {"--nproc", "3", "--spares", "0", "--checkpoint-every", "20"},
                      {"--steps", std::to_string(kSteps), "--kill-at", "50", "--kill-device", "0"});
  EXPECT_EQ(r.exit_code, 3) << logs(r);
  EXPECT_EQ(r.report["status"], "paused");
  EXPECT_NE(r.report["reason"].get<std::string>().find("no spare"), std::string::npos);
  EXPECT_NE(r.report["reason"].get<std::string>().find("the disk checkpoint of step 40 is kept"),
            std::string::npos)
      << r.report["reason"];
  ASSERT_NE(find_event(r, "paused"), nullptr);
  expect_replayed(r);
  // Nothing lost: every rank's checkpoint of step 40 is on disk ...
  for (int k = 0; k < 3; ++k) {
    EXPECT_TRUE(fs::exists(r.dir + "/checkpoints/sigmarun/step-00000000000000000040/rank-0000" +
                           std::to_string(k) + "/manifest.sgck"))
        << k;
  }
  // ... and a new run in the same folder, with a repaired device as a
  // spare, resumes from it and ends exactly where a fault-free run ends.
  const JobRun again = run_in(r.dir, {"--nproc", "3", "--spares", "1", "--checkpoint-every", "20"},
                              {"--steps", std::to_string(kSteps)});
  ASSERT_EQ(again.exit_code, 0) << logs(again);
  EXPECT_NE(read_file(r.dir + "/incidents.jsonl").find("\"event\":\"resumed\",\"from\""), std::string::npos);
  expect_exact(r);
}

// Disk checkpoints written in the background: the job still ends with the
// fault-free bytes, and the newest checkpoints of every rank are on disk.
TEST_F(Sigmarun, BackgroundDiskCheckpointsLeaveEveryRanksNewestOnDisk) {
  JobRun r = sigmarun("async-ckpt",
                      {"--nproc", "3", "--spares", "1", "--checkpoint-every", "20", "--checkpoint-async"},
                      {"--steps", std::to_string(kSteps), "--kill-at", "90", "--kill-device", "1"});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  expect_exact(r);
  for (int k = 0; k < 3; ++k) {
    EXPECT_TRUE(fs::exists(r.dir + "/checkpoints/sigmarun/step-00000000000000000160/rank-0000" +
                           std::to_string(k) + "/manifest.sgck"))
        << k;
  }
  EXPECT_EQ(r.report["storage"]["failed_saves"], 0);
}

TEST_F(Sigmarun, AJobThatAllowsItShrinksWhenNoSpareIsLeftAndNeverBelowItsFloor) {
  JobRun r = sigmarun("shrink", {"--nproc", "3", "--spares", "0", "--allow-shrink", "--min-ranks", "2"},
                      {"--steps", std::to_string(kSteps), "--kill-at", "60", "--kill-device", "1"});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  EXPECT_EQ(r.report["world"], 2);
  expect_replayed(r);
  const json* shrink = find_event(r, "scheduler", "action", "shrink");
  ASSERT_NE(shrink, nullptr) << logs(r);
  EXPECT_EQ((*shrink)["world_size"], 2);
  EXPECT_EQ(r.report["incidents"][0]["restore"], "memory");
  // Two ranks trained on from the restored step: exactly what a fault-free
  // job of three ranks to that step, then two from it, ends with.
  const uint64_t from = r.report["incidents"][0]["index"].get<uint64_t>();
  const auto f = finals(r, 2);
  ASSERT_EQ(f[0].size(), 2 * 4096 * sizeof(float));
  const auto clean = clean_run_shrunk_at("shrink-clean", from, 2);
  for (uint32_t k = 0; k < 2; ++k)
    EXPECT_TRUE(f[k] == clean[k]) << "rank " << k << " differs from the clean run";
  EXPECT_FALSE(f[0] == (*baseline_)[0]);
  // A second loss would go below the floor: paused instead.
  JobRun p = sigmarun("floor", {"--nproc", "2", "--spares", "0", "--allow-shrink", "--min-ranks", "2"},
                      {"--steps", std::to_string(kSteps), "--kill-at", "60", "--kill-device", "1"});
  EXPECT_EQ(p.exit_code, 3) << logs(p);
  EXPECT_EQ(p.report["status"], "paused");
  expect_replayed(p);
  // It took no disk checkpoint, and says so instead of promising one.
  EXPECT_NE(
      p.report["reason"].get<std::string>().find("no disk checkpoints are taken (set --checkpoint-every)"),
      std::string::npos)
      << p.report["reason"];
}

TEST_F(Sigmarun, APausedJobResumesOnFewerRanksFromItsDiskCheckpoints) {
  JobRun r = sigmarun("fewer", {"--nproc", "3", "--spares", "0", "--checkpoint-every", "20"},
                      {"--steps", std::to_string(kSteps), "--kill-at", "50", "--kill-device", "0"});
  ASSERT_EQ(r.exit_code, 3) << logs(r);
  // The devices left are two: the job goes on on two ranks from the step
  // 40 that three saved (each rank's state from the old rank of its number).
  const JobRun again = run_in(r.dir, {"--nproc", "2", "--spares", "0", "--checkpoint-every", "20"},
                              {"--steps", std::to_string(kSteps)});
  ASSERT_EQ(again.exit_code, 0) << logs(again);
  EXPECT_NE(read_file(r.dir + "/incidents.jsonl").find("\"event\":\"resumed\",\"from\""), std::string::npos);
  EXPECT_EQ(again.report["status"], "done");
  EXPECT_EQ(again.report["world"], 2);
  const auto f = finals(r, 2);
  ASSERT_EQ(f[0].size(), 2 * 4096 * sizeof(float));
  const auto clean = clean_run_shrunk_at("fewer-clean", 40, 2);
  for (uint32_t k = 0; k < 2; ++k)
    EXPECT_TRUE(f[k] == clean[k]) << "rank " << k << " differs from the clean run";
}

TEST_F(Sigmarun, AThermalRunawayIsMigratedBeforeTheDeviceFails) {
  // thermal_runaway: device 1 ramps from scenario second 30 and is lost at
  // 100; at 20 scenario seconds per second the ramp starts 1.5 s in (after
  // the job has started, even on a loaded machine) and the loss comes at
  // 5 s. Under ThreadSanitizer everything starts several times slower.
#if defined(__SANITIZE_THREAD__)
  const double scale = 8;
  const char* step_ms = "60";
#else
  const double scale = 20;
  const char* step_ms = "25";
#endif
  JobRun r = sigmarun("thermal",
                      std::vector<std::string>{"--nproc", "3", "--spares", "1", "--heartbeat", "0.05"} +
                          on_sim(std::string(SIGMA_SCENARIO_DIR) + "/thermal_runaway.yaml", scale),
                      {"--steps", std::to_string(kSteps), "--step-ms", step_ms});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  const json* mig = find_event(r, "migration_started");
  ASSERT_NE(mig, nullptr) << logs(r);
  EXPECT_EQ((*mig)["device"], 1);
  EXPECT_LT((*mig)["t"].get<double>(), 100 / scale) << "migrated after the scenario's failure time";
  const json* warn = find_event(r, "warning", "device", 1);
  ASSERT_NE(warn, nullptr);
  EXPECT_LT((*warn)["t"].get<double>(), (*mig)["t"].get<double>());
  EXPECT_EQ(r.report["incidents"][0]["proactive"], true);
  EXPECT_EQ(r.report["incidents"][0]["restore"], "memory");
  const json* move = find_event(r, "scheduler", "action", "migrate");
  ASSERT_NE(move, nullptr);
  EXPECT_EQ((*move)["to_device"], 3);
  expect_exact(r);
  expect_replayed(r);
}

// A slow or flapping link makes a job slower, never stops it: with no fault
// and no migration, the job ends as a clean run does, bitwise, within
// 1.5 x factor x the clean run's wall time.
void expect_slowed_not_stopped(const std::string& name, const std::string& faults, double factor) {
  SCOPED_TRACE(name);
  JobRun r = sigmarun(name,
                      std::vector<std::string>{"--nproc", "3", "--spares", "1", "--no-migration"} +
                          on_sim(scenario_file(name, faults)),
                      {"--steps", std::to_string(kSteps)});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  EXPECT_EQ(r.report["status"], "done");
  EXPECT_TRUE(r.report["incidents"].empty()) << logs(r);
  EXPECT_EQ(find_event(r, "fault"), nullptr) << logs(r);
  EXPECT_LT(r.wall_s, 1.5 * factor * Sigmarun::clean_wall_s())
      << "clean " << Sigmarun::clean_wall_s() << " s, slowed " << r.wall_s << " s";
  Sigmarun::expect_exact_of(r);
}

TEST_F(Sigmarun, ASlowLinkSlowsAFaultFreeJobButNeverStopsIt) {
  expect_slowed_not_stopped("slowlink", "  - {kind: slow_link, device: 2, at_s: 0, factor: 20}\n", 20);
}

TEST_F(Sigmarun, AFlappingLinkBesideASlowOneSlowsAFaultFreeJobButNeverStopsIt) {
  expect_slowed_not_stopped("flapping",
                            "  - {kind: flapping_link, device: 2, at_s: 0, period_s: 0.5, factor: 50}\n"
                            "  - {kind: slow_link, device: 3, at_s: 0, factor: 20}\n",
                            50);
}

TEST_F(Sigmarun, ASlowBandwidthLinkSlowsAFaultFreeJobButNeverStopsIt) {
  expect_slowed_not_stopped("slowbw",
                            "  - {kind: slow_bandwidth, device: 1, at_s: 0, factor: 20, gbps: 0.5}\n", 20);
}

TEST_F(Sigmarun, EveryLinkFlappingAtItsOwnPeriodSlowsAFaultFreeJobButNeverStopsIt) {
  std::string faults;
  for (int d = 0; d < 4; ++d)
    faults += "  - {kind: flapping_link, device: " + std::to_string(d) +
              ", at_s: 0, period_s: " + std::to_string(0.3 + 0.2 * d) + ", factor: 30}\n";
  expect_slowed_not_stopped("allflap", faults, 30);
}

// A real hang on a slow link is still a hang: the stopped process on the
// slowed device is found within the heartbeat bound and replaced, exactly.
TEST_F(Sigmarun, AHangOnASlowLinkIsStillFoundWithinTheHeartbeatTimeout) {
  JobRun r = sigmarun(
      "slowhang",
      std::vector<std::string>{"--nproc", "3", "--spares", "1", "--no-migration", "--heartbeat-timeout",
                               "1"} +
          on_sim(scenario_file("slowhang", "  - {kind: slow_link, device: 2, at_s: 0, factor: 20}\n")),
      {"--steps", std::to_string(kSteps), "--kill-at", "60", "--kill-device", "2", "--kill-signal", "STOP"});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  ASSERT_EQ(r.report["incidents"].size(), 1u) << logs(r);
  const json& inc = r.report["incidents"][0];
  EXPECT_NE(inc["cause"].get<std::string>().find("hung"), std::string::npos) << inc.dump();
  EXPECT_LT(inc["detected_s"].get<double>() - inc["fault_s"].get<double>(), 1.0 + 1.0);
  expect_exact(r);
}

// With migration on, a flapping link's climbing errors (5 a period, 150 a
// scenario minute, the monitor's limit 60) are an early warning: the rank
// moves to the spare before anything fails. Scenario and monitor run 20x
// the wall clock.
TEST_F(Sigmarun, AFlappingLinksWarningMovesItsRankToTheSpare) {
  JobRun r = sigmarun("flapmove",
                      std::vector<std::string>{"--nproc", "3", "--spares", "1", "--heartbeat", "0.05"} +
                          on_sim(scenario_file("flapmove",
                                               "  - {kind: flapping_link, device: 1, at_s: 0, "
                                               "period_s: 2, factor: 4}\n"),
                                 20),
                      {"--steps", std::to_string(kSteps), "--step-ms", "25"});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  const json* warn = find_event(r, "warning", "device", 1);
  ASSERT_NE(warn, nullptr) << logs(r);
  EXPECT_NE(warn->dump().find("link"), std::string::npos) << warn->dump();
  const json* move = find_event(r, "scheduler", "action", "migrate");
  ASSERT_NE(move, nullptr) << logs(r);
  EXPECT_EQ((*move)["device"], 1);
  EXPECT_EQ((*move)["to_device"], 3);
  expect_exact(r);
}

TEST_F(Sigmarun, ALostDeviceIsReplacedByASpare) {
  // The sim device 2 falls off the bus at its 100th collective (step ~19).
  const std::string scenario = ::testing::TempDir() + "lost-" + std::to_string(::getpid()) + ".yaml";
  g_dirs.push_back(scenario);
  std::ofstream(scenario) << "seed: 3\nduration_s: 60\nworld_size: 4\n"
                             "faults:\n  - {kind: device_lost, device: 2, at_op: 100}\n";
  JobRun r = sigmarun("lost", std::vector<std::string>{"--nproc", "3", "--spares", "1"} + on_sim(scenario),
                      {"--steps", std::to_string(kSteps), "--step-ms", "8"});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  ASSERT_GE(r.report["incidents"].size(), 1u) << logs(r);
  const json* f = find_event(r, "fault", "device", 2);
  ASSERT_NE(f, nullptr) << logs(r);
  const json* replace = find_event(r, "scheduler", "action", "replace");
  ASSERT_NE(replace, nullptr);
  EXPECT_EQ((*replace)["device"], 2);
  EXPECT_EQ((*replace)["to_device"], 3);
  expect_exact(r);
  expect_replayed(r);
}

TEST_F(Sigmarun, ACrashBeforeTheFirstSnapshotIsRecoveredByAFreshStart) {
  // Device 1's process crashes in its fourth collective: the admission probe
  // (op 0) and the join's probe (1) passed, the first snapshot's ring
  // exchange (2-5) is under way. No state exists anywhere yet and no step
  // has run: the restore is a fresh start, on the spare.
  const std::string scenario = ::testing::TempDir() + "early-" + std::to_string(::getpid()) + ".yaml";
  g_dirs.push_back(scenario);
  std::ofstream(scenario) << "seed: 4\nduration_s: 600\nworld_size: 4\n"
                             "faults:\n  - {kind: crash, device: 1, at_op: 3}\n";
  JobRun r = sigmarun("early", std::vector<std::string>{"--nproc", "3", "--spares", "1"} + on_sim(scenario),
                      {"--steps", std::to_string(kSteps)});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  ASSERT_EQ(r.report["incidents"].size(), 1u) << logs(r);
  EXPECT_EQ(r.report["incidents"][0]["restore"], "none") << logs(r);
  EXPECT_EQ(r.report["incidents"][0]["index"], 0) << logs(r);
  const json* replace = find_event(r, "scheduler", "action", "replace");
  ASSERT_NE(replace, nullptr) << logs(r);
  EXPECT_EQ((*replace)["device"], 1);
  expect_exact(r);
}

TEST_F(Sigmarun, SigtermStopsAtAStepBoundaryWritesTheReportAndLeavesAResumableJob) {
  const std::string dir = job_dir("sigterm");
  g_dirs.push_back(dir);
  const std::vector<std::string> agent{"--nproc", "3", "--spares", "1", "--checkpoint-every", "20"};
  std::vector<std::string> args{SIGMARUN, "--job-dir", dir, "--no-progress"};
  args.insert(args.end(), agent.begin(), agent.end());
  args.insert(args.end(), {"--", RUNTIME_WORKER, "--steps", std::to_string(kSteps), "--step-ms", "20"});
  const pid_t pid = spawn(args);
  // Stop it once the checkpoint of step 20 is complete.
  bool saved = false;
  for (int i = 0; i < 3000 && !saved; ++i) {
    for (const auto& st : sigma::checkpoint::list_steps(dir + "/checkpoints/sigmarun"))
      saved |= st.step == 20 && st.complete;
    if (!saved) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(saved) << "no checkpoint of step 20 within 30 s";
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "sigmarun died of a signal";
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  const json report = json::parse(read_file(dir + "/report.json"));
  EXPECT_EQ(report["status"], "stopped");
  const std::string why = report["reason"];
  EXPECT_NE(why.find("stopped by SIGTERM"), std::string::npos) << why;
  EXPECT_NE(why.find("is kept: rerun sigmarun in this folder to resume from it"), std::string::npos) << why;
  EXPECT_LT(report["steps"].get<uint64_t>(), kSteps);
  const std::string journal = read_file(dir + "/incidents.jsonl");
  EXPECT_NE(journal.find("\"event\":\"stop_requested\""), std::string::npos);
  EXPECT_NE(journal.find("\"event\":\"end\""), std::string::npos);
  EXPECT_FALSE(fs::exists(dir + "/agent.sock")) << "a stale socket was left";
  EXPECT_TRUE(report["incidents"].empty()) << "a requested stop is not an incident: " << report.dump();
  // A rerun in the folder resumes from the newest checkpoint and ends exact.
  const JobRun again = run_in(dir, agent, {"--steps", std::to_string(kSteps)});
  ASSERT_EQ(again.exit_code, 0) << logs(again);
  EXPECT_NE(read_file(dir + "/incidents.jsonl").find("\"event\":\"resumed\""), std::string::npos);
  expect_exact(again);
}

TEST_F(Sigmarun, AFailingDiskIsAStorageIncidentAndTheJobGoesOnFromTheMemoryTier) {
  // The checkpoint folder cannot be made: a regular file stands where it
  // would go, as a read-only or vanished mount would refuse it.
  const std::string dir = job_dir("storage");
  fs::create_directories(dir);
  std::ofstream(dir + "/checkpoints") << "not a folder\n";
  JobRun r = run_in(dir, {"--nproc", "3", "--spares", "1", "--checkpoint-every", "20"},
                    {"--steps", std::to_string(kSteps), "--kill-at", "60", "--kill-device", "1"});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  // One incident, the kill, recovered from memory: the failed saves were
  // no device fault and started no recovery.
  ASSERT_EQ(r.report["incidents"].size(), 1u) << logs(r);
  EXPECT_EQ(r.report["incidents"][0]["restore"], "memory");
  EXPECT_GE(r.report["storage"]["failed_saves"].get<uint64_t>(), 3u * (kSteps / 20 - 1)) << r.report.dump();
  EXPECT_NE(r.report["storage"]["last_error"].get<std::string>().find("checkpoints"), std::string::npos)
      << r.report.dump();
  ASSERT_NE(find_event(r, "storage_failed"), nullptr);
  expect_exact(r);
}

TEST_F(Sigmarun, ASpareThatDiesDuringItsHandOffIsReplacedAndNoSurvivorIsKilled) {
  // Device 1 is killed at step 60; the first spare (device 3) crashes in
  // its first collective of the job, the new communicator's probe. The
  // survivors' probe fails with it, and they report before or after its
  // exit is reaped; either way they wait for the next assignment and the
  // second spare (device 4) takes the rank.
  const std::string scenario = ::testing::TempDir() + "spare-dies-" + std::to_string(::getpid()) + ".yaml";
  g_dirs.push_back(scenario);
  std::ofstream(scenario) << "seed: 6\nduration_s: 600\nworld_size: 5\n"
                             "faults:\n  - {kind: crash, device: 3, at_op: 1}\n";
  JobRun r =
      sigmarun("spare-dies", std::vector<std::string>{"--nproc", "3", "--spares", "2"} + on_sim(scenario),
               {"--steps", std::to_string(kSteps), "--kill-at", "60", "--kill-device", "1"});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  for (const json& j : r.journal) {
    if (j.value("event", "") != "fault") continue;
    EXPECT_TRUE(j["device"] == 1 || j["device"] == 3) << "a healthy rank was treated as faulty: " << j.dump();
  }
  const json* to4 = find_event(r, "scheduler", "to_device", 4);
  ASSERT_NE(to4, nullptr) << logs(r);
  EXPECT_EQ((*to4)["action"], "replace");
  expect_exact(r);
}

TEST_F(Sigmarun, ASpareThatHangsInItsHandOffIsReplacedAfterTheRecoveryTimeout) {
  // Device 1 is killed at step 60; the first spare (device 3) hangs in its
  // first hand-off operation and keeps beating. Rank 0 joins the new
  // generation; the spare never does: after --recovery-timeout it is
  // replaced by the second spare, and no survivor is killed.
  const std::string scenario = ::testing::TempDir() + "spare-hangs-" + std::to_string(::getpid()) + ".yaml";
  g_dirs.push_back(scenario);
  std::ofstream(scenario) << "seed: 6\nduration_s: 600\nworld_size: 5\n"
                             "faults:\n  - {kind: hang, device: 3, at_op: 2}\n";
  JobRun r = sigmarun(
      "spare-hangs",
      std::vector<std::string>{"--nproc", "3", "--spares", "2", "--recovery-timeout", "3"} + on_sim(scenario),
      {"--steps", std::to_string(kSteps), "--kill-at", "60", "--kill-device", "1"});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  ASSERT_NE(find_event(r, "recovery_overdue"), nullptr) << logs(r);
  for (const json& j : r.journal) {
    if (j.value("event", "") != "fault") continue;
    EXPECT_TRUE(j["device"] == 1 || j["device"] == 3) << "a healthy rank was treated as faulty: " << j.dump();
    if (j["device"] == 3) {
      EXPECT_NE(j["cause"].get<std::string>().find("did not join generation"), std::string::npos) << j.dump();
    }
  }
  const json* to4 = find_event(r, "scheduler", "to_device", 4);
  ASSERT_NE(to4, nullptr) << logs(r);
  expect_exact(r);
}

TEST_F(Sigmarun, ACrashInTheLastStepAfterItsPeersFinishedIsRecoveredExactly) {
  // Device 1 dies after the all-reduce of the last step: its peers finish
  // that step, report done and wait for the goodbye. They are asked back,
  // the spare takes rank 1 from the memory tier, and the last steps since
  // the snapshot are run again; nobody is counted lost but device 1.
  // It dies 1 s after the reduce, when its peers have surely received all
  // of it: killed at once, a peer may still be waiting on it inside Gloo's
  // send, which the cpu vendor's abort does not wake (the agent then
  // replaces that peer after the abort grace, as it should, which would take
  // a second spare and a disk checkpoint).
  JobRun r = sigmarun("last-step", {"--nproc", "3", "--spares", "1", "--snapshot-every", "7"},
                      {"--steps", std::to_string(kSteps), "--kill-at", std::to_string(kSteps - 1),
                       "--kill-device", "1", "--kill-after-reduce", "--kill-delay-ms", "1000"});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  EXPECT_EQ(r.report["status"], "done");
  ASSERT_EQ(r.report["incidents"].size(), 1u) << logs(r);
  EXPECT_EQ(r.report["incidents"][0]["restore"], "memory");
  EXPECT_EQ(r.report["incidents"][0]["index"], kSteps / 7 * 7) << logs(r);
  for (const json& j : r.journal) {
    if (j.value("event", "") == "fault") {
      EXPECT_EQ(j["device"], 1) << j.dump();
    }
  }
  expect_exact(r);
}

TEST_F(Sigmarun, OnOpaqueDeviceMemoryAKilledWorkerIsRestoredFromTheMemoryTierExactly) {
  // The sim's device memory is opaque to the host (opaque=1): the worker's
  // all-reduce, the memory tier's snapshots and hand-off and the admission
  // probe all go through the HAL; a host read of a device pointer would
  // crash a worker and show as a second fault.
  std::vector<std::string> args = on_sim(SIGMA_SCENARIO_DIR "/healthy.yaml");
  args.back() += ";opaque=1";
  JobRun r = sigmarun("opaque", std::vector<std::string>{"--nproc", "3", "--spares", "1"} + args,
                      {"--steps", std::to_string(kSteps), "--kill-at", "60", "--kill-device", "1"});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  ASSERT_EQ(r.report["incidents"].size(), 1u) << logs(r);
  EXPECT_EQ(r.report["incidents"][0]["restore"], "memory");
  expect_exact(r);
}

// The C API's rollback skips its window (the result moves off the clean
// run's) and the window travels with the state: a spare that takes a rank
// after it trains on the same batches.
TEST(SigmarunC, ARollbackFromCSkipsItsDataAndAReplacementSkipsItToo) {
  const std::vector<std::string> agent{"--nproc", "2", "--spares", "1", "--snapshot-keep", "8"};
  JobRun clean = sigmarun("c-rb-clean", agent, {"120"}, RUNTIME_C_WORKER);
  JobRun rolled = sigmarun("c-rb", agent, {"120", "-1", "0", "30", "26"}, RUNTIME_C_WORKER);
  JobRun killed = sigmarun("c-rb-kill", agent, {"120", "60", "1", "30", "26"}, RUNTIME_C_WORKER);
  for (const JobRun* r : {&clean, &rolled, &killed}) ASSERT_EQ(r->exit_code, 0) << logs(*r);
  ASSERT_EQ(killed.report["incidents"].size(), 1u) << logs(killed);
  EXPECT_FALSE(finals(rolled, 2) == finals(clean, 2)) << "the rollback skipped nothing";
  EXPECT_TRUE(finals(killed, 2) == finals(rolled, 2)) << "the replacement trained on other batches";
}

TEST(SigmarunC, AWorkerWrittenInCRecoversFromAKillExactly) {
  JobRun clean = sigmarun("c-clean", {"--nproc", "2", "--spares", "1"}, {"120"}, RUNTIME_C_WORKER);
  ASSERT_EQ(clean.exit_code, 0) << logs(clean);
  JobRun killed = sigmarun("c-kill", {"--nproc", "2", "--spares", "1"}, {"120", "50", "1"}, RUNTIME_C_WORKER);
  ASSERT_EQ(killed.exit_code, 0) << logs(killed);
  ASSERT_EQ(killed.report["incidents"].size(), 1u);
  EXPECT_EQ(killed.report["incidents"][0]["restore"], "memory");
  const auto a = finals(clean, 2), b = finals(killed, 2);
  ASSERT_EQ(a[0].size(), 2048 * sizeof(float));
  EXPECT_TRUE(a == b);
}

// A C worker's failed call passes its status to the recovery
// (sigma_session_recover_status): the agent reads HAL_ERR_DEVICE_LOST from
// it, never from words, replaces the device at once, and the result is the
// fault-free run's.
TEST(SigmarunC, AWorkerWrittenInCTellsALostDeviceByItsStatus) {
  const std::vector<std::string> agent{"--nproc", "2", "--spares", "1"};
  JobRun clean = sigmarun("c-sim-clean", agent + on_sim(scenario_file("c-sim-clean", "  []\n")), {"120"},
                          RUNTIME_C_WORKER);
  ASSERT_EQ(clean.exit_code, 0) << logs(clean);
  JobRun lost = sigmarun(
      "c-sim-lost",
      agent + on_sim(scenario_file("c-sim-lost", "  - {kind: device_lost, device: 1, at_op: 100}\n")),
      {"120"}, RUNTIME_C_WORKER);
  ASSERT_EQ(lost.exit_code, 0) << logs(lost);
  const json* f = find_event(lost, "fault", "device", 1);
  ASSERT_NE(f, nullptr) << logs(lost);
  EXPECT_EQ((*f)["cause"].get<std::string>().rfind("the device reports itself lost: device_lost: ", 0), 0u)
      << (*f)["cause"];
  const json* replace = find_event(lost, "scheduler", "action", "replace");
  ASSERT_NE(replace, nullptr) << logs(lost);
  EXPECT_EQ((*replace)["device"], 1);
  EXPECT_EQ((*replace)["to_device"], 2);
  EXPECT_TRUE(finals(clean, 2) == finals(lost, 2));
}

TEST_F(Sigmarun, WorkersMeetThroughARealRedisServerAndRecover) {
  std::ifstream in(std::string(SIGMA_REDIS_FIXTURE_DIR) + "/port");
  int port = 0;
  in >> port;
  ASSERT_GT(port, 0) << "the redis fixture did not start";
  // Device 0 dies 1 s after step 40's all-reduce, when its peers have all
  // of it: killed at once, a peer may still wait inside Gloo's send to it,
  // which the cpu vendor's abort does not wake (docs/vendor-cpu.md), and be
  // replaced after the abort grace too -- one spare would not cover both.
  JobRun r = sigmarun(
      "redis", {"--nproc", "3", "--spares", "1", "--store", "redis://127.0.0.1:" + std::to_string(port)},
      {"--steps", std::to_string(kSteps), "--kill-at", "40", "--kill-device", "0", "--kill-after-reduce",
       "--kill-delay-ms", "1000"});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  EXPECT_NE(r.journal.at(0)["store"].get<std::string>().find("redis://127.0.0.1:"), std::string::npos);
  EXPECT_FALSE(fs::exists(r.dir + "/store")) << "no file store was used";
  ASSERT_EQ(r.report["incidents"].size(), 1u);
  expect_exact(r);
}

TEST_F(Sigmarun, ACollectiveThatHangsWhileTheProcessBeatsIsFoundByTheStepWatchdog) {
  // The sim device 1 stops completing collectives after its 206th: the
  // process and its heartbeats live on, the job does not. Its collectives:
  // the admission probe (1), the join's probe (2) and first snapshot ring
  // (3-6), then per step the all-reduce and a 4-op ring: the 207th is the
  // all-reduce of step 40, inside the step, where its peers get ahead.
  const std::string scenario = ::testing::TempDir() + "hang-" + std::to_string(::getpid()) + ".yaml";
  g_dirs.push_back(scenario);
  std::ofstream(scenario) << "seed: 5\nduration_s: 600\nworld_size: 4\n"
                             "faults:\n  - {kind: hang, device: 1, at_op: 206}\n";
  JobRun r = sigmarun(
      "collhang",
      std::vector<std::string>{"--nproc", "3", "--spares", "1", "--step-timeout", "1.5"} + on_sim(scenario),
      {"--steps", std::to_string(kSteps)});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  const json* f = find_event(r, "fault", "device", 1);
  ASSERT_NE(f, nullptr) << logs(r);
  EXPECT_NE((*f)["cause"].get<std::string>().find("stuck in a collective"), std::string::npos) << (*f).dump();
  expect_exact(r);
}

// Several agents, as on several hosts: the root (node 0) and followers,
// each with `per_node` = {nproc, spares}, meeting through a real Redis.
// Returns the root's run; follower k's folder is `dir + "-nodeK"`.
constexpr const char* kTestSecret = "sigmarun-test-secret-4f1c9a";

JobRun agents(const std::string& name, int redis_port, uint32_t nnodes, std::vector<std::string> common,
              std::vector<std::string> worker_args) {
  ::setenv("SIGMA_JOB_SECRET", kTestSecret, 1);  // every agent of the job holds it
  common.insert(common.end(), {"--nnodes", std::to_string(nnodes), "--store",
                               "redis://127.0.0.1:" + std::to_string(redis_port), "--job-id",
                               name + "-" + std::to_string(::getpid())});
  std::vector<pid_t> followers;
  for (uint32_t k = 1; k < nnodes; ++k) {
    const std::string dir = job_dir(name + "-node" + std::to_string(k));
    g_dirs.push_back(dir);
    std::vector<std::string> args{SIGMARUN,    "--node-rank", std::to_string(k),
                                  "--job-dir", dir,           "--no-progress"};
    args.insert(args.end(), common.begin(), common.end());
    args.push_back("--");
    args.push_back(RUNTIME_WORKER);
    args.insert(args.end(), worker_args.begin(), worker_args.end());
    followers.push_back(spawn(std::move(args)));
  }
  common.insert(common.begin(), {"--node-rank", "0", "--host", "127.0.0.1"});
  JobRun r = sigmarun(name, common, worker_args);
  for (pid_t f : followers) {
    int status = 0;
    ::waitpid(f, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == r.exit_code) << "a follower ended otherwise";
  }
  return r;
}

// Two agents, each with 2 ranks and 1 spare.
JobRun two_nodes(const std::string& name, int redis_port, std::vector<std::string> worker_args) {
  return agents(name, redis_port, 2, {"--nproc", "2", "--spares", "1"}, std::move(worker_args));
}

// Each rank's final state, from whichever host ran it last.
std::vector<std::string> finals_of(const JobRun& r, uint32_t world, uint32_t nnodes = 2) {
  std::vector<std::string> out;
  for (uint32_t k = 0; k < world; ++k) {
    const std::string file = "/final-rank-" + std::to_string(k) + ".bin";
    std::string f = read_file(r.dir + file);
    for (uint32_t n = 1; f.empty() && n < nnodes; ++n)
      f = read_file(r.dir + "-node" + std::to_string(n) + file);
    out.push_back(f);
  }
  return out;
}

int redis_port() {
  std::ifstream in(std::string(SIGMA_REDIS_FIXTURE_DIR) + "/port");
  int port = 0;
  in >> port;
  return port;
}

TEST(SigmarunNodes, TwoAgentsFormOneJobAndASpareOnOneHostReplacesAWorkerOnTheOther) {
  const int port = redis_port();
  ASSERT_GT(port, 0) << "the redis fixture did not start";
  JobRun clean = two_nodes("nodes-clean", port, {"--steps", "120"});
  ASSERT_EQ(clean.exit_code, 0) << logs(clean);
  EXPECT_EQ(clean.report["world"], 4);
  // The root reads the follower's launches and every worker's messages,
  // those of host 1's workers included: the layout is flat.
  const json& in = clean.report["control_plane"]["inbound"];
  EXPECT_EQ(in["by_type"]["node"], 1) << in.dump(1);
  EXPECT_GE(in["by_source"]["node_agents"]["messages"].get<uint64_t>(), 4u) << in.dump(1);  // its 3 launches
  EXPECT_GE(in["by_type"]["step"].get<uint64_t>(), 4 * 120u) << in.dump(1);
  // Device 3 is rank 3 on node 1; the first spare, device 4, is on node 0.
  JobRun r = two_nodes("nodes-kill", port, {"--steps", "120", "--kill-at", "40", "--kill-device", "3"});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  const json* launch = find_event(r, "launch", "device", 3);
  ASSERT_NE(launch, nullptr);
  EXPECT_EQ((*launch)["node"], 1);
  const json* replace = find_event(r, "scheduler", "action", "replace");
  ASSERT_NE(replace, nullptr) << logs(r);
  EXPECT_EQ((*replace)["to_device"], 4);
  EXPECT_EQ(r.report["incidents"][0]["restore"], "memory");
  // Each host is a node: rank 3's replica was on host 0, with rank 1 (the
  // ring would have put it on rank 0). Now three ranks are on host 0, and
  // only the ranks at the hosts' edges can hold across.
  const json* assigned = find_event(r, "assigned", "restore", "memory");
  ASSERT_NE(assigned, nullptr) << logs(r);
  EXPECT_EQ((*assigned)["handoff"], json::array({json::array({1, 3})})) << logs(r);
  EXPECT_EQ((*assigned)["domains"], json({0, 0, 1, 0})) << logs(r);
  EXPECT_EQ((*assigned)["replicas_across"], "node (2 of 4 ranks)") << logs(r);
  const auto a = finals_of(clean, 4), b = finals_of(r, 4);
  ASSERT_EQ(a[0].size(), 2 * 4096 * sizeof(float));
  for (uint32_t k = 0; k < 4; ++k) EXPECT_TRUE(a[k] == b[k]) << "rank " << k;
}

// Four agents in two groups of two, 1 rank and 1 spare each: ranks 0-3 on
// devices 0-3 (nodes 0-3), spares 4-7 (nodes 0-3); group 0 holds devices
// 0, 1, 4, 5 and group 1 holds 2, 3, 6, 7. Rank 3 loses its device three
// times: its group's two spares replace it, then the root lends group 0's.
TEST(SigmarunNodes, GroupControllersReplaceWithinTheirGroupAndEscalateOnlyWhenItHasNoSpare) {
  const int port = redis_port();
  ASSERT_GT(port, 0) << "the redis fixture did not start";
  // A generous heartbeat timeout: eight workers on a loaded machine must not
  // add a spurious hang to the three kills this test counts.
  const std::vector<std::string> layout{
      "--nproc", "1", "--spares", "1", "--nodes-per-group", "2", "--heartbeat-timeout", "20"};
  JobRun clean = agents("groups-clean", port, 4, layout, {"--steps", "120"});
  ASSERT_EQ(clean.exit_code, 0) << logs(clean);
  JobRun r = agents("groups-kill", port, 4, layout,
                    {"--steps", "120", "--kill-at", "30", "--kill-device", "3", "--kill-at", "60",
                     "--kill-device", "6", "--kill-at", "90", "--kill-device", "7"});
  ASSERT_EQ(r.exit_code, 0) << logs(r);
  // What replaced each killed device, and what went up to the root. On a
  // loaded machine a survivor caught in a Gloo send already queued when its
  // peer died can wait out its bound (the limit of Gloo in
  // docs/vendor-cpu.md), miss the abort grace and be replaced too: the
  // checks look only at the three kills.
  std::map<uint32_t, uint32_t> replaced;  // failed device -> its replacement
  bool seven_escalated = false;
  for (const json& e : r.journal) {
    if (e["event"] != "scheduler") continue;
    if (e["action"] == "replace" && e.contains("device"))
      replaced.emplace(e["device"].get<uint32_t>(), e["to_device"].get<uint32_t>());
    if (e["action"] == "escalate" && e["device"] == 7 && e["rank"] == 3) seven_escalated = true;
  }
  EXPECT_EQ(replaced[3], 6u) << logs(r);  // group 1's own spares first
  EXPECT_EQ(replaced[6], 7u) << logs(r);
  // Then the root lends group 0's lowest free spare: 4, or 5 when 4 went
  // to a survivor of group 0 that missed the abort grace.
  bool four_taken = false;
  for (const auto& [dev, to] : replaced) four_taken |= dev != 3 && dev != 6 && dev != 7 && to == 4;
  EXPECT_EQ(replaced[7], four_taken ? 5u : 4u) << logs(r);
  EXPECT_TRUE(seven_escalated) << logs(r);
  expect_replayed(r);
  const auto a = finals_of(clean, 4, 4), b = finals_of(r, 4, 4);
  ASSERT_EQ(a[0].size(), 2 * 4096 * sizeof(float));
  for (uint32_t k = 0; k < 4; ++k) EXPECT_TRUE(a[k] == b[k]) << "rank " << k;
}

std::string http_get(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return "";
  }
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
  (void)!::send(fd, req.data(), req.size(), 0);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

TEST(SigmarunMetrics, PrometheusMetricsAreServedWhileTheJobRuns) {
  const std::string dir = job_dir("metrics");
  g_dirs.push_back(dir);
  std::vector<std::string> args{
      SIGMARUN,         "--job-dir", dir,  "--no-progress", "--nproc", "2",   "--spares",  "1",
      "--metrics-port", "0",         "--", RUNTIME_WORKER,  "--steps", "400", "--step-ms", "10"};
  const pid_t pid = spawn(std::move(args));
  std::string body;
  for (int i = 0; i < 200 && body.find("sigma_steps_total ") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!fs::exists(dir + "/metrics.json")) continue;
    const int port = json::parse(read_file(dir + "/metrics.json"))["port"].get<int>();
    body = http_get(port, "/metrics");
    if (body.find("sigma_steps_total 0\n") != std::string::npos) body.clear();  // wait for progress
  }
  // Six clients that never finish their request: the old single-threaded
  // server gave each its 1 s read timeout in turn (6 s); now each holds one
  // thread of the pool and a scrape is answered meanwhile (well within 3 s
  // even on a loaded machine).
  {
    const int port = json::parse(read_file(dir + "/metrics.json"))["port"].get<int>();
    std::vector<int> idle;
    for (int k = 0; k < 6; ++k) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
      (void)!::send(fd, "GET /met", 8, MSG_NOSIGNAL);  // and never the rest
      idle.push_back(fd);
    }
    const auto t0 = std::chrono::steady_clock::now();
    const std::string again = http_get(port, "/metrics");
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(3000));
    EXPECT_NE(again.find("HTTP/1.1 200 OK"), std::string::npos) << again;
    for (int fd : idle) ::close(fd);
  }
  // A stranger on the agent's socket with malformed greetings: refused,
  // journalled, and the job goes on.
  {
    const int fd = connect_agent(dir);
    ASSERT_GE(fd, 0);
    const std::string junk = "not json\n{\"type\":5,\"device\":\"x\"}\n";
    (void)!::send(fd, junk.data(), junk.size(), 0);
    ::close(fd);
    const int fd2 = connect_agent(dir);
    ASSERT_GE(fd2, 0);
    const std::string hello = "{\"type\":\"hello\",\"device\":0}\n";
    (void)!::send(fd2, hello.data(), hello.size(), 0);
    // Held open until the agent has read and refused both connections (the
    // journal says so), not for a guessed while.
    auto refusals = [&] {
      const std::string j = read_file(dir + "/incidents.jsonl");
      size_t n = 0;
      for (auto k = j.find("refused_connection"); k != std::string::npos;
           k = j.find("refused_connection", k + 1))
        ++n;
      return n;
    };
    for (int i = 0; i < 1000 && refusals() < 2; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_GE(refusals(), 2u) << "the agent did not refuse both strangers within 10 s";
    ::close(fd2);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_NE(read_file(dir + "/incidents.jsonl").find("refused_connection"), std::string::npos);
  EXPECT_NE(body.find("HTTP/1.1 200 OK"), std::string::npos) << body;
  EXPECT_NE(body.find("# TYPE sigma_steps_total counter"), std::string::npos) << body;
  EXPECT_NE(body.find("sigma_device_health_score{device=\"0\"} 1"), std::string::npos) << body;
  EXPECT_NE(body.find("sigma_device_lifecycle_state{device=\"0\",state=\"in_use\"} 1"), std::string::npos)
      << body;
  EXPECT_NE(body.find("sigma_goodput_lost_seconds_total{cause=\"detection\"}"), std::string::npos) << body;
  EXPECT_NE(body.find("sigma_spares_available 1"), std::string::npos) << body;
}

TEST(SigmarunUsage, AWorkerOfAnotherProtocolVersionIsRefusedByName) {
  const JobRun r = sigmarun("old-protocol", {"--nproc", "1", "--spares", "0"}, {}, OLD_PROTOCOL_WORKER);
  EXPECT_EQ(r.exit_code, 4) << logs(r);
  const json* refused = find_event(r, "refused_connection");
  ASSERT_NE(refused, nullptr) << logs(r);
  const std::string why = (*refused)["reason"].get<std::string>();
  EXPECT_NE(why.find("protocol version 1"), std::string::npos) << why;
  EXPECT_NE(why.find("this agent speaks version 2"), std::string::npos) << why;
  // The worker was told why, in the same words.
  const std::string log = read_file(r.dir + "/logs/device-0.log");
  EXPECT_NE(log.find("refused: it speaks sigmarun protocol version 1"), std::string::npos) << log;
}

// Everything the agent can check before it starts is checked then: exit 2
// with the reason, nothing launched.
TEST(SigmarunUsage, BadOptionsAFolderThatIsAFileAndAVendorThatDoesNotLoadAreRefusedUpFront) {
  const std::string dir = job_dir("upfront");
  g_dirs.push_back(dir);
  auto refused = [&](const std::string& args, const std::string& says) {
    const std::string out = dir + ".err";
    const std::string cmd =
        std::string(SIGMARUN) + " --nproc 1 --no-progress " + args + " -- /bin/true 2>" + out;
    EXPECT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 2) << args;
    const std::string err = read_file(out);
    EXPECT_NE(err.find(says), std::string::npos) << args << ": " << err;
    std::filesystem::remove(out);
  };
  refused("--job-dir " + dir + " --step-timeout nan",
          "step timeout (--step-timeout) must be a finite number");
  refused("--job-dir " + dir + " --metrics-port 70000", "--metrics-port: Value 70000 not in range");
  // The library checks what a host embedding the agent passes, too.
  sigma::runtime::AgentOptions o;
  o.job_dir = dir;
  o.worker = {"/bin/true"};
  o.heartbeat_s = std::numeric_limits<double>::infinity();
  EXPECT_THROW(sigma::runtime::Agent{o}, sigma::Error);
  o.heartbeat_s = 0.1;
  o.metrics_port = 70000;
  EXPECT_THROW(sigma::runtime::Agent{o}, sigma::Error);
  refused("--job-dir " + dir + " --checkpoint-every -1", "--checkpoint-every");
  refused("--job-dir " + dir + " --vendor nosuch", "vendor 'nosuch' does not load");
  const std::string scenario = dir + "-bad.yaml";
  std::ofstream(scenario) << "devices:\n  0:\n    bogus: 1\n";
  refused("--job-dir " + dir + " --vendor sim --vendor-options scenario=" + scenario, scenario + ":1:");
  std::filesystem::remove(scenario);
  EXPECT_FALSE(std::filesystem::exists(dir + "/logs")) << "a worker was launched";
  const std::string file = dir + "-file";
  std::ofstream(file) << "x";
  refused("--job-dir " + file, "exists and is not a folder");
  std::filesystem::remove(file);
  refused("--job-dir /proc/sigma-job", "cannot make the job folder /proc/sigma-job");
}

// sigmarun started with `args` (its stderr to `err`), sent `sig` once
// `ready()` holds (or after `after_s`; no signal when `sig` is 0), and
// waited for. Returns the exit code and sets `wall_s` to the time from the
// signal (or the start) to its end.
int signalled(std::vector<std::string> args, const std::string& err, int sig, double after_s,
              const std::function<bool()>& ready, double& wall_s) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (sig != 0) {
    while (!(ready && ready()) &&
           std::chrono::steady_clock::now() - t0 < std::chrono::duration<double>(after_s))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ::kill(pid, sig);
  }
  const auto t1 = std::chrono::steady_clock::now();
  int status = 0;
  ::waitpid(pid, &status, 0);
  wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A vendor whose init blocks, crashes or ends the process is refused by
// name (the pre-flight runs it in a child, waited for at most the
// validation timeout), and a signal during the pre-flight ends sigmarun at
// once; a scenario that is a FIFO is refused without blocking.
TEST(SigmarunUsage, AVendorWhoseInitBlocksOrDiesIsRefusedAndASignalEndsThePreflight) {
  const std::string dir = job_dir("preflight");
  g_dirs.push_back(dir);
  const std::string bad = std::string(SIGMA_BAD_PLUGIN_DIR) + "/misbehave.so";
  auto run = [&](const std::string& misbehave, std::vector<std::string> extra, std::string& err_text) {
    ::setenv("SIGMA_BAD_MISBEHAVE", misbehave.c_str(), 1);
    std::vector<std::string> args{SIGMARUN,  "--job-dir", dir,        "--no-progress",
                                  "--nproc", "1",         "--vendor", bad};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--", "/bin/true"});
    const std::string err = dir + ".err";
    double wall = 0;
    const int code = signalled(args, err, 0, 0, nullptr, wall);
    ::unsetenv("SIGMA_BAD_MISBEHAVE");
    err_text = read_file(err);
    fs::remove(err);
    return code;
  };
  std::string err;
  EXPECT_EQ(run("hang:init", {"--validate-timeout", "1"}, err), 2) << err;
  EXPECT_NE(err.find("does not load: its init did not return within 1"), std::string::npos) << err;
  EXPECT_EQ(run("crash:init", {}, err), 2) << err;
  // SIGSEGV, or under a sanitizer the runtime's abort (or exit) after its report.
  EXPECT_TRUE(err.find("does not load: loading it killed the process (") != std::string::npos ||
              err.find("does not load: loading it ended the process (exit status") != std::string::npos)
      << err;
  // exit(0) inside init is never taken for a load (under ASan its exit-time
  // leak check may change the status it ends with).
  EXPECT_EQ(run("exit:init", {}, err), 2) << err;
  EXPECT_NE(err.find("does not load: loading it ended the process (exit status"), std::string::npos) << err;
  // SIGTERM while the init blocks: sigmarun ends at once, saying so.
  ::setenv("SIGMA_BAD_MISBEHAVE", "hang:init", 1);
  double wall = 0;
  const std::string errf = dir + ".err";
  const int code = signalled(
      {SIGMARUN, "--job-dir", dir, "--no-progress", "--nproc", "1", "--vendor", bad, "--", "/bin/true"}, errf,
      SIGTERM, 1.0, nullptr, wall);
  ::unsetenv("SIGMA_BAD_MISBEHAVE");
  EXPECT_EQ(code, 128 + SIGTERM) << read_file(errf);
  EXPECT_LT(wall, 2.0);
  EXPECT_NE(read_file(errf).find("stopped by SIGTERM during the pre-flight"), std::string::npos)
      << read_file(errf);
  // A scenario that is a FIFO no one writes: refused at once, by name.
  const std::string fifo = dir + "-scenario.fifo";
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const int fcode = signalled({SIGMARUN, "--job-dir", dir, "--no-progress", "--nproc", "1", "--vendor", "sim",
                               "--vendor-options", "scenario=" + fifo, "--", "/bin/true"},
                              errf, 0, 0, nullptr, wall);
  EXPECT_EQ(fcode, 2);
  EXPECT_NE(read_file(errf).find(fifo + ":0: (file): not a regular file (a FIFO)"), std::string::npos)
      << read_file(errf);
  ::unlink(fifo.c_str());
  fs::remove(errf);
  EXPECT_FALSE(fs::exists(dir + "/logs")) << "a worker was launched";
}

// SIGTERM ends sigmarun within 10 s while a device validates for ever (its
// admission probe hangs) and in a recovery whose spare hangs in its
// hand-off; the report says it was stopped.
TEST(SigmarunUsage, SigtermEndsTheJobWithinTenSecondsDuringValidationAndRecovery) {
  struct Phase {
    const char* name;
    const char* faults;
    std::vector<std::string> worker;
    const char* journalled;  // stop once this event is in the journal
  };
  const std::vector<Phase> phases = {
      {"validation", "  - {kind: hang, device: 1, at_op: 0}\n", {"--steps", "100000"}, "\"event\":\"start\""},
      {"recovery",
       "  - {kind: hang, device: 3, at_op: 2}\n",
       {"--steps", "100000", "--step-ms", "5", "--kill-at", "20", "--kill-device", "1"},
       "\"event\":\"assigned\",\"generation\":2"}};
  for (const Phase& ph : phases) {
    SCOPED_TRACE(ph.name);
    const std::string dir = job_dir(std::string("stop-") + ph.name);
    g_dirs.push_back(dir);
    std::vector<std::string> args{
        SIGMARUN, "--job-dir",          dir,   "--no-progress",      "--nproc", "3", "--spares",
        "1",      "--recovery-timeout", "600", "--validate-timeout", "600"};
    args = args + on_sim(scenario_file(std::string("stop-") + ph.name, ph.faults));
    args.insert(args.end(), {"--", RUNTIME_WORKER});
    args.insert(args.end(), ph.worker.begin(), ph.worker.end());
    double wall = 0;
    const std::string err = dir + ".err";
    const int code = signalled(
        args, err, SIGTERM, 60,
        [&] { return read_file(dir + "/incidents.jsonl").find(ph.journalled) != std::string::npos; }, wall);
    EXPECT_EQ(code, 128 + SIGTERM) << read_file(err);
    EXPECT_LT(wall, 10.0);
    const json report = json::parse(read_file(dir + "/report.json"));
    EXPECT_EQ(report["status"], "stopped") << report.dump();
    EXPECT_NE(report["reason"].get<std::string>().find("stopped by SIGTERM"), std::string::npos);
    fs::remove(err);
  }
}

// One agent per job folder: a second one is refused naming the first; and a
// peer that sends a line without end is cut off, not read for ever.
TEST(SigmarunUsage, ASecondAgentOnTheSameFolderIsRefusedAndAnEndlessLineIsCutOff) {
  const std::string dir = job_dir("locked");
  g_dirs.push_back(dir);
  const pid_t first = spawn({SIGMARUN, "--nproc", "2", "--no-progress", "--job-dir", dir, "--",
                             RUNTIME_WORKER, "--steps", "150", "--step-ms", "10"});
  for (int i = 0; i < 500 && !std::filesystem::exists(dir + "/agent.sock"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(std::filesystem::exists(dir + "/agent.sock"));
  const std::string err = dir + ".err";
  const std::string cmd =
      std::string(SIGMARUN) + " --nproc 1 --no-progress --job-dir " + dir + " -- /bin/true 2>" + err;
  EXPECT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 2);
  EXPECT_NE(read_file(err).find("is in use by sigmarun pid " + std::to_string(first)), std::string::npos)
      << read_file(err);
  std::filesystem::remove(err);
  // 4 MiB without a newline on the agent's socket: the agent hangs up.
  int fd = -1;  // (the socket file appears at bind, a moment before the agent listens)
  for (int i = 0; i < 2000 && fd < 0; ++i) {
    fd = connect_agent(dir);
    if (fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_GE(fd, 0);
  const std::string chunk(1 << 16, 'x');
  bool cut_off = false;
  for (int i = 0; i < 64 && !cut_off; ++i) cut_off = ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) < 0;
  char c;
  cut_off = cut_off || ::recv(fd, &c, 1, 0) <= 0;
  ::close(fd);
  EXPECT_TRUE(cut_off);
  int status = 0;
  ::waitpid(first, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the first job was hurt";
  EXPECT_NE(read_file(dir + "/incidents.jsonl").find("refused_connection"), std::string::npos);
}

// A stranger who reaches the agent's socket first and greets as device 0
// is refused (it has no launch token); the real worker then joins.
TEST(SigmarunUsage, AStrangersGreetingIsRefusedAndTheRealWorkerJoins) {
  const std::string dir = job_dir("stranger");
  g_dirs.push_back(dir);
  const pid_t agent = spawn({SIGMARUN, "--nproc", "2", "--no-progress", "--job-dir", dir, "--",
                             RUNTIME_WORKER, "--steps", "40", "--start-delay-ms", "1500"});
  // The socket file appears at bind, a moment before the agent listens.
  int fd = -1;
  for (int i = 0; i < 2000 && fd < 0; ++i) {
    fd = connect_agent(dir);
    if (fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_GE(fd, 0);
  const std::string hello =
      R"({"type":"hello","version":2,"device":0,"pid":1,"self_test":{"passed":true,"detail":"trust me"}})"
      "\n";
  ASSERT_EQ(::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL), static_cast<ssize_t>(hello.size()));
  std::string reply;
  char buf[512];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) reply.append(buf, static_cast<size_t>(n));
  ::close(fd);
  EXPECT_NE(reply.find("lacks the token"), std::string::npos) << reply;
  int status = 0;
  ::waitpid(agent, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_file(dir + "/incidents.jsonl");
  EXPECT_NE(read_file(dir + "/incidents.jsonl").find("SIGMA_WORKER_TOKEN"), std::string::npos);
}

TEST(SigmarunUsage, BadArgumentsAndAWorkerThatNeverGreetsAreClearErrors) {
  const std::string dir = job_dir("usage");
  g_dirs.push_back(dir);
  std::string cmd = std::string(SIGMARUN) + " --job-dir " + dir + " -- /bin/true 2>/dev/null";
  EXPECT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 2) << "--nproc is required";
  // A plain program that crashes: seen at once, reported, nothing hangs.
  cmd = std::string(SIGMARUN) + " --nproc 2 --no-progress --job-dir " + dir +
        " -- /bin/sh -c 'exit 7' 2>/dev/null";
  EXPECT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 4);
  const json rep = json::parse(read_file(dir + "/report.json"));
  EXPECT_EQ(rep["status"], "unrecoverable");
  EXPECT_NE(read_file(dir + "/incidents.jsonl").find("exited with status 7"), std::string::npos);
  // A plain program that runs to its end is done, not a fault.
  const std::string ok_dir = job_dir("usage-ok");
  g_dirs.push_back(ok_dir);
  cmd = std::string(SIGMARUN) + " --nproc 2 --spares 1 --no-progress --job-dir " + ok_dir +
        " -- /bin/sh -c 'exit 0' 2>/dev/null";
  EXPECT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 0);
  const json done = json::parse(read_file(ok_dir + "/report.json"));
  EXPECT_EQ(done["status"], "done") << done.dump();
  EXPECT_TRUE(done["incidents"].empty()) << done.dump();
}

// A store anyone on the network can write must not let them pose as the
// root: a record without the job's MAC is never connected to, and the
// follower runs nothing.
TEST(SigmarunNodes, AForgedRootRecordInARealRedisIsRefusedAndNothingRuns) {
  const int port = redis_port();
  ASSERT_GT(port, 0) << "the redis fixture did not start";
  // A decoy root: a listening socket nobody must connect to.
  const int decoy = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(decoy, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(decoy, 4), 0);
  socklen_t len = sizeof a;
  ::getsockname(decoy, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string job = "forged-" + std::to_string(::getpid());
  const std::string record = json{
      {"addr", "tcp://127.0.0.1:" + std::to_string(ntohs(a.sin_port))},
      {"nonce", "1-2"},
      {"mac",
       std::string(64, 'a')}}.dump();
  sigma::bootstrap::open_store("redis://127.0.0.1:" + std::to_string(port) + "/sigmarun-" + job)
      ->set("root", std::vector<uint8_t>(record.begin(), record.end()));

  ::setenv("SIGMA_JOB_SECRET", kTestSecret, 1);
  const std::string dir = job_dir("forged-follower");
  const std::string log = dir + ".log";
  std::vector<std::string> args{SIGMARUN,
                                "--nnodes",
                                "2",
                                "--node-rank",
                                "1",
                                "--nproc",
                                "1",
                                "--job-dir",
                                dir,
                                "--store",
                                "redis://127.0.0.1:" + std::to_string(port),
                                "--job-id",
                                job,
                                "--validate-timeout",
                                "2",
                                "--no-progress",
                                "--",
                                RUNTIME_WORKER};
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (std::freopen(log.c_str(), "w", stderr) == nullptr) ::_exit(126);
    std::vector<char*> argv;
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << read_file(log);
  EXPECT_NE(read_file(log).find("whose authentication failed"), std::string::npos) << read_file(log);
  pollfd p{decoy, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "the follower connected to the forged root";
  ::close(decoy);
  bool ran = false;
  if (fs::exists(dir + "/logs"))
    for (const auto& e : fs::directory_iterator(dir + "/logs"))
      ran |= e.path().filename().string().rfind("device-", 0) == 0;
  EXPECT_FALSE(ran) << "a worker was started";
  fs::remove_all(dir);
  fs::remove(log);
}

TEST(SigmarunNodes, SeveralAgentsWithoutAJobSecretAreRefusedUpFront) {
  ::unsetenv("SIGMA_JOB_SECRET");
  const JobRun r =
      sigmarun("no-secret", {"--nproc", "1", "--nnodes", "2", "--store", job_dir("no-secret-store")},
               {"--steps", "2"});
  EXPECT_EQ(r.exit_code, 2);
}

}  // namespace
