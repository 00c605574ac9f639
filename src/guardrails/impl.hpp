// The engine's state, shared by the step logic and the state (de)serialiser.
#pragma once

#include <sigma/guardrails.hpp>

#include "exchange.hpp"
#include "journal.hpp"
#include "policy.hpp"

#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace sigma::guardrails {

struct Guardrails::Impl {
  Config c;
  std::vector<LayerInfo> layers;
  detail::Exchange exchange;
  detail::LossScaler scaler;
  detail::SpikeDetector spikes;
  std::vector<detail::LayerPrecision> precision;
  std::set<uint64_t> snapshots;
  uint64_t min_next_step = 0;
  detail::Journal journal;
  std::function<void(const FaultReport&)> fault_sink;
  FingerprintResult last_fp;
  GradLayout layout;

  Impl(Config cfg, std::vector<LayerInfo> ls, const Group& g)
      : c(std::move(cfg)),
        layers(std::move(ls)),
        exchange(g, c.exchange_timeout),
        scaler(c.loss_scaling),
        spikes(c.spike),
        journal(c.journal, g.rank),
        layout(g.layout) {
    for (const auto& l : layers) precision.emplace_back(c.precision, l.dtype);
  }

  Decision decide(uint64_t step, const std::vector<double>& all, double scan_ms, double exchange_ms);
  void escalate_all(Decision& d, const std::string& why,
                    std::vector<std::pair<std::string, std::string>>& esc);
};

}  // namespace sigma::guardrails
