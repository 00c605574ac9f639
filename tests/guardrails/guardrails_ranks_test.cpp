// The guardrails across real processes meeting over real collectives: a NaN
// on one rank, a loss spike, a flipped bit in one replica's parameters, and
// an all-reduce silently corrupted by the sim vendor. Every rank must reach
// the same decisions, the faulty rank must be named, and the job must end
// with the parameters of an independent clean run on the same batches.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

extern char** environ;

namespace {

using namespace std::chrono_literals;
using Result = std::map<std::string, std::string>;

Result read_result(const std::string& path) {
  Result kv;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return kv;
}

std::vector<nlohmann::json> read_journal(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

struct Job {
  std::string dir;
  std::vector<Result> results;
  std::vector<std::vector<nlohmann::json>> journals;
};

// Runs WORLD workers to the end (at most 120 s) and collects what they wrote.
Job run(const std::string& scenario, int world, int steps, const std::string& plugin = "cpu",
        const std::string& options = "") {
  Job job;
  job.dir = ::testing::TempDir() + "guardrails-" + scenario + "-" + std::to_string(::getpid());
  std::filesystem::remove_all(job.dir);
  std::filesystem::create_directories(job.dir);
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    std::string opts = options;
    if (plugin == "sim") opts = "rank=" + std::to_string(r) + ";" + options;
    std::vector<std::string> args = {SIGMA_GUARDRAILS_WORKER,
                                     std::to_string(r),
                                     std::to_string(world),
                                     job.dir,
                                     scenario,
                                     std::to_string(steps),
                                     plugin,
                                     opts};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    EXPECT_EQ(::posix_spawn(&pid, SIGMA_GUARDRAILS_WORKER, nullptr, nullptr, argv.data(), environ), 0);
    pids.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  for (pid_t pid : pids) {
    int st = 0;
    while (::waitpid(pid, &st, WNOHANG) != pid) {
      if (std::chrono::steady_clock::now() > deadline) {
        for (pid_t p : pids) ::kill(p, SIGKILL);
        ADD_FAILURE() << "the job did not finish within 120 s";
        ::waitpid(pid, &st, 0);
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
  }
  for (int r = 0; r < world; ++r) {
    job.results.push_back(read_result(job.dir + "/result-" + std::to_string(r)));
    EXPECT_EQ(job.results.back()["status"], "ok") << "rank " << r << ": " << job.results.back()["error"];
    job.journals.push_back(read_journal(job.dir + "/journal.jsonl.rank" + std::to_string(r)));
  }
  return job;
}

// Every rank journalled the same decisions in the same order.
void expect_same_decisions(const Job& job) {
  for (size_t r = 1; r < job.journals.size(); ++r) {
    ASSERT_EQ(job.journals[r].size(), job.journals[0].size()) << "rank " << r;
    for (size_t i = 0; i < job.journals[0].size(); ++i) {
      const auto &a = job.journals[0][i], &b = job.journals[r][i];
      EXPECT_EQ(a["event"], b["event"]);
      EXPECT_EQ(a["step"], b["step"]);
      if (a["event"] == "step") {
        EXPECT_EQ(a["action"], b["action"]) << "rank " << r << " step " << a["step"];
        EXPECT_EQ(a["reason"], b["reason"]);
        EXPECT_EQ(a["next_loss_scale"], b["next_loss_scale"]);
      }
    }
  }
}

void expect_replicas_equal(const Job& job) {
  for (size_t r = 1; r < job.results.size(); ++r)
    EXPECT_EQ(job.results[r].at("final_fingerprint"), job.results[0].at("final_fingerprint")) << "rank " << r;
}

// The faulty job ended with the parameters of an independent fault-free run
// of the same world that trained on the same batches: `steps` applied
// updates that never saw `skipped` (the batches a guardrail deliberately
// skipped or rolled back). Replicas agreeing with each other is not enough:
// the repair broadcasts one replica's parameters to all.
void expect_equals_clean_run(const Job& job, int world, int steps, const std::string& skipped = "") {
  const Job clean = run(skipped.empty() ? "clean" : "skip:" + skipped, world, steps);
  for (int s = 1; s <= steps; ++s)
    ASSERT_EQ(clean.results[0].at("action_" + std::to_string(s)), "apply") << "the clean run's step " << s;
  for (size_t r = 0; r < job.results.size(); ++r)
    EXPECT_EQ(job.results[r].at("final_fingerprint"), clean.results[0].at("final_fingerprint"))
        << "rank " << r << " differs from the clean run that skipped [" << skipped << "]";
}

TEST(GuardrailsRanks, ACleanRunAppliesEveryStepAndTheReplicasAgree) {
  const Job job = run("clean", 2, 12);
  expect_same_decisions(job);
  expect_replicas_equal(job);
  for (size_t r = 0; r < job.results.size(); ++r)
    EXPECT_EQ(job.results[r].count("riders_wrong_at"), 0u) << "rank " << r << ": the riders came back wrong";
  for (const auto& e : job.journals[0])
    if (e["event"] == "step") {
      EXPECT_EQ(e["action"], "apply") << e.dump();
    }
  EXPECT_EQ(job.results[0].count("detected_at"), 0u);
}

TEST(GuardrailsRanks, ANaNOnOneRankSkipsTheStepEverywhereAndBacksOffTheScale) {
  const Job job = run("nan", 3, 8);
  expect_same_decisions(job);
  expect_equals_clean_run(job, 3, 7, "5");  // step 5's batch was never applied
  for (const auto& r : job.results) {
    EXPECT_EQ(r.at("action_5"), "skip");
    EXPECT_EQ(r.at("nonfinite_at"), "5");
    EXPECT_EQ(std::stod(r.at("scale_after")), 512.0);
    EXPECT_EQ(r.at("action_6"), "apply");
  }
  const auto& step5 = job.journals[0][4];
  EXPECT_EQ(step5["step"], 5);
  EXPECT_EQ(step5["non_finite_ranks"], nlohmann::json::array({1}));
}

TEST(GuardrailsRanks, ALossSpikeRollsEveryRankBackAndSkipsTheBadBatches) {
  const Job job = run("spike", 2, 30);
  expect_same_decisions(job);
  expect_equals_clean_run(job, 2, 30, "23,24,25");
  for (const auto& r : job.results) {
    EXPECT_EQ(r.at("rollback_at"), "23");
    EXPECT_EQ(r.at("rollback_to"), "20");
  }
  bool seen = false;
  for (const auto& e : job.journals[0]) {
    if (e["event"] != "step" || e["action"] != "rollback") continue;
    seen = true;
    EXPECT_EQ(e["rollback_to_step"], 20);
    EXPECT_EQ(e["skip_data"], nlohmann::json::array({23, 26}));
  }
  EXPECT_TRUE(seen);
  // After the rollback the job ran on to step 30 with no second spike.
  EXPECT_EQ(job.journals[0].back()["step"], 30);
}

TEST(GuardrailsRanks, AFlippedBitInOneOfThreeReplicasIsFoundWithinOneIntervalAndNamed) {
  const Job job = run("bitflip", 3, 20);
  expect_same_decisions(job);
  expect_equals_clean_run(job, 3, 20);  // repaired from a healthy replica, nothing skipped
  for (const auto& r : job.results) {
    EXPECT_EQ(r.at("detected_at"), "10");  // flipped after step 7, interval 5
    EXPECT_EQ(r.at("odd_ranks"), "2");
    EXPECT_EQ(r.at("faulty_ranks"), "2");
    EXPECT_EQ(r.at("fault_reports"), "1");
  }
}

TEST(GuardrailsRanks, WithTwoReplicasTheReRunOnASpareNamesTheFaultyOne) {
  const Job job = run("bitflip", 2, 15);
  expect_same_decisions(job);
  expect_equals_clean_run(job, 2, 15);
  for (const auto& r : job.results) {
    EXPECT_EQ(r.at("detected_at"), "10");
    EXPECT_EQ(r.count("odd_ranks") ? r.at("odd_ranks") : "", "");  // no majority of two
    EXPECT_EQ(r.at("faulty_ranks"), "1");
  }
  bool attributed = false;
  for (const auto& e : job.journals[0])
    if (e["event"] == "sdc_attribution") {
      attributed = true;
      EXPECT_EQ(e["faulty_ranks"], nlohmann::json::array({1}));
      EXPECT_EQ(e["rerun_device"], "spare-0");
    }
  EXPECT_TRUE(attributed);
}

TEST(GuardrailsRanks, AnAllReduceCorruptedByTheSimDeviceIsCaughtAtOnceAndNamed) {
  const Job job =
      run("sim_sdc", 3, 8, "sim", std::string("scenario=") + SIGMA_SCENARIO_DIR + "/healthy.yaml");
  expect_same_decisions(job);
  expect_equals_clean_run(job, 3, 7, "5");  // the corrupted step was skipped everywhere
  for (const auto& r : job.results) {
    EXPECT_EQ(r.at("mismatch_at"), "5");
    EXPECT_EQ(r.at("mismatch_ranks"), "1");
    EXPECT_EQ(r.at("action_5"), "skip");
    EXPECT_EQ(r.count("detected_at"), 0u);  // nothing left for the fingerprints
  }
}

}  // namespace
