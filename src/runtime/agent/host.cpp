// The agent's host: everything around the Coordinator that touches the
// world. One thread owns it all: it polls the listening sockets, the
// workers' and node agents' channels and a self-pipe woken by SIGCHLD (so a
// crash is seen the moment the process is reaped) and by request_stop(),
// feeds each event to the coordinator with the clock, and carries out the
// commands that come back: spawn, send, signal, disconnect, journal.
#include "runtime/agent/coordinator.hpp"
#include "runtime/agent/journal.hpp"
#include "runtime/agent/launcher.hpp"
#include "runtime/agent/metrics.hpp"
#include "runtime/agent/preflight.hpp"
#include "runtime/agent/series.hpp"
#include "runtime/channel.hpp"
#include "runtime/job_key.hpp"
#include "runtime/protocol.hpp"

#include <sigma/agent.hpp>
#include <sigma/bootstrap.hpp>
#include <sigma/checkpoint.hpp>
#include <sigma/error.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace sigma::runtime {

using json = nlohmann::json;
using namespace agent;
namespace fs = std::filesystem;

struct Agent::Impl {
  AgentOptions o;
  AgentObserver observer;
  std::atomic<int> stop_request{0};
  double t0 = health::monotonic_s();
  std::unique_ptr<Coordinator> core;
  std::unique_ptr<Journal> journal;
  std::unique_ptr<MetricsServer> metrics;
  std::vector<std::unique_ptr<Channel>> workers;  // [device]
  std::vector<pid_t> pids;                        // [device], on its host
  std::vector<std::string> tokens;                // [device]: its launch's SIGMA_WORKER_TOKEN
  std::vector<std::unique_ptr<Channel>> nodes;    // [node] -> its agent (1..nnodes-1)
  std::vector<std::unique_ptr<Channel>> pending;  // connected, not yet greeted
  int listen_fd = -1, tcp_fd = -1;
  std::string tcp_addr, store_uri;
  std::optional<JobKey> key;  // from o.secret: every connection authenticated
  int stop_seen = 0;
  double last_progress = 0;
  Series series;
  std::optional<protocol::StepDone> last_step;  // rank 0's latest, for the progress line
  double tokens_per_s = 0;

  double now() const { return health::monotonic_s() - t0; }
  int run();
  void open_endpoints();
  void carry_out(Commands commands);
  void spawn(uint32_t device);
  void greeted(std::unique_ptr<Channel> ch, const json& first);
  void read_messages(uint32_t device);
  void node_messages(uint32_t node);
  void reap();
  void poll_once(int wake_fd);
  void progress_tick();
  void step_done(const protocol::StepDone& s);
  void finish();
};

namespace {

DiskHoldings disk_holdings(const std::string& job_dir) {
  // The workers' checkpoint engines save below DIR/checkpoints, job "sigmarun".
  DiskHoldings out;
  for (const auto& st : checkpoint::list_steps(job_dir + "/checkpoints/sigmarun")) {
    for (uint32_t r : st.ranks) out[r].insert(st.step);
  }
  return out;
}

// Every run's rendezvous keys live apart (a job folder or a Redis is used
// again by a resumed run, or by other jobs): stale keys never mix in.
std::string store_for_run(const AgentOptions& o, const std::string& run_id) {
  if (o.store.empty()) return "file://" + o.job_dir + "/store/run-" + run_id;
  if (o.store.rfind("redis://", 0) == 0) {
    const auto slash = o.store.find('/', 8);
    return o.store.substr(0, slash) + "/" +
           (slash == std::string::npos ? std::string() : o.store.substr(slash + 1) + "-") + "sigmarun-" +
           run_id;
  }
  return (o.store.rfind("file://", 0) == 0 ? o.store : "file://" + o.store) + "/run-" + run_id;
}

}  // namespace

void Agent::Impl::carry_out(Commands commands) {
  for (auto& c : commands) {
    if (auto* r = std::get_if<Record>(&c)) {
      journal->write(r->entry);
    } else if (auto* s = std::get_if<SendTo>(&c)) {
      if (workers[s->device]) workers[s->device]->send(protocol::encode(s->message));
    } else if (auto* k = std::get_if<SignalWorker>(&c)) {
      const uint32_t n = core->node_of(k->device);
      if (n == 0 && pids[k->device] > 0)
        ::kill(pids[k->device], k->signal);
      else if (n != 0 && nodes[n])
        nodes[n]->send(protocol::encode(protocol::Kill{k->device, k->signal}));
    } else if (auto* d = std::get_if<Disconnect>(&c)) {
      workers[d->device].reset();
    } else if (auto* w = std::get_if<SpawnWorker>(&c)) {
      spawn(w->device);
    }
  }
}

namespace {

// 128 random bits, hex: what a launched worker proves itself with.
std::string random_token() {
  uint8_t b[16];
  for (size_t got = 0; got < sizeof b;) {
    const ssize_t n = ::getrandom(b + got, sizeof b - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(Code::internal, std::string("getrandom: ") + std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  char hex[33];
  for (size_t i = 0; i < sizeof b; ++i) std::snprintf(hex + 2 * i, 3, "%02x", b[i]);
  return hex;
}

}  // namespace

void Agent::Impl::spawn(uint32_t device) {
  const uint32_t node = core->node_of(device);
  EnvList env;
  env.emplace_back("SIGMA_AGENT_SOCKET", node == 0 ? o.job_dir + "/agent.sock" : tcp_addr);
  env.emplace_back("SIGMA_DEVICE", std::to_string(device));
  env.emplace_back("SIGMA_STORE", store_uri);
  env.emplace_back("SIGMA_HEARTBEAT_S", std::to_string(o.heartbeat_s));
  env.emplace_back("SIGMA_SNAPSHOT_EVERY", std::to_string(o.snapshot_every));
  env.emplace_back("SIGMA_CHECKPOINT_EVERY", std::to_string(o.checkpoint_every));
  env.emplace_back("SIGMA_SNAPSHOT_KEEP", std::to_string(o.snapshot_keep));
  env.emplace_back("SIGMA_CHECKPOINT_BASE_EVERY", std::to_string(o.checkpoint_base_every));
  env.emplace_back("SIGMA_CHECKPOINT_KEEP", std::to_string(o.checkpoint_keep));
  env.emplace_back("SIGMA_CHECKPOINT_ASYNC", o.checkpoint_async ? "1" : "0");
  tokens[device] = random_token();
  env.emplace_back("SIGMA_WORKER_TOKEN", tokens[device]);
  // A plain program (no session) still learns its place, torchrun-style.
  // Spares learn the launch world too (a trainer sizes its state from it).
  if (device < core->world()) env.emplace_back("SIGMA_RANK", std::to_string(device));
  env.emplace_back("SIGMA_WORLD_SIZE", std::to_string(core->world()));
  if (node != 0) {
    nodes[node]->send(protocol::encode(protocol::Spawn{device, env}));
    return;
  }
  // Throws when the program cannot be started: the job cannot start.
  pids[device] = spawn_worker(o, device, env);
  journal->write({{"event", "launch"}, {"device", device}, {"node", 0}, {"pid", pids[device]}});
}

// The first message on a new connection: a worker's hello (its device and
// admission verdict) or another host's agent. Anything else, a malformed
// greeting, a peer of another protocol version or a device that is not
// expected is refused, journalled with the reason.
void Agent::Impl::greeted(std::unique_ptr<Channel> ch, const json& first) {
  auto refuse = [&](const std::string& why) {
    journal->write({{"event", "refused_connection"}, {"reason", why}, {"message", first}});
    ch->send(protocol::encode(protocol::Goodbye{"refused: " + why}));
  };
  protocol::Greeting g;
  try {
    g = protocol::decode_greeting(first);
  } catch (const Error& e) {
    return refuse(e.what());
  }
  const uint32_t version = std::visit([](const auto& x) { return x.version; }, g);
  if (auto why = protocol::refusal(version)) return refuse(*why);
  if (const auto* node = std::get_if<protocol::NodeHello>(&g)) {
    // Another host's agent: it starts that node's workers for us.
    const uint32_t n = node->node;
    if (n == 0 || n >= o.nnodes || nodes[n] || core->finished())
      return refuse("node " + std::to_string(n) + " is not one this job waits for");
    nodes[n] = std::move(ch);
    journal->write({{"event", "node_joined"}, {"node", n}});
    carry_out(core->node_joined(n, now()));
    return;
  }
  const auto& hello = std::get<protocol::Hello>(g);
  if (!core->expects_hello(hello.device))
    return refuse("device " + std::to_string(hello.device) + " is not one this agent is starting");
  if (hello.device >= tokens.size() || hello.token != tokens[hello.device])
    return refuse("device " + std::to_string(hello.device) +
                  ": the greeting lacks the token of the process this agent started (SIGMA_WORKER_TOKEN)");
  workers[hello.device] = std::move(ch);
  carry_out(core->hello(hello, now()));
}

void Agent::Impl::read_messages(uint32_t device) {
  while (workers[device]) {
    auto m = workers[device]->receive_ready();
    if (!m) break;
    try {
      const protocol::WorkerMessage message = protocol::decode_worker(*m);
      if (const auto* s = std::get_if<protocol::StepDone>(&message); s && core->rank(device) == 0)
        step_done(*s);
      carry_out(core->message(device, message, now()));
    } catch (const Error& e) {
      // A worker's malformed message must not take the job down with it.
      journal->write({{"event", "bad_message"}, {"device", device}, {"error", e.what()}, {"message", *m}});
    }
  }
}

void Agent::Impl::node_messages(uint32_t n) {
  auto& ch = nodes[n];
  while (ch) {
    auto m = ch->receive_ready();
    if (!m) break;
    try {
      const protocol::NodeMessage msg = protocol::decode_node(*m);
      if (const auto* l = std::get_if<protocol::Launched>(&msg)) {
        if (l->device >= pids.size() || core->node_of(l->device) != n) continue;
        pids[l->device] = static_cast<pid_t>(l->pid);
        journal->write({{"event", "launch"}, {"device", l->device}, {"node", n}, {"pid", l->pid}});
      } else if (const auto* x = std::get_if<protocol::Exited>(&msg)) {
        if (x->device >= pids.size() || core->node_of(x->device) != n) continue;
        read_messages(x->device);  // whatever it sent before it died still counts
        pids[x->device] = -1;
        carry_out(core->exited(x->device, x->end, now()));
      }
    } catch (const Error& e) {
      journal->write({{"event", "bad_message"}, {"node", n}, {"error", e.what()}, {"message", *m}});
    }
  }
  if (ch && ch->closed()) {
    ch.reset();
    journal->write({{"event", "node_lost"}, {"node", n}});
    for (uint32_t d = 0; d < core->devices(); ++d) {
      if (core->node_of(d) == n && core->alive(d)) {
        read_messages(d);
        pids[d] = -1;
        carry_out(core->exited(d, protocol::ProcessEnd::lost_with_node(n), now()));
      }
    }
  }
}

void Agent::Impl::reap() {
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    for (uint32_t d = 0; d < pids.size(); ++d) {
      if (core->node_of(d) == 0 && pids[d] == pid) {
        read_messages(d);  // whatever it sent before it died still counts
        pids[d] = -1;
        carry_out(core->exited(d, protocol::ProcessEnd::of_wait_status(status), now()));
        break;
      }
    }
  }
}

void Agent::Impl::open_endpoints() {
  fs::create_directories(o.job_dir + "/logs");
  const std::string run_id =
      std::to_string(::getpid()) + "-" + std::to_string(static_cast<uint64_t>(health::monotonic_s() * 1e9));
  store_uri = store_for_run(o, run_id);
  journal = std::make_unique<Journal>(o.job_dir + "/incidents.jsonl", t0, observer);
  listen_fd = listen_unix(o.job_dir + "/agent.sock");
  ::fcntl(listen_fd, F_SETFL, O_NONBLOCK);
  if (o.nnodes > 1) {
    // Agents and workers on other hosts reach this one over TCP; they find
    // the address in the job's control store. The workers' rendezvous keys
    // get a fresh prefix per run, so stale keys of an earlier run never mix.
    int port = 0;
    tcp_fd = listen_tcp(o.host, &port);
    ::fcntl(tcp_fd, F_SETFL, O_NONBLOCK);
    tcp_addr = "tcp://" + o.host + ":" + std::to_string(port);
    const std::string nonce =
        std::to_string(::getpid()) + "-" + std::to_string(static_cast<uint64_t>(health::monotonic_s() * 1e6));
    store_uri = control_store_uri(o) + "-" + nonce;
    // Signed with the job's key: a follower connects only to a root that
    // holds the job's secret, whoever else can write the store.
    const std::string root = json{{"addr", tcp_addr},
                                  {"nonce", nonce},
                                  {"mac", mac_hex(*key, root_record_text(o.job_id, tcp_addr, nonce))}}
                                 .dump();
    bootstrap::open_store(control_store_uri(o))->set("root", std::vector<uint8_t>(root.begin(), root.end()));
  }
  if (o.metrics_port >= 0) {
    metrics = std::make_unique<MetricsServer>(o.metrics_port);
    std::fprintf(stderr, "sigmarun: metrics on http://127.0.0.1:%d/metrics\n", metrics->port());
    write_json_file(o.job_dir + "/metrics.json", {{"port", metrics->port()}});
  }
}

void Agent::Impl::poll_once(int wake_fd) {
  std::vector<pollfd> fds;
  fds.push_back({listen_fd, POLLIN, 0});
  fds.push_back({wake_fd, POLLIN, 0});
  if (tcp_fd >= 0) fds.push_back({tcp_fd, POLLIN, 0});
  for (auto& n : nodes) {
    if (n) fds.push_back({n->fd(), POLLIN, 0});
  }
  for (auto& p : pending) fds.push_back({p->fd(), POLLIN, 0});
  for (auto& w : workers) {
    if (w) fds.push_back({w->fd(), POLLIN, 0});
  }
  ::poll(fds.data(), fds.size(), 20);
  drain_wake_pipe();
  for (int lfd : {listen_fd, tcp_fd}) {
    if (lfd < 0) continue;
    for (;;) {
      const int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) break;
      pending.push_back(std::make_unique<Channel>(fd));
      if (key) pending.back()->authenticate(*key, /*client=*/false);
    }
  }
  // Greetings: the first message names the device.
  for (auto it = pending.begin(); it != pending.end();) {
    auto m = (*it)->receive_ready();
    if ((*it)->closed()) {
      if ((*it)->oversized())
        journal->write(
            {{"event", "refused_connection"}, {"reason", "a line over 1 MiB before its greeting"}});
      it = pending.erase(it);
      continue;
    }
    if (!m) {
      ++it;
      continue;
    }
    std::unique_ptr<Channel> ch = std::move(*it);
    it = pending.erase(it);
    greeted(std::move(ch), *m);
  }
  for (uint32_t d = 0; d < workers.size(); ++d) {
    if (!workers[d]) continue;
    read_messages(d);
    // The channel broke before the exit was reaped: the exit decides.
    if (workers[d] && workers[d]->oversized())
      journal->write(
          {{"event", "bad_message"}, {"device", d}, {"error", "a line over 1 MiB: connection closed"}});
    if (workers[d] && workers[d]->closed()) workers[d].reset();
  }
  reap();
  for (uint32_t n = 1; n < nodes.size(); ++n) node_messages(n);
}

// Rank 0's step: the series, and a numerics decision in the journal.
void Agent::Impl::step_done(const protocol::StepDone& s) {
  const double t = now();
  series.step(t, s);
  if (s.tokens && s.seconds > 0) tokens_per_s = static_cast<double>(s.tokens) / s.seconds;
  last_step = s;
  if (!s.note.empty()) {
    series.note(t, s.step, s.note);
    journal->write({{"event", "numerics"}, {"step", s.step}, {"note", s.note}});
  }
}

void Agent::Impl::progress_tick() {
  const double t = now();
  if (t - last_progress < 1.0) return;
  last_progress = t;
  const MetricsSnapshot snap = core->metrics(t);
  series.devices(t, snap);
  if (metrics) metrics->publish(snap);
  if (!o.progress) return;
  const size_t incidents = core->incidents().size() + (core->recovering() ? 1 : 0);
  char figures[96] = "";
  if (last_step && last_step->loss)
    std::snprintf(figures, sizeof figures, " | loss %.3f | %.0f tokens/s", *last_step->loss, tokens_per_s);
  std::fprintf(stderr, "sigmarun: %6.1f s | step %llu%s | world %u | spares %zu | incidents %zu%s\n", t,
               static_cast<unsigned long long>(core->reached()), figures, core->world_size(), core->spares(),
               incidents, core->recovering() ? " | recovering" : "");
}

int Agent::Impl::run() {
  JobDirLock lock(o.job_dir);  // before anything is written there
  if (const int sig = preflight_vendor(o, [this] { return stop_request.load(); }); sig != 0) {
    std::fprintf(stderr, "sigmarun: stopped by %s during the pre-flight (loading vendor '%s'): nothing ran\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM", o.vendor.c_str());
    return 128 + sig;
  }
  open_endpoints();
  const int wake_fd = wake_pipe();
  core = std::make_unique<Coordinator>(o, disk_holdings(o.job_dir), now());
  workers.resize(core->devices());
  pids.assign(core->devices(), -1);
  tokens.assign(core->devices(), "");
  nodes.resize(o.nnodes);
  journal->write({{"event", "start"},
                  {"job_id", o.job_id},
                  {"nproc", o.nproc},
                  {"spares", o.spares},
                  {"nnodes", o.nnodes},
                  {"nodes_per_group", o.nodes_per_group},
                  {"snapshot_every", o.snapshot_every},
                  {"checkpoint_every", o.checkpoint_every},
                  {"proactive_migration", o.proactive_migration},
                  {"allow_shrink", o.allow_shrink},
                  {"min_world", o.min_world},
                  {"vendor", o.vendor},
                  {"store", store_uri},
                  {"agent", tcp_addr},
                  {"vendor_options", o.vendor_options},
                  {"worker", o.worker}});
  carry_out(core->start(now()));
  while (!core->over()) {
    poll_once(wake_fd);
    if (const int sig = stop_request.load(); sig != 0 && sig != stop_seen) {
      stop_seen = sig;
      carry_out(core->stop_requested(sig, now()));
    }
    carry_out(core->tick(now()));
    progress_tick();
  }
  finish();
  return core->exit_code();
}

void Agent::Impl::finish() {
  for (auto& n : nodes) {
    if (n) n->send(protocol::encode(protocol::NodeGoodbye{core->exit_code(), {}}));
  }
  const double wall = now();
  json report = core->report(wall);
  // Every *_s time here and in the journal counts from this CLOCK_MONOTONIC
  // reading, so that a worker's own stamps can be set beside them.
  report["clock_origin_monotonic_s"] = t0;
  report["series"] = series.to_json();
  write_json_file(o.job_dir + "/report.json", report);
  const auto& storage = report["storage"];
  if (storage["failed_saves"].get<uint64_t>() > 0)
    std::fprintf(stderr, "sigmarun: the disk tier is failing: %llu checkpoint save(s) failed, the last: %s\n",
                 static_cast<unsigned long long>(storage["failed_saves"].get<uint64_t>()),
                 storage["last_error"].get<std::string>().c_str());
  const std::string& why = core->reason();
  std::fprintf(stderr, "sigmarun: %s after %llu steps in %.2f s%s%s; goodput %.3f; report: %s/report.json\n",
               core->status().c_str(), static_cast<unsigned long long>(core->reached()), wall,
               why.empty() ? "" : ": ", why.c_str(), report["ledger"]["goodput"].get<double>(),
               o.job_dir.c_str());
  for (const json& inc : report["incidents"]) {
    std::fprintf(stderr,
                 "  incident: %s\n    restored from %s at step %llu, %llu step(s) recomputed, back at the "
                 "reached step %.3f s after the fault\n",
                 inc.value("cause", std::string("?")).c_str(), inc.value("restore", std::string("-")).c_str(),
                 static_cast<unsigned long long>(inc.value("index", uint64_t{0})),
                 static_cast<unsigned long long>(inc.value("recomputed_steps", uint64_t{0})),
                 inc.contains("back_at_reached_step_s") && inc["back_at_reached_step_s"].is_number()
                     ? inc["back_at_reached_step_s"].get<double>()
                     : -1.0);
  }
  journal->write({{"event", "end"}, {"status", core->status()}, {"reason", why}});
  if (metrics) metrics->publish(core->metrics(wall));
  ::close(listen_fd);
  if (tcp_fd >= 0) ::close(tcp_fd);
  ::unlink((o.job_dir + "/agent.sock").c_str());
}

Agent::Agent(AgentOptions options, AgentObserver observer) : impl_(std::make_unique<Impl>()) {
  if (options.job_dir.empty()) throw Error(Code::invalid_argument, "agent: job_dir is required");
  if (options.worker.empty())
    throw Error(Code::invalid_argument, "agent: worker (the program to run) is required");
  if (options.nproc == 0 || options.nnodes == 0)
    throw Error(Code::invalid_argument, "agent: nproc and nnodes must be at least 1");
  if (options.node_rank != 0)
    throw Error(Code::invalid_argument, "agent: node_rank " + std::to_string(options.node_rank) +
                                            " is a follower: run_follower() runs it");
  options.job_dir = fs::absolute(options.job_dir).string();
  if (options.job_id.empty()) options.job_id = fs::path(options.job_dir).filename().string();
  if (options.host.empty()) options.host = "127.0.0.1";
  check_options(options);
  impl_->o = std::move(options);
  impl_->observer = std::move(observer);
  if (!impl_->o.secret.empty()) impl_->key = derive_key(impl_->o.secret);
}

Agent::~Agent() = default;

int Agent::run() { return impl_->run(); }

void Agent::request_stop(int signal) noexcept {
  impl_->stop_request.store(signal);
  wake();
}

namespace {
std::atomic<Agent*> g_signalled_agent{nullptr};
void on_stop_signal(int sig) {
  if (Agent* a = g_signalled_agent.load()) a->request_stop(sig);
}
}  // namespace

void stop_agent_on_signals(Agent& agent) {
  g_signalled_agent.store(&agent);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
}

}  // namespace sigma::runtime
