// The guardrails engine: scan, one exchange, the policies, the journal.
#include <sigma/guardrails.hpp>
#include <sigma/kernels.hpp>

#include "impl.hpp"
#include "vote.hpp"

#include <tbb/parallel_for.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

namespace sigma::guardrails {

const char* action_name(Action a) {
  switch (a) {
    case Action::apply:
      return "apply";
    case Action::skip:
      return "skip";
    case Action::rollback:
      return "rollback";
  }
  return "?";
}

namespace {

// All buffers of a step are cut into fixed pieces scanned on oneTBB's
// threads (many small layers keep every core busy as well as one big one),
// then summed in piece order, so a rank gets the same figures run after run.
constexpr uint64_t kPieceElems = uint64_t{1} << 20;

// Device buffers are hashed through host pieces of this size.
constexpr uint64_t kFingerprintPiece = uint64_t{16} << 20;

// A rank's figures in the exchange: the loss, then per layer its gradients'
// non-finite count, sum of squares and amax, and its activations' amax.
constexpr size_t kPerLayer = 4;
size_t exchange_width(size_t layers) { return 1 + kPerLayer * layers; }

struct Piece {
  size_t layer;
  const uint8_t* data;
  uint64_t count;
  hal_dtype_t dtype;
  kernels::Place where;
};

// Replicated layout: the ranks whose gradient figures (per layer:
// non-finite count and amax exactly, sum of squares to 1e-9 relative, which
// absorbs another ISA's summation order) differ from those of a strict
// majority; activations are each rank's own and not compared. Empty when
// all agree or when no majority exists.
std::vector<int> odd_replicas(const std::vector<double>& all, size_t width, int world) {
  auto same = [&](int a, int b) {
    const double* x = all.data() + static_cast<size_t>(a) * width;
    const double* y = all.data() + static_cast<size_t>(b) * width;
    for (size_t i = 1; i < width; i += kPerLayer) {
      if (x[i] != y[i] || x[i + 2] != y[i + 2]) return false;
      if (std::fabs(x[i + 1] - y[i + 1]) > 1e-9 * std::max(std::fabs(x[i + 1]), std::fabs(y[i + 1])))
        return false;
    }
    return true;
  };
  for (int cand = 0; cand < world; ++cand) {
    std::vector<int> odd;
    for (int r = 0; r < world; ++r)
      if (!same(cand, r)) odd.push_back(r);
    if (2 * odd.size() < static_cast<size_t>(world)) return odd;  // cand is in a strict majority
  }
  // No majority (e.g. two replicas that differ): all are suspects.
  std::vector<int> odd(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) odd[static_cast<size_t>(r)] = r;
  return odd;
}

void check_view(const BufferView& v, const std::string& what) {
  if (v.count > 0 && v.data == nullptr)
    throw Error(Code::invalid_argument, "guardrails: " + what + " is NULL");
  if (v.dtype != HAL_DTYPE_F32 && v.dtype != HAL_DTYPE_F16 && v.dtype != HAL_DTYPE_BF16)
    throw Error(Code::invalid_argument, "guardrails: " + what + " has dtype " + hal::dtype_name(v.dtype) +
                                            " (f32, f16 or bf16 expected)");
}

std::string fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c, d);
  return buf;
}

}  // namespace

Guardrails::Guardrails(Config config, std::vector<LayerInfo> layers, Group group) {
  config.validate();
  std::set<std::string> seen;
  for (const auto& l : layers) {
    if (l.name.empty()) throw Error(Code::invalid_argument, "guardrails: a layer has an empty name");
    if (!seen.insert(l.name).second)
      throw Error(Code::invalid_argument, "guardrails: layer '" + l.name + "' twice");
    if (l.dtype != HAL_DTYPE_F16 && l.dtype != HAL_DTYPE_BF16 && l.dtype != HAL_DTYPE_F32)
      throw Error(Code::invalid_argument, "guardrails: layer '" + l.name + "' has compute dtype " +
                                              hal::dtype_name(l.dtype) + " (f16, bf16 or f32 expected)");
  }
  impl_ = std::make_unique<Impl>(std::move(config), std::move(layers), group);
}

Guardrails::~Guardrails() = default;

Decision Guardrails::step(uint64_t step, double loss, const std::vector<std::vector<BufferView>>& grads,
                          const std::vector<double>& riders, const std::vector<double>& activation_amax) {
  auto& m = *impl_;
  if (grads.size() != m.layers.size())
    throw Error(Code::invalid_argument, "guardrails: step " + std::to_string(step) + " has gradients for " +
                                            std::to_string(grads.size()) + " layers, " +
                                            std::to_string(m.layers.size()) + " are registered");
  if (!activation_amax.empty() && activation_amax.size() != m.layers.size())
    throw Error(Code::invalid_argument, "guardrails: step " + std::to_string(step) +
                                            " has activation figures for " +
                                            std::to_string(activation_amax.size()) + " layers, " +
                                            std::to_string(m.layers.size()) + " are registered");
  if (step < m.min_next_step)
    throw Error(Code::invalid_argument, "guardrails: step " + std::to_string(step) + " comes after step " +
                                            std::to_string(m.min_next_step - 1) + "; steps must grow");
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Piece> pieces;
  for (size_t l = 0; l < grads.size(); ++l) {
    for (size_t b = 0; b < grads[l].size(); ++b) {
      const BufferView& v = grads[l][b];
      check_view(v, "layer '" + m.layers[l].name + "' buffer " + std::to_string(b));
      const uint64_t es = v.dtype == HAL_DTYPE_F32 ? 4 : 2;
      for (uint64_t at = 0; at < v.count; at += kPieceElems)
        pieces.push_back({l,
                          static_cast<const uint8_t*>(v.data) + at * es,
                          std::min(kPieceElems, v.count - at),
                          v.dtype,
                          {v.plugin, v.device}});
    }
  }
  std::vector<kernels::ScanResult> found(pieces.size());
  tbb::parallel_for(size_t{0}, pieces.size(), [&](size_t i) {
    found[i] = kernels::grad_scan(pieces[i].where, pieces[i].data, pieces[i].count, pieces[i].dtype);
  });
  // [loss, then per layer: non-finite count, sum of squares, amax,
  // activation amax; riders]
  const size_t width = exchange_width(m.layers.size());
  std::vector<double> mine(width + riders.size());
  mine[0] = loss;
  std::copy(riders.begin(), riders.end(), mine.begin() + static_cast<std::ptrdiff_t>(width));
  for (size_t l = 0; l < activation_amax.size(); ++l)  // NaN as +inf: max() keeps it
    mine[1 + kPerLayer * l + 3] = std::isnan(activation_amax[l]) ? INFINITY : std::fabs(activation_amax[l]);
  for (size_t i = 0; i < pieces.size(); ++i) {
    double* at = mine.data() + 1 + kPerLayer * pieces[i].layer;
    at[0] += static_cast<double>(found[i].non_finite);
    at[1] += found[i].sum_squares;
    at[2] = std::max(at[2], found[i].amax);
  }
  const auto t1 = std::chrono::steady_clock::now();
  const auto bytes = m.exchange.all_gather(mine.data(), mine.size() * sizeof(double));
  const auto t2 = std::chrono::steady_clock::now();
  std::vector<double> gathered(bytes.size() / sizeof(double));
  std::memcpy(gathered.data(), bytes.data(), bytes.size());
  // Each rank's figures for the decision; the riders apart.
  std::vector<double> all, ridden;
  for (size_t r = 0; r < static_cast<size_t>(m.exchange.world()); ++r) {
    const auto at = gathered.begin() + static_cast<std::ptrdiff_t>(r * mine.size());
    all.insert(all.end(), at, at + static_cast<std::ptrdiff_t>(width));
    ridden.insert(ridden.end(), at + static_cast<std::ptrdiff_t>(width),
                  at + static_cast<std::ptrdiff_t>(mine.size()));
  }
  using ms = std::chrono::duration<double, std::milli>;
  Decision d = m.decide(step, all, ms(t1 - t0).count(), ms(t2 - t1).count());
  d.riders = std::move(ridden);
  return d;
}

void Guardrails::Impl::escalate_all(Decision& d, const std::string& why,
                                    std::vector<std::pair<std::string, std::string>>& esc) {
  for (size_t l = 0; l < layers.size(); ++l) {
    if (layers[l].dtype == HAL_DTYPE_F32 || precision[l].escalated()) continue;
    precision[l].force_escalate();
    d.escalate.push_back(layers[l].name);
    d.escalate_why.push_back(why);
    esc.emplace_back(layers[l].name, why);
  }
}

// The ranks' figures, reduced in rank order (every rank computes the same
// doubles): the loss, non-finite counts, the global norm, each layer's
// non-finite count and amax.
void Guardrails::Impl::reduce(Decision& d, const std::vector<double>& all, std::vector<double>& layer_nf,
                              std::vector<double>& layer_amax, std::vector<double>& layer_act) {
  const size_t width = exchange_width(layers.size());
  const int world = exchange.world();
  double loss_sum = 0, ssq = 0;
  for (int r = 0; r < world; ++r) {
    const double* v = all.data() + static_cast<size_t>(r) * width;
    loss_sum += v[0];
    double rank_nf = 0;
    for (size_t l = 0; l < layers.size(); ++l) {
      const double* f = v + 1 + kPerLayer * l;
      layer_nf[l] += f[0];
      rank_nf += f[0];
      ssq += f[1];
      layer_amax[l] = std::max(layer_amax[l], f[2]);
      layer_act[l] = std::max(layer_act[l], f[3]);
    }
    if (rank_nf > 0) d.non_finite_ranks.push_back(r);
    d.non_finite += static_cast<uint64_t>(rank_nf);
  }
  d.loss = loss_sum / world;
  if (layout == GradLayout::replicated) {
    // Every rank scanned the same gradients: one copy's sum of squares.
    ssq /= world;
    d.mismatch_ranks = odd_replicas(all, width, world);
  }
  d.loss_scale = scaler.scale();
  d.global_norm = std::sqrt(ssq) / d.loss_scale;
}

// Per-layer precision sees every step, skipped ones included.
void Guardrails::Impl::precision_changes(Decision& d, const std::vector<double>& layer_nf,
                                         const std::vector<double>& layer_amax,
                                         const std::vector<double>& layer_act, Changes& esc, Changes& desc) {
  for (size_t l = 0; l < layers.size(); ++l) {
    const auto v = precision[l].observe(layer_nf[l] > 0, layer_amax[l] / d.loss_scale, layer_act[l]);
    if (v.change == detail::LayerPrecision::Change::escalate) {
      d.escalate.push_back(layers[l].name);
      d.escalate_why.push_back(v.why);
      esc.emplace_back(layers[l].name, v.why);
    } else if (v.change == detail::LayerPrecision::Change::deescalate) {
      d.deescalate.push_back(layers[l].name);
      d.deescalate_why.push_back(v.why);
      desc.emplace_back(layers[l].name, v.why);
    }
  }
}

void Guardrails::Impl::on_overflow(Decision& d, uint64_t step, const std::vector<double>& layer_nf) {
  d.action = Action::skip;
  if (d.non_finite > 0) {
    std::string where;
    for (size_t l = 0; l < layers.size(); ++l)
      if (layer_nf[l] > 0) where += (where.empty() ? "" : ", ") + layers[l].name;
    std::string ranks;
    for (int r : d.non_finite_ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    d.reason = std::to_string(d.non_finite) + " non-finite gradient values (layers " + where + "; ranks " +
               ranks + "): step skipped";
  } else {
    d.reason = "the loss is not finite: step skipped";
  }
  d.next_loss_scale = scaler.update(true);
  if (d.next_loss_scale != d.loss_scale)
    d.reason += fmt(", loss scale %g -> %g", d.loss_scale, d.next_loss_scale);
  min_next_step = step + 1;
}

// Applying would make the replicas diverge; skipping keeps them equal.
void Guardrails::Impl::on_mismatch(Decision& d, uint64_t step) {
  d.action = Action::skip;
  std::string ranks;
  for (int r : d.mismatch_ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  d.reason =
      "replicated gradients differ on rank(s) " + ranks +
      " from the majority (non-finite count, sum of squares or amax): a silent error in the all-reduce or "
      "in memory; step skipped, check the parameter fingerprints";
  d.next_loss_scale = d.loss_scale;
  min_next_step = step + 1;
}

// Back to the newest snapshot far enough before the spike, its data window
// skipped; with none, the step is skipped.
void Guardrails::Impl::on_spike(Decision& d, uint64_t step, const detail::SpikeDetector::Verdict& spike,
                                Changes& esc) {
  const uint64_t latest = step >= 1 + c.spike.rollback_margin ? step - 1 - c.spike.rollback_margin : 0;
  auto it = snapshots.upper_bound(latest);
  const bool have = step >= 1 + c.spike.rollback_margin && it != snapshots.begin();
  const std::string figures = fmt("loss %.6g above the limit %.6g (median %.6g, MAD %.4g)", d.loss,
                                  spike.limit, spike.median, spike.mad);
  if (have) {
    const uint64_t target = *std::prev(it);
    d.action = Action::rollback;
    d.rollback_to_step = target;
    d.skip_data_begin = step >= c.spike.skip_before ? step - c.spike.skip_before : 0;
    d.skip_data_end = step + c.spike.skip_after + 1;
    d.reason = "loss spike: " + figures + "; roll back to the snapshot of step " + std::to_string(target) +
               " and skip the data of steps [" + std::to_string(d.skip_data_begin) + ", " +
               std::to_string(d.skip_data_end) + ")";
    spikes.rewind(target);
    snapshots.erase(snapshots.upper_bound(target), snapshots.end());
    min_next_step = target + 1;
  } else {
    d.action = Action::skip;
    d.reason = "loss spike: " + figures + "; no snapshot at or before step " + std::to_string(latest) +
               " to roll back to: this step is skipped";
    min_next_step = step + 1;
  }
  d.next_loss_scale = d.loss_scale;
  if (spikes.record_spike(step))
    escalate_all(d,
                 std::to_string(c.spike.escalate_after) + " loss spikes within " +
                     std::to_string(c.spike.escalate_within) + " steps",
                 esc);
}

void Guardrails::Impl::on_apply(Decision& d, uint64_t step) {
  d.action = Action::apply;
  const double max_norm = c.clipping.max_norm;
  if (max_norm > 0 && d.global_norm > max_norm) d.clip_factor = max_norm / (d.global_norm + 1e-6);
  d.grad_multiplier = d.clip_factor / d.loss_scale;
  d.reason = fmt("gradients finite, global norm %.6g", d.global_norm);
  d.reason +=
      d.clip_factor < 1 ? fmt(" clipped to %g (factor %.6g)", max_norm, d.clip_factor) : std::string();
  spikes.accept(step, d.loss);
  d.next_loss_scale = scaler.update(false);
  if (d.next_loss_scale != d.loss_scale)
    d.reason += fmt("; loss scale %g -> %g after %g clean steps", d.loss_scale, d.next_loss_scale,
                    static_cast<double>(c.loss_scaling.growth_interval));
  min_next_step = step + 1;
}

Decision Guardrails::Impl::decide(uint64_t step, const std::vector<double>& all, double scan_ms,
                                  double exchange_ms) {
  Decision d;
  d.step = step;
  std::vector<double> layer_nf(layers.size()), layer_amax(layers.size()), layer_act(layers.size());
  reduce(d, all, layer_nf, layer_amax, layer_act);
  const bool overflow = d.non_finite > 0 || !std::isfinite(d.loss);
  Changes esc, desc;
  precision_changes(d, layer_nf, layer_amax, layer_act, esc, desc);
  detail::SpikeDetector::Verdict spike;
  if (overflow) {
    on_overflow(d, step, layer_nf);
  } else if (!d.mismatch_ranks.empty()) {
    on_mismatch(d, step);
  } else if ((spike = spikes.judge(d.loss)).spike) {
    on_spike(d, step, spike, esc);
  } else {
    on_apply(d, step);
  }
  d.check_fingerprint = (c.sdc.enabled && step % c.sdc.interval == 0) || !d.mismatch_ranks.empty();
  journal.decision(d, esc, desc, scan_ms, exchange_ms);
  return d;
}

void Guardrails::note_snapshot(uint64_t step) {
  auto& s = impl_->snapshots;
  s.insert(step);
  while (s.size() > 256) s.erase(s.begin());
}

bool Guardrails::fingerprint_due(uint64_t step) const {
  return impl_->c.sdc.enabled && step % impl_->c.sdc.interval == 0;
}

uint64_t fingerprint(const std::vector<BufferView>& params) {
  XXH3_state_t* st = XXH3_createState();
  if (st == nullptr) throw Error(Code::out_of_memory, "guardrails: cannot allocate a hash state");
  XXH3_64bits_reset(st);
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    if (p.count > 0 && p.data == nullptr) {
      XXH3_freeState(st);
      throw Error(Code::invalid_argument, "guardrails: parameter buffer " + std::to_string(i) + " is NULL");
    }
    const uint64_t bytes = p.count * hal::dtype_size(p.dtype);
    if (bytes > 0 && p.plugin != nullptr && !p.plugin->host_addressable(p.device)) {
      // Read through the HAL in pieces: the same hash wherever it lives.
      std::vector<uint8_t> piece;
      for (uint64_t at = 0; at < bytes; at += kFingerprintPiece) {
        piece.resize(std::min(kFingerprintPiece, bytes - at));
        p.plugin->check(
            p.plugin->api().device->memcpy(p.device, piece.data(), static_cast<const uint8_t*>(p.data) + at,
                                           piece.size(), HAL_COPY_DEVICE_TO_HOST, nullptr),
            "memcpy (parameter fingerprint)");
        XXH3_64bits_update(st, piece.data(), piece.size());
      }
    } else if (bytes > 0) {
      XXH3_64bits_update(st, p.data, bytes);
    }
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

FingerprintResult Guardrails::check_fingerprint(uint64_t step, const std::vector<BufferView>& params) {
  auto& m = *impl_;
  const uint64_t mine = fingerprint(params);
  const auto bytes = m.exchange.all_gather(&mine, sizeof mine);
  FingerprintResult r;
  r.step = step;
  r.fingerprints.resize(static_cast<size_t>(m.exchange.world()));
  std::memcpy(r.fingerprints.data(), bytes.data(), bytes.size());
  const std::set<uint64_t> distinct(r.fingerprints.begin(), r.fingerprints.end());
  r.match = distinct.size() == 1;
  if (r.match) {
    r.reason = "all " + std::to_string(r.fingerprints.size()) + " replicas agree";
  } else if (const auto major = detail::strict_majority(r.fingerprints)) {
    r.rerun_needed = true;
    for (size_t i = 0; i < r.fingerprints.size(); ++i)
      if (r.fingerprints[i] != *major) r.odd_ranks.push_back(static_cast<int>(i));
    std::string odd;
    for (int i : r.odd_ranks) odd += (odd.empty() ? "" : ",") + std::to_string(i);
    r.reason = "replicas disagree: rank(s) " + odd + " differ from the majority of " +
               std::to_string(r.fingerprints.size() - r.odd_ranks.size()) +
               "; re-run the step on another device to attribute it";
  } else {
    r.rerun_needed = true;
    r.reason = std::to_string(distinct.size()) + " different fingerprints over " +
               std::to_string(r.fingerprints.size()) +
               " replicas, no majority; re-run the step on another device";
  }
  note_fingerprints(r);
  return r;
}

void Guardrails::note_fingerprints(const FingerprintResult& result) {
  impl_->last_fp = result;
  impl_->journal.fingerprint(result);
}

std::vector<int> Guardrails::attribute_rerun(uint64_t step, uint64_t rerun_fingerprint,
                                             const std::string& device) {
  auto& m = *impl_;
  if (m.last_fp.step != step || m.last_fp.match || m.last_fp.fingerprints.empty())
    throw Error(Code::invalid_argument,
                "guardrails: attribute_rerun: step " + std::to_string(step) + " had no fingerprint mismatch");
  std::vector<int> faulty;
  bool any_agrees = false;
  for (size_t i = 0; i < m.last_fp.fingerprints.size(); ++i) {
    if (m.last_fp.fingerprints[i] == rerun_fingerprint)
      any_agrees = true;
    else
      faulty.push_back(static_cast<int>(i));
  }
  if (!any_agrees) faulty.clear();
  std::vector<FaultReport> reports;
  for (int r : faulty) {
    char hex[40];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(m.last_fp.fingerprints[r]));
    reports.push_back({step, r, "silent_data_corruption",
                       "parameters of rank " + std::to_string(r) + " (fingerprint " + hex +
                           ") disagree with the step re-run on " + device});
  }
  m.journal.attribution(step, device, rerun_fingerprint, faulty);
  for (const auto& rep : reports)
    if (m.fault_sink) m.fault_sink(rep);
  return faulty;
}

void Guardrails::on_fault(std::function<void(const FaultReport&)> sink) {
  impl_->fault_sink = std::move(sink);
}

double Guardrails::loss_scale() const { return impl_->scaler.scale(); }

const std::vector<LayerInfo>& Guardrails::layers() const { return impl_->layers; }

bool Guardrails::escalated(const std::string& layer) const {
  for (size_t l = 0; l < impl_->layers.size(); ++l)
    if (impl_->layers[l].name == layer) return impl_->precision[l].escalated();
  throw Error(Code::invalid_argument, "guardrails: no layer '" + layer + "'");
}

}  // namespace sigma::guardrails
