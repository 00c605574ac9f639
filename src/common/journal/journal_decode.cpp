// A journal line read back as its record: every field's type checked, the
// fields a kind has always had required, the ones added since optional.
#include "journal_records.hpp"

#include <sigma/error.hpp>

#include <limits>

namespace sigma::journal {

namespace {

using nlohmann::json;

[[noreturn]] void bad(const char* field, const std::string& why) {
  throw Error(Code::invalid_argument, std::string(field) + ": " + why);
}

bool whole_number(const json& v) {
  // Written as unsigned or as a signed integer that is not negative.
  return v.is_number_integer() && (v.is_number_unsigned() || v.get<int64_t>() >= 0);
}

uint32_t whole32_of(const char* k, const json& v) {
  if (!whole_number(v)) bad(k, "missing or not a whole number");
  const uint64_t n = v.get<uint64_t>();
  if (n > std::numeric_limits<uint32_t>::max()) bad(k, "above 4294967295");
  return static_cast<uint32_t>(n);
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
    if (!has(k) || !whole_number(j[k])) bad(k, "missing or not a whole number");
    return j[k].get<uint64_t>();
  }
  uint32_t whole32(const char* k) const {
    if (!has(k)) bad(k, "missing or not a whole number");
    return whole32_of(k, j[k]);
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
  const json& array(const char* k) const {
    if (!has(k) || !j[k].is_array()) bad(k, "missing or not an array");
    return j[k];
  }
  json any(const char* k) const { return has(k) ? j[k] : json(); }
  // Optional fields: their default when absent, checked when present.
  std::string text_or(const char* k) const { return has(k) ? text(k) : std::string(); }
  double number_or(const char* k, double otherwise) const { return has(k) ? number(k) : otherwise; }
  uint32_t whole32_or(const char* k, uint32_t otherwise) const { return has(k) ? whole32(k) : otherwise; }
  uint64_t whole_or(const char* k, uint64_t otherwise) const { return has(k) ? whole(k) : otherwise; }
  int64_t integer_or(const char* k, int64_t otherwise) const { return has(k) ? integer(k) : otherwise; }
  std::optional<uint32_t> maybe32(const char* k) const {
    return has(k) ? std::optional<uint32_t>(whole32(k)) : std::nullopt;
  }
  std::vector<uint32_t> wholes32_or(const char* k) const {
    std::vector<uint32_t> out;
    if (has(k))
      for (const json& v : array(k)) out.push_back(whole32_of(k, v));
    return out;
  }
  std::vector<std::string> texts_or(const char* k) const {
    std::vector<std::string> out;
    if (!has(k)) return out;
    for (const json& v : array(k)) {
      if (!v.is_string()) bad(k, "an element is not a string");
      out.push_back(v.get<std::string>());
    }
    return out;
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
  r.recovery = f.has("recovery") ? f.text("recovery") : "exact";
  if (r.recovery != "exact" && r.recovery != "contained") bad("recovery", "neither exact nor contained");
  r.replica_size = f.whole32_or("replica_size", 0);
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

Assigned read_assigned(const Fields& f) {
  Assigned r;
  r.generation = f.whole("generation");
  r.restore = f.text_or("restore");
  r.index = f.whole_or("index", 0);
  if (f.has("handoff")) {
    for (const json& p : f.array("handoff")) {
      if (!p.is_array() || p.size() != 2) bad("handoff", "an element is not a [holder, receiver] pair");
      r.handoff.emplace_back(whole32_of("handoff", p[0]), whole32_of("handoff", p[1]));
    }
  }
  r.devices = f.wholes32_or("devices");
  r.domains = f.wholes32_or("domains");
  r.replicas_across = f.text_or("replicas_across");
  return r;
}

// The kinds that start, end or steer the job.
Record read_job(Event e, const Fields& f) {
  switch (e) {
    case Event::start:
      return read_start(f);
    case Event::end:
      return End{f.text_or("status"), f.text_or("reason"),
                 f.has("code") ? std::optional<int64_t>(f.integer("code")) : std::nullopt};
    case Event::stopped:
    case Event::paused:
    case Event::unrecoverable:
    case Event::done_without_session:
      return JobEnded{e, f.text_or("reason")};
    case Event::resumed:
      return Resumed{f.whole("index"), f.text_or("from")};
    case Event::stop_requested:
      return StopRequested{f.text_or("signal")};
    case Event::numerics:
      return Numerics{f.whole("step"), f.text_or("note")};
    case Event::scheduler:
      return Scheduler{
          f.text("action"),       f.text_or("reason"), f.maybe32("device"),          f.maybe32("rank"),
          f.maybe32("to_device"), f.text_or("tier"),   f.whole32_or("world_size", 0)};
    default:
      return std::monostate{};
  }
}

// The kinds about one device or its process.
Record read_device(Event e, const Fields& f) {
  switch (e) {
    case Event::launch:
      return Launch{f.whole32("device"), f.maybe32("node"), f.integer_or("pid", 0)};
    case Event::validated:
      return Validated{f.whole32("device"), f.flag("passed", false), f.text_or("detail")};
    case Event::exit:
    case Event::exited_without_session:
      return ProcessExit{e, f.whole32("device"), f.text_or("status")};
    case Event::fault:
      return Fault{f.whole32("device"), f.integer_or("rank", -1), f.text_or("phase"), f.text_or("cause"),
                   f.number_or("detected_after_s", 0)};
    case Event::readmit:
      return Readmit{f.whole32("device"), f.text_or("cause"), f.whole32_or("time", 0), f.whole32_or("of", 0)};
    case Event::health_state:
    case Event::warning:
    case Event::warning_cleared:
      return read_health(e, f);
    case Event::storage_failed:
      return StorageFailed{f.whole32_or("device", 0), f.integer_or("rank", -1), f.whole_or("index", 0),
                           f.text_or("reason")};
    default:
      return read_job(e, f);
  }
}

// The recovery round's kinds.
Record read_recovery(Event e, const Fields& f) {
  switch (e) {
    case Event::recovery_started:
      return RecoveryStarted{f.text_or("cause"), f.has("reached_step")
                                                     ? std::optional<uint64_t>(f.whole("reached_step"))
                                                     : std::nullopt};
    case Event::assigned:
      return read_assigned(f);
    case Event::recovery_overdue:
      return RecoveryOverdue{f.whole("generation"), f.whole_or("late", 0)};
    case Event::rejoined:
      return Rejoined{f.whole("generation"), f.number_or("after_fault_s", 0),
                      f.whole_or("recomputed_steps", 0)};
    case Event::recovered:
      return Recovered{f.whole("back_at_step"), f.number_or("after_fault_s", 0)};
    case Event::migration_started:
      return MigrationStarted{f.whole32("device"), f.integer_or("rank", -1), f.whole_or("boundary_step", 0)};
    case Event::stalled:
      return Stalled{f.integer_or("step", 0), f.number_or("seconds", 0), f.text_or("note")};
    default:
      return read_device(e, f);
  }
}

// The control plane's connections.
Record read_record(Event e, const Fields& f) {
  switch (e) {
    case Event::node_joined:
    case Event::node_lost:
    case Event::joined_root:
      return NodeEvent{e, f.whole32("node")};
    case Event::bad_message:
      return BadMessage{f.maybe32("device"), f.maybe32("node"), f.text_or("error"), f.any("message")};
    case Event::refused_connection:
      return RefusedConnection{f.text_or("reason"), f.any("message")};
    case Event::refused_env:
      return RefusedEnv{f.whole32("device"), f.texts_or("names")};
    case Event::goodbye:
      return Goodbye{f.integer_or("code", 0), f.text_or("reason")};
    case Event::root_lost:
      return RootLost{};
    default:
      return read_recovery(e, f);
  }
}

}  // namespace

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
