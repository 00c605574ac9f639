// The main job's trainer under sigmarun, with real processes: recoverable
// faults leave the final parameters bitwise equal to a fault-free run's;
// guardrail decisions (a NaN burst skipped, a spike rolled back) are the only
// differences, and the report states them; report.html renders in headless
// Chromium with every chart drawn.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs a command line with stderr to `log` and stdout to `out` (or `log`);
// returns its exit status.
int run(std::vector<std::string> args, const std::string& log = "/dev/null", const std::string& out = "") {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (std::freopen(log.c_str(), "w", stderr) == nullptr) ::_exit(126);
    if (out.empty()) {
      ::dup2(::fileno(stderr), 1);
    } else if (std::freopen(out.c_str(), "w", stdout) == nullptr) {
      ::_exit(126);
    }
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct Fixture {
  std::string root, text;
  Fixture() {
    root = ::testing::TempDir() + "moe-trainer-" + std::to_string(::getpid());
    fs::remove_all(root);
    fs::create_directories(root);
    // Public-domain English text (Debian's bible-kjv), as the main job uses.
    text = root + "/kjv.txt";
    if (run({"bible", "gen1:1-job42:17"}, "/dev/null", text) != 0 || fs::file_size(text) < 100000)
      ADD_FAILURE() << "the bible program (Debian bible-kjv) gave no text";
  }
  ~Fixture() {
    if (!::testing::Test::HasFailure()) fs::remove_all(root);
  }

  // One small job: 4 workers, 1 spare; returns its folder.
  std::string job(const std::string& name, const std::string& scenario, std::vector<std::string> extra = {},
                  const std::vector<std::string>& agent = {}) {
    const std::string dir = root + "/" + name;
    // A job that hangs fails here in minutes (SIGTERM stops sigmarun at a step boundary).
    std::vector<std::string> args{"timeout", "-k",
                                  "20",      "240",
                                  SIGMARUN,  "--nproc",
                                  "4",       "--spares",
                                  "1",       "--snapshot-keep",
                                  "4",       "--readmit-crashed",
                                  "1",       "--job-dir",
                                  dir,       "--no-progress"};
    args.insert(args.end(), agent.begin(), agent.end());
    if (!scenario.empty()) {
      const std::string file = root + "/" + name + ".yaml";
      std::ofstream(file) << scenario;
      args.insert(args.end(), {"--vendor", "sim", "--vendor-options", "scenario=" + file + ";rank={device}"});
    }
    args.insert(args.end(), {"--",
                             MOE_TRAINER,
                             "--data",
                             text,
                             "--steps",
                             "60",
                             "--layers",
                             "2",
                             "--d-model",
                             "64",
                             "--ffn",
                             "128",
                             "--seq",
                             "32",
                             "--batch",
                             "4",
                             "--warmup",
                             "10",
                             "--gemm-gflops",
                             "50",
                             "--model-gflops",
                             "25",
                             "--guardrails",
                             GUARDRAILS});
    args.insert(args.end(), extra.begin(), extra.end());
    const int rc = run(args, root + "/" + name + ".log");
    EXPECT_EQ(rc, 0) << name << ":\n" << read_file(root + "/" + name + ".log");
    return dir;
  }
};

// The final parameters: every rank's dense copy, then each expert by its
// global index (wherever the autotuner left it).
std::string finals(const std::string& dir) {
  std::string all;
  for (int r = 0; r < 4; ++r) {
    const std::string f = dir + "/final-rank-" + std::to_string(r) + ".bin";
    EXPECT_TRUE(fs::exists(f)) << f;
    all += read_file(f);
  }
  for (int e = 0; e < 8; ++e) {
    const std::string f = dir + "/final-expert-" + std::to_string(e) + ".bin";
    EXPECT_TRUE(fs::exists(f)) << f;
    all += read_file(f);
  }
  return all;
}

json summary(const std::string& dir) { return json::parse(read_file(dir + "/report.json")).at("summary"); }

bool has_incident(const json& s, const std::string& kind) {
  for (const auto& i : s["incidents"])
    if (i["kind"] == kind) return true;
  return false;
}

constexpr const char* kHeader = "seed: 5\nduration_s: 600\nworld_size: 5\n";

TEST(MoeTrainer, RecoverableFaultsEndWithTheFaultFreeRunsBytesAndGuardrailDecisionsAreStated) {
  Fixture fx;
  const std::string clean = fx.job("clean", "");
  const std::string reference = finals(clean);
  ASSERT_FALSE(reference.empty());
  EXPECT_EQ(summary(clean)["skipped_steps"], 0);

  // Two crashes (the first device readmitted, then the spare that took its
  // rank), each restored from the memory tier, and a slow link whose
  // experts the autotuner moves away: the same bytes at the end.
  const std::string crashed =
      fx.job("crashed", std::string(kHeader) +
                            "faults:\n"
                            "  - {kind: slow_bandwidth, device: 2, at_s: 1, factor: 2, gbps: 5}\n"
                            "  - {kind: crash, device: 1, at_op: 400}\n"
                            "  - {kind: crash, device: 4, at_op: 600}\n");
  const json rep = json::parse(read_file(crashed + "/report.json"));
  EXPECT_GE(rep["incidents"].size(), 1u) << rep.dump(1);
  EXPECT_TRUE(has_incident(summary(crashed), "crash"));
  EXPECT_TRUE(has_incident(summary(crashed), "slow link")) << "the autotuner moved experts off device 2";
  EXPECT_EQ(summary(crashed)["skipped_steps"], 0);
  EXPECT_TRUE(finals(crashed) == reference) << "a restored run must end with the fault-free run's bytes";

  // A NaN burst on one device's all-reduce results: steps skipped, stated.
  const std::string nan =
      fx.job("nan", std::string(kHeader) +
                        "faults:\n"
                        "  - {kind: nan_burst, device: 2, at_op: 300, count: 2, op: all_reduce}\n");
  const json s = summary(nan);
  EXPECT_GE(s["skipped_steps"].get<int>(), 1) << s.dump(1);
  EXPECT_TRUE(has_incident(s, "NaN burst")) << s.dump(1);
  EXPECT_FALSE(finals(nan) == reference) << "a skipped step changes the result, and the report says so";

  // A corrupt data batch: its loss spike is rolled back and the window skipped.
  // (Disk checkpoints every 5 steps, in the background: the rollback
  // crosses one, which is discarded and saved again.)
  const std::string spike =
      fx.job("spike", "", {"--poison-batches", "35"}, {"--checkpoint-every", "5", "--checkpoint-async"});
  const json sp = summary(spike);
  EXPECT_TRUE(has_incident(sp, "loss spike")) << sp.dump(1);
  EXPECT_GE(sp["rolled_back_steps"].get<int>(), 1) << sp.dump(1);
  EXPECT_EQ(json::parse(read_file(spike + "/report.json"))["storage"]["failed_saves"], 0);

  // report.html: headless Chromium loads it with no console error, every
  // chart is drawn, and a screenshot is kept beside the build.
  const std::string page = nan + "/report.html";
  ASSERT_TRUE(fs::exists(page));
  const std::string dom = fx.root + "/dom.html", log = fx.root + "/chromium.log";
  const std::string shot = std::string(SCREENSHOT_DIR) + "/moe_trainer_report.png";
  std::vector<std::string> chromium{"chromium",
                                    "--headless",
                                    "--no-sandbox",
                                    "--disable-gpu",
                                    "--enable-logging=stderr",
                                    "--v=0",
                                    "--window-size=1000,2600"};
  auto dump = chromium;
  dump.insert(dump.end(), {"--dump-dom", "file://" + page});
  ASSERT_EQ(run(dump, log, dom), 0) << read_file(log);
  EXPECT_EQ(read_file(log).find("CONSOLE"), std::string::npos) << read_file(log);
  const std::string html = read_file(dom);
  for (const char* id : {"loss", "step-time", "temperature", "timeline", "goodput"}) {
    const auto at = html.find(std::string("id=\"") + id + "\"");
    ASSERT_NE(at, std::string::npos) << "no chart " << id;
    const auto end = html.find("</figure>", at);
    const std::string fig = html.substr(at, end - at);
    size_t marks = 0;
    for (const char* tag : {"<path", "<polyline", "<polygon"})
      for (auto k = fig.find(tag); k != std::string::npos; k = fig.find(tag, k + 1)) ++marks;
    EXPECT_GE(marks, 10u) << "chart " << id << " is (nearly) empty";
  }
  auto snap = chromium;
  snap.push_back("--screenshot=" + shot);
  snap.push_back("file://" + page);
  EXPECT_EQ(run(snap, log), 0) << read_file(log);
  EXPECT_GT(fs::file_size(shot), 20000u) << "the screenshot is (nearly) blank";
}

}  // namespace
