#include "runtime/agent/records.hpp"

#include <algorithm>

namespace sigma::runtime::agent {

nlohmann::json record_of(const scheduler::Action& a) {
  journal::Scheduler r;
  r.action = scheduler::action_name(a.kind);
  r.reason = a.reason;
  if (a.device != scheduler::kNone) r.device = a.device;
  if (a.rank != scheduler::kNone) r.rank = a.rank;
  if (a.to_device != scheduler::kNone) r.to_device = a.to_device;
  r.tier = a.tier;
  r.world_size = a.world_size;
  return journal::encode(r);
}

nlohmann::json record_of(const health::Event& e) {
  journal::Health r;
  r.kind = e.kind == health::Event::Kind::warning_raised    ? journal::Event::warning
           : e.kind == health::Event::Kind::warning_cleared ? journal::Event::warning_cleared
                                                            : journal::Event::health_state;
  r.device = e.device;
  if (e.kind == health::Event::Kind::state_changed) {
    r.from = health::state_name(e.from);
    r.to = health::state_name(e.to);
  }
  if (!e.warning.rule.empty()) {
    r.signal = e.warning.signal;
    r.rule = e.warning.rule;
    r.severity = health::state_name(e.warning.severity);
    r.value = e.warning.value;
    r.threshold = e.warning.threshold;
    if (e.warning.eta_s >= 0) r.eta_s = e.warning.eta_s;
    r.message = e.warning.message;
  }
  return journal::encode(r);
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
