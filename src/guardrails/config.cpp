// Guardrail configuration: checks on the struct, and the strict YAML form.
#include <sigma/guardrails.hpp>

#include "yaml_reader.hpp"

#include <cmath>

namespace sigma::guardrails {
namespace {

[[noreturn]] void refuse(const std::string& field, const std::string& why) {
  throw Error(Code::invalid_argument, "guardrails: " + field + ": " + why);
}

void positive(double v, const char* field) {
  if (!(v > 0) || !std::isfinite(v)) refuse(field, std::to_string(v) + " must be a finite number > 0");
}

}  // namespace

void Config::validate() const {
  const auto& ls = loss_scaling;
  positive(ls.initial_scale, "loss_scaling.initial_scale");
  positive(ls.min_scale, "loss_scaling.min_scale");
  positive(ls.max_scale, "loss_scaling.max_scale");
  if (!(ls.growth_factor > 1))
    refuse("loss_scaling.growth_factor", std::to_string(ls.growth_factor) + " must be > 1");
  if (!(ls.backoff_factor > 0 && ls.backoff_factor < 1))
    refuse("loss_scaling.backoff_factor", std::to_string(ls.backoff_factor) + " must be in (0, 1)");
  if (ls.growth_interval == 0) refuse("loss_scaling.growth_interval", "must be >= 1");
  if (ls.min_scale > ls.max_scale) refuse("loss_scaling.min_scale", "is above max_scale");
  if (ls.initial_scale < ls.min_scale || ls.initial_scale > ls.max_scale)
    refuse("loss_scaling.initial_scale", "is outside [min_scale, max_scale]");
  if (!(clipping.max_norm >= 0) || !std::isfinite(clipping.max_norm))
    refuse("clipping.max_norm", std::to_string(clipping.max_norm) + " must be >= 0 (0: off)");
  if (spike.window == 0) refuse("spike.window", "must be >= 1");
  if (spike.min_history > spike.window) refuse("spike.min_history", "is larger than spike.window");
  positive(spike.threshold, "spike.threshold");
  if (!(spike.min_relative >= 0)) refuse("spike.min_relative", "must be >= 0");
  if (precision.window == 0) refuse("precision.window", "must be >= 1");
  if (!(precision.max_overflow_rate > 0 && precision.max_overflow_rate <= 1))
    refuse("precision.max_overflow_rate", std::to_string(precision.max_overflow_rate) + " must be in (0, 1]");
  if (!(precision.min_headroom_bits >= 0) || precision.min_headroom_bits > 128)
    refuse("precision.min_headroom_bits", "must be in [0, 128]");
  if (precision.calm_steps == 0) refuse("precision.calm_steps", "must be >= 1");
  if (sdc.interval == 0) refuse("sdc.interval", "must be >= 1");
  if (exchange_timeout.count() <= 0) refuse("exchange_timeout", "must be > 0 ms");
}

Config Config::from_yaml(const std::string& text, const std::string& name) {
  using yaml::Reader;
  Config c;
  try {
    const YAML::Node root = yaml::parse(text, name);
    const Reader r(name);
    if (!root.IsDefined() || root.IsNull()) return c;  // an empty file: the defaults
    r.only_keys(root, "",
                {"loss_scaling", "clipping", "spike", "precision", "sdc", "journal", "exchange_timeout_ms"});
    const double kHuge = 1e300;
    const uint64_t kMany = uint64_t{1} << 40;
    if (const auto n = root["loss_scaling"]) {
      r.only_keys(n, "loss_scaling",
                  {"enabled", "initial_scale", "growth_factor", "backoff_factor", "growth_interval",
                   "min_scale", "max_scale"});
      auto& ls = c.loss_scaling;
      if (n["enabled"]) ls.enabled = r.boolean(n["enabled"], "loss_scaling.enabled");
      if (n["initial_scale"])
        ls.initial_scale = r.number(n["initial_scale"], "loss_scaling.initial_scale", 1e-30, kHuge);
      if (n["growth_factor"])
        ls.growth_factor = r.number(n["growth_factor"], "loss_scaling.growth_factor", 1.000001, 1e6);
      if (n["backoff_factor"])
        ls.backoff_factor = r.number(n["backoff_factor"], "loss_scaling.backoff_factor", 1e-9, 0.999999);
      if (n["growth_interval"])
        ls.growth_interval = r.integer(n["growth_interval"], "loss_scaling.growth_interval", 1, kMany);
      if (n["min_scale"]) ls.min_scale = r.number(n["min_scale"], "loss_scaling.min_scale", 1e-30, kHuge);
      if (n["max_scale"]) ls.max_scale = r.number(n["max_scale"], "loss_scaling.max_scale", 1e-30, kHuge);
    }
    if (const auto n = root["clipping"]) {
      r.only_keys(n, "clipping", {"max_norm"});
      if (n["max_norm"]) c.clipping.max_norm = r.number(n["max_norm"], "clipping.max_norm", 0, kHuge);
    }
    if (const auto n = root["spike"]) {
      r.only_keys(n, "spike",
                  {"enabled", "window", "min_history", "threshold", "min_relative", "rollback_margin",
                   "skip_before", "skip_after", "escalate_after", "escalate_within"});
      auto& s = c.spike;
      if (n["enabled"]) s.enabled = r.boolean(n["enabled"], "spike.enabled");
      if (n["window"]) s.window = r.integer(n["window"], "spike.window", 1, 1000000);
      if (n["min_history"]) s.min_history = r.integer(n["min_history"], "spike.min_history", 1, 1000000);
      if (n["threshold"]) s.threshold = r.number(n["threshold"], "spike.threshold", 1e-6, 1e6);
      if (n["min_relative"]) s.min_relative = r.number(n["min_relative"], "spike.min_relative", 0, 1e6);
      if (n["rollback_margin"])
        s.rollback_margin = r.integer(n["rollback_margin"], "spike.rollback_margin", 0, kMany);
      if (n["skip_before"]) s.skip_before = r.integer(n["skip_before"], "spike.skip_before", 0, kMany);
      if (n["skip_after"]) s.skip_after = r.integer(n["skip_after"], "spike.skip_after", 0, kMany);
      if (n["escalate_after"])
        s.escalate_after = r.integer(n["escalate_after"], "spike.escalate_after", 0, kMany);
      if (n["escalate_within"])
        s.escalate_within = r.integer(n["escalate_within"], "spike.escalate_within", 1, kMany);
      if (s.min_history > s.window)
        r.fail(n["min_history"] ? n["min_history"] : n, "spike.min_history", "is larger than spike.window");
    }
    if (const auto n = root["precision"]) {
      r.only_keys(n, "precision",
                  {"enabled", "window", "max_overflow_rate", "min_headroom_bits", "calm_steps"});
      auto& p = c.precision;
      if (n["enabled"]) p.enabled = r.boolean(n["enabled"], "precision.enabled");
      if (n["window"]) p.window = r.integer(n["window"], "precision.window", 1, 1000000);
      if (n["max_overflow_rate"])
        p.max_overflow_rate = r.number(n["max_overflow_rate"], "precision.max_overflow_rate", 1e-9, 1);
      if (n["min_headroom_bits"])
        p.min_headroom_bits = r.number(n["min_headroom_bits"], "precision.min_headroom_bits", 0, 128);
      if (n["calm_steps"]) p.calm_steps = r.integer(n["calm_steps"], "precision.calm_steps", 1, kMany);
    }
    if (const auto n = root["sdc"]) {
      r.only_keys(n, "sdc", {"enabled", "interval"});
      if (n["enabled"]) c.sdc.enabled = r.boolean(n["enabled"], "sdc.enabled");
      if (n["interval"]) c.sdc.interval = r.integer(n["interval"], "sdc.interval", 1, kMany);
    }
    if (const auto n = root["journal"]) {
      r.only_keys(n, "journal", {"path", "all_ranks"});
      if (n["path"]) c.journal.path = r.text(n["path"], "journal.path");
      if (n["all_ranks"]) c.journal.all_ranks = r.boolean(n["all_ranks"], "journal.all_ranks");
    }
    if (const auto n = root["exchange_timeout_ms"])
      c.exchange_timeout = std::chrono::milliseconds(r.integer(n, "exchange_timeout_ms", 1, 86400000));
    // Relations between keys (min above max, ...), named by the key.
    try {
      c.validate();
    } catch (const Error& e) {
      std::string what = e.what();
      const std::string prefix = "guardrails: ";
      if (what.rfind(prefix, 0) == 0) what = what.substr(prefix.size());
      const std::string section = what.substr(0, what.find('.'));
      const YAML::Node at = root[section];
      throw yaml::Refused{name + ":" + std::to_string(at.IsDefined() ? at.Mark().line + 1 : 0) + ": " + what};
    }
  } catch (const yaml::Refused& r) {
    throw Error(Code::invalid_argument, r.message);
  }
  return c;
}

Config Config::from_yaml_file(const std::string& path) {
  try {
    return from_yaml(yaml::read_file(path), path);
  } catch (const yaml::Refused& r) {
    throw Error(Code::invalid_argument, r.message);
  }
}

}  // namespace sigma::guardrails
