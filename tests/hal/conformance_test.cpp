// sigma-hal-conformance run as a separate process, as a vendor would run it,
// and judged by its exit status and JSON report.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>

namespace {

struct SuiteRun {
  int exit_code = -1;
  std::string output;
  nlohmann::json report;
};

SuiteRun run_suite(const std::string& args, const std::string& env = "") {
  static int counter = 0;
  const std::string json = ::testing::TempDir() + "conformance-" + std::to_string(::getpid()) + "-" +
                           std::to_string(counter++) + ".json";
  const std::string cmd = env + " " + SIGMA_CONFORMANCE_BIN + " " + args + " --json " + json + " 2>&1";
  SuiteRun r;
  FILE* f = ::popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) r.output.append(buf, n);
  const int st = ::pclose(f);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream in(json);
  if (in) r.report = nlohmann::json::parse(in);
  std::remove(json.c_str());
  return r;
}

const nlohmann::json* find_check(const nlohmann::json& report, const std::string& name) {
  for (const auto& c : report.at("checks"))
    if (c.at("name") == name) return &c;
  return nullptr;
}

// The check `name` of the report failed, and its detail says `says`.
void expect_failed(const SuiteRun& r, const std::string& name, const std::string& says) {
  const auto* c = find_check(r.report, name);
  ASSERT_NE(c, nullptr) << name << ":\n" << r.output;
  EXPECT_EQ((*c)["outcome"], "FAIL") << name;
  EXPECT_NE((*c)["detail"].get<std::string>().find(says), std::string::npos)
      << name << ": " << (*c)["detail"];
}

TEST(Conformance, SkeletonPassesWithOneRank) {
  SuiteRun r = run_suite("--plugin skeleton");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.report["summary"]["failed"], 0) << r.output;
  EXPECT_GE(r.report["summary"]["passed"].get<int>(), 60) << r.output;
  // The paths that need a hang are really exercised (through HANG injection).
  for (const char* name : {"coll.timeout_abort", "lifecycle.finalize_in_flight", "fault.device_lost",
                           "coll.matrix.all_reduce.bf16", "errors.last_error_per_thread"}) {
    const auto* c = find_check(r.report, name);
    ASSERT_NE(c, nullptr) << name;
    EXPECT_EQ((*c)["outcome"], "pass") << name << ": " << (*c)["detail"];
  }
  EXPECT_NE(r.output.find("0 failed"), std::string::npos);
}

TEST(Conformance, SkeletonWithTwoRanksSkipsMultiRankChecksAndSaysWhy) {
  SuiteRun r = run_suite("--plugin skeleton --ranks 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.report["ranks"], 2);
  const auto* c = find_check(r.report, "coll.matrix.all_reduce.f32");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ((*c)["outcome"], "skip");
  EXPECT_NE((*c)["detail"].get<std::string>().find("world size 1 only"), std::string::npos);
  EXPECT_EQ(r.report["summary"]["failed"], 0);
}

TEST(Conformance, AnAbi10PluginPassesWithTheOptionalRunChecksSkipped) {
  SuiteRun r = run_suite(std::string("--plugin ") + SIGMA_BAD_PLUGIN_DIR + "/old_minor.so");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.report["summary"]["failed"], 0) << r.output;
  for (const char* name : {"coll.run", "coll.run_timeout_abort"}) {
    const auto* c = find_check(r.report, name);
    ASSERT_NE(c, nullptr) << name;
    EXPECT_EQ((*c)["outcome"], "skip") << name;
    EXPECT_NE((*c)["detail"].get<std::string>().find("optional"), std::string::npos) << (*c)["detail"];
  }
}

TEST(Conformance, AWrongAllReduceResultFailsAndNamesTheCase) {
  SuiteRun r = run_suite(std::string("--plugin ") + SIGMA_BAD_PLUGIN_DIR + "/wrong_result.so");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  expect_failed(r, "coll.matrix.all_reduce.f32", "element 3");
  // Other dtypes were not broken and still pass.
  EXPECT_EQ((*find_check(r.report, "coll.matrix.all_reduce.f64"))["outcome"], "pass");
}

TEST(Conformance, ANaNTemperatureReadAsOkFailsTheTelemetryCheck) {
  SuiteRun r = run_suite(std::string("--plugin ") + SIGMA_BAD_PLUGIN_DIR + "/nan_telemetry.so");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  expect_failed(r, "telemetry.read", "with HAL_OK");
}

// A plugin writing two samples past the array it was given fails the
// telemetry checks by name; the suite's heap is the guard's, not the
// plugin's to corrupt, so every other check still runs and reports.
TEST(Conformance, ATelemetryReadPastItsArrayFailsByNameAndTheSuiteGoesOn) {
  SuiteRun r = run_suite(std::string("--plugin ") + SIGMA_BAD_PLUGIN_DIR + "/sample_overrun.so");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  for (const char* name : {"telemetry.read", "telemetry.monotonic_concurrent"})
    expect_failed(r, name, "sample(s) past the");
  EXPECT_EQ((*find_check(r.report, "coll.matrix.all_reduce.f32"))["outcome"], "pass");
  EXPECT_EQ(r.output.find("free(): invalid pointer"), std::string::npos) << r.output;
}

// hal.h's bootstrap key rule is the plugin's to keep too: a 1025-byte key
// fails coll.create by name.
TEST(Conformance, ABootstrapKeyOutsideTheRuleFailsCommunicatorCreation) {
  SuiteRun r = run_suite(std::string("--plugin ") + SIGMA_BAD_PLUGIN_DIR + "/long_key.so");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  expect_failed(r, "coll.create", "key outside hal.h's rule (1 to 1024 bytes");
}

TEST(Conformance, ABrokenTableFailsAtLoadWithTheField) {
  SuiteRun r = run_suite(std::string("--plugin ") + SIGMA_BAD_PLUGIN_DIR + "/null_required.so");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  expect_failed(r, "load", "comm_abort");
}

TEST(Conformance, APluginWithNoDeviceIsReportedSkippedNotPassed) {
  SuiteRun r = run_suite(std::string("--plugin ") + SIGMA_BAD_PLUGIN_DIR + "/init_unavailable.so");
  EXPECT_EQ(r.exit_code, 77) << r.output;
  EXPECT_EQ(r.report["summary"]["passed"], 0);
  EXPECT_EQ((*find_check(r.report, "load"))["outcome"], "skip");
  EXPECT_NE(r.output.find("no device"), std::string::npos) << r.output;
}

TEST(Conformance, AnUnknownPluginFailsClearly) {
  SuiteRun r = run_suite("--plugin no_such_vendor_xyz");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("libsigma_hal_no_such_vendor_xyz.so"), std::string::npos) << r.output;
}

// A plugin that exits, crashes or hangs in one phase: the suite fails the
// check it was in, names the status or signal and what the plugin said
// last, and (unless nothing can run without the plugin) resumes with the
// next group. It never exits 0 and never prints nothing.
struct Misbehaviour {
  const char* what;   // SIGMA_BAD_MISBEHAVE
  const char* check;  // the check that must fail
  const char* after;  // a check of a later group that must have run ("" when nothing can)
  bool after_passes;  // ... and passed (not when it meets the misbehaviour again)
};

void PrintTo(const Misbehaviour& m, std::ostream* os) { *os << m.what; }

class ConformanceSupervision : public ::testing::TestWithParam<Misbehaviour> {};

TEST_P(ConformanceSupervision, FailsTheCheckItWasInByNameAndGoesOn) {
  const Misbehaviour& m = GetParam();
  const std::string action = std::string(m.what).substr(0, std::string(m.what).find(':'));
  SuiteRun r = run_suite(std::string("--plugin ") + SIGMA_BAD_PLUGIN_DIR +
                             "/misbehave.so --check-timeout-s 3 --op-timeout-ms 1000 --large-count 1031",
                         std::string("SIGMA_BAD_MISBEHAVE=") + m.what);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("FAIL"), std::string::npos) << r.output;
  const auto* c = find_check(r.report, m.check);
  ASSERT_NE(c, nullptr) << m.what << "\n" << r.output;
  EXPECT_EQ((*c)["outcome"], "FAIL") << r.output;
  const std::string detail = (*c)["detail"];
  if (action == "crash") {
    // A sanitizer's own SEGV handler turns the signal into its report and
    // an exit status; either way the crash is named.
    EXPECT_TRUE(detail.find("was killed by signal Segmentation fault") != std::string::npos ||
                detail.find("SEGV") != std::string::npos)
        << detail;
  } else {
    const char* says = action == "exit" ? "exited with status 0 before its results were complete"
                                        : "was still in this check after 3 s";
    EXPECT_NE(detail.find(says), std::string::npos) << detail;
    EXPECT_NE(detail.find(std::string("its last words: bad plugin: misbehaving (") + m.what + ")"),
              std::string::npos)
        << detail;
  }
  if (*m.after == '\0') {
    EXPECT_EQ(r.report["summary"]["passed"], 0) << r.output;
  } else {
    const auto* later = find_check(r.report, m.after);
    ASSERT_NE(later, nullptr) << "did not resume after " << m.check << ":\n" << r.output;
    if (m.after_passes) {
      EXPECT_EQ((*later)["outcome"], "pass") << r.output;
    }
  }
}

std::vector<Misbehaviour> misbehaviours() {
  std::vector<Misbehaviour> out;
  for (const char* action : {"exit", "crash", "hang"}) {
    static std::vector<std::string> names;  // stable storage for the parameters' strings
    names.reserve(64);
    for (const char* phase : {"discovery", "init", "props", "collective", "finalize"}) {
      names.push_back(std::string(action) + ":" + phase);
      const std::string p = phase;
      out.push_back({names.back().c_str(),
                     p == "discovery" || p == "init" ? "load"
                     : p == "props"                  ? "abi.props_size"
                     : p == "collective"             ? "coll.matrix.all_reduce.f32"
                                                     : "unload",
                     p == "discovery" || p == "init" ? ""
                     : p == "props"                  ? "telemetry.read"
                     : p == "collective"             ? "lifecycle.reload"
                                                     : "lifecycle.double_init",
                     p != "finalize"});
    }
  }
  return out;
}

std::string case_name(const ::testing::TestParamInfo<Misbehaviour>& i) {
  std::string n = i.param.what;
  n[n.find(':')] = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(EveryPhase, ConformanceSupervision, ::testing::ValuesIn(misbehaviours()), case_name);

TEST(ConformanceSupervisionRanks, ARankThatExitsInsideThePluginFailsTheSuiteWithTwoRanks) {
  SuiteRun r = run_suite(std::string("--plugin ") + SIGMA_BAD_PLUGIN_DIR +
                             "/misbehave.so --ranks 2 --check-timeout-s 3 --op-timeout-ms 1000",
                         "SIGMA_BAD_MISBEHAVE=exit:props");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const auto* c = find_check(r.report, "abi.props_size");
  ASSERT_NE(c, nullptr) << r.output;
  EXPECT_EQ((*c)["outcome"], "FAIL");
  EXPECT_NE((*c)["detail"].get<std::string>().find("exited with status 0 before its results were complete"),
            std::string::npos)
      << (*c)["detail"];
  // Both ranks ran the groups after it: nothing is blamed on a missing rank.
  const auto* t = find_check(r.report, "telemetry.read");
  ASSERT_NE(t, nullptr) << r.output;
  EXPECT_EQ((*t)["outcome"], "pass") << (*t)["detail"];
}

}  // namespace
