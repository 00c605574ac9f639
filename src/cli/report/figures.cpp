#include "figures.hpp"

#include <sigma/error.hpp>

#include "journal_records.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>

namespace sigma_report {

using json = nlohmann::json;

namespace {

double num(const json& j, const char* key, double otherwise = 0) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : otherwise;
}
std::string str(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string fmt(const char* f, double a, double b = 0, double c = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c);
  return buf;
}

// Which device held each rank over time, from the scheduler's journal lines.
class Placement {
 public:
  void feed(const sigma::journal::Line& l) {
    const auto* s = std::get_if<sigma::journal::Scheduler>(&l.record);
    if (s == nullptr || !s->rank) return;
    const auto rank = static_cast<int64_t>(*s->rank);
    const auto device = [](const std::optional<uint32_t>& d) { return d ? static_cast<int64_t>(*d) : 0; };
    if (s->action == "assign") changes_.push_back({l.t, rank, device(s->device)});
    if (s->action == "replace" || s->action == "migrate")
      changes_.push_back({l.t, rank, device(s->to_device)});
  }
  int64_t device_of(int64_t rank, double t) const {
    int64_t d = -1;
    for (const auto& c : changes_)
      if (c.rank == rank && c.t <= t) d = c.device;
    return d;
  }

 private:
  struct Change {
    double t;
    int64_t rank, device;
  };
  std::vector<Change> changes_;
};

// "ranks 1" / "rank(s) 0" in a guardrails reason: the first rank number named.
int64_t rank_named(const std::string& note) {
  for (const char* key : {"rank(s) ", "ranks ", "rank "}) {
    const auto at = note.find(key);
    if (at != std::string::npos)
      return std::strtoll(note.c_str() + at + std::string(key).size(), nullptr, 10);
  }
  return -1;
}

void recoveries(const json& report, Figures& f) {
  for (const json& inc : report.value("incidents", json::array())) {
    Incident i;
    i.t = num(inc, "fault_s");
    const std::string cause = str(inc, "cause");
    const bool migration = cause.rfind("migration", 0) == 0;
    i.kind = migration ? "migration" : cause.find("lost") != std::string::npos ? "device lost" : "crash";
    if (const auto d = cause.find("device "); d != std::string::npos)
      i.device = "device " + std::to_string(std::strtoul(cause.c_str() + d + 7, nullptr, 10));
    i.what = cause;
    const double back = num(inc, "back_at_reached_step_s", -1);
    i.handled = "restored from " + str(inc, "restore") + " at step " +
                std::to_string(inc.value("index", uint64_t{0})) + ", " +
                std::to_string(inc.value("recomputed_steps", uint64_t{0})) + " step(s) recomputed" +
                (back >= 0 ? fmt(", back at the reached step after %.2f s", back) : std::string());
    i.lost_s = std::max(0.0, back);
    f.incidents.push_back(i);
  }
}

// A step's note may carry several decisions: "skipped: ...; rebalanced: ...".
std::vector<std::string> parts_of(const std::string& note) {
  std::vector<std::string> out;
  size_t from = 0;
  for (;;) {
    size_t cut = std::string::npos;
    for (const char* key :
         {"; skipped: ", "; rolled back: ", "; rebalanced: ", "; escalated ", "; returned "})
      cut = std::min(cut, note.find(key, from));
    out.push_back(note.substr(from, cut == std::string::npos ? std::string::npos : cut - from));
    if (cut == std::string::npos) return out;
    from = cut + 2;
  }
}

// "escalated L to f32: why" / "returned L to f16: why": the layer's name,
// and whether it went up; nullopt for another decision.
std::optional<std::pair<std::string, bool>> precision_change(const std::string& part) {
  for (const auto& [head, up] : {std::pair{"escalated ", true}, std::pair{"returned ", false}}) {
    if (part.rfind(head, 0) != 0) continue;
    const auto to = part.find(" to f", std::string(head).size());
    if (to == std::string::npos) return std::nullopt;
    return std::pair{part.substr(std::string(head).size(), to - std::string(head).size()), up};
  }
  return std::nullopt;
}

// A precision change and the first step it applies to: a step's own
// change from the next step on; one decided with a rollback comes with the
// note of the first step after it, which already ran with it.
struct PrecisionChange {
  double from_step = 0;
  std::string layer;
  bool up = false;
};

// The steps each layer ran in f32, from its changes in order. A span still
// open ends with the job's last step; an empty one is left out.
void precision_spans(const std::vector<PrecisionChange>& changes, double end, Figures& f) {
  std::map<std::string, double> open;
  const auto close = [&f](const std::string& layer, double from, double to) {
    if (to > from) f.f32_spans.push_back({layer, from, to});
  };
  for (const auto& c : changes) {
    if (c.up && !open.count(c.layer)) open[c.layer] = c.from_step;
    if (!c.up && open.count(c.layer)) {
      close(c.layer, open[c.layer], c.from_step);
      open.erase(c.layer);
    }
  }
  for (const auto& [layer, from] : open) close(layer, from, end);
}

// One numerics or autotuner decision a worker reported.
Incident decision(const std::string& part, double t, uint64_t step, uint64_t reached, const Placement& where,
                  Figures& f) {
  Incident i;
  i.t = t;
  i.what = part;
  const bool rollback = part.rfind("rolled back", 0) == 0;
  const bool rebalance = part.rfind("rebalanced", 0) == 0;
  const bool sdc = part.find("differ on rank") != std::string::npos;
  const bool nan = part.find("non-finite") != std::string::npos;
  i.kind = rollback    ? "loss spike"
           : rebalance ? "slow link"
           : sdc       ? "silent corruption"
           : nan       ? "NaN burst"
                       : "skipped step";
  if (const auto change = precision_change(part)) {
    i.kind = change->second ? "precision escalated" : "precision returned";
    i.handled = change->second ? change->first + " runs its GEMMs in f32 from the next step"
                               : change->first + " runs in its low precision again from the next step";
    return i;
  }
  const int64_t rank = rank_named(part);
  const int64_t dev = rank >= 0 ? where.device_of(rank, t) : -1;
  if (dev >= 0) i.device = "device " + std::to_string(dev);
  if (rollback) {
    const uint64_t redo = reached > step ? reached - step : 0;
    f.rolled_back_steps += redo;
    i.handled =
        "rolled back " + std::to_string(redo) + " step(s) from the memory tier; the data window skipped";
    i.lost_s = static_cast<double>(redo) * f.median_step_s;
  } else if (rebalance) {
    i.handled =
        "the autotuner moved experts (parameters and optimizer state, through the HAL); results unchanged";
  } else {
    ++f.skipped_steps;
    i.handled = sdc ? "step skipped on every rank; rank " + std::to_string(rank) + " named (" + i.device + ")"
                    : "step skipped on every rank";
    i.lost_s = f.median_step_s;
  }
  return i;
}

void numerics(const json& report, const Placement& where, Figures& f) {
  const json series = report.value("series", json::object());
  const json steps = series.value("steps", json::array());
  std::vector<PrecisionChange> changes;
  for (const json& n : series.value("notes", json::array())) {
    const double t = num(n, "t");
    const uint64_t step = n.value("step", uint64_t{0});
    // The steps reached before the note: what a rollback made the job redo.
    uint64_t reached = 0;
    for (const json& p : steps)
      if (num(p, "t") < t) reached = std::max(reached, p.value("step", uint64_t{0}) + 1);
    bool after_rollback = false;
    for (const std::string& part : parts_of(str(n, "note"))) {
      f.incidents.push_back(decision(part, t, step, reached, where, f));
      after_rollback |= part.rfind("rolled back", 0) == 0;
      if (const auto change = precision_change(part))
        changes.push_back(
            {static_cast<double>(after_rollback ? step : step + 1), change->first, change->second});
    }
  }
  double last = 0;
  for (const json& p : steps) last = std::max(last, num(p, "step") + 1);
  precision_spans(changes, last, f);
}

void warnings(const std::vector<sigma::journal::Line>& journal, Figures& f) {
  namespace jr = sigma::journal;
  for (const jr::Line& l : journal) {
    if (const auto* r = std::get_if<jr::Readmit>(&l.record)) {
      f.incidents.push_back(
          {l.t, "readmitted", "device " + std::to_string(r->device), "its worker crashed: " + r->cause,
           "validated again with a fresh worker (self-test, probe); a spare again when it passes", 0});
    } else if (const auto* h = std::get_if<jr::Health>(&l.record); h && h->kind == jr::Event::health_state) {
      if (h->to != "suspect" && h->to != "failing") continue;
      f.incidents.push_back({l.t, "health " + h->to, "device " + std::to_string(h->device), h->message,
                             "the scheduler decides (migration when a spare is free)", 0});
    } else if (const auto* s = std::get_if<jr::StorageFailed>(&l.record)) {
      f.incidents.push_back({l.t, "storage", "", s->reason, "training went on with the memory tier", 0});
    }
  }
}

Trace losses(const json& report) {
  Trace t;
  for (const json& p : report.value("series", json::object()).value("steps", json::array())) {
    if (p.contains("loss") && p["loss"].is_number()) {
      t.x.push_back(num(p, "step"));
      t.y.push_back(p["loss"].get<double>());
    }
  }
  return t;
}

void series(const json& report, const json* reference, const std::vector<sigma::journal::Line>& journal,
            Figures& f) {
  const json s = report.value("series", json::object());
  double tokens = 0, flops = 0, busy = 0, peak = 0;
  for (const json& p : s.value("steps", json::array())) {
    f.step_time.x.push_back(num(p, "t"));
    f.step_time.y.push_back(num(p, "seconds"));
    if (p.contains("loss") && p["loss"].is_number()) {
      f.loss.x.push_back(num(p, "step"));
      f.loss.y.push_back(p["loss"].get<double>());
    }
    tokens += num(p, "tokens");
    flops += num(p, "flops");
    busy += num(p, "seconds");
    peak = std::max(peak, num(p, "peak_flops"));
  }
  // What counted: the steps the job kept, not the ones it did twice.
  const double kept = f.steps > 0 && !f.step_time.x.empty()
                          ? static_cast<double>(f.steps) / static_cast<double>(f.step_time.x.size())
                          : 1;
  if (tokens > 0 && f.wall_s > 0) f.tokens_per_s = tokens * kept / f.wall_s;
  if (flops > 0 && peak > 0 && busy > 0) {
    f.mfu = flops / busy / peak;
    const double held = f.world > 0 ? static_cast<double>(f.world + f.spares) / f.world : 1;
    f.fleet_mfu = flops * kept / (f.wall_s * peak * held);
  }
  if (reference) f.reference_loss = losses(*reference);
  std::map<uint32_t, DeviceTrace> devices;
  for (const json& p : s.value("devices", json::array())) {
    const auto d = p.value("device", 0u);
    devices[d].device = d;
    if (p.contains("temperature_c") && p["temperature_c"].is_number()) {
      devices[d].temperature.x.push_back(num(p, "t"));
      devices[d].temperature.y.push_back(p["temperature_c"].get<double>());
    }
  }
  for (const sigma::journal::Line& l : journal) {
    const auto* h = std::get_if<sigma::journal::Health>(&l.record);
    if (h == nullptr || h->kind != sigma::journal::Event::health_state) continue;
    devices[h->device].device = h->device;
    devices[h->device].health.emplace_back(l.t, h->to);
  }
  for (auto& [d, trace] : devices) f.devices.push_back(std::move(trace));
}

}  // namespace

Figures compute(const json& report, const std::vector<json>& journal, const json* reference,
                const std::vector<std::pair<std::string, json>>& compare) {
  Figures f;
  for (const auto& [label, other] : compare) f.compare_loss.emplace_back(label, losses(other));
  f.status = str(report, "status");
  f.reason = str(report, "reason");
  f.steps = report.value("steps", uint64_t{0});
  f.wall_s = num(report, "wall_s");
  f.world = report.value("world", 0u);
  f.spares = report.value("spares", 0u);
  f.median_step_s = num(report, "median_step_s");
  const json ledger = report.value("ledger", json::object());
  f.goodput = num(ledger, "goodput", 1);
  const json lost = ledger.value("lost_s", json::object());
  for (const auto& [cause, s] : lost.items())
    if (s.is_number()) f.lost_s.emplace_back(cause, s.get<double>());
  // The journal's lines as records; one a reader cannot take is counted,
  // not guessed at.
  std::vector<sigma::journal::Line> lines;
  for (const json& e : journal) {
    try {
      lines.push_back(sigma::journal::decode(e));
    } catch (const sigma::Error&) {
      ++f.unread_journal_lines;
    }
  }
  Placement where;
  for (const auto& l : lines) where.feed(l);
  series(report, reference, lines, f);
  recoveries(report, f);
  numerics(report, where, f);
  warnings(lines, f);
  f.lost_s.emplace_back("skipped steps", static_cast<double>(f.skipped_steps) * f.median_step_s);
  f.lost_s.emplace_back("rolled back", static_cast<double>(f.rolled_back_steps) * f.median_step_s);
  std::stable_sort(f.incidents.begin(), f.incidents.end(),
                   [](const Incident& a, const Incident& b) { return a.t < b.t; });
  return f;
}

json to_json(const Figures& f) {
  json incidents = json::array();
  for (const auto& i : f.incidents)
    incidents.push_back({{"t", i.t},
                         {"kind", i.kind},
                         {"device", i.device},
                         {"what", i.what},
                         {"handled", i.handled},
                         {"lost_s", i.lost_s}});
  json lost = json::object();
  for (const auto& [cause, s] : f.lost_s) lost[cause] = s;
  auto opt = [](double x) { return x < 0 ? json(nullptr) : json(x); };
  return {{"status", f.status},
          {"steps", f.steps},
          {"wall_s", f.wall_s},
          {"tokens_per_s", opt(f.tokens_per_s)},
          {"mfu", opt(f.mfu)},
          {"fleet_mfu", opt(f.fleet_mfu)},
          {"goodput", f.goodput},
          {"skipped_steps", f.skipped_steps},
          {"rolled_back_steps", f.rolled_back_steps},
          {"lost_s", lost},
          {"incidents", incidents},
          {"unread_journal_lines", f.unread_journal_lines}};
}

}  // namespace sigma_report
