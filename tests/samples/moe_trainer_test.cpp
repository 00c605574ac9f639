// The main job's trainer under sigmarun, with real processes: recoverable
// faults leave the final parameters bitwise equal to a fault-free run's;
// guardrail decisions (a NaN burst skipped, a spike rolled back) are the only
// differences, and the report states them; report.html renders in headless
// Chromium with every chart drawn.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
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
  std::string guardrails = GUARDRAILS;  // the main job's
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
                             guardrails});
    args.insert(args.end(), extra.begin(), extra.end());
    const int rc = run(args, root + "/" + name + ".log");
    EXPECT_EQ(rc, 0) << name << ":\n" << read_file(root + "/" + name + ".log");
    return dir;
  }
};

// The final state, parameters and AdamW moments: every rank's dense copy,
// then each expert by its global index, wherever the autotuner left it.
// Each replica of an expert wrote its own file; they must all agree (a
// replica that differs is named), and the expert's bytes are theirs.
std::string finals(const std::string& dir) {
  std::string all;
  for (int r = 0; r < 4; ++r) {
    const std::string f = dir + "/final-rank-" + std::to_string(r) + ".bin";
    EXPECT_TRUE(fs::exists(f)) << f;
    all += read_file(f);
  }
  for (int e = 0; e < 8; ++e) {
    std::string first;
    int replicas = 0;
    for (int r = 0; r < 4; ++r) {
      const std::string f =
          dir + "/final-expert-" + std::to_string(e) + "-rank-" + std::to_string(r) + ".bin";
      if (!fs::exists(f)) continue;
      const std::string bytes = read_file(f);
      if (replicas++ == 0) first = bytes;
      EXPECT_TRUE(bytes == first) << "expert " << e << ": rank " << r << "'s replica differs from the first";
    }
    EXPECT_GE(replicas, 1) << "no rank holds expert " << e;
    all += first;
  }
  return all;
}

// What each chart of report.html draws, read from the DOM: its data
// series (polylines in a series colour with more than a legend's two
// points) and its marks (glyphs in a series colour).
struct Chart {
  bool no_data = false;
  size_t marks = 0;
  std::vector<std::pair<size_t, size_t>> series;  // (points, distinct y values)
};

Chart chart_of(const std::string& html, const std::string& id) {
  Chart c;
  const auto at = html.find("id=\"" + id + "\"");
  if (at == std::string::npos) return c;
  const std::string fig = html.substr(at, html.find("</figure>", at) - at);
  c.no_data = fig.find("class=\"no-data\"") != std::string::npos;
  static const std::regex element(R"re(<(polyline|text|polygon)\b([^>]*)>)re");
  static const std::regex colour(
      R"re((stroke|fill)="#(1F77B4|D62728|2CA02C|FF7F0E|9467BD|8C564B|7F7F7F|17BECF)")re");
  static const std::regex points(R"re(points="([^"]*)")re");
  for (std::sregex_iterator it(fig.begin(), fig.end(), element), end; it != end; ++it) {
    const std::string attrs = (*it)[2];
    if (!std::regex_search(attrs, colour)) continue;
    std::smatch pm;
    if ((*it)[1] == "text") {
      ++c.marks;
    } else if (std::regex_search(attrs, pm, points)) {
      std::istringstream in(pm[1].str());
      std::set<std::string> ys;
      size_t n = 0;
      for (std::string xy; in >> xy; ++n) ys.insert(xy.substr(xy.find(',') + 1));
      if (n > 2) c.series.emplace_back(n, ys.size());
      if ((*it)[1] == "polygon" || n == 5) ++c.marks;  // a filled bar
    }
  }
  return c;
}

// What is wrong with report.html's charts for a job of `steps` steps: a
// chart with no data series of about one point per step (temperature: per
// telemetry sample; the timeline and the time bars: no marks), or drawn
// from a constant series.
std::vector<std::string> chart_problems(const std::string& html, size_t steps) {
  std::vector<std::string> out;
  auto need_series = [&](const std::string& id, size_t min_points, size_t min_distinct) {
    const Chart c = chart_of(html, id);
    bool ok = false;
    for (auto [n, distinct] : c.series) ok |= n >= min_points && distinct >= min_distinct;
    if (c.no_data) out.push_back(id + ": says no data");
    if (!ok) out.push_back(id + ": no series of " + std::to_string(min_points) + "+ points that varies");
  };
  need_series("loss", steps / 2, 3);
  need_series("step-time", steps / 2, 3);
  need_series("temperature", 3, 2);  // sampled with the heartbeats: about one a second
  for (const char* id : {"timeline", "goodput"}) {
    const Chart c = chart_of(html, id);
    if (c.no_data) out.push_back(std::string(id) + ": says no data");
    if (c.marks == 0) out.push_back(std::string(id) + ": no marks");
  }
  return out;
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
  const json crashed_summary = summary(crashed);
  size_t crashes = 0;
  for (const auto& i : crashed_summary["incidents"]) crashes += i["kind"] == "crash" ? 1 : 0;
  EXPECT_EQ(crashes, 2u) << crashed_summary.dump(1);
  size_t from_memory = 0;
  for (const auto& i : rep["incidents"]) from_memory += i.value("restore", "") == "memory" ? 1 : 0;
  EXPECT_EQ(from_memory, 2u) << "both crashes restored from the memory tier: " << rep["incidents"].dump(1);
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
  for (const char* id : {"loss", "step-time", "temperature", "timeline", "goodput"})
    ASSERT_NE(html.find(std::string("id=\"") + id + "\""), std::string::npos) << "no chart " << id;
  for (const auto& p : chart_problems(html, 60)) ADD_FAILURE() << "report.html: " << p;
  // The checker sees an empty report: a job that ran no step (a plain
  // program) gets charts that say "no data", and every one is flagged.
  const std::string empty = fx.root + "/empty";
  ASSERT_EQ(run({SIGMARUN, "--nproc", "1", "--job-dir", empty, "--no-progress", "--", "/bin/true"},
                fx.root + "/empty.log"),
            0)
      << read_file(fx.root + "/empty.log");
  const std::string empty_html = read_file(empty + "/report.html");
  EXPECT_NE(empty_html.find("no data ("), std::string::npos);
  EXPECT_GE(chart_problems(empty_html, 60).size(), 5u) << "the checker is blind to an empty report";
  EXPECT_EQ(read_file(fx.root + "/empty.log").find("PLPLOT WARNING"), std::string::npos)
      << read_file(fx.root + "/empty.log");
  auto snap = chromium;
  snap.push_back("--screenshot=" + shot);
  snap.push_back("file://" + page);
  EXPECT_EQ(run(snap, log), 0) << read_file(log);
  EXPECT_GT(fs::file_size(shot), 20000u) << "the screenshot is (nearly) blank";
}

// f16 GEMMs with dynamic loss scaling; layer 1's attention logits grow to
// 1e6 times and back over steps 15-45. With escalation off the steps whose
// logits pass f16's range are skipped (the loss is not finite). With it,
// the guardrails escalate that layer to f32 on its activations' headroom
// before the first of those steps and return it to f16 once calm: nothing
// is skipped. A worker killed while the layer is escalated is restored
// from the memory tier with the escalation in its state: the run ends with
// the uninterrupted run's bytes, and the report draws the layer's f32
// steps and the run without escalation beside it.
TEST(MoeTrainer, AnF16LayerWhoseLogitsGrowIsEscalatedBeforeItOverflowsAndReturnedAndACrashKeepsTheBytes) {
  Fixture fx;
  const std::string config =
      "loss_scaling: {enabled: true, initial_scale: 1024, growth_interval: 100}\n"
      "spike: {enabled: false}\n"
      "precision: {enabled: false, window: 100, max_overflow_rate: 0.05, min_headroom_bits: 4, calm_steps: "
      "8}\n";
  fx.guardrails = fx.root + "/f16.yaml";
  const std::vector<std::string> f16{"--precision", "f16", "--logit-growth", "1:15:45:1e6"};
  // rank 0's steps that ran with a part in f32 (its log's f32_parts), and those it skipped.
  const auto steps_where = [](const std::string& dir, const std::function<bool(const json&)>& pick) {
    std::vector<uint64_t> out;
    std::istringstream lines(read_file(dir + "/trainer.jsonl"));
    for (std::string line; std::getline(lines, line);) {
      const json j = json::parse(line);
      if (j.value("event", "") == "step" && pick(j)) out.push_back(j["step"]);
    }
    return out;
  };

  std::ofstream(fx.guardrails) << config;  // escalation off
  const std::string no_escalation = fx.job("f16-no-escalation", "", f16);
  const auto skipped = steps_where(no_escalation, [](const json& j) { return j["action"] != "apply"; });
  ASSERT_GE(skipped.size(), 3u) << "the growth overflows f16 for a few steps";
  EXPECT_EQ(summary(no_escalation)["skipped_steps"], skipped.size());

  std::ofstream(fx.guardrails) << std::regex_replace(config, std::regex("enabled: false, window"),
                                                     "enabled: true, window");
  const std::string clean = fx.job("f16", "", f16);
  const json s = summary(clean);
  EXPECT_EQ(s["skipped_steps"], 0) << s.dump(1);
  std::vector<std::string> changes;
  for (const auto& i : s["incidents"])
    if (i["kind"].get<std::string>().rfind("precision", 0) == 0)
      changes.push_back(i["kind"].get<std::string>() + ": " + i["what"].get<std::string>());
  ASSERT_EQ(changes.size(), 2u) << s.dump(1);
  EXPECT_EQ(changes[0].rfind("precision escalated: escalated block1.attn to f32: activation amax", 0), 0u)
      << changes[0];
  EXPECT_EQ(changes[1].rfind("precision returned: returned block1.attn to f16: calm for 8 steps", 0), 0u)
      << changes[1];
  const auto f32_steps = steps_where(clean, [](const json& j) { return !j["f32_parts"].empty(); });
  ASSERT_FALSE(f32_steps.empty());
  EXPECT_GT(f32_steps.front(), 15u);
  EXPECT_LT(f32_steps.front(), skipped.front()) << "escalated before the logits pass f16's range";
  EXPECT_GT(f32_steps.back(), skipped.back());
  EXPECT_EQ(f32_steps.size(), f32_steps.back() - f32_steps.front() + 1) << "one span";
  EXPECT_LT(f32_steps.back(), 59u) << "returned to f16 within the run";
  EXPECT_LT(f32_steps.front(), 30u) << "the kill below comes while the layer runs in f32";
  EXPECT_GT(f32_steps.back(), 30u);
  const Chart precision = chart_of(read_file(clean + "/report.html"), "precision");
  EXPECT_FALSE(precision.no_data);
  EXPECT_GE(precision.marks, 1u) << "no f32 span drawn";

  // Killed at step 30, escalated: the same bytes at the end. Its report
  // draws the run with escalation off beside it (the fifth colour).
  auto kill = f16;
  kill.insert(kill.end(), {"--kill-at", "30", "--kill-device", "1"});
  const std::string killed =
      fx.job("f16-kill", "", kill, {"--report-compare", "escalation off=" + no_escalation});
  const json rep = json::parse(read_file(killed + "/report.json"));
  ASSERT_EQ(rep["incidents"].size(), 1u) << rep.dump(1);
  EXPECT_EQ(rep["incidents"][0].value("restore", ""), "memory");
  EXPECT_TRUE(finals(killed) == finals(clean)) << "the escalation state travels with the snapshot";
  const std::string page = read_file(killed + "/report.html");
  const auto loss = page.find("id=\"loss\"");
  ASSERT_NE(loss, std::string::npos);
  EXPECT_NE(page.substr(loss, page.find("</figure>", loss) - loss).find("#9467BD"), std::string::npos)
      << "no line of the compared run";
}

// rank 0's trainer.jsonl: each committed step's loss (a step a re-form
// voided is not logged; the last line of a step run again counts).
std::map<uint64_t, double> step_losses(const std::string& dir) {
  std::map<uint64_t, double> out;
  std::istringstream lines(read_file(dir + "/trainer.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    const json j = json::parse(line);
    if (j.value("event", "") == "step") out[j["step"].get<uint64_t>()] = j["loss"].get<double>();
  }
  return out;
}

// Every rank of a run with replicas ends with rank 0's dense state
// (parameters and moments).
void expect_ranks_alike(const std::string& dir) {
  const std::string dense = read_file(dir + "/final-rank-0.bin");
  EXPECT_FALSE(dense.empty()) << dir;
  for (int r = 1; r < 4; ++r)
    EXPECT_TRUE(read_file(dir + "/final-rank-" + std::to_string(r) + ".bin") == dense)
        << dir << ": rank " << r;
}

// rank 0's guardrails journal: the fingerprint votes, in order.
std::vector<json> fingerprint_votes(const std::string& dir) {
  std::vector<json> out;
  std::istringstream lines(read_file(dir + "/guardrails.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    json j = json::parse(line);
    if (j.value("event", "") == "fingerprint") out.push_back(std::move(j));
  }
  return out;
}

// Contained recovery: two data-parallel replicas of one expert group of two
// ranks (sigmarun's replica groups are the trainer's expert groups). A rank
// killed at step 15 stops its replica alone: the other steps on with both
// replicas' micro-batches, the spare and the stopped replica's other rank
// take its live state and rejoin. The run differs from a fault-free one
// only in the order of its sums; the replicas agree bitwise throughout.
// No proactive migration: on a loaded machine a rank's steps may be slow
// enough for the straggler rule, an incident of its own.
TEST(MoeTrainer, UnderContainedRecoveryAKilledRankStopsOnlyItsReplicaAndTheRunEndsAsTheFaultFreeOne) {
  Fixture fx;
  const std::vector<std::string> agent{"--recovery",         "contained", "--replica-size", "2",
                                       "--devices-per-node", "2",         "--no-migration"};
  const std::string clean = fx.job("contained-clean", "", {"--replicas", "2"}, agent);
  const std::string killed =
      fx.job("contained-kill", "", {"--replicas", "2", "--kill-at", "15", "--kill-device", "3"}, agent);
  const json report = json::parse(read_file(killed + "/report.json"));
  const json& c = report["contained"];
  ASSERT_EQ(c["incidents"].size(), 1u) << report.dump(1);
  EXPECT_EQ(c["incidents"][0]["replica"], 1);
  EXPECT_EQ(c["incidents"][0]["end"], "rejoined");
  EXPECT_GE(c["degraded_steps"].get<uint64_t>(), 1u);
  EXPECT_EQ(summary(killed)["skipped_steps"], 0);
  EXPECT_EQ(summary(killed)["lost_s"]["restart"], 0.0) << "no exact round restarted the world";
  // Every rank of both replicas ends with the same dense state, and each
  // expert's two copies agree (finals() compares them).
  expect_ranks_alike(killed);
  EXPECT_FALSE(finals(killed).empty());
  // Every step committed once, on the same data: the losses side by side.
  const auto got = step_losses(killed), want = step_losses(clean);
  ASSERT_EQ(got.size(), 60u);
  ASSERT_EQ(want.size(), 60u);
  std::string side;
  for (uint64_t step = 0; step < 60; step += 6)
    side += "step " + std::to_string(step) + ": " + std::to_string(got.at(step)) + " vs " +
            std::to_string(want.at(step)) + "\n";
  EXPECT_LE(std::abs(got.at(59) - want.at(59)), 0.01 * std::abs(want.at(59))) << side;
  std::printf("%llu steps degraded; per-step loss, contained run vs fault-free:\n%s",
              static_cast<unsigned long long>(c["degraded_steps"].get<uint64_t>()), side.c_str());

  // A slow link in replica 1 (device 2, its first rank): the autotuner
  // moves that position's experts in both replicas alike (each decides on
  // the worst of the counterparts' samples), so their expert gradients
  // still sum slot by slot. Then device 3 is killed: replica 0 samples
  // alone while replica 1 is out, and replica 1 rejoins with replica 0's
  // placement. Every rank ends alike and every vote finds the counterparts'
  // whole state equal.
  const std::string slow = fx.job("contained-slow",
                                  std::string(kHeader) +
                                      "faults:\n"
                                      "  - {kind: slow_bandwidth, device: 2, at_s: 1, factor: 2, gbps: 5}\n",
                                  {"--replicas", "2", "--kill-at", "30", "--kill-device", "3"}, agent);
  EXPECT_TRUE(has_incident(summary(slow), "slow link")) << summary(slow).dump(1);
  size_t moves = 0;
  std::istringstream slow_steps(read_file(slow + "/trainer.jsonl"));
  for (std::string line; std::getline(slow_steps, line);)
    moves += json::parse(line).value("rebalance", json()).is_object() ? 1 : 0;
  EXPECT_GE(moves, 1u) << "rank 0 (replica 0, whose links are fast) moved no expert";
  EXPECT_EQ(json::parse(read_file(slow + "/report.json"))["contained"]["incidents"].size(), 1u);
  EXPECT_EQ(summary(slow)["skipped_steps"], 0);
  expect_ranks_alike(slow);
  EXPECT_FALSE(finals(slow).empty());
  for (const json& v : fingerprint_votes(slow)) EXPECT_TRUE(v["match"].get<bool>()) << v.dump();
  const auto slow_losses = step_losses(slow);
  ASSERT_EQ(slow_losses.size(), 60u);
  EXPECT_LE(std::abs(slow_losses.at(59) - want.at(59)), 0.01 * std::abs(want.at(59)));

  // NaN in one replica's exchange results (device 2, replica 1): every
  // replica skips the step alike, and they never diverge.
  const std::string nan = fx.job("contained-nan",
                                 std::string(kHeader) +
                                     "faults:\n"
                                     "  - {kind: nan_burst, device: 2, at_op: 300, count: 2, "
                                     "op: all_reduce}\n",
                                 {"--replicas", "2"}, agent);
  EXPECT_GE(summary(nan)["skipped_steps"].get<int>(), 1) << summary(nan).dump(1);
  expect_ranks_alike(nan);

  // The replicas' fingerprints are voted across them every 25 steps (the
  // dense parameters over all four ranks, everything over counterparts).
  const auto votes = fingerprint_votes(clean);
  ASSERT_EQ(votes.size(), 3u) << "steps 0, 25 and 50";
  for (const json& v : votes) {
    EXPECT_TRUE(v["match"].get<bool>()) << v.dump();
    ASSERT_EQ(v["fingerprints"].size(), 4u) << v.dump();
    EXPECT_EQ(v["fingerprints"][0], v["fingerprints"][2]) << "counterparts hold the same bytes: " << v.dump();
  }
  // A flipped bit in one rank's data-parallel result (device 2's 301st
  // operation: the dense gradients' all-reduce of step 9, replica 1): its
  // replica's guardrails see its two ranks' gradients differ. Replica 1
  // leaves and takes replica 0's state (which applied the step) instead of
  // skipping it; nothing is skipped and every rank ends alike.
  const std::string sdc = fx.job("contained-sdc",
                                 std::string(kHeader) +
                                     "faults:\n"
                                     "  - {kind: silent_corruption, device: 2, at_op: 301, count: 1, "
                                     "op: all_reduce}\n",
                                 {"--replicas", "2"}, agent);
  const json sdc_report = json::parse(read_file(sdc + "/report.json"));
  const json& si = sdc_report["contained"]["incidents"];
  ASSERT_EQ(si.size(), 1u) << "did operation 301 stop being the dense all-reduce? " << sdc_report.dump(1);
  EXPECT_EQ(si[0]["replica"], 1);
  EXPECT_EQ(si[0]["end"], "rejoined");
  EXPECT_NE(si[0]["cause"].get<std::string>().find("exchanged gradients differ"), std::string::npos) << si[0];
  EXPECT_EQ(summary(sdc)["skipped_steps"], 0);
  EXPECT_EQ(summary(sdc)["lost_s"]["restart"], 0.0);
  expect_ranks_alike(sdc);
  const auto sdc_losses = step_losses(sdc);
  ASSERT_EQ(sdc_losses.size(), 60u);
  EXPECT_LE(std::abs(sdc_losses.at(59) - want.at(59)), 0.01 * std::abs(want.at(59)));
  for (const json& v : fingerprint_votes(sdc)) EXPECT_TRUE(v["match"].get<bool>()) << v.dump();

  // A flipped bit in device 2's replica-wide sum of the dense gradients
  // (operation 316, step 10) reaches rank 0 through the data-parallel sum:
  // both replicas' ranks disagree and both leave. The last one out finds no
  // healthy replica and the exact round runs; its assignment holds every
  // replica (it once held only the healthy ones: the job ended
  // unrecoverable, the stopped replica's ranks unable to join). Every rank
  // ends alike.
  const std::string both = fx.job("contained-sdc-both",
                                  std::string(kHeader) +
                                      "faults:\n"
                                      "  - {kind: silent_corruption, device: 2, at_op: 316, count: 1, "
                                      "op: all_reduce}\n",
                                  {"--replicas", "2"}, agent);
  // Rank 0 logs the steps it runs. Which replica leaves first is a race:
  // when it is rank 0's, that replica takes the other's newer state (a
  // hand-off) and never runs the steps in between, so rank 0's log may have
  // a gap (57 steps in one run on a loaded machine). The run reaches the
  // last step either way, and skips none.
  const auto both_losses = step_losses(both);
  ASSERT_FALSE(both_losses.empty());
  EXPECT_EQ(both_losses.rbegin()->first, 59u);
  EXPECT_GE(both_losses.size(), 50u);
  EXPECT_EQ(summary(both)["skipped_steps"], 0);
  EXPECT_NE(read_file(both + "/report.json").find("exchanged gradients differ"), std::string::npos);
  expect_ranks_alike(both);

  // A second fault while a replica is out: device 3 crashes in step 15
  // and replica 1 stops; the spare takes its rank and the hand-off from
  // replica 0 is under way when device 0 crashes too. No healthy replica
  // is left, so the exact round runs. Replica 1's ranks, waiting for a
  // donor that is gone, answer its abort (they once sat in the store for
  // 30 s, were killed after the grace and took the state with them: the
  // job ended unrecoverable). No spare is left, so the round waits for
  // device 3, readmitted and validating, and goes on with it (it once
  // ended the job paused). Every rank ends alike.
  const std::string second = fx.job("contained-second-fault",
                                    std::string(kHeader) +
                                        "faults:\n"
                                        "  - {kind: crash, device: 3, at_op: 450}\n"
                                        "  - {kind: crash, device: 0, at_op: 520}\n",
                                    {"--replicas", "2"}, agent);
  EXPECT_EQ(json::parse(read_file(second + "/report.json"))["status"], "done");
  const json second_c = json::parse(read_file(second + "/report.json"))["contained"];
  ASSERT_EQ(second_c["incidents"].size(), 1u) << second_c.dump(1);
  EXPECT_EQ(second_c["incidents"][0]["end"], "exact round");
  const std::string journal = read_file(second + "/incidents.jsonl");
  const auto handoff = journal.find("\"event\":\"handoff\""), fallback = journal.find("contained_fallback");
  ASSERT_NE(fallback, std::string::npos);
  EXPECT_LT(handoff, fallback) << "the second fault came before replica 1's hand-off began";
  EXPECT_NE(journal.find("\"action\":\"resume\""), std::string::npos) << "no spare was left to wait for";
  EXPECT_EQ(journal.find("did not answer the abort"), std::string::npos);
  EXPECT_EQ(step_losses(second).size(), 60u);
  expect_ranks_alike(second);
  EXPECT_FALSE(finals(second).empty());

  // A guardrails rollback under contained recovery: a poisoned batch's loss
  // spike reaches every replica alike (the loss is global), so all of them
  // roll back to the same snapshot and skip the same window.
  const std::string rolled =
      fx.job("contained-rollback", "", {"--replicas", "2", "--poison-batches", "35"}, agent);
  EXPECT_TRUE(has_incident(summary(rolled), "loss spike")) << summary(rolled).dump(1);
  EXPECT_GE(summary(rolled)["rolled_back_steps"].get<int>(), 1);
  EXPECT_TRUE(json::parse(read_file(rolled + "/report.json"))["contained"]["incidents"].empty());
  expect_ranks_alike(rolled);
  EXPECT_FALSE(finals(rolled).empty());
  for (const json& v : fingerprint_votes(rolled)) EXPECT_TRUE(v["match"].get<bool>()) << v.dump();
}

}  // namespace
