// The guardrails' policy state as JSON, for checkpoints.
#include "impl.hpp"

#include <nlohmann/json.hpp>

namespace sigma::guardrails {

using nlohmann::json;

namespace {
// A whole number >= 0. nlohmann's get<uint64_t>() on a float or a negative
// number converts without a check (undefined for 1e127): refuse instead.
uint64_t u64(const json& v, const char* what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  throw Error(Code::invalid_argument, std::string("guardrails: restore_state: ") + what + " is " +
                                          v.dump(-1).substr(0, 40) + ", not a whole number >= 0");
}
}  // namespace

std::string Guardrails::save_state() const {
  const auto& m = *impl_;
  json layers = json::array();
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const auto s = m.precision[l].state();
    std::string window;
    for (bool b : s.window) window += b ? '1' : '0';
    layers.push_back(
        {{"name", m.layers[l].name}, {"escalated", s.escalated}, {"calm", s.calm}, {"window", window}});
  }
  json history = json::array();
  for (const auto& [step, loss] : m.spikes.history()) history.push_back({step, loss});
  return json{{"format", "sigma.guardrails.state/1"},
              {"loss_scale", m.scaler.scale()},
              {"clean_steps", m.scaler.clean_steps()},
              {"min_next_step", m.min_next_step},
              {"loss_history", history},
              {"spikes", m.spikes.spikes()},
              {"snapshots", m.snapshots},
              {"layers", layers}}
      .dump();
}

void Guardrails::restore_state(const std::string& text) {
  auto& m = *impl_;
  try {
    const json j = json::parse(text);
    if (j.at("format") != "sigma.guardrails.state/1")
      throw Error(Code::invalid_argument,
                  "guardrails: restore_state: unknown format " + j.at("format").dump());
    const auto& layers = j.at("layers");
    if (layers.size() != m.layers.size())
      throw Error(Code::invalid_argument, "guardrails: restore_state: the state has " +
                                              std::to_string(layers.size()) + " layers, " +
                                              std::to_string(m.layers.size()) + " are registered");
    std::vector<detail::LayerPrecision::State> states;
    for (size_t l = 0; l < layers.size(); ++l) {
      if (layers[l].at("name") != m.layers[l].name)
        throw Error(Code::invalid_argument, "guardrails: restore_state: layer " + std::to_string(l) + " is " +
                                                layers[l].at("name").dump() + ", registered as '" +
                                                m.layers[l].name + "'");
      detail::LayerPrecision::State s;
      s.escalated = layers[l].at("escalated").get<bool>();
      s.calm = u64(layers[l].at("calm"), "a layer's calm");
      for (char c : layers[l].at("window").get<std::string>()) s.window.push_back(c == '1');
      states.push_back(std::move(s));
    }
    const double scale = j.at("loss_scale").get<double>();
    if (!(scale > 0) || !std::isfinite(scale))
      throw Error(Code::invalid_argument, "guardrails: restore_state: loss_scale " + std::to_string(scale));
    std::deque<std::pair<uint64_t, double>> history;
    for (const auto& h : j.at("loss_history"))
      history.emplace_back(u64(h.at(0), "a loss step"), h.at(1).get<double>());
    std::deque<uint64_t> spikes;
    for (const auto& s : j.at("spikes")) spikes.push_back(u64(s, "a spike step"));
    std::set<uint64_t> snapshots;
    for (const auto& s : j.at("snapshots")) snapshots.insert(u64(s, "a snapshot step"));
    const auto clean_steps = u64(j.at("clean_steps"), "clean_steps");
    const auto min_next_step = u64(j.at("min_next_step"), "min_next_step");
    // Everything parsed: only now change the engine.
    m.scaler.restore(scale, clean_steps);
    m.min_next_step = min_next_step;
    m.spikes.restore(std::move(history), std::move(spikes));
    m.snapshots = std::move(snapshots);
    for (size_t l = 0; l < states.size(); ++l) m.precision[l].restore(states[l]);
  } catch (const json::exception& e) {
    throw Error(Code::invalid_argument,
                std::string("guardrails: restore_state: not a guardrails state: ") + e.what());
  }
}

}  // namespace sigma::guardrails
