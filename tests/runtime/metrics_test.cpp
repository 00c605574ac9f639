// /metrics as monitoring people already run reads it: Debian's promtool
// accepts a live job's exposition (naming, types, one series per state),
// and a real Prometheus server scrapes the job and answers queries for the
// job's and the devices' series (DCGM names); every panel of the Grafana
// dashboard (tools/grafana/sigma-job.json) queries families a live job
// serves, and the server parses each of its queries.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
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

// A sigmarun job of two workers and a spare, long enough to be scraped;
// `vendor`: sigmarun's vendor flags (none: the cpu vendor).
struct Job {
  std::string dir;
  pid_t pid = -1;
  int port = -1;
  explicit Job(const std::string& name, const std::vector<std::string>& vendor = {}) {
    dir = ::testing::TempDir() + "sigma-metrics-" + name + "-" + std::to_string(::getpid());
    fs::remove_all(dir);
    std::vector<std::string> args{SIGMARUN, "--job-dir", dir, "--no-progress",  "--nproc",
                                  "2",      "--spares",  "1", "--metrics-port", "0"};
    args.insert(args.end(), vendor.begin(), vendor.end());
    args.insert(args.end(), {"--", RUNTIME_WORKER, "--steps", "6000", "--step-ms", "10"});
    pid = spawn(args);
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

// Whether the prometheus binary is here; a failure where the test command
// requires it (SIGMA_TEST_REQUIRE_TOOLS), which installs it.
bool prometheus_installed() {
  if (std::system("command -v prometheus > /dev/null 2>&1") == 0) return true;
  if (std::getenv("SIGMA_TEST_REQUIRE_TOOLS") != nullptr)
    ADD_FAILURE() << "no prometheus binary, and it is required";
  return false;
}

// A real Prometheus server on a free loopback port, scraping `job` every
// second; stopped with the object.
struct Prometheus {
  std::string dir;
  int port = free_port();
  pid_t pid = -1;
  explicit Prometheus(const Job& job) : dir(job.dir) {
    std::ofstream(dir + "/prometheus.yml") << "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                                              "scrape_configs:\n"
                                              "  - job_name: sigmarun\n"
                                              "    static_configs: [{targets: ['127.0.0.1:"
                                           << job.port << "']}]\n";
    pid = spawn(
        {"prometheus", "--config.file=" + dir + "/prometheus.yml", "--storage.tsdb.path=" + dir + "/tsdb",
         "--web.listen-address=127.0.0.1:" + std::to_string(port)},
        dir + "/prometheus.log");
  }
  ~Prometheus() {
    if (pid > 0) stop(pid);
  }
  // Installed, so its exit is a failure (a bad config too).
  bool exited() {
    if (pid > 0 && ::waitpid(pid, nullptr, WNOHANG) == pid) pid = -1;
    return pid < 0;
  }
  std::string log() const { return read_file(dir + "/prometheus.log"); }
  // The server's answer to an instant query (POSTed as a form: no URL
  // encoding); null when it did not answer with JSON.
  json query(const std::string& expr) const {
    httplib::Client c("127.0.0.1", port);
    auto r = c.Post("/api/v1/query", httplib::Params{{"query", expr}});
    if (!r) return nullptr;
    json j = json::parse(r->body, nullptr, false);
    return j.is_discarded() ? json() : j;
  }
};

// The number of series an answer holds; -1 for an error or no answer.
int series_in(const json& answer) {
  if (!answer.is_object() || answer.value("status", "") != "success") return -1;
  return static_cast<int>(answer["data"]["result"].size());
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
  if (!prometheus_installed()) GTEST_SKIP() << "no prometheus binary";
  Job job("prometheus");
  ASSERT_GT(job.port, 0);
  ASSERT_FALSE(job.metrics().empty());
  Prometheus prom(job);
  json steps, util;
  for (int i = 0; i < 300; ++i) {  // 30 s: start, first scrape
    std::this_thread::sleep_for(100ms);
    if (prom.exited()) FAIL() << "prometheus exited early:\n" << prom.log();
    json a = prom.query("sigma_steps_total"), b = prom.query("DCGM_FI_DEV_GPU_UTIL");
    if (series_in(a) < 0 || series_in(b) < 0) continue;
    steps = std::move(a);
    util = std::move(b);
    if (series_in(steps) > 0 && series_in(util) == 3) break;
  }
  ASSERT_FALSE(steps.is_null()) << prom.log();
  ASSERT_EQ(steps["data"]["result"].size(), 1u) << steps.dump();
  EXPECT_GT(std::stod(steps["data"]["result"][0]["value"][1].get<std::string>()), 0) << steps.dump();
  EXPECT_EQ(util["data"]["result"].size(), 3u) << "a series per device: " << util.dump();
}

// --- The Grafana dashboard -------------------------------------------------

// The sample names an exposition's families allow, each with its family's
// type: the `# TYPE` name, a counter's "_total" (OpenMetrics names the
// family without it), a histogram's and a summary's series.
std::map<std::string, std::string> served_names(const std::string& exposition) {
  std::map<std::string, std::string> names;
  std::istringstream in(exposition);
  for (std::string line; std::getline(in, line);) {
    std::istringstream w(line);
    std::string hash, keyword, name, type;
    if (!(w >> hash >> keyword >> name >> type) || hash != "#" || keyword != "TYPE") continue;
    std::vector<std::string> suffixes{""};
    if (type == "counter" && !name.ends_with("_total")) suffixes.push_back("_total");
    if (type == "histogram") suffixes.push_back("_bucket");
    if (type == "histogram" || type == "summary") suffixes.insert(suffixes.end(), {"_sum", "_count"});
    for (const auto& s : suffixes) names[name + s] = type;
  }
  return names;
}

// `expr` with its strings and what its {...} and [...] hold blanked out:
// label matchers, Grafana variables and durations name no metric.
std::string blank_matchers(const std::string& expr) {
  std::string out(expr.size(), ' ');
  char quote = 0;
  int depth = 0;
  for (size_t i = 0; i < expr.size(); ++i) {
    const char c = expr[i];
    if (quote != 0) {
      if (c == '\\' && quote != '`')
        ++i;
      else if (c == quote)
        quote = 0;
    } else if (c == '"' || c == '\'' || c == '`') {
      quote = c;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      --depth;
    } else if (depth == 0) {
      out[i] = c;
    }
  }
  return out;
}

bool identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }

// The metric names a PromQL expression selects: its identifiers less
// functions and aggregations (followed by '('), keywords, and the label
// lists of by/without/on/ignoring/group_left/group_right.
std::set<std::string> metric_names(const std::string& expr) {
  static const std::set<std::string> kLabelLists{"by",       "without",    "on",
                                                 "ignoring", "group_left", "group_right"};
  static const std::set<std::string> kKeywords{
      "by",     "without",  "on",     "ignoring", "group_left", "group_right",  "bool",
      "offset", "and",      "or",     "unless",   "sum",        "min",          "max",
      "avg",    "group",    "stddev", "stdvar",   "count",      "count_values", "bottomk",
      "topk",   "quantile", "atan2",  "inf",      "nan"};
  const std::string e = blank_matchers(expr);
  std::set<std::string> names;
  for (size_t i = 0; i < e.size();) {
    size_t j = i;
    while (j < e.size() && identifier_char(e[j])) ++j;
    if (j == i) {
      ++i;
      continue;
    }
    const std::string word = e.substr(i, j - i);
    const size_t next = e.find_first_not_of(" \t\n", j);
    const bool call = next != std::string::npos && e[next] == '(';
    if (call && kLabelLists.count(word)) {
      j = std::min(e.size(), e.find(')', next));
    } else if (!call && !kKeywords.count(word) && !std::isdigit(static_cast<unsigned char>(word[0]))) {
      names.insert(word);  // not a number or a duration either (1m, 0.5, 1e3)
    }
    i = j;
  }
  return names;
}

// Every panel, rows' panels included.
std::vector<json> panels_of(const json& dashboard) {
  std::vector<json> out;
  for (const json& p : dashboard.value("panels", json::array())) {
    out.push_back(p);
    for (const json& q : p.value("panels", json::array())) out.push_back(q);
  }
  return out;
}

json dashboard() {
  std::ifstream f(SIGMA_GRAFANA_DASHBOARD);
  return json::parse(f);  // throws, failing the test, on a file that is not JSON
}

// An expression as Grafana sends it: $__rate_interval as a window, the
// job's and instance's variables as "All" (.*).
std::string as_grafana_sends(const std::string& expr) {
  const std::string e = std::regex_replace(expr, std::regex(R"(\$\{?__rate_interval\}?)"), "1m");
  return std::regex_replace(e, std::regex(R"(\$\{?[A-Za-z_]\w*\}?)"), ".*");
}

TEST(Metrics, DashboardMetricNamesSkipLabelsFunctionsAndKeywords) {
  EXPECT_EQ(
      metric_names("sum by (instance, cause) (rate(a_total{job=~\"$job\",x=\"b{c}\"}[$__rate_interval]))"),
      (std::set<std::string>{"a_total"}));
  EXPECT_EQ(metric_names("max by (d) ((b{state=\"on\"} == 1) * 2 or c offset 5m) / on(d) group_left(e) f"),
            (std::set<std::string>{"b", "c", "f"}));
  EXPECT_EQ(served_names("# TYPE x_total counter\n# TYPE y counter\n# TYPE h histogram\nx_total 1\n"),
            (std::map<std::string, std::string>{{"x_total", "counter"},
                                                {"y", "counter"},
                                                {"y_total", "counter"},
                                                {"h", "histogram"},
                                                {"h_bucket", "histogram"},
                                                {"h_sum", "histogram"},
                                                {"h_count", "histogram"}}));
  EXPECT_EQ(as_grafana_sends("rate(x{job=~\"$job\"}[$__rate_interval])"), "rate(x{job=~\".*\"}[1m])");
}

TEST(Metrics, TheDashboardHasEachRequiredPanelOnce) {
  std::map<std::string, int> titles;
  for (const json& p : panels_of(dashboard())) ++titles[p.value("title", "")];
  for (const char* t :
       {"Steps per second", "Tokens per second", "Goodput", "Time lost by cause", "Incidents",
        "Device health states", "Device temperature", "Device power", "ECC errors", "Link errors"})
    EXPECT_EQ(titles[t], 1) << t;
}

// One panel's queries against a live job's families: each names at least
// one, only served ones, a counter only under rate() or increase(), and
// every window is $__rate_interval.
void expect_served(const json& panel, const std::map<std::string, std::string>& served) {
  const std::string title = panel.value("title", "");
  ASSERT_FALSE(panel.value("targets", json::array()).empty()) << title;
  for (const json& t : panel["targets"]) {
    const std::string expr = t.value("expr", "");
    const std::set<std::string> names = metric_names(expr);
    EXPECT_FALSE(names.empty()) << title << ": " << expr;
    for (const std::string& n : names) {
      const auto it = served.find(n);
      EXPECT_TRUE(it != served.end()) << title << ": " << n << " is not served";
      if (it == served.end() || it->second != "counter") continue;
      EXPECT_TRUE(expr.find("rate(" + n) != std::string::npos ||
                  expr.find("increase(" + n) != std::string::npos)
          << title << ": the counter " << n << " outside rate()/increase()";
    }
    size_t windows = 0;
    for (size_t at = expr.find('['); at != std::string::npos; at = expr.find('[', at + 1)) ++windows;
    size_t rate_windows = 0;
    for (size_t at = expr.find("[$__rate_interval]"); at != std::string::npos;
         at = expr.find("[$__rate_interval]", at + 1))
      ++rate_windows;
    EXPECT_EQ(windows, rate_windows) << title << ": a window other than $__rate_interval: " << expr;
  }
}

// Waits (30 s at most) for three scrapes of the job: every rate() and
// increase() then has two samples in its window.
bool scraped_thrice(Prometheus& prom) {
  for (int i = 0; i < 300; ++i) {
    if (series_in(prom.query("count_over_time(sigma_steps_total[1m]) >= 3")) > 0) return true;
    if (prom.exited()) return false;
    std::this_thread::sleep_for(100ms);
  }
  return false;
}

// The job runs on the sim vendor (samples/scenarios/healthy.yaml): it
// reports every telemetry field, where the cpu vendor has no temperature,
// power or ECC on a host without hwmon, powercap or EDAC.
TEST(Metrics, EveryDashboardPanelQueriesAMetricTheJobServes) {
  const json d = dashboard();
  Job job("dashboard", {"--vendor", "sim", "--vendor-options",
                        "scenario=" SIGMA_SCENARIO_DIR "/healthy.yaml;rank={device}"});
  ASSERT_GT(job.port, 0) << "no metrics.json in " << job.dir;
  const std::string body = job.metrics();
  ASSERT_FALSE(body.empty()) << "no progress on /metrics";
  const auto served = served_names(body);
  for (const json& p : panels_of(d))
    if (p.value("type", "") != "row") expect_served(p, served);
  if (!prometheus_installed()) GTEST_SKIP() << "no prometheus binary: the queries were not sent to one";
  Prometheus prom(job);
  ASSERT_TRUE(scraped_thrice(prom)) << prom.log();
  for (const json& p : panels_of(d))
    for (const json& t : p.value("targets", json::array())) {
      const std::string expr = as_grafana_sends(t.value("expr", ""));
      const json answer = prom.query(expr);
      EXPECT_GT(series_in(answer), 0) << p.value("title", "") << ": " << expr << "\n" << answer.dump();
    }
}

}  // namespace
