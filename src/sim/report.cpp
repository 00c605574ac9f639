// The simulator's results as JSON and as a table.
#include "engine.hpp"

#include <sigma/sim.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace sigma::sim {
namespace {

nlohmann::json ledger_json(const Ledger& l) {
  return {{"productive", l.productive}, {"lost_work", l.lost_work},
          {"detection", l.detection},   {"restart", l.restart},
          {"restore", l.restore},       {"checkpoint", l.checkpoint},
          {"migration", l.migration},   {"paused", l.paused},
          {"degraded", l.degraded},     {"slow", l.slow},
          {"spare", l.spare},           {"repair", l.repair},
          {"total", l.total()}};
}

nlohmann::json latency_json(const LatencyFigures& f) {
  return {{"count", f.count}, {"p50_s", f.p50_s}, {"p99_s", f.p99_s}, {"max_s", f.max_s}};
}

nlohmann::json policy_json(const PolicyResult& p) {
  nlohmann::json cats = nlohmann::json::object();
  for (const auto& [name, n] : p.by_category) cats[name] = n;
  return {{"policy", p.policy},
          {"world", p.world},
          {"spares", p.spares},
          {"spare_shortfall_risk", p.spare_risk},
          {"effective_accelerator_utilization", p.utilization},
          {"effective_training_time_ratio", p.ettr},
          {"failures", p.failures},
          {"incidents", p.incidents},
          {"faults_joining_a_round", p.joined},
          {"recovery", latency_json(p.recovery)},
          {"mean_time_to_interruption_h", p.mtti_h},
          {"migrations", p.migrations},
          {"averted", p.averted},
          {"restores", {{"memory", p.restores_memory}, {"disk", p.restores_disk}}},
          {"pauses", p.pauses},
          {"contained",
           {{"faults", p.contained}, {"exact_fallbacks", p.exact_fallbacks}, {"rejoins", p.rejoins}}},
          {"events", p.events},
          {"degradations", {{"on_the_job", p.degradations}, {"moved_away", p.degradations_moved}}},
          {"failures_by_category", cats},
          {"accelerator_seconds", ledger_json(p.ledger)}};
}

nlohmann::json scenario_json(const Scenario& s) {
  const FailureModel& f = s.failures;
  return {{"seed", s.seed},
          {"accelerators", s.accelerators},
          {"per_node", s.per_node},
          {"days", s.days},
          {"step_s", s.step_s},
          {"failures",
           {{"per_accelerator_day", f.per_accelerator_day},
            {"rate_multiplier", f.rate_multiplier},
            {"weibull_shape", f.weibull_shape},
            {"precursor_fraction", f.precursor_fraction},
            {"precursor_lead_min", f.precursor_lead_min},
            {"repair_hours", f.repair_hours},
            {"straggler_per_accelerator_day", f.straggler_per_accelerator_day},
            {"straggler_slowdown", f.straggler_slowdown},
            {"straggler_hours", f.straggler_hours},
            {"slow_link_per_accelerator_day", f.slow_link_per_accelerator_day},
            {"slow_link_slowdown", f.slow_link_slowdown},
            {"slow_link_hours", f.slow_link_hours}}}};
}

}  // namespace

std::string to_json(const std::vector<Result>& results) {
  nlohmann::json runs = nlohmann::json::array();
  for (const Result& r : results) {
    nlohmann::json ps = nlohmann::json::array();
    for (const PolicyResult& p : r.policies) ps.push_back(policy_json(p));
    runs.push_back({{"scenario", scenario_json(r.scenario)}, {"policies", ps}});
  }
  return nlohmann::json{{"runs", runs}}.dump(2) + "\n";
}

std::string to_json(const std::vector<CostVariant>& variants) {
  nlohmann::json out = nlohmann::json::array();
  for (const CostVariant& v : variants) {
    nlohmann::json ps = nlohmann::json::array();
    for (const PolicyResult& p : v.result.policies) ps.push_back(policy_json(p));
    out.push_back({{"variant", v.name}, {"scenario", scenario_json(v.result.scenario)}, {"policies", ps}});
  }
  return nlohmann::json{{"sensitivity", out}}.dump(2) + "\n";
}

std::string to_table(const Result& r) {
  std::ostringstream o;
  const FailureModel& f = r.scenario.failures;
  char line[512];
  std::snprintf(line, sizeof line,
                "%u accelerators x %.1f days, seed %llu; rate x%.3g, Weibull %.2f, precursors %.0f%% at %.0f "
                "min, repair %.0f h; stragglers x%.2f, slow links x%.2f, %.2g each per accelerator-day\n",
                r.scenario.accelerators, r.scenario.days, static_cast<unsigned long long>(r.scenario.seed),
                f.rate_multiplier, f.weibull_shape, f.precursor_fraction * 100, f.precursor_lead_min,
                f.repair_hours, f.straggler_slowdown, f.slow_link_slowdown, f.straggler_per_accelerator_day);
  o << line;
  o << "policy               spares  util    ETTR    fail  incid join MTTI h  back s  migr  mem/disk  contd "
       "| lost %: work  detect restart restore ckpt  migr  paused degr  slow  spare repair\n";
  for (const PolicyResult& p : r.policies) {
    const double t = p.ledger.total() > 0 ? p.ledger.total() : 1;
    const Ledger& l = p.ledger;
    std::snprintf(
        line, sizeof line,
        "%-20s %6u  %6.2f%% %6.2f%% %5llu %6llu %4llu %6.2f %7.0f %5llu %4llu/%-4llu %5llu |      %5.2f "
        "%6.2f "
        "%7.2f %7.2f %5.2f %5.2f %6.2f %5.2f %5.2f %5.2f %6.2f\n",
        p.policy.c_str(), p.spares, p.utilization * 100, p.ettr * 100,
        static_cast<unsigned long long>(p.failures), static_cast<unsigned long long>(p.incidents),
        static_cast<unsigned long long>(p.joined), p.mtti_h, p.recovery.p50_s,
        static_cast<unsigned long long>(p.migrations), static_cast<unsigned long long>(p.restores_memory),
        static_cast<unsigned long long>(p.restores_disk), static_cast<unsigned long long>(p.contained),
        100 * l.lost_work / t, 100 * l.detection / t, 100 * l.restart / t, 100 * l.restore / t,
        100 * l.checkpoint / t, 100 * l.migration / t, 100 * l.paused / t, 100 * l.degraded / t,
        100 * l.slow / t, 100 * l.spare / t, 100 * l.repair / t);
    o << line;
  }
  o << "util: effective accelerator utilisation (SIGMA's meaning): productive accelerator time over "
       "accelerators x duration, spares and repairs included (not the job report's fleet MFU: model FLOPs "
       "over wall x peak). ETTR: the job's kept progress over the duration.\n";
  return o.str();
}

std::string to_json(const std::vector<ControlPlaneResult>& results) {
  nlohmann::json out = nlohmann::json::array();
  for (const ControlPlaneResult& r : results) {
    out.push_back({{"mode", r.mode},
                   {"accelerators", r.accelerators},
                   {"controllers", r.controllers},
                   {"reports", latency_json(r.reports)},
                   {"faults", latency_json(r.faults)},
                   {"escalations", r.escalations},
                   {"root_events_per_s", r.root_events_per_s},
                   {"root_capacity_per_s", r.root_capacity_per_s},
                   {"busiest_utilisation", r.busiest_utilisation},
                   {"report_service_p50_s", r.service_p50_s}});
  }
  return out.dump(2) + "\n";
}

std::string to_table(const std::vector<ControlPlaneResult>& results) {
  std::ostringstream o;
  char line[320];
  std::snprintf(line, sizeof line, "%-13s %8s %6s %11s %11s %11s %11s %6s %11s %11s %6s\n", "mode", "accel",
                "ctrls", "report p50", "report p99", "fault p50", "fault p99", "escal", "root ev/s",
                "root cap/s", "busy");
  o << line;
  for (const ControlPlaneResult& r : results) {
    std::snprintf(line, sizeof line,
                  "%-13s %8u %6u %9.3fms %9.3fms %9.3fms %9.3fms %6llu %11.0f %11.0f %6.2f\n", r.mode.c_str(),
                  r.accelerators, r.controllers, r.reports.p50_s * 1e3, r.reports.p99_s * 1e3,
                  r.faults.p50_s * 1e3, r.faults.p99_s * 1e3, static_cast<unsigned long long>(r.escalations),
                  r.root_events_per_s, r.root_capacity_per_s, r.busiest_utilisation);
    o << line;
  }
  return o.str();
}

}  // namespace sigma::sim

namespace sigma::sim::detail {

LatencyFigures latency_figures(std::vector<double> v) {
  LatencyFigures f;
  f.count = v.size();
  if (v.empty()) return f;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
  };
  f.p50_s = at(0.5);
  f.p99_s = at(0.99);
  f.max_s = v.back();
  return f;
}

}  // namespace sigma::sim::detail
