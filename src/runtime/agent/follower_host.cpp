// A follower agent's host (every host but the first): it reaches the root
// through the control store, then polls the root's channel and reaps its
// children, feeding each event to the Follower and carrying out what comes
// back (start, send, signal, journal).
#include "journal_records.hpp"
#include "runtime/agent/follower.hpp"
#include "runtime/agent/journal.hpp"
#include "runtime/agent/launcher.hpp"
#include "runtime/agent/preflight.hpp"
#include "runtime/channel.hpp"
#include "runtime/job_key.hpp"
#include "runtime/protocol.hpp"

#include <sigma/agent.hpp>
#include <sigma/bootstrap.hpp>
#include <sigma/error.hpp>
#include <sigma/health.hpp>

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>
#include <filesystem>
#include <thread>

namespace sigma::runtime {

using json = nlohmann::json;
using namespace agent;

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

// What the host does for the Follower's commands, in order.
class FollowerHost {
 public:
  FollowerHost(const AgentOptions& o, Channel& root, Journal& journal, Follower& f)
      : o_(o), root_(root), journal_(journal), f_(f) {}

  void carry_out(const follow::Commands& commands) {
    for (const follow::Command& c : commands) std::visit([&](const auto& x) { do_(x); }, c);
  }

 private:
  void do_(const follow::StartWorker& c) {
    follow::Commands next;
    try {
      next = f_.started(c.device, spawn_worker(o_, c.device, c.env));
    } catch (const Error& e) {
      next = f_.not_started(c.device, e.what());
    }
    carry_out(next);
  }
  void do_(const follow::ToRoot& c) { root_.send(protocol::encode(c.message)); }
  void do_(const follow::SignalPid& c) { ::kill(c.pid, c.signal); }
  void do_(const follow::Note& c) { journal_.write(c.entry); }

  const AgentOptions& o_;
  Channel& root_;
  Journal& journal_;
  Follower& f_;
};

// Every child of this host that ended since the last call, to the Follower.
void reap(Follower& f, FollowerHost& host) {
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    host.carry_out(f.exited(pid, protocol::ProcessEnd::of_wait_status(status)));
  }
}

void read_root(Channel& root, Follower& f, FollowerHost& host) {
  while (auto m = root.receive_ready()) {
    protocol::RootMessage msg;
    try {
      msg = protocol::decode_root(*m);
    } catch (const Error& e) {
      host.carry_out(f.bad_message(e.what(), *m));
      continue;
    }
    host.carry_out(f.message(msg, health::monotonic_s()));
  }
}

}  // namespace

int run_follower(const AgentOptions& o) {
  check_options(o);
  JobDirLock lock(o.job_dir);
  preflight_vendor(o, [] { return 0; });  // SIGTERM ends a follower as it is
  std::filesystem::create_directories(o.job_dir + "/logs");
  Journal journal(o.job_dir + "/node.jsonl", health::monotonic_s());
  const int wake = wake_pipe();
  auto root = reach_root(o, o.validate_timeout_s * 2);
  Follower f(o.node_rank, o.rack);
  FollowerHost host(o, *root, journal, f);
  host.carry_out(f.connected(::getpid()));
  while (!f.over()) {
    pollfd p[2] = {{root->fd(), POLLIN, 0}, {wake, POLLIN, 0}};
    ::poll(p, 2, 50);
    drain_wake_pipe();
    reap(f, host);
    read_root(*root, f, host);
    if (root->closed()) host.carry_out(f.root_closed(health::monotonic_s()));
    host.carry_out(f.tick(health::monotonic_s()));
  }
  journal.write(journal::encode(journal::End{{}, {}, f.code()}));
  return f.code();
}

}  // namespace sigma::runtime
