// A sigmarun incident journal read back as a scenario to replay, and the
// comparison of its decisions with the simulator's.
#include <sigma/error.hpp>
#include <sigma/sim.hpp>

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

// A field of one journal line, checked.
struct Line {
  const json& j;
  const std::string& name;
  size_t n;
  bool has(const char* k) const { return j.contains(k); }
  double number(const char* k, double lo, double hi) const {
    if (!has(k) || !j[k].is_number()) fail(name, n, k, "missing or not a number");
    const double v = j[k].get<double>();
    if (!(v >= lo && v <= hi)) fail(name, n, k, "out of range");
    return v;
  }
  uint32_t whole(const char* k, uint32_t lo, uint32_t hi) const {
    if (!has(k) || !j[k].is_number_unsigned()) fail(name, n, k, "missing or not a whole number");
    const uint64_t v = j[k].get<uint64_t>();
    if (v < lo || v > hi)
      fail(name, n, k, "out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return static_cast<uint32_t>(v);
  }
  std::string text(const char* k) const {
    if (!has(k) || !j[k].is_string()) fail(name, n, k, "missing or not a string");
    return j[k].get<std::string>();
  }
  bool flag(const char* k, bool otherwise) const {
    if (!has(k)) return otherwise;
    if (!j[k].is_boolean()) fail(name, n, k, "not true or false");
    return j[k].get<bool>();
  }
};

struct Layout {
  uint32_t nproc = 0, spares = 0, nnodes = 0, per_group = 0, min_world = 1, snapshot_every = 1;
  bool migrate = true, shrink = false;
  uint32_t devices() const { return nnodes * (nproc + spares); }
  uint32_t node_of(uint32_t d) const {  // as sigmarun numbers devices: ranks, then spares
    return d < nproc * nnodes ? d / nproc : (d - nproc * nnodes) / std::max(1u, spares);
  }
};

Layout read_start(const Line& l) {
  Layout o;
  o.nproc = l.whole("nproc", 1, 4096);
  o.spares = l.whole("spares", 0, 4096);
  o.nnodes = l.whole("nnodes", 1, 4096);
  if (l.has("nodes_per_group")) o.per_group = l.whole("nodes_per_group", 0, 4096);
  if (l.has("snapshot_every")) o.snapshot_every = l.whole("snapshot_every", 1, 1000000);
  if (l.has("min_world")) o.min_world = l.whole("min_world", 0, 1u << 24);
  o.migrate = l.flag("proactive_migration", true);
  o.shrink = l.flag("allow_shrink", false);
  if (o.devices() < 2) fail(l.name, l.n, "nproc", "a replay needs at least 2 devices");
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
  p.snapshot_every_s = step_s * o.snapshot_every;
  p.snapshot_stall_s = p.memory_restore_s = p.disk_stall_s = p.disk_restore_s = 0;
  p.disk_every_s = 1e300;  // disk checkpoints do not decide anything here
  p.crash_detect_s = p.hang_detect_s = p.restart_s = p.replace_s = p.migrate_s = 0;
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
    const json j = json::parse(raw, nullptr, false);
    if (j.is_discarded() || !j.is_object()) fail(name, n, "(line)", "not a JSON object");
    const Line l{j, name, n};
    const std::string event = l.text("event");
    const double t = l.number("t", 0, 1e12);
    end_s = std::max(end_s, t);
    if (event == "start") {
      layout = read_start(l);
      continue;
    }
    if (!layout) fail(name, n, "event", "'" + event + "' before the start line");
    const uint32_t last = layout->devices() - 1;
    if (event == "fault") {
      r.scenario.script.push_back({t, l.whole("device", 0, last), "fault", false});
      ++r.faults;
    } else if (event == "health_state") {
      const std::string to = l.text("to");
      if (to == "failed") continue;  // the fault line that follows decides
      r.scenario.script.push_back(
          {t, l.whole("device", 0, last), "", false, to == "healthy" ? "calm" : "warning"});
      ++r.health_changes;
    } else if (event == "recovery_started" && step_s == 0 && l.has("reached_step")) {
      const double reached = l.number("reached_step", 0, 1e15);
      if (reached > 0) step_s = t / reached;
    } else if (event == "scheduler" && decides(l.text("action"))) {
      Decision d;
      d.at_s = t;
      d.action = l.text("action");
      if (l.has("device")) d.device = l.whole("device", 0, last);
      if (l.has("rank")) d.rank = l.whole("rank", 0, last);
      if (l.has("to_device")) d.to_device = l.whole("to_device", 0, last);
      if (l.has("tier")) d.tier = l.text("tier");
      r.journalled.push_back(d);
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
