// The main of every GoogleTest program here. It differs from gtest_main in
// two ways, both so that CTest can tell a skip from a failure by the exit
// code alone:
//
//  - a run in which every selected test was skipped, and nothing failed,
//    exits 77 (the tests' SKIP_RETURN_CODE); any failure, a suite's set-up
//    or tear-down included, exits 1; a run that passed exits 0;
//  - skipped tests are printed as "[ SKIP     ]", not GoogleTest's
//    "[  SKIPPED ]": gtest_discover_tests gives every test a skip regular
//    expression matching that text, and CTest lets such a match win over a
//    failing exit code (a failed suite set-up, whose tests gtest then skips,
//    passed as "skipped").
//
// CTest runs one test per process (gtest_discover_tests), so "every selected
// test was skipped" is "this test was skipped".
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr int kSkipExitCode = 77;

// GoogleTest's own printer, with the two lines that name skipped tests
// printed another way.
class Printer : public ::testing::TestEventListener {
 public:
  explicit Printer(::testing::TestEventListener* inner) : inner_(inner) {}
  void OnTestProgramStart(const ::testing::UnitTest& u) override { inner_->OnTestProgramStart(u); }
  void OnTestIterationStart(const ::testing::UnitTest& u, int i) override {
    inner_->OnTestIterationStart(u, i);
  }
  void OnEnvironmentsSetUpStart(const ::testing::UnitTest& u) override {
    inner_->OnEnvironmentsSetUpStart(u);
  }
  void OnEnvironmentsSetUpEnd(const ::testing::UnitTest& u) override { inner_->OnEnvironmentsSetUpEnd(u); }
  void OnTestSuiteStart(const ::testing::TestSuite& s) override { inner_->OnTestSuiteStart(s); }
  void OnTestStart(const ::testing::TestInfo& t) override { inner_->OnTestStart(t); }
  void OnTestPartResult(const ::testing::TestPartResult& r) override { inner_->OnTestPartResult(r); }
  void OnTestEnd(const ::testing::TestInfo& t) override {
    if (!t.result()->Skipped()) return inner_->OnTestEnd(t);
    std::printf("[ SKIP     ] %s.%s (%lld ms)\n", t.test_suite_name(), t.name(),
                static_cast<long long>(t.result()->elapsed_time()));
    std::fflush(stdout);
  }
  void OnTestSuiteEnd(const ::testing::TestSuite& s) override { inner_->OnTestSuiteEnd(s); }
  void OnEnvironmentsTearDownStart(const ::testing::UnitTest& u) override {
    inner_->OnEnvironmentsTearDownStart(u);
  }
  void OnEnvironmentsTearDownEnd(const ::testing::UnitTest& u) override {
    inner_->OnEnvironmentsTearDownEnd(u);
  }
  void OnTestIterationEnd(const ::testing::UnitTest& u, int i) override {
    if (u.skipped_test_count() == 0) return inner_->OnTestIterationEnd(u, i);
    summary(u);
  }
  void OnTestProgramEnd(const ::testing::UnitTest& u) override { inner_->OnTestProgramEnd(u); }

 private:
  static void summary(const ::testing::UnitTest& u) {
    std::vector<std::string> skipped, failed;
    for (int i = 0; i < u.total_test_suite_count(); ++i) {
      const ::testing::TestSuite& s = *u.GetTestSuite(i);
      if (s.ad_hoc_test_result().Failed()) failed.push_back(std::string(s.name()) + ": set-up or tear-down");
      for (int j = 0; j < s.total_test_count(); ++j) {
        const ::testing::TestInfo& t = *s.GetTestInfo(j);
        const std::string name = std::string(s.name()) + "." + t.name();
        if (t.result()->Skipped()) skipped.push_back(name);
        if (t.result()->Failed()) failed.push_back(name);
      }
    }
    if (u.ad_hoc_test_result().Failed()) failed.push_back("the global set-up or tear-down");
    std::printf("[==========] %d tests ran. (%lld ms total)\n", u.test_to_run_count(),
                static_cast<long long>(u.elapsed_time()));
    std::printf("[  PASSED  ] %d tests.\n", u.successful_test_count());
    for (const auto& n : skipped) std::printf("[ SKIP     ] %s\n", n.c_str());
    for (const auto& n : failed) std::printf("[  FAILED  ] %s\n", n.c_str());
    std::fflush(stdout);
  }

  std::unique_ptr<::testing::TestEventListener> inner_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (::testing::TestEventListener* inner = listeners.Release(listeners.default_result_printer()))
    listeners.Append(new Printer(inner));
  if (RUN_ALL_TESTS() != 0) return 1;
  const ::testing::UnitTest& u = *::testing::UnitTest::GetInstance();
  if (u.ad_hoc_test_result().Failed()) return 1;
  const bool all_skipped = u.test_to_run_count() > 0 && u.skipped_test_count() == u.test_to_run_count();
  return all_skipped ? kSkipExitCode : 0;
}
