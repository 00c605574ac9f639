#include "protocol.hpp"

#include <sigma/error.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace sigma::runtime::protocol {
namespace {

using json = nlohmann::json;

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  throw Error(Code::invalid_argument, "protocol: " + where + ": " + what);
}

// The fields of one message of kind `kind`, read with their types checked.
class Fields {
 public:
  Fields(const json& j, std::string kind) : j_(j), kind_(std::move(kind)) {}

  const json& at(const char* name) const {
    auto it = j_.find(name);
    if (it == j_.end()) bad(kind_ + "." + name, "missing");
    return *it;
  }
  bool has(const char* name) const { return j_.contains(name); }
  std::string where(const char* name) const { return kind_ + "." + name; }

  template <class T>
  T integer(const char* name) const {
    return integer_of<T>(at(name), where(name));
  }
  template <class T>
  T integer_or(const char* name, T otherwise) const {
    return has(name) ? integer<T>(name) : otherwise;
  }
  double number(const char* name) const {
    const json& v = at(name);
    if (!v.is_number()) bad(where(name), "expected a number, got " + v.dump());
    return v.get<double>();
  }
  bool boolean(const char* name) const {
    const json& v = at(name);
    if (!v.is_boolean()) bad(where(name), "expected true or false, got " + v.dump());
    return v.get<bool>();
  }
  std::string text(const char* name) const {
    const json& v = at(name);
    if (!v.is_string()) bad(where(name), "expected a string, got " + v.dump());
    return v.get<std::string>();
  }
  std::string text_or(const char* name, std::string otherwise) const {
    return has(name) ? text(name) : otherwise;
  }
  const json& array(const char* name) const {
    const json& v = at(name);
    if (!v.is_array()) bad(where(name), "expected an array, got " + v.dump());
    return v;
  }
  template <class T>
  std::vector<T> integers(const char* name) const {
    std::vector<T> out;
    for (const json& v : array(name)) out.push_back(integer_of<T>(v, where(name) + "[]"));
    return out;
  }

  template <class T>
  static T integer_of(const json& v, const std::string& where) {
    if (v.is_number_unsigned()) {
      const auto x = v.get<uint64_t>();
      if (x <= static_cast<uint64_t>(std::numeric_limits<T>::max())) return static_cast<T>(x);
    } else if (v.is_number_integer()) {
      const auto x = v.get<int64_t>();
      const bool fits =
          x >= 0
              ? static_cast<uint64_t>(x) <= static_cast<uint64_t>(std::numeric_limits<T>::max())
              : std::numeric_limits<T>::is_signed && x >= static_cast<int64_t>(std::numeric_limits<T>::min());
      if (fits) return static_cast<T>(x);
    }
    bad(where, "expected an integer in range, got " + v.dump());
  }

 private:
  const json& j_;
  std::string kind_;
};

std::string type_of(const json& j, const char* side) {
  if (!j.is_object()) bad(side, "a message must be a JSON object, got " + j.dump());
  auto it = j.find("type");
  if (it == j.end() || !it->is_string()) bad(side, "a message needs a string \"type\"");
  return it->get<std::string>();
}

const char* value_type_name(uint32_t t) {
  return t == HAL_VALUE_F64 ? "f64" : t == HAL_VALUE_I64 ? "i64" : "u64";
}

json sample_json(const hal_telemetry_sample_t& s) {
  json v = s.type == HAL_VALUE_F64   ? json(s.value.f64)
           : s.type == HAL_VALUE_I64 ? json(s.value.i64)
                                     : json(s.value.u64);
  return {{"field", s.id}, {"status", s.status}, {"type", value_type_name(s.type)}, {"value", v}};
}

hal_telemetry_sample_t sample_of(const json& j) {
  const Fields f(j, "heartbeat.telemetry[]");
  hal_telemetry_sample_t s{};
  s.id = f.integer<uint32_t>("field");
  s.status = f.integer<int32_t>("status");
  const std::string type = f.text("type");
  if (type == "f64") {
    s.type = HAL_VALUE_F64;
    s.value.f64 = f.number("value");
  } else if (type == "i64") {
    s.type = HAL_VALUE_I64;
    s.value.i64 = f.integer<int64_t>("value");
  } else if (type == "u64") {
    s.type = HAL_VALUE_U64;
    s.value.u64 = f.integer<uint64_t>("value");
  } else {
    bad(f.where("type"), "expected f64, i64 or u64, got '" + type + "'");
  }
  return s;
}

// A RecoverRequest's code: a code's name, or "unknown".
std::optional<Code> failure_code(const Fields& f) {
  const std::string text = f.text("code");
  if (text == "unknown") return std::nullopt;
  for (int c = static_cast<int>(Code::ok); c <= static_cast<int>(Code::data_loss); ++c)
    if (text == code_name(static_cast<Code>(c))) return static_cast<Code>(c);
  bad(f.where("code"), "expected a code's name or unknown, got '" + text + "'");
}

RestoreTier tier(const Fields& f) {
  const std::string text = f.text("restore");
  const auto t = restore_tier_named(text);
  if (!t) bad(f.where("restore"), "expected none, memory or disk, got '" + text + "'");
  return *t;
}

Hello hello_of(const Fields& f) {
  Hello h;
  // Version 1 had no version field: absent means 1, refused by name.
  h.version = f.integer_or<uint32_t>("version", 1);
  h.device = f.integer<uint32_t>("device");
  h.pid = f.integer_or<int64_t>("pid", 0);
  if (f.has("self_test")) {
    const Fields t(f.at("self_test"), "hello.self_test");
    h.self_test_passed = t.boolean("passed");
    h.self_test_detail = t.text_or("detail", "");
  }
  h.token = f.text_or("token", "");
  return h;
}

NodeHello node_hello_of(const Fields& f) {
  return {f.integer_or<uint32_t>("version", 1), f.integer<uint32_t>("node"), f.integer_or<int64_t>("pid", 0),
          f.text_or("rack", "")};
}

const char* how_name(ProcessEnd::How how) {
  switch (how) {
    case ProcessEnd::How::exited:
      return "exited";
    case ProcessEnd::How::signalled:
      return "signalled";
    case ProcessEnd::How::lost:
      return "lost";
    case ProcessEnd::How::not_started:
      return "not_started";
    case ProcessEnd::How::unknown:
      break;
  }
  return "unknown";
}

Exited exited_of(const Fields& f) {
  Exited x;
  x.device = f.integer<uint32_t>("device");
  const std::string how = f.has("how") ? f.text("how") : "unknown";
  if (how == "exited")
    x.end.how = ProcessEnd::How::exited;
  else if (how == "signalled")
    x.end.how = ProcessEnd::How::signalled;
  else if (how == "lost")
    x.end.how = ProcessEnd::How::lost;
  else if (how == "not_started")
    x.end.how = ProcessEnd::How::not_started;
  else if (how != "unknown")
    bad("exit.how", "expected exited, signalled, lost, not_started or unknown, got '" + how + "'");
  x.end.code = f.integer_or<int>("code", 0);
  if (x.end.how == ProcessEnd::How::unknown) x.end.words = f.text("status");
  if (x.end.how == ProcessEnd::How::not_started) x.end.words = f.text("why");
  return x;
}

}  // namespace

ProcessEnd ProcessEnd::of_wait_status(int status) {
  if (WIFSIGNALED(status)) return {How::signalled, WTERMSIG(status), {}};
  if (WIFEXITED(status)) return {How::exited, WEXITSTATUS(status), {}};
  return {How::unknown, 0, "ended"};
}

std::string ProcessEnd::describe() const {
  switch (how) {
    case How::exited:
      return "exited with status " + std::to_string(code);
    case How::signalled:
      return std::string("killed by signal ") + strsignal(code);
    case How::lost:
      return "lost with its node agent " + std::to_string(code);
    case How::not_started:
      return "could not start: " + words;
    case How::unknown:
      break;
  }
  return words.empty() ? "ended" : words;
}

json encode(const WorkerMessage& m) {
  return std::visit(
      Overloaded{
          [](const Hello& h) -> json {
            json j{{"type", "hello"},
                   {"version", h.version},
                   {"device", h.device},
                   {"pid", h.pid},
                   {"self_test", {{"passed", h.self_test_passed}, {"detail", h.self_test_detail}}}};
            if (!h.token.empty()) j["token"] = h.token;
            return j;
          },
          [](const Heartbeat& h) -> json {
            json t = json::array();
            for (const auto& s : h.telemetry) t.push_back(sample_json(s));
            json j{{"type", "heartbeat"}, {"step", h.step}, {"step_done", h.step_done}, {"telemetry", t}};
            if (h.telemetry_status != HAL_OK)
              j["telemetry_error"] = {{"status", h.telemetry_status}, {"message", h.telemetry_error}};
            return j;
          },
          [](const Joined& x) -> json {
            return {{"type", "joined"},     {"generation", x.generation}, {"rank", x.rank},
                    {"index", x.index},     {"restore", name(x.restore)}, {"comm_s", x.comm_s},
                    {"probe_s", x.probe_s}, {"restore_s", x.restore_s}};
          },
          [](const StepDone& x) -> json {
            json j = {{"type", "step"}, {"step", x.step}, {"seconds", x.seconds}};
            // JSON has no NaN: a non-finite loss travels as null.
            if (x.loss) j["loss"] = std::isfinite(*x.loss) ? json(*x.loss) : json(nullptr);
            if (x.tokens) j["tokens"] = x.tokens;
            if (x.flops > 0) j["flops"] = x.flops;
            if (x.peak_flops > 0) j["peak_flops"] = x.peak_flops;
            if (!x.note.empty()) j["note"] = x.note;
            return j;
          },
          [](const Snapshotted& x) -> json {
            return {{"type", "snapshot"}, {"index", x.index}};
          },
          [](const Checkpointed& x) -> json {
            return {{"type", "checkpoint"}, {"index", x.index}};
          },
          [](const RecoverRequest& x) -> json {
            json j = {{"type", "recover"},  {"code", x.code ? std::string(code_name(*x.code)) : "unknown"},
                      {"reason", x.reason}, {"generation", x.generation},
                      {"own", x.own},       {"replica", x.replica},
                      {"disk", x.disk}};
            if (x.replicas_of) {
              json of = json::array();
              for (const auto& [rank, steps] : *x.replicas_of) of.push_back({{"of", rank}, {"steps", steps}});
              j["replicas_of"] = of;
            }
            return j;
          },
          [](const Done& x) -> json {
            return {{"type", "done"}, {"steps", x.steps}};
          },
          [](const StorageFailed& x) -> json {
            return {{"type", "storage_failed"}, {"index", x.index}, {"reason", x.reason}};
          },
          [](const Refused& x) -> json {
            return {{"type", "refused"}, {"reason", x.reason}};
          },
          [](const Reformed& x) -> json {
            return {{"type", "reformed"}, {"epoch", x.epoch}};
          },
      },
      m);
}

checkpoint::ReplicaPlacement replica_placement(const Assign& a) {
  return a.domains.empty() ? checkpoint::ReplicaPlacement::ring(a.world)
                           : checkpoint::ReplicaPlacement::across(a.domains, a.replicas);
}

json encode(const AgentMessage& m) {
  return std::visit(Overloaded{
                        [](const Assign& a) -> json {
                          json h = json::array();
                          for (auto [holder, receiver] : a.handoff) h.push_back({holder, receiver});
                          json j = {{"type", "assign"},
                                    {"rank", a.rank},
                                    {"world", a.world},
                                    {"generation", a.generation},
                                    {"restore", name(a.restore)},
                                    {"index", a.index},
                                    {"handoff", h},
                                    {"domains", a.domains},
                                    {"replicas", a.replicas},
                                    {"host_ranks", a.host_ranks}};
                          if (!a.refresh.empty()) {
                            json r = json::array();
                            for (auto [source, holder] : a.refresh) r.push_back({source, holder});
                            j["refresh"] = r;
                          }
                          if (!a.replica_of.empty()) {
                            j["replica_of"] = a.replica_of;
                            j["epoch"] = a.epoch;
                            j["live"] = a.live;
                            if (a.contained) j["contained"] = true;
                          }
                          return j;
                        },
                        [](const Reform& x) -> json {
                          json j = {{"type", "reform"}, {"epoch", x.epoch}, {"live", x.live}};
                          if (x.boundary) {
                            j["rejoining"] = x.rejoining;
                            j["donor"] = *x.donor;
                            j["boundary"] = *x.boundary;
                            if (x.rejoin) j["rejoin"] = true;
                          }
                          if (!x.domains.empty()) j["domains"] = x.domains;
                          return j;
                        },
                        [](const Abort& x) -> json {
                          return {{"type", "abort"}, {"reason", x.reason}};
                        },
                        [](const Retire& x) -> json {
                          return {{"type", "retire"}, {"reason", x.reason}};
                        },
                        [](const StopAfter& x) -> json {
                          return {{"type", "stop_after"}, {"step", x.step}};
                        },
                        [](const Goodbye& x) -> json {
                          return {{"type", "goodbye"}, {"reason", x.reason}};
                        },
                    },
                    m);
}

json encode(const NodeMessage& m) {
  return std::visit(
      Overloaded{
          [](const NodeHello& h) -> json {
            json j = {{"type", "node"}, {"version", h.version}, {"node", h.node}, {"pid", h.pid}};
            if (!h.rack.empty()) j["rack"] = h.rack;
            return j;
          },
          [](const Launched& x) -> json {
            return {{"type", "launched"}, {"device", x.device}, {"pid", x.pid}};
          },
          [](const Exited& x) -> json {
            return {{"type", "exit"},
                    {"device", x.device},
                    {"how", how_name(x.end.how)},
                    {"code", x.end.code},
                    {"why", x.end.how == ProcessEnd::How::not_started ? x.end.words : ""},
                    {"status", x.end.describe()}};
          },
      },
      m);
}

json encode(const RootMessage& m) {
  return std::visit(Overloaded{
                        [](const Spawn& s) -> json {
                          json env = json::object();
                          for (const auto& [k, v] : s.env) env[k] = v;
                          return {{"type", "spawn"}, {"device", s.device}, {"env", env}};
                        },
                        [](const Kill& k) -> json {
                          return {{"type", "kill"}, {"device", k.device}, {"signal", k.signal}};
                        },
                        [](const NodeGoodbye& g) -> json {
                          return {{"type", "goodbye"}, {"code", g.code}, {"reason", g.reason}};
                        },
                    },
                    m);
}

namespace {

// [{"of": rank, "steps": [...]}, ...]: the replicas a worker holds, by rank.
std::map<uint32_t, std::vector<uint64_t>> replicas_of(const Fields& f) {
  std::map<uint32_t, std::vector<uint64_t>> out;
  for (const json& e : f.array("replicas_of")) {
    if (!e.is_object()) bad(f.where("replicas_of"), "expected {\"of\": rank, \"steps\": [...]} objects");
    const Fields each(e, f.where("replicas_of") + "[]");
    const auto rank = each.integer<uint32_t>("of");
    if (out.count(rank)) bad(f.where("replicas_of"), "rank " + std::to_string(rank) + " listed twice");
    out[rank] = each.integers<uint64_t>("steps");
  }
  return out;
}

}  // namespace

namespace {

// Replicas named in `field`: ascending, each once, each below `replicas`.
std::vector<uint32_t> replica_set(const Fields& f, const char* field, uint32_t replicas) {
  auto set = f.integers<uint32_t>(field);
  for (size_t i = 0; i < set.size(); ++i) {
    if (set[i] >= replicas)
      bad(f.where(field), "replica " + std::to_string(set[i]) + " of " + std::to_string(replicas));
    if (i > 0 && set[i] <= set[i - 1]) bad(f.where(field), "expected ascending replicas, each once");
  }
  return set;
}

// Assign's contained-recovery fields: every rank's replica, every replica
// the same size, and the live set the rank starts in.
void contained_of(const Fields& f, Assign& a) {
  a.replica_of = f.integers<uint32_t>("replica_of");
  if (a.replica_of.size() != a.world)
    bad(f.where("replica_of"), std::to_string(a.replica_of.size()) + " replicas for a world of " +
                                   std::to_string(a.world) + " ranks");
  for (uint32_t q : a.replica_of)
    if (q >= a.world)
      bad(f.where("replica_of"),
          "replica " + std::to_string(q) + " in a world of " + std::to_string(a.world) + " ranks");
  const uint32_t replicas = *std::max_element(a.replica_of.begin(), a.replica_of.end()) + 1;
  std::vector<uint32_t> size(replicas, 0);
  for (uint32_t q : a.replica_of) ++size[q];
  if (std::any_of(size.begin(), size.end(), [&](uint32_t n) { return n != size[0]; }))
    bad(f.where("replica_of"), "replicas of different sizes");
  a.epoch = f.integer<uint64_t>("epoch");
  a.live = replica_set(f, "live", replicas);
  if (a.live.empty()) bad(f.where("live"), "no live replica");
  a.contained = f.has("contained") && f.boolean("contained");
}

// A Reform: a live set, and for a hand-off its rejoining replicas (in the
// set), its donor (in the set, not rejoining) and its boundary, all three
// or none.
Reform reform_of(const Fields& f) {
  constexpr uint32_t any = std::numeric_limits<uint32_t>::max();
  Reform r{f.integer<uint64_t>("epoch"), replica_set(f, "live", any)};
  if (r.live.empty()) bad(f.where("live"), "no live replica");
  if (f.has("domains")) r.domains = f.integers<uint32_t>("domains");
  if (!f.has("boundary")) return r;
  r.rejoining = replica_set(f, "rejoining", any);
  r.donor = f.integer<uint32_t>("donor");
  r.boundary = f.integer<uint64_t>("boundary");
  r.rejoin = f.has("rejoin") && f.boolean("rejoin");
  const auto in = [&](uint32_t q, const std::vector<uint32_t>& set) {
    return std::find(set.begin(), set.end(), q) != set.end();
  };
  if (r.rejoining.empty()) bad(f.where("rejoining"), "a hand-off with no replica rejoining");
  for (uint32_t q : r.rejoining)
    if (!in(q, r.live)) bad(f.where("rejoining"), "replica " + std::to_string(q) + " is not in the live set");
  if (!in(*r.donor, r.live) || in(*r.donor, r.rejoining))
    bad(f.where("donor"), "replica " + std::to_string(*r.donor) + " is not a live replica staying");
  return r;
}

}  // namespace

WorkerMessage decode_worker(const json& j) {
  const std::string type = type_of(j, "worker message");
  const Fields f(j, type);
  if (type == "hello") return hello_of(f);
  if (type == "heartbeat") {
    Heartbeat h;
    h.step = f.integer<int64_t>("step");
    h.step_done = f.boolean("step_done");
    for (const json& s : f.array("telemetry")) h.telemetry.push_back(sample_of(s));
    if (f.has("telemetry_error")) {
      const Fields e(f.at("telemetry_error"), "heartbeat.telemetry_error");
      h.telemetry_status = e.integer<int32_t>("status");
      h.telemetry_error = e.text("message");
      if (h.telemetry_status >= HAL_OK) bad(e.where("status"), "expected an error status (< 0)");
    }
    return h;
  }
  if (type == "joined")
    return Joined{f.integer<uint64_t>("generation"),
                  f.integer<uint32_t>("rank"),
                  f.integer<uint64_t>("index"),
                  tier(f),
                  f.number("comm_s"),
                  f.number("probe_s"),
                  f.number("restore_s")};
  if (type == "step") {
    StepDone s{f.integer<uint64_t>("step"), f.number("seconds")};
    if (f.has("loss")) s.loss = f.at("loss").is_null() ? std::nan("") : f.number("loss");
    s.tokens = f.integer_or<uint64_t>("tokens", 0);
    s.flops = f.has("flops") ? f.number("flops") : 0;
    s.peak_flops = f.has("peak_flops") ? f.number("peak_flops") : 0;
    s.note = f.text_or("note", "");
    return s;
  }
  if (type == "snapshot") return Snapshotted{f.integer<uint64_t>("index")};
  if (type == "checkpoint") return Checkpointed{f.integer<uint64_t>("index")};
  if (type == "recover") {
    RecoverRequest r{failure_code(f),
                     f.text("reason"),
                     f.integer<uint64_t>("generation"),
                     f.integers<uint64_t>("own"),
                     f.integers<uint64_t>("replica"),
                     f.integers<uint64_t>("disk")};
    if (f.has("replicas_of")) r.replicas_of = replicas_of(f);
    return r;
  }
  if (type == "done") return Done{f.integer<uint64_t>("steps")};
  if (type == "storage_failed") return StorageFailed{f.integer<uint64_t>("index"), f.text("reason")};
  if (type == "refused") return Refused{f.text("reason")};
  if (type == "reformed") return Reformed{f.integer<uint64_t>("epoch")};
  bad(type, "not a message a worker sends");
}

AgentMessage decode_agent(const json& j) {
  const std::string type = type_of(j, "agent message");
  const Fields f(j, type);
  if (type == "assign") {
    Assign a;
    a.rank = f.integer<uint32_t>("rank");
    a.world = f.integer<uint32_t>("world");
    a.generation = f.integer<uint64_t>("generation");
    a.restore = tier(f);
    a.index = f.integer<uint64_t>("index");
    if (a.world == 0 || a.rank >= a.world)
      bad(f.where("rank"), "rank " + std::to_string(a.rank) + " of a world of " + std::to_string(a.world));
    for (const json& p : f.array("handoff")) {
      if (!p.is_array() || p.size() != 2) bad(f.where("handoff"), "expected [holder, receiver] pairs");
      a.handoff.emplace_back(Fields::integer_of<uint32_t>(p[0], f.where("handoff")),
                             Fields::integer_of<uint32_t>(p[1], f.where("handoff")));
    }
    if (f.has("refresh")) {
      for (const json& p : f.array("refresh")) {
        if (!p.is_array() || p.size() != 2) bad(f.where("refresh"), "expected [source, holder] pairs");
        const auto source = Fields::integer_of<uint32_t>(p[0], f.where("refresh"));
        const auto holder = Fields::integer_of<uint32_t>(p[1], f.where("refresh"));
        if (source >= a.world || holder >= a.world || source == holder)
          bad(f.where("refresh"), "[" + std::to_string(source) + ", " + std::to_string(holder) +
                                      "] in a world of " + std::to_string(a.world) + " ranks");
        a.refresh.emplace_back(source, holder);
      }
    }
    if (f.has("domains")) a.domains = f.integers<uint32_t>("domains");
    if (!a.domains.empty() && a.domains.size() != a.world)
      bad(f.where("domains"),
          std::to_string(a.domains.size()) + " domains for a world of " + std::to_string(a.world) + " ranks");
    a.replicas = f.integer_or<uint32_t>("replicas", 1);
    if (a.replicas < 1 || a.replicas > 2)
      bad(f.where("replicas"), "expected 1 or 2, got " + std::to_string(a.replicas));
    a.host_ranks = f.integer_or<uint32_t>("host_ranks", 0);
    if (f.has("replica_of")) contained_of(f, a);
    return a;
  }
  if (type == "reform") return reform_of(f);
  if (type == "abort") return Abort{f.text("reason")};
  if (type == "retire") return Retire{f.text("reason")};
  if (type == "stop_after") return StopAfter{f.integer<int64_t>("step")};
  if (type == "goodbye") return Goodbye{f.text_or("reason", "")};
  bad(type, "not a message the agent sends");
}

NodeMessage decode_node(const json& j) {
  const std::string type = type_of(j, "node message");
  const Fields f(j, type);
  if (type == "node") return node_hello_of(f);
  if (type == "launched") return Launched{f.integer<uint32_t>("device"), f.integer<int64_t>("pid")};
  if (type == "exit") return exited_of(f);
  bad(type, "not a message a node agent sends");
}

RootMessage decode_root(const json& j) {
  const std::string type = type_of(j, "root message");
  const Fields f(j, type);
  if (type == "spawn") {
    Spawn s;
    s.device = f.integer<uint32_t>("device");
    const json& env = f.at("env");
    if (!env.is_object()) bad(f.where("env"), "expected an object of strings");
    for (const auto& [k, v] : env.items()) {
      if (!v.is_string()) bad(f.where("env") + "." + k, "expected a string, got " + v.dump());
      s.env.emplace_back(k, v.get<std::string>());
    }
    return s;
  }
  if (type == "kill") return Kill{f.integer<uint32_t>("device"), f.integer<int>("signal")};
  if (type == "goodbye") return NodeGoodbye{f.integer_or<int>("code", 4), f.text_or("reason", "")};
  bad(type, "not a message the root agent sends");
}

Greeting decode_greeting(const json& j) {
  const std::string type = type_of(j, "greeting");
  const Fields f(j, type);
  if (type == "hello") return hello_of(f);
  if (type == "node") return node_hello_of(f);
  bad(type, "a connection must start with hello (a worker) or node (another host's agent)");
}

std::optional<std::string> refusal(uint32_t version) {
  if (version == kVersion) return std::nullopt;
  return "it speaks sigmarun protocol version " + std::to_string(version) + ", this agent speaks version " +
         std::to_string(kVersion) + " (run workers built against the same libsigma as sigmarun)";
}

}  // namespace sigma::runtime::protocol
