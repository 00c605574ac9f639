#include "runtime/agent/launcher.hpp"

#include "runtime/agent/journal.hpp"
#include "runtime/agent/preflight.hpp"
#include "runtime/channel.hpp"
#include "runtime/job_key.hpp"
#include "runtime/protocol.hpp"

#include <sigma/bootstrap.hpp>
#include <sigma/error.hpp>
#include <sigma/health.hpp>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

extern char** environ;

namespace sigma::runtime::agent {

using json = nlohmann::json;

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

namespace {

// Finds the root's address in the control store and connects; a key left by
// an earlier run of the same job id points nowhere and is read again. A
// record whose MAC fails (written by someone without the job's secret) is
// never connected to.
std::unique_ptr<Channel> reach_root(const AgentOptions& o, double timeout_s) {
  const JobKey key = derive_key(o.secret);
  auto store = bootstrap::open_store(control_store_uri(o));
  const double t0 = health::monotonic_s();
  std::string last, refused;
  while (health::monotonic_s() - t0 < timeout_s) {
    auto v = store->get("root", std::chrono::milliseconds(500));
    if (!v) continue;
    const auto j = json::parse(std::string(v->begin(), v->end()), nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("addr") || !j["addr"].is_string()) continue;
    const std::string addr = j["addr"].get<std::string>();
    const std::string nonce = j.value("nonce", std::string()), mac = j.value("mac", std::string());
    if (!mac_ok(key, root_record_text(o.job_id, addr, nonce), mac)) {
      refused = addr;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
    last = addr;
    try {
      auto ch = Channel::connect(last);
      ch->authenticate(key, /*client=*/true);
      return ch;
    } catch (const Error&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  throw Error(Code::unavailable,
              "sigmarun: no root agent of job '" + o.job_id + "' answered within " +
                  std::to_string(static_cast<int>(timeout_s)) + " s (store " + control_store_uri(o) +
                  (last.empty() ? "" : ", last address " + last) +
                  (refused.empty() ? ""
                                   : "; refused a root record for " + refused +
                                         " whose authentication failed: forged, or another job secret") +
                  ")");
}

}  // namespace

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

namespace sigma::runtime {

using namespace agent;

int run_follower(const AgentOptions& o) {
  check_options(o);
  JobDirLock lock(o.job_dir);
  preflight_vendor(o, [] { return 0; });  // SIGTERM ends a follower as it is
  std::filesystem::create_directories(o.job_dir + "/logs");
  Journal journal(o.job_dir + "/node.jsonl", health::monotonic_s());
  const int wake = wake_pipe();
  auto root = reach_root(o, o.validate_timeout_s * 2);
  root->send(protocol::encode(protocol::NodeHello{protocol::kVersion, o.node_rank, ::getpid()}));
  journal.write({{"event", "joined_root"}, {"node", o.node_rank}});
  std::map<pid_t, uint32_t> children;  // pid -> device
  int code = -1;
  double goodbye_at = -1;
  for (;;) {
    pollfd p[2] = {{root->fd(), POLLIN, 0}, {wake, POLLIN, 0}};
    ::poll(p, 2, 50);
    drain_wake_pipe();
    for (;;) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      auto it = children.find(pid);
      if (it == children.end()) continue;
      const auto end = protocol::ProcessEnd::of_wait_status(status);
      root->send(protocol::encode(protocol::Exited{it->second, end}));
      journal.write({{"event", "exit"}, {"device", it->second}, {"status", end.describe()}});
      children.erase(it);
    }
    while (auto m = root->receive_ready()) {
      protocol::RootMessage msg;
      try {
        msg = protocol::decode_root(*m);
      } catch (const Error& e) {
        journal.write({{"event", "bad_message"}, {"error", e.what()}, {"message", *m}});
        continue;
      }
      if (const auto* spawn = std::get_if<protocol::Spawn>(&msg)) {
        try {
          const auto [env, refused] = allowed_env(spawn->env);
          if (!refused.empty())
            journal.write(
                {{"event", "refused_env"}, {"device", spawn->device}, {"names", nlohmann::json(refused)}});
          const pid_t pid = spawn_worker(o, spawn->device, env);
          children[pid] = spawn->device;
          root->send(protocol::encode(protocol::Launched{spawn->device, pid}));
          journal.write({{"event", "launch"}, {"device", spawn->device}, {"pid", pid}});
        } catch (const Error& e) {
          root->send(
              protocol::encode(protocol::Exited{spawn->device, protocol::ProcessEnd::not_started(e.what())}));
        }
      } else if (const auto* kill = std::get_if<protocol::Kill>(&msg)) {
        for (auto& [pid, dev] : children) {
          if (dev == kill->device) ::kill(pid, kill->signal);
        }
      } else if (const auto* bye = std::get_if<protocol::NodeGoodbye>(&msg)) {
        code = bye->code;
        goodbye_at = health::monotonic_s();
        if (!bye->reason.empty())
          journal.write({{"event", "goodbye"}, {"code", code}, {"reason", bye->reason}});
      }
    }
    if (root->closed() && code < 0) {
      // The root is gone: nobody is left to coordinate these workers.
      journal.write({{"event", "root_lost"}});
      for (auto& [pid, dev] : children) ::kill(pid, SIGKILL);
      code = 4;
      goodbye_at = health::monotonic_s();
    }
    if (code >= 0) {
      if (children.empty()) break;
      if (health::monotonic_s() - goodbye_at > 10) {
        for (auto& [pid, dev] : children) ::kill(pid, SIGKILL);
      }
    }
  }
  journal.write({{"event", "end"}, {"code", code}});
  return code;
}

}  // namespace sigma::runtime
