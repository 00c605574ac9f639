#include "runtime/agent/recovery_round.hpp"

#include <algorithm>
#include <utility>

namespace sigma::runtime::agent {

using json = nlohmann::json;

RecoveryRound::RecoveryRound() = default;

void RecoveryRound::begin(const std::string& cause, double fault_s, double t, uint64_t reached) {
  // Everything but the incidents of earlier rounds starts afresh.
  std::vector<json> kept = std::move(incidents_);
  *this = RecoveryRound();
  incidents_ = std::move(kept);
  active_ = true;
  cause_ = cause;
  fault_s_ = fault_s;
  detected_s_ = abort_s_ = t;
  reached_ = reached;
}

bool RecoveryRound::fault(const std::string& cause, double fault_s, bool from_report, double t,
                          uint64_t reached) {
  if (active_ && !rejoined_) {
    // A second fault before the first recovery finished: the same round
    // goes on with one more casualty. A survivor's report often arrives
    // before the exit is reaped: the fault itself is the better headline.
    if (cause_is_report_) {
      cause_ = cause + " (first seen as: " + cause_ + ")";
      cause_is_report_ = from_report;
    } else {
      cause_ += "; then " + cause;
    }
    incident_["cause"] = cause_;
    assigned_ = false;
    abort_s_ = t;
    return false;
  }
  if (active_) {
    incident_["back_at_reached_step_s"] = nullptr;
    incidents_.push_back(incident_);
  }
  begin(cause, fault_s, t, reached);
  cause_is_report_ = from_report;
  incident_ = {{"cause", cause}, {"fault_s", fault_s}, {"detected_s", t}, {"reached_step", reached}};
  return true;
}

void RecoveryRound::migration(const std::string& cause, double t, uint64_t reached, const json& warning) {
  begin(cause, t, t, reached);
  incident_ = {{"cause", cause},          {"fault_s", t},      {"detected_s", t},
               {"reached_step", reached}, {"proactive", true}, {"warning", warning}};
}

void RecoveryRound::pause(std::string reason, double t) {
  if (gave_up_) return;
  paused_ = true;
  paused_s_ = t;
  pause_reason_ = std::move(reason);
}

void RecoveryRound::resume() {
  if (!gave_up_) paused_ = false;
}

void RecoveryRound::assignment_failed(const std::string& why) {
  if (++failed_assignments_ < kMaxFailedAssignments) return;
  paused_ = gave_up_ = true;
  pause_reason_ = "recovery failed " + std::to_string(failed_assignments_) + " times; the last: " + why;
}

void RecoveryRound::assigned(double t, uint64_t index, RestoreTier tier) {
  assigned_ = true;
  assigned_s_ = t;
  index_ = index;
  tier_ = tier;
}

RecoveryRound::Charges RecoveryRound::rejoined(double t, uint64_t generation, double comm_s,
                                               double restore_s) {
  rejoined_ = true;
  Charges c;
  c.recomputed_steps = reached_ > index_ ? reached_ - index_ : 0;
  c.detection_s = detected_s_ - fault_s_;
  c.restart_s = std::max(0.0, t - detected_s_ - restore_s);
  c.restore_s = restore_s;
  incident_.update({{"generation", generation},
                    {"restore", name(tier_)},
                    {"index", index_},
                    {"recomputed_steps", c.recomputed_steps},
                    {"rejoined_s", t},
                    {"comm_s", comm_s},
                    {"restore_s", restore_s}});
  return c;
}

void RecoveryRound::recovered(double t) {
  incident_["back_at_reached_step_s"] = t - fault_s_;
  incidents_.push_back(incident_);
  active_ = false;
}

void RecoveryRound::close() {
  if (!active_) return;
  incidents_.push_back(incident_);
  active_ = false;
}

}  // namespace sigma::runtime::agent
