// A sigmarun incident journal read back as a scenario to replay, and the
// comparison of its decisions with the simulator's.
#include <sigma/error.hpp>
#include <sigma/sim.hpp>

#include "journal_records.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <sstream>

namespace sigma::sim {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& name, size_t line, const std::string& field,
                       const std::string& why) {
  throw Error(Code::invalid_argument, name + ":" + std::to_string(line) + ": " + field + ": " + why);
}

// A value of one journal line, checked against its range.
template <typename T>
T in_range(const std::string& name, size_t line, const char* field, T v, T lo, T hi) {
  if (v < lo || v > hi)
    fail(name, line, field, "out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}
struct Layout {
  uint32_t nproc = 0, spares = 0, nnodes = 0, per_group = 0, min_world = 1, snapshot_every = 1;
  uint32_t replica_size = 0;  // contained recovery's replicas (0: exact)
  bool migrate = true, shrink = false;
  uint32_t devices() const { return nnodes * (nproc + spares); }
  uint32_t node_of(uint32_t d) const {  // as sigmarun numbers devices: ranks, then spares
    return d < nproc * nnodes ? d / nproc : (d - nproc * nnodes) / std::max(1u, spares);
  }
};

Layout read_start(const journal::Start& r, const std::string& name, size_t n) {
  Layout o;
  o.nproc = in_range<uint32_t>(name, n, "nproc", r.nproc, 1, 4096);
  o.spares = in_range<uint32_t>(name, n, "spares", r.spares, 0, 4096);
  o.nnodes = in_range<uint32_t>(name, n, "nnodes", r.nnodes, 1, 4096);
  o.per_group = in_range<uint32_t>(name, n, "nodes_per_group", r.nodes_per_group, 0, 4096);
  o.snapshot_every =
      static_cast<uint32_t>(in_range<uint64_t>(name, n, "snapshot_every", r.snapshot_every, 1, 1000000));
  o.min_world = in_range<uint32_t>(name, n, "min_world", r.min_world, 0, 1u << 24);
  o.migrate = r.proactive_migration;
  o.shrink = r.allow_shrink;
  if (o.devices() < 2) fail(name, n, "nproc", "a replay needs at least 2 devices");
  if (r.recovery == "contained") {
    o.replica_size = in_range<uint32_t>(name, n, "replica_size", r.replica_size, 1, o.nproc * o.nnodes);
    if (o.nproc * o.nnodes % o.replica_size != 0)
      fail(name, n, "replica_size", "does not divide the world of " + std::to_string(o.nproc * o.nnodes));
  }
  return o;
}

// Everything but the journal's own events: one failure category that
// takes the device out for good, no drawn failures, no repairs.
Scenario scenario_of(const Layout& o, double step_s, double end_s) {
  Scenario s;
  s.accelerators = o.devices();
  s.per_node = o.nproc + o.spares;
  s.days = (end_s + 1.0) / 86400.0;
  s.step_s = step_s;
  s.failures.rate_multiplier = 0;
  s.failures.precursor_fraction = 0;
  s.failures.repair_hours = 1e6;
  s.failures.categories = {{"fault", Scope::device, 1, false}};
  if (o.per_group)
    for (uint32_t d = 0; d < o.devices(); ++d) s.groups.push_back(o.node_of(d) / o.per_group);
  Policy p;
  p.name = "sigmarun";
  p.spares = SpareRule::count;
  p.spare_count = o.nnodes * o.spares;
  p.memory_tier = true;
  p.replicas_across_nodes = true;  // as sigmarun places them: in another node where the nodes allow
  p.snapshot_every_s = step_s * o.snapshot_every;
  p.snapshot_stall_s = p.memory_restore_s = p.disk_stall_s = p.disk_restore_s = 0;
  p.disk_every_s = 1e300;  // disk checkpoints do not decide anything here
  p.crash_detect_s = p.hang_detect_s = p.restart_s = p.replace_s = p.migrate_s = 0;
  p.replica_size = o.replica_size;  // contained: its faults stop a replica, as the agent's machine decides
  p.comm_fixed_s = p.comm_per_member_s = p.handoff_s = p.spare_ready_s = 0;
  p.full_restart = false;
  p.migrate_on_warning = o.migrate;
  p.allow_shrink = o.shrink;
  p.min_world = o.min_world;
  s.policies = {p};
  s.record_decisions = true;
  return s;
}

bool decides(const std::string& action) {
  for (const char* k : {"replace", "restore", "migrate", "shrink", "pause", "resume"})
    if (action == k) return true;
  return false;
}

std::string describe(const Decision& d) {
  std::ostringstream o;
  o << d.action;
  if (d.device != UINT32_MAX) o << " device " << d.device;
  if (d.rank != UINT32_MAX) o << " rank " << d.rank;
  if (d.to_device != UINT32_MAX) o << " to device " << d.to_device;
  if (!d.tier.empty()) o << " from " << d.tier;
  return o.str();
}

// One journal line read, or the file, line and field it fails at.
journal::Line read_line(const std::string& raw, const std::string& name, size_t n) {
  const json j = json::parse(raw, nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail(name, n, "(line)", "not a JSON object");
  try {
    journal::Line l = journal::decode(j);
    if (!(l.t >= 0 && l.t <= 1e12)) fail(name, n, "t", "out of range");
    return l;
  } catch (const Error& e) {
    if (std::string(e.what()).rfind(name + ":", 0) == 0) throw;  // ours, already placed
    throw Error(Code::invalid_argument, name + ":" + std::to_string(n) + ": " + e.what());
  }
}

// The decision a scheduler line journals, its devices checked.
Decision decision_of(const journal::Scheduler& r, double t, uint32_t last, const std::string& name,
                     size_t n) {
  Decision d;
  d.at_s = t;
  d.action = r.action;
  if (r.device) d.device = in_range<uint32_t>(name, n, "device", *r.device, 0, last);
  if (r.rank) d.rank = in_range<uint32_t>(name, n, "rank", *r.rank, 0, last);
  if (r.to_device) d.to_device = in_range<uint32_t>(name, n, "to_device", *r.to_device, 0, last);
  d.tier = r.tier;
  return d;
}

}  // namespace

Replay parse_journal(const std::string& text, const std::string& name) {
  Replay r;
  std::optional<Layout> layout;
  double step_s = 0, end_s = 0;
  std::istringstream in(text);
  size_t n = 0;
  for (std::string raw; std::getline(in, raw);) {
    ++n;
    if (raw.find_first_not_of(" \t\r") == std::string::npos) continue;
    const journal::Line l = read_line(raw, name, n);
    const double t = l.t;
    end_s = std::max(end_s, t);
    if (const auto* start = std::get_if<journal::Start>(&l.record)) {
      layout = read_start(*start, name, n);
      continue;
    }
    if (!layout)
      fail(name, n, "event", "'" + std::string(journal::name(l.event)) + "' before the start line");
    const uint32_t last = layout->devices() - 1;
    if (const auto* f = std::get_if<journal::Fault>(&l.record)) {
      r.scenario.script.push_back(
          {t, in_range<uint32_t>(name, n, "device", f->device, 0, last), "fault", false});
      ++r.faults;
    } else if (const auto* h = std::get_if<journal::Health>(&l.record);
               h && h->kind == journal::Event::health_state) {
      if (h->to == "failed") continue;  // the fault line that follows decides
      r.scenario.script.push_back({t, in_range<uint32_t>(name, n, "device", h->device, 0, last), "", false,
                                   h->to == "healthy" ? "calm" : "warning"});
      ++r.health_changes;
    } else if (const auto* rs = std::get_if<journal::RecoveryStarted>(&l.record)) {
      if (step_s == 0 && rs->reached_step && *rs->reached_step > 0)
        step_s = t / static_cast<double>(*rs->reached_step);
    } else if (const auto* sc = std::get_if<journal::Scheduler>(&l.record); sc && decides(sc->action)) {
      r.journalled.push_back(decision_of(*sc, t, last, name, n));
    }
  }
  if (!layout) fail(name, n, "event", "no start line: not a sigmarun journal");
  auto script = std::move(r.scenario.script);
  r.scenario = scenario_of(*layout, step_s > 0 ? step_s : 0.01, end_s);
  r.scenario.script = std::move(script);
  return r;
}

std::string compare_decisions(const std::vector<Decision>& journalled,
                              const std::vector<Decision>& simulated) {
  std::vector<Decision> a, b;
  std::copy_if(journalled.begin(), journalled.end(), std::back_inserter(a),
               [](const Decision& d) { return decides(d.action); });
  std::copy_if(simulated.begin(), simulated.end(), std::back_inserter(b),
               [](const Decision& d) { return decides(d.action); });
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string x = i < a.size() ? describe(a[i]) : "nothing";
    const std::string y = i < b.size() ? describe(b[i]) : "nothing";
    if (x != y) {
      return "decision " + std::to_string(i + 1) + ": the journal has " + x + ", the simulator " + y;
    }
  }
  return "";
}

}  // namespace sigma::sim
