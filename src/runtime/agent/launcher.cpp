#include "runtime/agent/launcher.hpp"

#include <sigma/error.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <set>

extern char** environ;

namespace sigma::runtime::agent {

std::string control_store_uri(const AgentOptions& o) {
  std::string base = o.store;
  if (base.rfind("redis://", 0) == 0) {
    // redis://host:port[/prefix] -> redis://host:port/prefix-sigmarun-ID
    const auto slash = base.find('/', 8);
    const std::string prefix = slash == std::string::npos ? "" : base.substr(slash + 1) + "-";
    return base.substr(0, slash) + "/" + prefix + "sigmarun-" + o.job_id;
  }
  if (base.rfind("file://", 0) == 0) base = base.substr(7);
  return "file://" + base + "/sigmarun-" + o.job_id;
}

std::string root_record_text(const std::string& job_id, const std::string& addr, const std::string& nonce) {
  return "sigma-root\n" + job_id + "\n" + addr + "\n" + nonce;
}

std::string vendor_options_for(const std::string& options, uint32_t device) {
  static const std::string kDevice = "{device}";
  std::string out = options;
  for (size_t at = out.find(kDevice); at != std::string::npos; at = out.find(kDevice, at)) {
    out.replace(at, kDevice.size(), std::to_string(device));
    at += std::to_string(device).size();
  }
  return out;
}

pid_t spawn_worker(const AgentOptions& o, uint32_t device, const EnvList& given) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "SIGMA_", 6) != 0 || std::strncmp(*e, "SIGMA_HAL_PLUGIN_PATH=", 22) == 0)
      env.emplace_back(*e);
  }
  for (const auto& [k, v] : given) env.push_back(k + "=" + v);
  env.push_back("SIGMA_JOB_DIR=" + o.job_dir);
  env.push_back("SIGMA_HAL_PLUGIN=" + o.vendor);
  if (!o.secret.empty()) env.push_back("SIGMA_JOB_SECRET=" + o.secret);
  if (!o.vendor_options.empty())
    env.push_back("SIGMA_HAL_OPTIONS=" + vendor_options_for(o.vendor_options, device));
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = o.worker;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  const std::string log = o.job_dir + "/logs/device-" + std::to_string(device) + ".log";
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0)
    throw Error(Code::invalid_argument, "sigmarun: cannot start " + args[0] + ": " + std::strerror(rc));
  return pid;
}

namespace {

int g_pipe[2] = {-1, -1};

void on_sigchld(int) { wake(); }

}  // namespace

void wake() noexcept {
  if (g_pipe[1] < 0) return;
  const int saved = errno;
  const char c = 1;
  (void)!::write(g_pipe[1], &c, 1);
  errno = saved;
}

int wake_pipe() {
  if (g_pipe[0] >= 0) return g_pipe[0];
  if (::pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw Error(Code::internal, std::string("agent: pipe: ") + std::strerror(errno));
  }
  struct sigaction sa {};
  sa.sa_handler = on_sigchld;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  ::sigaction(SIGCHLD, &sa, nullptr);
  return g_pipe[0];
}

void drain_wake_pipe() {
  char drain[64];
  while (::read(g_pipe[0], drain, sizeof drain) > 0) {
  }
}

std::pair<EnvList, std::vector<std::string>> allowed_env(const EnvList& given) {
  static const std::set<std::string> kAllowed = {"SIGMA_AGENT_SOCKET",    "SIGMA_DEVICE",
                                                 "SIGMA_STORE",           "SIGMA_HEARTBEAT_S",
                                                 "SIGMA_SNAPSHOT_EVERY",  "SIGMA_CHECKPOINT_EVERY",
                                                 "SIGMA_SNAPSHOT_KEEP",   "SIGMA_CHECKPOINT_BASE_EVERY",
                                                 "SIGMA_CHECKPOINT_KEEP", "SIGMA_RANK",
                                                 "SIGMA_WORLD_SIZE",      "SIGMA_WORKER_TOKEN",
                                                 "SIGMA_CHECKPOINT_ASYNC"};
  std::pair<EnvList, std::vector<std::string>> out;
  for (const auto& [k, v] : given) {
    if (kAllowed.count(k)) {
      out.first.emplace_back(k, v);
    } else {
      out.second.push_back(k);
    }
  }
  return out;
}

}  // namespace sigma::runtime::agent
