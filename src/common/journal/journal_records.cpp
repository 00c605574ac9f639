// The journal's kinds and their names, and each record written as its line.
// Reading is journal_decode.cpp.
#include "journal_records.hpp"

#include <array>
#include <utility>

namespace sigma::journal {

namespace {

using nlohmann::json;

constexpr std::array<std::pair<Event, const char*>, 36> kNames{{
    {Event::unknown, "unknown"},
    {Event::start, "start"},
    {Event::end, "end"},
    {Event::launch, "launch"},
    {Event::validated, "validated"},
    {Event::exit, "exit"},
    {Event::exited_without_session, "exited_without_session"},
    {Event::fault, "fault"},
    {Event::readmit, "readmit"},
    {Event::recovery_started, "recovery_started"},
    {Event::assigned, "assigned"},
    {Event::rejoined, "rejoined"},
    {Event::recovered, "recovered"},
    {Event::recovery_overdue, "recovery_overdue"},
    {Event::resumed, "resumed"},
    {Event::migration_started, "migration_started"},
    {Event::stalled, "stalled"},
    {Event::stop_requested, "stop_requested"},
    {Event::stopped, "stopped"},
    {Event::paused, "paused"},
    {Event::unrecoverable, "unrecoverable"},
    {Event::scheduler, "scheduler"},
    {Event::health_state, "health_state"},
    {Event::warning, "warning"},
    {Event::warning_cleared, "warning_cleared"},
    {Event::storage_failed, "storage_failed"},
    {Event::numerics, "numerics"},
    {Event::node_joined, "node_joined"},
    {Event::node_lost, "node_lost"},
    {Event::bad_message, "bad_message"},
    {Event::refused_connection, "refused_connection"},
    {Event::refused_env, "refused_env"},
    {Event::joined_root, "joined_root"},
    {Event::goodbye, "goodbye"},
    {Event::root_lost, "root_lost"},
    {Event::done_without_session, "done_without_session"},
}};

json line(Event e, json fields = json::object()) {
  fields["event"] = name(e);
  return fields;
}

}  // namespace

const char* name(Event e) noexcept {
  for (const auto& [k, n] : kNames)
    if (k == e) return n;
  return "unknown";
}

Event event_named(std::string_view text) noexcept {
  for (const auto& [k, n] : kNames)
    if (text == n) return k;
  return Event::unknown;
}

json encode(const Start& r) {
  return line(Event::start, {{"job_id", r.job_id},
                             {"nproc", r.nproc},
                             {"spares", r.spares},
                             {"nnodes", r.nnodes},
                             {"nodes_per_group", r.nodes_per_group},
                             {"snapshot_every", r.snapshot_every},
                             {"checkpoint_every", r.checkpoint_every},
                             {"proactive_migration", r.proactive_migration},
                             {"allow_shrink", r.allow_shrink},
                             {"min_world", r.min_world},
                             {"recovery", r.recovery},
                             {"replica_size", r.replica_size},
                             {"vendor", r.vendor},
                             {"store", r.store},
                             {"agent", r.agent},
                             {"vendor_options", r.vendor_options},
                             {"worker", r.worker}});
}

json encode(const Fault& r) {
  return line(Event::fault, {{"device", r.device},
                             {"rank", r.rank},
                             {"phase", r.phase},
                             {"cause", r.cause},
                             {"detected_after_s", r.detected_after_s}});
}

json encode(const Health& r) {
  json j = line(r.kind, {{"device", r.device}});
  if (r.kind == Event::health_state) {
    j["from"] = r.from;
    j["to"] = r.to;
  }
  if (!r.rule.empty()) {
    j["signal"] = r.signal;
    j["rule"] = r.rule;
    j["severity"] = r.severity;
    j["value"] = r.value;
    j["threshold"] = r.threshold;
    if (r.eta_s) j["eta_s"] = *r.eta_s;
    j["message"] = r.message;
  }
  return j;
}

json encode(const RecoveryStarted& r) {
  json j = line(Event::recovery_started, {{"cause", r.cause}});
  if (r.reached_step) j["reached_step"] = *r.reached_step;
  return j;
}

json encode(const Scheduler& r) {
  json j = line(Event::scheduler, {{"action", r.action}, {"reason", r.reason}});
  if (r.device) j["device"] = *r.device;
  if (r.rank) j["rank"] = *r.rank;
  if (r.to_device) j["to_device"] = *r.to_device;
  if (!r.tier.empty()) j["tier"] = r.tier;
  if (r.world_size) j["world_size"] = r.world_size;
  return j;
}

json encode(const Readmit& r) {
  return line(Event::readmit, {{"device", r.device}, {"cause", r.cause}, {"time", r.time}, {"of", r.of}});
}

json encode(const StorageFailed& r) {
  return line(Event::storage_failed,
              {{"device", r.device}, {"rank", r.rank}, {"index", r.index}, {"reason", r.reason}});
}

json encode(const End& r) {
  json j = line(Event::end);
  if (r.code) {
    j["code"] = *r.code;
  } else {
    j["status"] = r.status;
    j["reason"] = r.reason;
  }
  return j;
}

json encode(const JobEnded& r) { return line(r.kind, {{"reason", r.reason}}); }

json encode(const Resumed& r) { return line(Event::resumed, {{"index", r.index}, {"from", r.from}}); }

json encode(const StopRequested& r) { return line(Event::stop_requested, {{"signal", r.signal}}); }

json encode(const Numerics& r) { return line(Event::numerics, {{"step", r.step}, {"note", r.note}}); }

json encode(const Launch& r) {
  json j = line(Event::launch, {{"device", r.device}});
  if (r.node) j["node"] = *r.node;
  j["pid"] = r.pid;
  return j;
}

json encode(const Validated& r) {
  return line(Event::validated, {{"device", r.device}, {"passed", r.passed}, {"detail", r.detail}});
}

json encode(const ProcessExit& r) { return line(r.kind, {{"device", r.device}, {"status", r.status}}); }

json encode(const Assigned& r) {
  json handoff = json::array();
  for (const auto& [holder, receiver] : r.handoff) handoff.push_back({holder, receiver});
  return line(Event::assigned, {{"generation", r.generation},
                                {"restore", r.restore},
                                {"index", r.index},
                                {"handoff", handoff},
                                {"devices", r.devices},
                                {"domains", r.domains},
                                {"replicas_across", r.replicas_across}});
}

json encode(const RecoveryOverdue& r) {
  return line(Event::recovery_overdue, {{"generation", r.generation}, {"late", r.late}});
}

json encode(const Rejoined& r) {
  return line(Event::rejoined, {{"generation", r.generation},
                                {"after_fault_s", r.after_fault_s},
                                {"recomputed_steps", r.recomputed_steps}});
}

json encode(const Recovered& r) {
  return line(Event::recovered, {{"back_at_step", r.back_at_step}, {"after_fault_s", r.after_fault_s}});
}

json encode(const MigrationStarted& r) {
  return line(Event::migration_started,
              {{"device", r.device}, {"rank", r.rank}, {"boundary_step", r.boundary_step}});
}

json encode(const Stalled& r) {
  return line(Event::stalled, {{"step", r.step}, {"seconds", r.seconds}, {"note", r.note}});
}

json encode(const NodeEvent& r) { return line(r.kind, {{"node", r.node}}); }

json encode(const BadMessage& r) {
  json j = line(Event::bad_message);
  if (r.device) j["device"] = *r.device;
  if (r.node) j["node"] = *r.node;
  j["error"] = r.error;
  if (!r.message.is_null()) j["message"] = r.message;
  return j;
}

json encode(const RefusedConnection& r) {
  json j = line(Event::refused_connection, {{"reason", r.reason}});
  if (!r.message.is_null()) j["message"] = r.message;
  return j;
}

json encode(const RefusedEnv& r) {
  return line(Event::refused_env, {{"device", r.device}, {"names", r.names}});
}

json encode(const Goodbye& r) { return line(Event::goodbye, {{"code", r.code}, {"reason", r.reason}}); }

json encode(const RootLost&) { return line(Event::root_lost); }

}  // namespace sigma::journal
