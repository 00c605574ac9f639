// The agent's host, its connections: the listening endpoints, each new
// connection's greeting, the workers' and node agents' messages, reaping
// children, and one turn of the poll loop.
#include "journal_records.hpp"
#include "runtime/agent/host_impl.hpp"
#include "runtime/agent/launcher.hpp"

#include <sigma/bootstrap.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <filesystem>

namespace sigma::runtime {

using json = nlohmann::json;
using namespace agent;
namespace fs = std::filesystem;

namespace {

// The type a message names, for the inbound tally.
std::string type_of(const json& m) {
  auto it = m.find("type");
  return it != m.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The next message ready on `ch`, tallied in `in` as `from`'s load (a
// greeting, `from` unknown yet: a node agent's when it is one, else a
// worker's).
std::optional<json> receive_counted(Channel& ch, std::optional<Inbound::Source> from, Inbound& in) {
  const uint64_t before = ch.bytes_read();
  auto m = ch.receive_ready();
  const std::string type = m ? type_of(*m) : std::string();
  const Inbound::Source source =
      from.value_or(type == "node" ? Inbound::Source::node_agent : Inbound::Source::worker);
  in.bytes(source, ch.bytes_read() - before);
  if (m) in.message(source, type);
  return m;
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

// The first message on a new connection: a worker's hello (its device and
// admission verdict) or another host's agent. Anything else, a malformed
// greeting, a peer of another protocol version or a device that is not
// expected is refused, journalled with the reason.
void Agent::Impl::greeted(std::unique_ptr<Channel> ch, const json& first) {
  auto refuse = [&](const std::string& why) {
    journal->write(journal::encode(journal::RefusedConnection{why, first}));
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
    journal->write(journal::encode(journal::NodeEvent{journal::Event::node_joined, n}));
    carry_out(core->node_joined(n, node->rack, now()));
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
    auto m = receive_counted(*workers[device], Inbound::Source::worker, inbound);
    if (!m) break;
    try {
      const protocol::WorkerMessage message = protocol::decode_worker(*m);
      if (const auto* s = std::get_if<protocol::StepDone>(&message); s && core->rank(device) == 0)
        step_done(*s);
      carry_out(core->message(device, message, now()));
    } catch (const Error& e) {
      // A worker's malformed message must not take the job down with it.
      journal->write(journal::encode(journal::BadMessage{device, {}, e.what(), *m}));
    }
  }
}

void Agent::Impl::node_messages(uint32_t n) {
  auto& ch = nodes[n];
  while (ch) {
    auto m = receive_counted(*ch, Inbound::Source::node_agent, inbound);
    if (!m) break;
    try {
      const protocol::NodeMessage msg = protocol::decode_node(*m);
      if (const auto* l = std::get_if<protocol::Launched>(&msg)) {
        if (l->device >= pids.size() || core->node_of(l->device) != n) continue;
        pids[l->device] = static_cast<pid_t>(l->pid);
        journal->write(journal::encode(journal::Launch{l->device, n, l->pid}));
      } else if (const auto* x = std::get_if<protocol::Exited>(&msg)) {
        if (x->device >= pids.size() || core->node_of(x->device) != n) continue;
        read_messages(x->device);  // whatever it sent before it died still counts
        pids[x->device] = -1;
        carry_out(core->exited(x->device, x->end, now()));
      }
    } catch (const Error& e) {
      journal->write(journal::encode(journal::BadMessage{{}, n, e.what(), *m}));
    }
  }
  if (ch && ch->closed()) {
    ch.reset();
    journal->write(journal::encode(journal::NodeEvent{journal::Event::node_lost, n}));
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
    auto m = receive_counted(**it, std::nullopt, inbound);
    if ((*it)->closed()) {
      if ((*it)->oversized())
        journal->write(
            journal::encode(journal::RefusedConnection{"a line over 1 MiB before its greeting", {}}));
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
      journal->write(journal::encode(journal::BadMessage{d, {}, "a line over 1 MiB: connection closed", {}}));
    if (workers[d] && workers[d]->closed()) workers[d].reset();
  }
  reap();
  for (uint32_t n = 1; n < nodes.size(); ++n) node_messages(n);
}

}  // namespace sigma::runtime
