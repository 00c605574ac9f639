// The control plane under load: the real decision code's service times,
// queued at one flat controller or at group controllers under a root.
#include "engine.hpp"
#include "runtime/protocol.hpp"

#include <sigma/error.hpp>
#include <sigma/health.hpp>
#include <sigma/hierarchy.hpp>
#include <sigma/sim.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <queue>
#include <random>

namespace sigma::sim {
namespace {

using Clock = std::chrono::steady_clock;

template <class F>
double timed(F&& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One message waiting at a controller (server 0: the root; 1 + g: group g).
struct Job {
  enum class Kind { fault_event, report, fault, tick, summary, escalation } kind;
  double arrive = 0;  // at its controller
  double origin = 0;  // when its event happened
  uint64_t seq = 0;
  uint32_t server = 0;
  uint32_t device = 0;
  double service = 0;  // an escalation: measured at the group already
};

struct Later {
  bool operator()(const Job& a, const Job& b) const {
    return a.arrive != b.arrive ? a.arrive > b.arrive : a.seq > b.seq;
  }
};

// A heartbeat as a worker sends it: step, and four telemetry fields.
std::string heartbeat_line() {
  runtime::protocol::Heartbeat hb;
  hb.step = 1234;
  const hal_field_id_t ids[] = {HAL_FIELD_TEMPERATURE_C, HAL_FIELD_POWER_W, HAL_FIELD_UTILIZATION_PCT,
                                HAL_FIELD_ECC_CORRECTABLE};
  for (hal_field_id_t id : ids) {
    hal_telemetry_sample_t s{};
    s.id = id;
    s.status = HAL_OK;
    s.type = id == HAL_FIELD_ECC_CORRECTABLE ? HAL_VALUE_U64 : HAL_VALUE_F64;
    if (s.type == HAL_VALUE_F64) s.value.f64 = 61.5;
    hb.telemetry.push_back(s);
  }
  return runtime::protocol::encode(runtime::protocol::WorkerMessage{hb}).dump();
}

class Plane {
 public:
  Plane(const ControlPlaneSpec& s, bool tree);
  ControlPlaneResult run();

 private:
  uint32_t server_of(uint32_t device) const { return tree_ ? 1 + device / s_.group_size : 0; }
  double hop(uint32_t server) const { return server == 0 ? s_.root_hop_s : s_.hop_s; }
  void push(Job j);
  double serve(const Job& j);
  double report(const Job& j);
  double fault(const Job& j);
  void locate(const Job& j);
  void account(const Job& j, double service);

  const ControlPlaneSpec& s_;
  const bool tree_;
  const uint32_t groups_;
  const std::string line_;
  std::unique_ptr<scheduler::Scheduler> flat_;
  std::unique_ptr<scheduler::Hierarchy> hier_;
  std::vector<std::unique_ptr<health::Monitor>> monitors_;  // one per controller
  std::vector<double> free_at_, busy_;
  std::vector<uint64_t> arrivals_;
  std::priority_queue<Job, std::vector<Job>, Later> queue_;
  uint64_t seq_ = 0;
  std::vector<double> report_lat_, fault_lat_, report_service_;
  uint64_t escalations_ = 0;
  bool escalated_ = false;  // the last fault served went up to the root
  std::vector<bool> faulted_;
};

scheduler::Config sched_config(const ControlPlaneSpec& s) {
  scheduler::Config c;
  c.world_size = s.accelerators - static_cast<uint32_t>(std::ceil(s.spare_fraction * s.accelerators));
  c.group_size = s.group_size;
  return c;
}

Plane::Plane(const ControlPlaneSpec& s, bool tree)
    : s_(s),
      tree_(tree),
      groups_((s.accelerators + s.group_size - 1) / s.group_size),
      line_(heartbeat_line()) {
  const uint32_t servers = tree ? 1 + groups_ : 1;
  health::Config hc;
  hc.history_samples = s.history_samples;
  for (uint32_t i = 0; i < servers; ++i) monitors_.push_back(std::make_unique<health::Monitor>(hc));
  free_at_.assign(servers, 0);
  busy_.assign(servers, 0);
  arrivals_.assign(servers, 0);
  if (tree) {
    hier_ = std::make_unique<scheduler::Hierarchy>(sched_config(s));
  } else {
    flat_ = std::make_unique<scheduler::Scheduler>(sched_config(s));
  }
  for (uint32_t d = 0; d < s.accelerators; ++d) {
    monitors_[server_of(d)]->add_device(d);
    if (tree) {
      hier_->add_device(d, 0);
      hier_->validation_done(d, true, "ok", 0);
    } else {
      flat_->add_device(d, 0);
      flat_->validation_done(d, true, "ok", 0);
    }
  }
  if (tree) hier_->start(0);
  if (!tree) flat_->start(0);
}

void Plane::push(Job j) {
  j.seq = seq_++;
  ++arrivals_[j.server];
  queue_.push(j);
}

// A heartbeat decoded and fed to the controller's Monitor; a group's
// summary to the root is decoded only.
double Plane::report(const Job& j) {
  return timed([&] {
    const auto m = runtime::protocol::decode_worker(nlohmann::json::parse(line_));
    const auto& hb = std::get<runtime::protocol::Heartbeat>(m);
    if (j.kind == Job::Kind::summary) return;
    health::Monitor& mon = *monitors_[j.server];
    mon.observe_heartbeat(j.device, j.origin);
    mon.observe_telemetry(j.device, j.origin, hb.telemetry.data(), hb.telemetry.size());
  });
}

double Plane::fault(const Job& j) {
  const uint64_t before = tree_ ? hier_->traffic().root_calls : 0;
  const double t = timed([&] {
    if (tree_) {
      hier_->on_fault(j.device, "crash", true, j.origin);
    } else {
      flat_->on_fault(j.device, "crash", true, j.origin);
    }
  });
  escalated_ = tree_ && hier_->traffic().root_calls != before;
  return t;
}

// Runs the job's real code and returns its service time.
double Plane::serve(const Job& j) {
  switch (j.kind) {
    case Job::Kind::report:
    case Job::Kind::summary:
      return report(j);
    case Job::Kind::tick:
      return timed([&] { monitors_[j.server]->evaluate(j.arrive); });
    case Job::Kind::fault:
      return fault(j);
    case Job::Kind::escalation:
      return j.service;  // the root's part, charged the whole call (an upper bound)
    case Job::Kind::fault_event:
      break;
  }
  return 0;
}

// A fault happens on a rank: its device now, and the message to the
// device's controller (none when the job is paused for want of spares).
void Plane::locate(const Job& j) {
  const auto dev = tree_ ? hier_->device_of(j.device) : flat_->device_of(j.device);
  if (!dev || faulted_[*dev]) return;
  faulted_[*dev] = true;
  const uint32_t srv = server_of(*dev);
  push({Job::Kind::fault, j.origin + hop(srv), j.origin, 0, srv, *dev, 0});
}

// Queues the served job at its controller and books its latency: a report
// when decided, a fault when its action is back at the node agent.
void Plane::account(const Job& j, double service) {
  const double finish = std::max(j.arrive, free_at_[j.server]) + service;
  free_at_[j.server] = finish;
  busy_[j.server] += service;
  if (j.kind == Job::Kind::report) {
    report_lat_.push_back(finish - j.origin);
    report_service_.push_back(service);
  } else if (j.kind == Job::Kind::fault && escalated_) {
    ++escalations_;
    push({Job::Kind::escalation, finish + s_.root_hop_s, j.origin, 0, 0, j.device, service});
  } else if (j.kind == Job::Kind::fault) {
    fault_lat_.push_back(finish + hop(j.server) - j.origin);
  } else if (j.kind == Job::Kind::escalation) {
    fault_lat_.push_back(finish + s_.root_hop_s + s_.hop_s - j.origin);
  }
}

ControlPlaneResult Plane::run() {
  std::mt19937_64 rng(s_.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  // Each accelerator's heartbeats start at a phase of its own.
  for (uint32_t d = 0; d < s_.accelerators; ++d) {
    const double phase = unit(rng) * s_.report_period_s;
    for (double t = phase; t < s_.seconds; t += s_.report_period_s)
      push({Job::Kind::report, t + hop(server_of(d)), t, 0, server_of(d), d, 0});
  }
  for (uint32_t srv = 0; srv < free_at_.size(); ++srv) {
    for (double t = s_.tick_s; t < s_.seconds; t += s_.tick_s) push({Job::Kind::tick, t, t, 0, srv, 0, 0});
    if (srv > 0) {  // a group's state to the root, once a report period
      for (double t = s_.report_period_s; t < s_.seconds; t += s_.report_period_s)
        push({Job::Kind::summary, t + s_.root_hop_s, t, 0, 0, 0, 0});
    }
  }
  // Faults on ranks drawn uniformly, at exponential intervals.
  const double rate = s_.fault_rate_per_s * s_.accelerators;
  std::exponential_distribution<double> gap(rate > 0 ? rate : 1.0);
  std::vector<std::pair<double, uint32_t>> faults;
  for (double t = rate > 0 ? gap(rng) : s_.seconds; t < s_.seconds; t += gap(rng))
    faults.emplace_back(t, static_cast<uint32_t>(rng() % sched_config(s_).world_size));
  faulted_.assign(s_.accelerators, false);
  for (auto [t, rank] : faults) {
    queue_.push({Job::Kind::fault_event, t, t, seq_++, 0, rank, 0});
  }
  while (!queue_.empty()) {
    const Job j = queue_.top();
    queue_.pop();
    if (j.kind == Job::Kind::fault_event) {
      locate(j);
      continue;
    }
    if (j.kind == Job::Kind::report && faulted_[j.device]) continue;  // its worker is gone
    escalated_ = false;
    account(j, serve(j));
  }
  ControlPlaneResult r;
  r.mode = tree_ ? "hierarchical" : "flat";
  r.accelerators = s_.accelerators;
  r.controllers = static_cast<uint32_t>(free_at_.size());
  r.reports = detail::latency_figures(report_lat_);
  r.faults = detail::latency_figures(fault_lat_);
  r.escalations = escalations_;
  r.root_events_per_s = static_cast<double>(arrivals_[0]) / s_.seconds;
  r.root_capacity_per_s = busy_[0] > 0 ? static_cast<double>(arrivals_[0]) / busy_[0] : 0;
  r.busiest_utilisation = *std::max_element(busy_.begin(), busy_.end()) / s_.seconds;
  r.service_p50_s = detail::latency_figures(report_service_).p50_s;
  return r;
}

}  // namespace

std::vector<ControlPlaneResult> control_plane(const ControlPlaneSpec& s) {
  auto bad = [](const std::string& why) { throw Error(Code::invalid_argument, "control plane: " + why); };
  if (s.accelerators < 2) bad("at least 2 accelerators");
  if (s.group_size == 0 || s.group_size > s.accelerators) bad("group_size must be in [1, accelerators]");
  if (!(s.spare_fraction >= 0 && s.spare_fraction < 1)) bad("spare_fraction must be in [0, 1)");
  if (!(s.report_period_s > 0) || !(s.tick_s > 0) || !(s.seconds > 0) || !std::isfinite(s.seconds))
    bad("report_period_s, tick_s and seconds must be positive");
  if (!(s.fault_rate_per_s >= 0) || !(s.hop_s >= 0) || !(s.root_hop_s >= 0))
    bad("rates and hops must be >= 0");
  if (s.seconds / s.report_period_s * s.accelerators > 1e9) bad("more than 10^9 reports");
  return {Plane(s, false).run(), Plane(s, true).run()};
}

}  // namespace sigma::sim
