// The journal's kinds and typed records, both ways.
#include "journal_records.hpp"

#include <sigma/error.hpp>

#include <array>
#include <limits>
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

[[noreturn]] void bad(const char* field, const std::string& why) {
  throw Error(Code::invalid_argument, std::string(field) + ": " + why);
}

// The fields of one line, read with their types checked.
struct Fields {
  const json& j;
  bool has(const char* k) const { return j.contains(k); }
  double number(const char* k) const {
    if (!has(k) || !j[k].is_number()) bad(k, "missing or not a number");
    return j[k].get<double>();
  }
  uint64_t whole(const char* k) const {
    // Written as unsigned or as a signed integer that is not negative.
    if (!has(k) || !j[k].is_number_integer() || (!j[k].is_number_unsigned() && j[k].get<int64_t>() < 0))
      bad(k, "missing or not a whole number");
    return j[k].get<uint64_t>();
  }
  uint32_t whole32(const char* k) const {
    const uint64_t v = whole(k);
    if (v > std::numeric_limits<uint32_t>::max()) bad(k, "above 4294967295");
    return static_cast<uint32_t>(v);
  }
  int64_t integer(const char* k) const {
    if (!has(k) || !j[k].is_number_integer()) bad(k, "missing or not an integer");
    return j[k].get<int64_t>();
  }
  std::string text(const char* k) const {
    if (!has(k) || !j[k].is_string()) bad(k, "missing or not a string");
    return j[k].get<std::string>();
  }
  bool flag(const char* k, bool otherwise) const {
    if (!has(k)) return otherwise;
    if (!j[k].is_boolean()) bad(k, "not true or false");
    return j[k].get<bool>();
  }
  // Optional fields: their default when absent, checked when present.
  std::string text_or(const char* k) const { return has(k) ? text(k) : std::string(); }
  double number_or(const char* k, double otherwise) const { return has(k) ? number(k) : otherwise; }
  uint32_t whole32_or(const char* k, uint32_t otherwise) const { return has(k) ? whole32(k) : otherwise; }
  uint64_t whole_or(const char* k, uint64_t otherwise) const { return has(k) ? whole(k) : otherwise; }
  std::optional<uint32_t> maybe32(const char* k) const {
    return has(k) ? std::optional<uint32_t>(whole32(k)) : std::nullopt;
  }
};

Start read_start(const Fields& f) {
  Start r;
  r.job_id = f.text_or("job_id");
  r.nproc = f.whole32("nproc");
  r.spares = f.whole32("spares");
  r.nnodes = f.whole32("nnodes");
  r.nodes_per_group = f.whole32_or("nodes_per_group", 0);
  r.min_world = f.whole32_or("min_world", 1);
  r.snapshot_every = f.whole_or("snapshot_every", 1);
  r.checkpoint_every = f.whole_or("checkpoint_every", 0);
  r.proactive_migration = f.flag("proactive_migration", true);
  r.allow_shrink = f.flag("allow_shrink", false);
  r.vendor = f.text_or("vendor");
  r.store = f.text_or("store");
  r.agent = f.text_or("agent");
  r.vendor_options = f.text_or("vendor_options");
  if (f.has("worker")) r.worker = f.j["worker"];
  return r;
}

Health read_health(Event kind, const Fields& f) {
  Health r;
  r.kind = kind;
  r.device = f.whole32("device");
  if (kind == Event::health_state) {
    r.from = f.text_or("from");
    r.to = f.text("to");
  }
  r.rule = f.text_or("rule");
  r.signal = f.text_or("signal");
  r.severity = f.text_or("severity");
  r.message = f.text_or("message");
  r.value = f.number_or("value", 0);
  r.threshold = f.number_or("threshold", 0);
  if (f.has("eta_s")) r.eta_s = f.number("eta_s");
  return r;
}

Record read_record(Event e, const Fields& f) {
  switch (e) {
    case Event::start:
      return read_start(f);
    case Event::fault:
      return Fault{f.whole32("device"), f.has("rank") ? f.integer("rank") : -1, f.text_or("phase"),
                   f.text_or("cause"), f.number_or("detected_after_s", 0)};
    case Event::health_state:
    case Event::warning:
    case Event::warning_cleared:
      return read_health(e, f);
    case Event::recovery_started:
      return RecoveryStarted{f.text_or("cause"), f.has("reached_step")
                                                     ? std::optional<uint64_t>(f.whole("reached_step"))
                                                     : std::nullopt};
    case Event::scheduler:
      return Scheduler{
          f.text("action"),       f.text_or("reason"), f.maybe32("device"),          f.maybe32("rank"),
          f.maybe32("to_device"), f.text_or("tier"),   f.whole32_or("world_size", 0)};
    case Event::readmit:
      return Readmit{f.whole32("device"), f.text_or("cause"), f.whole32_or("time", 0), f.whole32_or("of", 0)};
    case Event::storage_failed:
      return StorageFailed{f.whole32_or("device", 0), f.has("rank") ? f.integer("rank") : -1,
                           f.whole_or("index", 0), f.text_or("reason")};
    default:
      return std::monostate{};
  }
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

json line(Event e, json fields) {
  fields["event"] = name(e);
  return fields;
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

Line decode(const json& j) {
  if (!j.is_object()) bad("(line)", "not a JSON object");
  const Fields f{j};
  Line l;
  l.event = event_named(f.text("event"));
  l.t = f.number("t");
  l.record = read_record(l.event, f);
  return l;
}

}  // namespace sigma::journal
