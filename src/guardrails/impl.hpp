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

  // Layer name and why, for the journal.
  using Changes = std::vector<std::pair<std::string, std::string>>;

  Decision decide(uint64_t step, const std::vector<double>& all, double scan_ms, double exchange_ms);
  void reduce(Decision& d, const std::vector<double>& all, std::vector<double>& layer_nf,
              std::vector<double>& layer_amax, std::vector<double>& layer_act);
  void precision_changes(Decision& d, const std::vector<double>& layer_nf,
                         const std::vector<double>& layer_amax, const std::vector<double>& layer_act,
                         Changes& esc, Changes& desc);
  void on_overflow(Decision& d, uint64_t step, const std::vector<double>& layer_nf);
  void on_mismatch(Decision& d, uint64_t step);
  void on_spike(Decision& d, uint64_t step, const detail::SpikeDetector::Verdict& spike, Changes& esc);
  void on_apply(Decision& d, uint64_t step);
  void escalate_all(Decision& d, const std::string& why, Changes& esc);
};

}  // namespace sigma::guardrails
