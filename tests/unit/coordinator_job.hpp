// The coordinator tests' harness: a Coordinator driven the way the agent's
// host drives it, keeping every command it gave, with the workers' side
// played where a test needs it.
#pragma once

#include "runtime/agent/coordinator.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <map>

namespace sigma::runtime::agent::testing {

namespace protocol = sigma::runtime::protocol;

inline AgentOptions options(uint32_t nproc, uint32_t spares) {
  AgentOptions o;
  o.nproc = nproc;
  o.spares = spares;
  o.job_dir = "/nonexistent/job";
  o.worker = {"worker"};
  o.heartbeat_timeout_s = 3;
  o.abort_grace_s = 5;
  o.step_timeout_s = 60;
  o.recovery_timeout_s = 20;
  return o;
}

inline protocol::ProcessEnd sigkill() { return {protocol::ProcessEnd::How::signalled, SIGKILL, {}}; }
inline protocol::ProcessEnd exited(int status) { return {protocol::ProcessEnd::How::exited, status, {}}; }
// A temperature sample of `celsius`, as a worker's heartbeat carries it.
inline hal_telemetry_sample_t temperature(double celsius) {
  hal_telemetry_sample_t t{};
  t.id = HAL_FIELD_TEMPERATURE_C;
  t.status = HAL_OK;
  t.type = HAL_VALUE_F64;
  t.value.f64 = celsius;
  return t;
}

// Drives a Coordinator the way the agent's host does, keeping every command
// it gave, and plays the workers' side where a test needs it.
class Job {
 public:
  explicit Job(const AgentOptions& o, DiskHoldings disk = {}, std::optional<ContainedOptions> contained = {})
      : c(o, std::move(disk), 0, contained) {
    take(c.start(0));
  }

  Coordinator c;
  double t = 0;
  Commands log;                       // everything since the last clear()
  std::map<uint32_t, double> kill_t;  // when each device was first sent SIGKILL

  void take(Commands cs) {
    for (auto& x : cs) {
      if (const auto* k = std::get_if<SignalWorker>(&x); k && k->signal == SIGKILL)
        kill_t.emplace(k->device, t);
      log.push_back(std::move(x));
    }
  }
  // The SpawnWorker commands for `device`.
  size_t spawned(uint32_t device) const {
    size_t n = 0;
    for (const auto& x : log) {
      const auto* s = std::get_if<SpawnWorker>(&x);
      n += s && s->device == device ? 1 : 0;
    }
    return n;
  }
  void clear() { log.clear(); }
  void at(double when) {
    t = when;
    take(c.tick(t));
  }
  // Device d's fresh worker greets with its self-test's verdict.
  void hello(uint32_t d, bool passed = true, const std::string& detail = "") {
    protocol::Hello h;
    h.device = d;
    h.self_test_passed = passed;
    h.self_test_detail = detail;
    take(c.hello(h, t));
  }
  void hello_all() {
    for (uint32_t d = 0; d < c.devices(); ++d) hello(d);
  }
  void msg(uint32_t d, protocol::WorkerMessage m) { take(c.message(d, m, t)); }
  void exit(uint32_t d, protocol::ProcessEnd how = sigkill()) { take(c.exited(d, how, t)); }

  // The messages of kind M sent to `device`.
  template <class M>
  std::vector<M> sent(uint32_t device) const {
    std::vector<M> out;
    for (const auto& x : log) {
      const auto* s = std::get_if<SendTo>(&x);
      if (s && s->device == device)
        if (const auto* m = std::get_if<M>(&s->message)) out.push_back(*m);
    }
    return out;
  }
  bool killed(uint32_t device) const {
    for (const auto& x : log) {
      const auto* k = std::get_if<SignalWorker>(&x);
      if (k && k->device == device && k->signal == SIGKILL) return true;
    }
    return false;
  }
  // The journal lines of `event`.
  std::vector<nlohmann::json> records(const std::string& event) const {
    std::vector<nlohmann::json> out;
    for (const auto& x : log) {
      const auto* r = std::get_if<Record>(&x);
      if (r && r->entry.value("event", "") == event) out.push_back(r->entry);
    }
    return out;
  }

  // Every device greets, the job starts; the ranks join generation 1.
  void start() {
    hello_all();
    at(t + 0.1);
    for (uint32_t d = 0; d < c.devices(); ++d) {
      if (c.phase(d) == Phase::active)
        msg(d, protocol::Joined{1, static_cast<uint32_t>(c.rank(d)), 0, RestoreTier::none});
    }
  }
  // Each device in `ranks` finishes steps [from, to), with a heartbeat and a
  // snapshot of each; the clock moves 0.1 s per step.
  void steps(const std::vector<uint32_t>& devices, uint64_t from, uint64_t to) {
    for (uint64_t s = from; s < to; ++s) {
      t += 0.1;
      for (uint32_t d : devices) {
        msg(d, protocol::Heartbeat{static_cast<int64_t>(s), true, {}, HAL_OK, {}});
        msg(d, protocol::StepDone{s, 0.1});
      }
      take(c.tick(t));
    }
  }
  void beat(const std::vector<uint32_t>& devices, int64_t step, bool done) {
    for (uint32_t d : devices) msg(d, protocol::Heartbeat{step, done, {}, HAL_OK, {}});
  }
  // Only `devices` beat (inside `step`) every 0.5 s for `seconds`; the others are silent.
  void only_beat(const std::vector<uint32_t>& devices, int64_t step, double seconds) {
    const double from = t;
    for (double when = from + 0.5; when < from + seconds; when += 0.5) {
      beat(devices, step, false);
      at(when);
    }
  }
  // `d` asks for a recovery holding own and replica snapshots `held`.
  void report(uint32_t d, std::vector<uint64_t> own, std::vector<uint64_t> replica,
              sigma::Code code = sigma::Code::aborted, std::vector<uint64_t> disk = {}) {
    protocol::RecoverRequest r;
    r.code = code;
    r.reason = std::string(sigma::code_name(code)) + ": the communicator was aborted";
    r.generation = c.generation();
    r.own = std::move(own);
    r.replica = std::move(replica);
    r.disk = std::move(disk);
    msg(d, r);
  }
  void join(uint32_t d, const protocol::Assign& a) {
    msg(d, protocol::Joined{a.generation, a.rank, a.index, a.restore});
  }
};

}  // namespace sigma::runtime::agent::testing
