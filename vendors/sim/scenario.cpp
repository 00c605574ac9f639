#include "scenario.hpp"

#include "strict_yaml.hpp"

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

namespace sim_vendor {
namespace {

using yaml::Refused;

class Parser : public yaml::Reader {
 public:
  using Reader::Reader;

  Signal signal(const YAML::Node& n, const std::string& key, Signal def, double lo, double hi) const {
    if (n.IsScalar()) {
      def.baseline = number(n, key, lo, hi);
      return def;
    }
    only_keys(n, key, {"baseline", "noise"});
    if (n["baseline"]) def.baseline = number(n["baseline"], key + ".baseline", lo, hi);
    if (n["noise"]) def.noise = number(n["noise"], key + ".noise", 0, hi - lo);
    return def;
  }

  TelemetryModel telemetry(const YAML::Node& n, const std::string& path, TelemetryModel t) const {
    only_keys(n, path,
              {"temperature_c", "power_w", "clock_mhz", "utilization_pct", "ecc_correctable_per_s",
               "link_errors_per_s", "throttle_c"});
    if (n["temperature_c"])
      t.temperature_c = signal(n["temperature_c"], path + ".temperature_c", t.temperature_c, -50, 200);
    if (n["power_w"]) t.power_w = signal(n["power_w"], path + ".power_w", t.power_w, 0, 1e5);
    if (n["clock_mhz"]) t.clock_mhz = signal(n["clock_mhz"], path + ".clock_mhz", t.clock_mhz, 0, 1e5);
    if (n["utilization_pct"])
      t.utilization_pct = signal(n["utilization_pct"], path + ".utilization_pct", t.utilization_pct, 0, 100);
    if (n["ecc_correctable_per_s"])
      t.ecc_correctable_per_s = number(n["ecc_correctable_per_s"], path + ".ecc_correctable_per_s", 0, 1e6);
    if (n["link_errors_per_s"])
      t.link_errors_per_s = number(n["link_errors_per_s"], path + ".link_errors_per_s", 0, 1e6);
    if (n["throttle_c"]) t.throttle_c = number(n["throttle_c"], path + ".throttle_c", -50, 250);
    return t;
  }

  Event event(const YAML::Node& n, const std::string& path, double end) const {
    if (!n.IsMap()) fail(n, path, "expected a mapping");
    if (!n["kind"])
      fail(n, path + ".kind",
           "missing (thermal_ramp, power_spike, ecc_burst, ecc_uncorrectable, link_error_growth)");
    const std::string kind = text(n["kind"], path + ".kind");
    Event e{};
    auto at = [&] {
      if (!n["at_s"]) fail(n, path + ".at_s", "missing");
      e.at_s = number(n["at_s"], path + ".at_s", 0, 1e12);
      if (e.at_s > end)
        fail(n["at_s"], path + ".at_s",
             "is after the scenario's end (duration_s " + std::to_string(end) + ")");
    };
    auto need = [&](const char* key) -> const YAML::Node {
      if (!n[key]) fail(n, path + "." + key, "missing for kind " + kind);
      return n[key];
    };
    if (kind == "thermal_ramp") {
      only_keys(n, path, {"kind", "at_s", "duration_s", "to"});
      e.kind = EventKind::thermal_ramp;
      at();
      e.duration_s = number(need("duration_s"), path + ".duration_s", 0, 1e12);
      e.to = number(need("to"), path + ".to", -50, 250);
    } else if (kind == "power_spike") {
      only_keys(n, path, {"kind", "at_s", "duration_s", "to"});
      e.kind = EventKind::power_spike;
      at();
      e.duration_s = number(need("duration_s"), path + ".duration_s", 0, 1e12);
      e.to = number(need("to"), path + ".to", 0, 1e5);
    } else if (kind == "ecc_burst" || kind == "ecc_uncorrectable") {
      only_keys(n, path, {"kind", "at_s", "duration_s", "count"});
      e.kind = kind == "ecc_burst" ? EventKind::ecc_burst : EventKind::ecc_uncorrectable;
      at();
      if (n["duration_s"]) e.duration_s = number(n["duration_s"], path + ".duration_s", 0, 1e12);
      e.count = integer(need("count"), path + ".count", 1, 1ull << 40);
    } else if (kind == "link_error_growth") {
      only_keys(n, path, {"kind", "at_s", "duration_s", "rate_per_s"});
      e.kind = EventKind::link_error_growth;
      at();
      if (n["duration_s"]) e.duration_s = number(n["duration_s"], path + ".duration_s", 0, 1e12);
      e.rate_per_s = number(need("rate_per_s"), path + ".rate_per_s", 0, 1e6);
    } else {
      fail(n["kind"], path + ".kind",
           "unknown event kind '" + kind +
               "' (thermal_ramp, power_spike, ecc_burst, ecc_uncorrectable, link_error_growth)");
    }
    return e;
  }

  DeviceModel device(const YAML::Node& n, const std::string& path, const DeviceModel& base,
                     double end) const {
    only_keys(n, path, {"telemetry", "events"});
    DeviceModel d = base;
    if (n["telemetry"]) d.telemetry = telemetry(n["telemetry"], path + ".telemetry", base.telemetry);
    if (n["events"]) {
      if (!n["events"].IsSequence()) fail(n["events"], path + ".events", "expected a list");
      d.events.clear();
      for (size_t i = 0; i < n["events"].size(); ++i)
        d.events.push_back(event(n["events"][i], path + ".events[" + std::to_string(i) + "]", end));
    }
    return d;
  }

  Fault fault(const YAML::Node& n, const std::string& path, const Scenario& s) const {
    if (!n.IsMap()) fail(n, path, "expected a mapping");
    only_keys(n, path,
              {"kind", "device", "at_s", "at_op", "duration_s", "factor", "period_s", "count", "gbps",
               "latency_us", "op"});
    Fault f{};
    f.line = n.Mark().line + 1;
    if (!n["kind"]) fail(n, path + ".kind", "missing");
    const std::string kind = text(n["kind"], path + ".kind");
    static const std::map<std::string, FaultKind> kinds = {
        {"device_lost", FaultKind::device_lost},
        {"hang", FaultKind::hang},
        {"slow_link", FaultKind::slow_link},
        {"flapping_link", FaultKind::flapping_link},
        {"silent_corruption", FaultKind::silent_corruption},
        {"crash", FaultKind::crash},
        {"slow_bandwidth", FaultKind::slow_bandwidth},
        {"nan_burst", FaultKind::nan_burst}};
    auto it = kinds.find(kind);
    if (it == kinds.end())
      fail(n["kind"], path + ".kind",
           "unknown fault kind '" + kind +
               "' (device_lost, hang, slow_link, flapping_link, silent_corruption, nan_burst, crash, "
               "slow_bandwidth)");
    f.kind = it->second;
    if (!n["device"]) fail(n, path + ".device", "missing");
    const uint64_t dev = integer(n["device"], path + ".device", 0, 1ull << 31);
    if (dev >= s.world_size)
      fail(n["device"], path + ".device",
           "unknown device " + std::to_string(dev) + " (world_size is " + std::to_string(s.world_size) + ")");
    f.device = static_cast<uint32_t>(dev);
    if (n["at_s"] && n["at_op"]) fail(n["at_op"], path, "give at_s or at_op, not both");
    if (n["at_s"]) {
      f.at_s = number(n["at_s"], path + ".at_s", 0, 1e12);
      if (*f.at_s > s.duration_s)
        fail(n["at_s"], path + ".at_s",
             std::to_string(*f.at_s) + " is after the scenario's end (duration_s " +
                 std::to_string(s.duration_s) + ")");
    } else if (n["at_op"]) {
      f.at_op = integer(n["at_op"], path + ".at_op", 0, 1ull << 62);
    } else {
      fail(n, path + ".at_s",
           "missing: a fault needs at_s (seconds) or at_op (the device's n-th collective)");
    }
    const bool timed = f.kind == FaultKind::slow_link || f.kind == FaultKind::flapping_link ||
                       f.kind == FaultKind::slow_bandwidth;
    if (n["duration_s"]) {
      if (!timed)
        fail(n["duration_s"], path + ".duration_s",
             "only slow_link, flapping_link and slow_bandwidth last a while");
      f.duration_s = number(n["duration_s"], path + ".duration_s", 0, 1e12);
    }
    if (n["factor"]) {
      if (!timed)
        fail(n["factor"], path + ".factor", "only slow_link, flapping_link and slow_bandwidth take a factor");
      f.factor = number(n["factor"], path + ".factor", 1, 1e4);
    } else if (timed) {
      fail(n, path + ".factor", "missing: how many times slower collectives get (>= 1)");
    }
    if (n["gbps"]) {
      if (!timed)
        fail(n["gbps"], path + ".gbps", "only slow_link, flapping_link and slow_bandwidth have a link rate");
      f.gbps = number(n["gbps"], path + ".gbps", 1e-6, 1e6);
    } else if (f.kind == FaultKind::slow_bandwidth) {
      fail(n, path + ".gbps",
           "missing: the link's healthy rate in GB/s (each byte then costs factor - 1 times more)");
    }
    if (n["latency_us"]) {
      if (f.kind != FaultKind::slow_link && f.kind != FaultKind::flapping_link)
        fail(n["latency_us"], path + ".latency_us",
             "only slow_link and flapping_link stretch a latency (slow_bandwidth charges bytes only)");
      f.latency_us = number(n["latency_us"], path + ".latency_us", 0, 1e9);
    }
    if (n["period_s"]) {
      if (f.kind != FaultKind::flapping_link)
        fail(n["period_s"], path + ".period_s", "only flapping_link has a period");
      f.period_s = number(n["period_s"], path + ".period_s", 1e-3, 1e12);
    } else if (f.kind == FaultKind::flapping_link) {
      fail(n, path + ".period_s", "missing: the length of one slow + one normal phase");
    }
    const bool corrupting = f.kind == FaultKind::silent_corruption || f.kind == FaultKind::nan_burst;
    if (n["count"]) {
      if (!corrupting) fail(n["count"], path + ".count", "only silent_corruption and nan_burst have a count");
      f.count = integer(n["count"], path + ".count", 1, 1ull << 40);
    }
    if (n["op"]) {
      if (!corrupting) fail(n["op"], path + ".op", "only silent_corruption and nan_burst pick an operation");
      // hal_coll_op_t's values (the parser builds without hal.h; comm.cpp checks them).
      static const std::map<std::string, int> ops = {
          {"all_reduce", 0}, {"broadcast", 5},   {"all_gather", 1}, {"reduce_scatter", 2},
          {"all_to_all", 3}, {"all_to_allv", 4}, {"recv", 8}};
      const std::string op = text(n["op"], path + ".op");
      auto o = ops.find(op);
      if (o == ops.end())
        fail(n["op"], path + ".op",
             "unknown operation '" + op +
                 "' (all_reduce, broadcast, all_gather, reduce_scatter, all_to_all, all_to_allv, recv)");
      f.op = o->second;
    }
    return f;
  }

  Scenario scenario(const YAML::Node& root) const {
    if (!root.IsMap()) fail(root, "(top)", "a scenario is a mapping of keys to values");
    only_keys(
        root, "",
        {"description", "seed", "duration_s", "world_size", "time_scale", "inner", "devices", "faults"});
    Scenario s;
    s.file = file();
    if (root["description"]) text(root["description"], "description");
    if (!root["duration_s"]) fail(root, "duration_s", "missing: the scenario's length in seconds");
    s.duration_s = number(root["duration_s"], "duration_s", 1e-3, 1e9);
    if (root["seed"]) s.seed = integer(root["seed"], "seed", 0, UINT64_MAX);
    if (root["world_size"])
      s.world_size = static_cast<uint32_t>(integer(root["world_size"], "world_size", 1, 1u << 20));
    if (root["time_scale"]) s.time_scale = number(root["time_scale"], "time_scale", 1e-3, 1e6);
    if (root["inner"]) {
      s.inner = text(root["inner"], "inner");
      if (s.inner.empty() || s.inner == "sim" || s.inner.find_first_of("/.") != std::string::npos)
        fail(root["inner"], "inner", "must name another vendor, e.g. cpu");
    }
    if (const YAML::Node devs = root["devices"]) {
      if (!devs.IsMap()) fail(devs, "devices", "expected a mapping of device (or 'default') to its model");
      if (devs["default"])
        s.default_device = device(devs["default"], "devices.default", s.default_device, s.duration_s);
      for (const auto& kv : devs) {
        const std::string key = kv.first.Scalar();
        if (key == "default") continue;
        const uint64_t idx = integer(kv.first, "devices." + key, 0, 1ull << 31);
        if (idx >= s.world_size)
          fail(kv.first, "devices." + key,
               "unknown device " + key + " (world_size is " + std::to_string(s.world_size) + ")");
        if (s.devices.count(static_cast<uint32_t>(idx)))
          fail(
              kv.first, "devices." + key,
              "device " + std::to_string(idx) + " given twice (as another key too): one model would be lost");
        s.devices[static_cast<uint32_t>(idx)] =
            device(kv.second, "devices." + key, s.default_device, s.duration_s);
      }
    }
    if (const YAML::Node fs = root["faults"]) {
      if (!fs.IsSequence()) fail(fs, "faults", "expected a list");
      for (size_t i = 0; i < fs.size(); ++i)
        s.faults.push_back(fault(fs[i], "faults[" + std::to_string(i) + "]", s));
    }
    return s;
  }
};

}  // namespace

const char* fault_kind_name(FaultKind k) {
  switch (k) {
    case FaultKind::device_lost:
      return "device_lost";
    case FaultKind::hang:
      return "hang";
    case FaultKind::slow_link:
      return "slow_link";
    case FaultKind::flapping_link:
      return "flapping_link";
    case FaultKind::slow_bandwidth:
      return "slow_bandwidth";
    case FaultKind::silent_corruption:
      return "silent_corruption";
    case FaultKind::crash:
      return "crash";
    case FaultKind::nan_burst:
      return "nan_burst";
  }
  return "?";
}

std::optional<Scenario> parse_scenario(const std::string& text, const std::string& file, std::string& error) {
  try {
    return Parser(file).scenario(yaml::parse(text, file));
  } catch (const Refused& r) {
    error = r.message;
  }
  return std::nullopt;
}

std::optional<Scenario> load_scenario(const std::string& path, std::string& error) {
  try {
    return parse_scenario(yaml::read_file(path), path, error);
  } catch (const Refused& r) {
    error = r.message;
  }
  return std::nullopt;
}

Scenario healthy_scenario() {
  Scenario s;
  s.file = "(built-in healthy scenario)";
  s.duration_s = 1e9;
  s.world_size = 1u << 20;
  return s;
}

}  // namespace sim_vendor
