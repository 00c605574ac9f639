// /metrics as monitoring people already run reads it: Debian's promtool
// accepts a live job's exposition (naming, types, one series per state),
// and a real Prometheus server scrapes the job and answers queries for the
// job's and the devices' series (DCGM names).
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

pid_t spawn(std::vector<std::string> args, const std::string& log = "") {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (!log.empty()) {
      std::FILE* f = std::freopen(log.c_str(), "w", stderr);
      if (f) ::dup2(::fileno(stderr), 1);
    }
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

void stop(pid_t pid) {
  ::kill(pid, SIGTERM);
  for (int i = 0; i < 300; ++i) {
    if (::waitpid(pid, nullptr, WNOHANG) == pid) return;
    std::this_thread::sleep_for(50ms);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

// A sigmarun job of two workers and a spare, long enough to be scraped.
struct Job {
  std::string dir;
  pid_t pid = -1;
  int port = -1;
  explicit Job(const std::string& name) {
    dir = ::testing::TempDir() + "sigma-metrics-" + name + "-" + std::to_string(::getpid());
    fs::remove_all(dir);
    pid = spawn({SIGMARUN, "--job-dir", dir, "--no-progress", "--nproc", "2", "--spares", "1",
                 "--metrics-port", "0", "--", RUNTIME_WORKER, "--steps", "6000", "--step-ms", "10"});
    for (int i = 0; i < 400 && port < 0; ++i) {
      std::this_thread::sleep_for(50ms);
      if (fs::exists(dir + "/metrics.json"))
        port = json::parse(read_file(dir + "/metrics.json"))["port"].get<int>();
    }
  }
  ~Job() {
    stop(pid);
    fs::remove_all(dir);
  }
  // The exposition once the job has made progress.
  std::string metrics() const {
    httplib::Client c("127.0.0.1", port);
    for (int i = 0; i < 200; ++i) {
      auto r = c.Get("/metrics");
      if (r && r->status == 200 && r->body.find("sigma_steps_total 0\n") == std::string::npos &&
          r->body.find("DCGM_FI_DEV_GPU_UTIL") != std::string::npos)
        return r->body;
      std::this_thread::sleep_for(50ms);
    }
    return "";
  }
};

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST(Metrics, PromtoolAcceptsALiveJobsExposition) {
  Job job("promtool");
  ASSERT_GT(job.port, 0) << "no metrics.json in " << job.dir;
  const std::string body = job.metrics();
  ASSERT_FALSE(body.empty()) << "no progress on /metrics";
  const std::string file = job.dir + "/scrape.txt", out = job.dir + "/promtool.txt";
  std::ofstream(file) << body;
  const int rc = std::system(("promtool check metrics < '" + file + "' > '" + out + "' 2>&1").c_str());
  EXPECT_EQ(rc, 0) << read_file(out) << "\n" << body;
  EXPECT_EQ(read_file(out), "") << "promtool's complaints";
  // The state is a value of a fixed set of series, not a label that changes.
  EXPECT_NE(body.find("sigma_device_health_state{device=\"0\",state=\"healthy\"} 1"), std::string::npos)
      << body;
  EXPECT_NE(body.find("sigma_device_health_state{device=\"0\",state=\"failed\"} 0"), std::string::npos)
      << body;
  EXPECT_NE(body.find("sigma_device_lifecycle_state{device=\"2\",state=\"available\"} 1"), std::string::npos)
      << body;
  EXPECT_NE(body.find("sigma_goodput_lost_seconds_total{cause=\"detection\"}"), std::string::npos) << body;
  // The agent's inbound load, as the report counts it.
  for (const char* m : {"sigma_agent_inbound_messages_total{source=\"workers\"}",
                        "sigma_agent_inbound_bytes_total{source=\"workers\"}",
                        "sigma_agent_inbound_messages_by_type_total{type=\"heartbeat\"}",
                        "sigma_agent_inbound_messages_by_type_total{type=\"step\"}"})
    EXPECT_NE(body.find(m), std::string::npos) << m << "\n" << body;
  // Telemetry under DCGM's names, one series per device.
  for (const char* m : {"DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"}", "DCGM_FI_DEV_FB_USED{gpu=\"1\"}"})
    EXPECT_NE(body.find(m), std::string::npos) << m << "\n" << body;
}

TEST(Metrics, APrometheusServerScrapesALiveJob) {
  // Skipped only where Prometheus is not installed, and not even there under
  // the test command (SIGMA_TEST_REQUIRE_TOOLS), which installs it.
  if (std::system("command -v prometheus > /dev/null 2>&1") != 0) {
    if (std::getenv("SIGMA_TEST_REQUIRE_TOOLS") != nullptr)
      FAIL() << "no prometheus binary, and it is required";
    GTEST_SKIP() << "no prometheus binary";
  }
  Job job("prometheus");
  ASSERT_GT(job.port, 0);
  ASSERT_FALSE(job.metrics().empty());
  const int port = free_port();
  const std::string cfg = job.dir + "/prometheus.yml";
  std::ofstream(cfg) << "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                        "scrape_configs:\n"
                        "  - job_name: sigmarun\n"
                        "    static_configs: [{targets: ['127.0.0.1:"
                     << job.port << "']}]\n";
  const pid_t prom = spawn({"prometheus", "--config.file=" + cfg, "--storage.tsdb.path=" + job.dir + "/tsdb",
                            "--web.listen-address=127.0.0.1:" + std::to_string(port)},
                           job.dir + "/prometheus.log");
  httplib::Client c("127.0.0.1", port);
  json steps, util;
  for (int i = 0; i < 300; ++i) {  // 30 s: start, first scrape
    std::this_thread::sleep_for(100ms);
    if (::waitpid(prom, nullptr, WNOHANG) == prom)  // installed, so its exit is a failure (a bad config too)
      FAIL() << "prometheus exited early:\n" << read_file(job.dir + "/prometheus.log");
    auto a = c.Get("/api/v1/query?query=sigma_steps_total");
    auto b = c.Get("/api/v1/query?query=DCGM_FI_DEV_GPU_UTIL");
    if (!a || !b || a->status != 200 || b->status != 200) continue;
    steps = json::parse(a->body);
    util = json::parse(b->body);
    if (!steps["data"]["result"].empty() && util["data"]["result"].size() == 3) break;
  }
  stop(prom);
  ASSERT_FALSE(steps.is_null()) << read_file(job.dir + "/prometheus.log");
  ASSERT_EQ(steps["data"]["result"].size(), 1u) << steps.dump();
  EXPECT_GT(std::stod(steps["data"]["result"][0]["value"][1].get<std::string>()), 0) << steps.dump();
  EXPECT_EQ(util["data"]["result"].size(), 3u) << "a series per device: " << util.dump();
}

}  // namespace
