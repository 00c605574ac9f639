// The agent's host: everything around the Coordinator that touches the
// world. One thread owns it all: it polls the listening sockets, the
// workers' and node agents' channels and a self-pipe woken by SIGCHLD (so a
// crash is seen the moment the process is reaped) and by request_stop(),
// feeds each event to the coordinator with the clock, and carries out the
// commands that come back: spawn, send, signal, disconnect, journal.
#include "journal_records.hpp"
#include "runtime/agent/host_impl.hpp"
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

namespace {

DiskHoldings disk_holdings(const std::string& job_dir) {
  // The workers' checkpoint engines save below DIR/checkpoints, job "sigmarun".
  DiskHoldings out;
  for (const auto& st : checkpoint::list_steps(job_dir + "/checkpoints/sigmarun")) {
    for (uint32_t r : st.ranks) out[r].insert(st.step);
  }
  return out;
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
  env.reserve(24);  // also spares GCC 12 a false -Warray-bounds on the first insert's growth
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
  if (o.tier_memory_bytes > 0)
    env.emplace_back("SIGMA_TIER_MEMORY_BYTES", std::to_string(o.tier_memory_bytes));
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
  journal->write(journal::encode(journal::Launch{device, 0u, pids[device]}));
}

// Rank 0's step: the series, and a numerics decision in the journal.
void Agent::Impl::step_done(const protocol::StepDone& s) {
  const double t = now();
  series.step(t, s);
  tokens_total += s.tokens;
  if (s.tokens && s.seconds > 0) tokens_per_s = static_cast<double>(s.tokens) / s.seconds;
  last_step = s;
  if (!s.note.empty()) {
    series.note(t, s.step, s.note);
    journal->write(journal::encode(journal::Numerics{s.step, s.note}));
  }
}

void Agent::Impl::progress_tick() {
  const double t = now();
  if (t - last_progress < 1.0) return;
  last_progress = t;
  MetricsSnapshot snap = core->metrics(t);
  snap.inbound = inbound;
  snap.tokens = tokens_total;
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
  std::optional<ContainedOptions> contained;
  if (o.recovery == AgentOptions::Recovery::contained)
    contained = ContainedOptions{o.replica_size};
  else if (o.replica_size > 0)  // the layout alone: the workers' groups, exact recovery
    contained = ContainedOptions{o.replica_size, ContainedOptions{}.boundary_lead, false};
  core = std::make_unique<Coordinator>(o, disk_holdings(o.job_dir), now(), contained);
  workers.resize(core->devices());
  pids.assign(core->devices(), -1);
  tokens.assign(core->devices(), "");
  nodes.resize(o.nnodes);
  journal->write(journal::encode(
      journal::Start{.job_id = o.job_id,
                     .nproc = o.nproc,
                     .spares = o.spares,
                     .nnodes = o.nnodes,
                     .nodes_per_group = o.nodes_per_group,
                     .min_world = o.min_world,
                     .snapshot_every = o.snapshot_every,
                     .checkpoint_every = o.checkpoint_every,
                     .proactive_migration = o.proactive_migration,
                     .allow_shrink = o.allow_shrink,
                     .recovery = o.recovery == AgentOptions::Recovery::contained ? "contained" : "exact",
                     .replica_size = o.replica_size,
                     .vendor = o.vendor,
                     .store = store_uri,
                     .agent = tcp_addr,
                     .vendor_options = o.vendor_options,
                     .worker = o.worker}));
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
  report["control_plane"] = {{"inbound", inbound.to_json(wall)}};
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
  journal->write(journal::encode(journal::End{core->status(), why, {}}));
  if (metrics) {
    MetricsSnapshot last = core->metrics(wall);
    last.inbound = inbound;
    last.tokens = tokens_total;
    metrics->publish(last);
  }
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
