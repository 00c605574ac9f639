#include "runtime/agent/records.hpp"

#include <algorithm>

namespace sigma::runtime::agent {

nlohmann::json record_of(const scheduler::Action& a) {
  nlohmann::json j{{"event", "scheduler"}, {"action", scheduler::action_name(a.kind)}, {"reason", a.reason}};
  if (a.device != scheduler::kNone) j["device"] = a.device;
  if (a.rank != scheduler::kNone) j["rank"] = a.rank;
  if (a.to_device != scheduler::kNone) j["to_device"] = a.to_device;
  if (!a.tier.empty()) j["tier"] = a.tier;
  if (a.world_size) j["world_size"] = a.world_size;
  return j;
}

nlohmann::json record_of(const health::Event& e) {
  const char* kind = e.kind == health::Event::Kind::warning_raised    ? "warning"
                     : e.kind == health::Event::Kind::warning_cleared ? "warning_cleared"
                                                                      : "health_state";
  nlohmann::json j{{"event", kind}, {"device", e.device}};
  if (e.kind == health::Event::Kind::state_changed) {
    j["from"] = health::state_name(e.from);
    j["to"] = health::state_name(e.to);
  }
  if (!e.warning.rule.empty()) {
    j["signal"] = e.warning.signal;
    j["rule"] = e.warning.rule;
    j["severity"] = health::state_name(e.warning.severity);
    j["value"] = e.warning.value;
    j["threshold"] = e.warning.threshold;
    if (e.warning.eta_s >= 0) j["eta_s"] = e.warning.eta_s;
    j["message"] = e.warning.message;
  }
  return j;
}

nlohmann::json Ledger::to_json(double wall_s) const {
  const double lost = detection_s + restart_s + restore_s + recompute_s + slow_steps_s;
  return {{"wall_s", wall_s},
          {"lost_s",
           {{"detection", detection_s},
            {"restart", restart_s},
            {"restore", restore_s},
            {"recomputation", recompute_s},
            {"slow_steps", slow_steps_s}}},
          {"recomputed_steps", recomputed_steps},
          {"idle_spares_device_s", idle_spares_s},
          {"steps_run", steps_run},
          {"goodput", wall_s > 0 ? std::max(0.0, 1.0 - lost / wall_s) : 0.0}};
}

}  // namespace sigma::runtime::agent
