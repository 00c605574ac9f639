// Scenario files: strict YAML, every key checked, errors as file:line: key.
#include "yaml_reader.hpp"

#include <sigma/error.hpp>
#include <sigma/sim.hpp>

#include <filesystem>
#include <limits>

namespace sigma::sim {
namespace {

constexpr double kBig = 1e12;

void read_failures(const yaml::Reader& y, const YAML::Node& n, const std::string& folder, FailureModel& m) {
  y.only_keys(n, "failures",
              {"model", "per_accelerator_day", "rate_multiplier", "weibull_shape", "precursor_fraction",
               "precursor_lead_min", "repair_hours", "straggler_per_accelerator_day", "straggler_slowdown",
               "straggler_hours", "slow_link_per_accelerator_day", "slow_link_slowdown", "slow_link_hours"});
  if (n["model"]) {
    const std::filesystem::path p(y.text(n["model"], "failures.model"));
    try {
      m = load_failure_model(p.is_absolute() ? p.string() : (std::filesystem::path(folder) / p).string());
    } catch (const Error& e) {
      y.fail(n["model"], "failures.model", e.what());
    }
  }
  if (n["per_accelerator_day"])
    m.per_accelerator_day = y.number(n["per_accelerator_day"], "failures.per_accelerator_day", 0, 1);
  if (n["rate_multiplier"])
    m.rate_multiplier = y.number(n["rate_multiplier"], "failures.rate_multiplier", 0, 1e6);
  if (n["weibull_shape"]) m.weibull_shape = y.number(n["weibull_shape"], "failures.weibull_shape", 0.05, 10);
  if (n["precursor_fraction"])
    m.precursor_fraction = y.number(n["precursor_fraction"], "failures.precursor_fraction", 0, 1);
  if (n["precursor_lead_min"])
    m.precursor_lead_min = y.number(n["precursor_lead_min"], "failures.precursor_lead_min", 0, 1e6);
  if (n["repair_hours"]) m.repair_hours = y.number(n["repair_hours"], "failures.repair_hours", 0.01, 1e6);
  auto num = [&](const char* key, double& out, double lo, double hi) {
    if (n[key]) out = y.number(n[key], std::string("failures.") + key, lo, hi);
  };
  num("straggler_per_accelerator_day", m.straggler_per_accelerator_day, 0, 100);
  num("straggler_slowdown", m.straggler_slowdown, 1, 100);
  num("straggler_hours", m.straggler_hours, 1e-3, 1e6);
  num("slow_link_per_accelerator_day", m.slow_link_per_accelerator_day, 0, 100);
  num("slow_link_slowdown", m.slow_link_slowdown, 1, 100);
  num("slow_link_hours", m.slow_link_hours, 1e-3, 1e6);
}

Policy read_policy(const yaml::Reader& y, const YAML::Node& n, size_t i) {
  const std::string at = "policies[" + std::to_string(i) + "]";
  y.only_keys(n, at,
              {"name",
               "base",
               "spares",
               "spare_fraction",
               "spare_risk",
               "spare_count",
               "disk_every_s",
               "disk_stall_s",
               "disk_restore_s",
               "memory_tier",
               "replicas_across_nodes",
               "replicas",
               "snapshot_every_s",
               "snapshot_from_model",
               "snapshot_stall_s",
               "memory_restore_s",
               "crash_detect_s",
               "hang_detect_s",
               "step_timeout_s",
               "sdc_detect_s",
               "full_restart",
               "restart_s",
               "replace_s",
               "migrate_on_warning",
               "migrate_s",
               "replica_size",
               "comm_fixed_s",
               "comm_per_member_s",
               "handoff_s",
               "spare_ready_s",
               "straggler_min_steps"});
  if (!n["name"]) y.fail(n, at + ".name", "missing");
  const std::string name = y.text(n["name"], at + ".name");
  const std::string base = n["base"] ? y.text(n["base"], at + ".base") : name;
  Policy p;
  bool found = false;
  for (const Policy& s : standard_policies())
    if (s.name == base) p = s, found = true;
  if (!found)
    y.fail(n["base"] ? n["base"] : n["name"], at + (n["base"] ? ".base" : ".name"),
           "'" + base +
               "' is not a standard policy (reactive, sigma-paper, libsigma, libsigma-contained); name one "
               "as base");
  p.name = name;
  if (n["spares"]) {
    const std::string r = y.text(n["spares"], at + ".spares");
    if (r == "none")
      p.spares = SpareRule::none;
    else if (r == "fraction")
      p.spares = SpareRule::fraction;
    else if (r == "model")
      p.spares = SpareRule::model;
    else if (r == "count")
      p.spares = SpareRule::count;
    else
      y.fail(n["spares"], at + ".spares", "expected none, fraction, model or count, not '" + r + "'");
  }
  auto num = [&](const char* key, double& out, double lo, double hi) {
    if (n[key]) out = y.number(n[key], at + "." + key, lo, hi);
  };
  auto flag = [&](const char* key, bool& out) {
    if (n[key]) out = y.boolean(n[key], at + "." + key);
  };
  num("spare_fraction", p.spare_fraction, 0, 0.9);
  num("spare_risk", p.spare_risk, 1e-9, 0.999);
  if (n["spare_count"])
    p.spare_count = static_cast<uint32_t>(y.number(n["spare_count"], at + ".spare_count", 0, 1 << 24));
  num("disk_every_s", p.disk_every_s, 1, kBig);
  num("disk_stall_s", p.disk_stall_s, 0, kBig);
  num("disk_restore_s", p.disk_restore_s, 0, kBig);
  flag("memory_tier", p.memory_tier);
  flag("replicas_across_nodes", p.replicas_across_nodes);
  if (n["replicas"]) p.replicas = static_cast<uint32_t>(y.integer(n["replicas"], at + ".replicas", 1, 2));
  num("snapshot_every_s", p.snapshot_every_s, 1, kBig);
  flag("snapshot_from_model", p.snapshot_from_model);
  num("snapshot_stall_s", p.snapshot_stall_s, 0, kBig);
  num("memory_restore_s", p.memory_restore_s, 0, kBig);
  num("crash_detect_s", p.crash_detect_s, 0, kBig);
  num("hang_detect_s", p.hang_detect_s, 0, kBig);
  num("step_timeout_s", p.step_timeout_s, 0, kBig);
  num("sdc_detect_s", p.sdc_detect_s, 0, kBig);
  flag("full_restart", p.full_restart);
  num("restart_s", p.restart_s, 0, kBig);
  num("replace_s", p.replace_s, 0, kBig);
  flag("migrate_on_warning", p.migrate_on_warning);
  num("migrate_s", p.migrate_s, 0, kBig);
  if (n["replica_size"])
    p.replica_size = static_cast<uint32_t>(y.integer(n["replica_size"], at + ".replica_size", 0, 1u << 24));
  num("comm_fixed_s", p.comm_fixed_s, 0, kBig);
  num("comm_per_member_s", p.comm_per_member_s, 0, kBig);
  num("handoff_s", p.handoff_s, 0, kBig);
  num("spare_ready_s", p.spare_ready_s, 0, kBig);
  if (n["straggler_min_steps"])
    p.straggler_min_steps =
        static_cast<uint32_t>(y.integer(n["straggler_min_steps"], at + ".straggler_min_steps", 2, 50));
  if (p.replica_size > 0 && p.full_restart)
    y.fail(n["replica_size"] ? n["replica_size"] : n, at + ".replica_size",
           "contained recovery replaces ranks: it needs full_restart: false");
  if (p.memory_tier && p.snapshot_every_s <= 0)
    y.fail(n, at + ".snapshot_every_s", "a memory tier needs a snapshot interval > 0");
  return p;
}

}  // namespace

Scenario load_scenario(const std::string& path, const FailureModel& defaults) {
  std::string text;
  try {
    text = yaml::read_file(path);
  } catch (const yaml::Refused& r) {
    throw Error(Code::invalid_argument, r.message);
  }
  return parse_scenario(text, path, defaults);
}

Scenario parse_scenario(const std::string& text, const std::string& path, const FailureModel& defaults) {
  try {
    const yaml::Reader y(path);
    const YAML::Node root = yaml::parse(text, path);
    y.only_keys(root, "",
                {"seed", "accelerators", "per_node", "days", "step_s", "telemetry_period_s", "failures",
                 "policies", "script"});
    Scenario s;
    s.failures = defaults;
    if (root["seed"]) s.seed = y.integer(root["seed"], "seed", 0, std::numeric_limits<uint64_t>::max());
    if (root["accelerators"])
      s.accelerators = static_cast<uint32_t>(y.integer(root["accelerators"], "accelerators", 2, 1u << 24));
    if (root["per_node"])
      s.per_node = static_cast<uint32_t>(y.integer(root["per_node"], "per_node", 1, 1024));
    if (root["days"]) s.days = y.number(root["days"], "days", 1e-3, 3650);
    if (root["step_s"]) s.step_s = y.number(root["step_s"], "step_s", 1e-3, 86400);
    if (root["telemetry_period_s"])
      s.telemetry_period_s = y.number(root["telemetry_period_s"], "telemetry_period_s", 0.1, 3600);
    const std::string folder = std::filesystem::path(path).parent_path().string();
    if (root["failures"]) read_failures(y, root["failures"], folder, s.failures);
    if (root["policies"]) {
      const YAML::Node ps = root["policies"];
      if (!ps.IsSequence() || ps.size() == 0) y.fail(ps, "policies", "expected a non-empty list");
      for (size_t i = 0; i < ps.size(); ++i) s.policies.push_back(read_policy(y, ps[i], i));
    } else {
      s.policies = standard_policies();
    }
    if (root["script"]) {
      const YAML::Node fs = root["script"];
      if (!fs.IsSequence()) y.fail(fs, "script", "expected a list of failures");
      for (size_t i = 0; i < fs.size(); ++i) {
        const std::string at = "script[" + std::to_string(i) + "]";
        y.only_keys(fs[i], at, {"at_s", "device", "category", "precursor", "health"});
        const bool health = static_cast<bool>(fs[i]["health"]);
        for (const char* k : {"at_s", "device"})
          if (!fs[i][k]) y.fail(fs[i], at + "." + k, "missing");
        if (!health && !fs[i]["category"]) y.fail(fs[i], at + ".category", "missing (or give health)");
        ScriptedFailure f;
        f.at_s = y.number(fs[i]["at_s"], at + ".at_s", 0, s.days * 86400.0);
        f.device = static_cast<uint32_t>(y.integer(fs[i]["device"], at + ".device", 0, s.accelerators - 1));
        if (health) {
          f.health = y.text(fs[i]["health"], at + ".health");
          if (f.health != "warning" && f.health != "calm" && f.health != "straggler" &&
              f.health != "slow_link")
            y.fail(fs[i]["health"], at + ".health", "expected warning, calm, straggler or slow_link");
        } else {
          f.category = y.text(fs[i]["category"], at + ".category");
          bool known = false;
          for (const Category& c : s.failures.categories) known = known || c.name == f.category;
          if (!known)
            y.fail(fs[i]["category"], at + ".category",
                   "'" + f.category + "' is not a category of the model");
        }
        if (fs[i]["precursor"]) f.precursor = y.boolean(fs[i]["precursor"], at + ".precursor");
        s.script.push_back(f);
      }
    }
    return s;
  } catch (const yaml::Refused& r) {
    throw Error(Code::invalid_argument, r.message);
  }
}

}  // namespace sigma::sim
