// The failure model's public figures and the three standard policies.
#include <sigma/error.hpp>
#include <sigma/sim.hpp>

#include "regular_file.hpp"

#include <nlohmann/json.hpp>

namespace sigma::sim {
namespace {

// How each Llama 3 interruption cause reaches the job (Table 5's names).
struct Mapping {
  const char* name;
  Scope scope;
  bool precursor;
};

constexpr Mapping kMappings[] = {
    {"faulty_gpu", Scope::device, true},
    {"gpu_hbm3_memory", Scope::device, true},
    {"gpu_sram_memory", Scope::device, true},
    {"gpu_system_processor", Scope::device, true},
    {"gpu_thermal_interface_sensor", Scope::device, true},
    {"software_bug", Scope::software, false},
    {"dependency", Scope::software, false},
    {"nccl_watchdog_timeout", Scope::hang, false},
    {"silent_data_corruption", Scope::silent, false},
    {"network_switch_or_cable", Scope::node, false},
    {"nic", Scope::node, false},
    {"host_maintenance_unplanned", Scope::node, false},
    {"ssd", Scope::node, false},
    {"power_supply", Scope::node, false},
    {"server_chassis", Scope::node, false},
    {"io_expansion_board", Scope::node, false},
    {"cpu", Scope::node, false},
    {"system_memory", Scope::node, false},
};

[[noreturn]] void refuse(const std::string& path, const std::string& field, const std::string& why) {
  throw Error(Code::invalid_argument, path + ": " + field + ": " + why);
}

// The middle of a list of swept values, within [lo, hi].
double middle(const nlohmann::json& list, const std::string& path, const std::string& field, double lo,
              double hi) {
  if (!list.is_array() || list.empty() || !list[list.size() / 2].is_number())
    refuse(path, field, "expected a non-empty list of numbers");
  const double v = list[list.size() / 2].get<double>();
  if (!(v >= lo && v <= hi))
    refuse(path, field,
           "the middle value is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

double single(const nlohmann::json& v, const std::string& path, const std::string& field, double lo,
              double hi) {
  if (!v.is_number() || !(v.get<double>() >= lo && v.get<double>() <= hi))
    refuse(path, field, "expected a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v.get<double>();
}

}  // namespace

const char* scope_name(Scope s) noexcept {
  switch (s) {
    case Scope::device:
      return "device";
    case Scope::node:
      return "node";
    case Scope::software:
      return "software";
    case Scope::hang:
      return "hang";
    case Scope::silent:
      return "silent";
  }
  return "?";
}

FailureModel load_failure_model(const std::string& path) {
  std::string text, why;
  if (!files::read_regular(path, uint64_t{1} << 20, text, why)) refuse(path, "(file)", why);
  return parse_failure_model(text, path);
}

FailureModel parse_failure_model(const std::string& text, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    refuse(path, "(syntax)", e.what());
  }
  if (!j.is_object()) refuse(path, "(top level)", "expected an object");
  FailureModel m;
  try {
    const auto& causes = j.at("llama3_interruptions").at("unexpected_by_cause");
    for (const Mapping& map : kMappings) {
      if (!causes.contains(map.name)) continue;
      const auto& n = causes.at(map.name);
      if (!n.is_number() || !(n.get<double>() >= 0 && n.get<double>() <= 1e9))
        refuse(path, std::string("llama3_interruptions.unexpected_by_cause.") + map.name,
               "expected a count in [0, 1e9]");
      m.categories.push_back({map.name, map.scope, n.get<double>(), map.precursor});
    }
    for (const auto& [name, n] : causes.items()) {
      bool known = false;
      for (const Mapping& map : kMappings) known = known || name == map.name;
      if (!known)
        refuse(path, "llama3_interruptions.unexpected_by_cause." + name,
               "a cause the simulator cannot place");
    }
    if (m.categories.empty()) refuse(path, "llama3_interruptions.unexpected_by_cause", "no causes");
    const auto& rate = j.at("derived_rates").at("llama3_unexpected_per_gpu_day");
    if (!rate.is_number() || !(rate.get<double>() > 0 && rate.get<double>() <= 1))
      refuse(path, "derived_rates.llama3_unexpected_per_gpu_day", "expected a number in (0, 1]");
    m.per_accelerator_day = rate.get<double>();
    const auto& a = j.at("early_life_assumptions");
    m.rate_multiplier = middle(a.at("rate_multiplier_vs_llama3"), path,
                               "early_life_assumptions.rate_multiplier_vs_llama3", 0, 1e6);
    m.precursor_fraction =
        middle(a.at("fraction_of_hardware_failures_with_telemetry_precursor"), path,
               "early_life_assumptions.fraction_of_hardware_failures_with_telemetry_precursor", 0, 1);
    m.precursor_lead_min =
        middle(a.at("precursor_lead_minutes"), path, "early_life_assumptions.precursor_lead_minutes", 0, 1e6);
    m.repair_hours = middle(a.at("repair_hours"), path, "early_life_assumptions.repair_hours", 0.01, 1e6);
    const auto& shape = a.at("weibull_shape_infant_mortality");
    if (!shape.is_number() || !(shape.get<double>() >= 0.05 && shape.get<double>() <= 10))
      refuse(path, "early_life_assumptions.weibull_shape_infant_mortality",
             "expected a number in [0.05, 10]");
    m.weibull_shape = shape.get<double>();
    if (j.contains("degradation_assumptions")) {  // this project's addition to the public figures
      const auto& d = j.at("degradation_assumptions");
      const std::string at = "degradation_assumptions.";
      m.straggler_per_accelerator_day = m.slow_link_per_accelerator_day =
          middle(d.at("per_accelerator_day"), path, at + "per_accelerator_day", 0, 100);
      m.straggler_slowdown = middle(d.at("straggler_slowdown"), path, at + "straggler_slowdown", 1, 100);
      m.straggler_hours = single(d.at("straggler_hours"), path, at + "straggler_hours", 1e-3, 1e6);
      m.slow_link_slowdown = single(d.at("slow_link_slowdown"), path, at + "slow_link_slowdown", 1, 100);
      m.slow_link_hours = single(d.at("slow_link_hours"), path, at + "slow_link_hours", 1e-3, 1e6);
    }
  } catch (const nlohmann::json::out_of_range& e) {
    refuse(path, "(missing field)", e.what());
  } catch (const nlohmann::json::type_error& e) {
    refuse(path, "(wrong type)", e.what());
  }
  return m;
}

std::vector<Policy> standard_policies() {
  Policy reactive;
  reactive.name = "reactive";
  reactive.spares = SpareRule::model;  // the cluster scheduler finds replacement nodes
  reactive.disk_every_s = 1800;
  reactive.disk_stall_s = 60;  // a synchronous save
  reactive.disk_restore_s = 300;
  reactive.crash_detect_s = 60;
  reactive.hang_detect_s = 600;  // NCCL's watchdog
  reactive.sdc_detect_s = 4 * 3600.0;
  reactive.full_restart = true;
  reactive.restart_s = 900;

  Policy paper;
  paper.name = "sigma-paper";
  paper.spares = SpareRule::fraction;
  paper.spare_fraction = 0.034;
  paper.disk_every_s = 1800;
  paper.disk_stall_s = 60;
  paper.disk_restore_s = 300;
  paper.crash_detect_s = 30;
  paper.hang_detect_s = 90;
  paper.sdc_detect_s = 3600;
  paper.full_restart = true;
  paper.restart_s = 600;
  paper.migrate_on_warning = true;
  paper.migrate_s = 60;

  Policy ours;
  ours.name = "libsigma";
  ours.spares = SpareRule::model;
  ours.spare_risk = 0.01;
  ours.disk_every_s = 1800;
  ours.disk_stall_s = 1;  // asynchronous: the snapshot copy only
  ours.disk_restore_s = 300;
  ours.memory_tier = true;
  ours.replicas_across_nodes = true;  // every host is a failure domain of its own
  ours.snapshot_every_s = 100;        // every 10 steps of 10 s without a failure model ...
  ours.snapshot_from_model = true;    // ... else Young and Daly's interval
  ours.snapshot_stall_s = 1;
  ours.memory_restore_s = 5;
  ours.crash_detect_s = 1;
  // A hung collective while every process still beats: the step
  // watchdog, with sigmarun --step-timeout 20 (two 10-s steps; its default
  // is 60 s).
  ours.step_timeout_s = 20;
  ours.sdc_detect_s = 20;  // the guardrails' cross-rank check, two steps
  ours.full_restart = false;
  ours.replace_s = 60;
  ours.restart_s = 600;
  ours.migrate_on_warning = true;
  ours.migrate_s = 10;

  // libsigma with --recovery contained: replicas of 64 accelerators (EP 8
  // x PP 8); a fault stops its replica, the others step on. The costs are
  // docs/sim.md's cost model.
  Policy contained = ours;
  contained.name = "libsigma-contained";
  contained.replica_size = 64;
  contained.comm_fixed_s = 1;
  contained.comm_per_member_s = 60.0 / 131072;
  contained.handoff_s = 1.2;
  contained.spare_ready_s = 5;
  contained.straggler_min_steps = 5;  // a migration costs a replica's hand-off, not a stop
  return {reactive, paper, ours, contained};
}

}  // namespace sigma::sim
