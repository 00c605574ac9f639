// Top-k softmax routing and capacity: which expert each token goes to and
// which choices are dropped, decided on one rank before any byte moves.
#include <sigma/parallel.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace sigma::parallel {

namespace {

void check_options(const RouterOptions& o) {
  if (o.num_experts == 0) throw Error(Code::invalid_argument, "route: num_experts is 0");
  if (o.top_k == 0 || o.top_k > o.num_experts)
    throw Error(Code::invalid_argument, "route: top_k " + std::to_string(o.top_k) + " outside [1, " +
                                            std::to_string(o.num_experts) + "]");
  if (!std::isfinite(o.capacity_factor) || o.capacity_factor < 0)
    throw Error(Code::invalid_argument, "route: capacity_factor " + std::to_string(o.capacity_factor) +
                                            " (0 is dropless; > 0 a factor)");
}

// Softmax of one row in f32 into `p`; its top-k into ids / probs (ties: the
// lower expert).
void route_token(const float* row, uint32_t num_experts, uint32_t top_k, std::vector<float>& p, int32_t* ids,
                 float* probs) {
  float max = row[0];
  for (uint32_t e = 1; e < num_experts; ++e) max = std::max(max, row[e]);
  float sum = 0;
  for (uint32_t e = 0; e < num_experts; ++e) sum += (p[e] = std::exp(row[e] - max));
  for (uint32_t e = 0; e < num_experts; ++e) p[e] /= sum;
  for (uint32_t k = 0; k < top_k; ++k) {
    int32_t best = -1;
    for (uint32_t e = 0; e < num_experts; ++e) {
      if (std::find(ids, ids + k, static_cast<int32_t>(e)) != ids + k) continue;
      if (best < 0 || p[e] > p[static_cast<uint32_t>(best)]) best = static_cast<int32_t>(e);
    }
    ids[k] = best;
    probs[k] = p[static_cast<uint32_t>(best)];
  }
}

// Drops the choices over each expert's capacity: the lowest probabilities
// (ties: the later choice) or the latest positions.
void apply_capacity(Routing& r, const std::vector<float>& choice_prob, uint32_t num_experts,
                    DropPolicy drop) {
  const uint64_t n = r.num_tokens * r.top_k;
  std::vector<std::vector<uint64_t>> of_expert(num_experts);
  for (uint64_t i = 0; i < n; ++i) of_expert[static_cast<uint32_t>(r.expert_ids[i])].push_back(i);
  for (auto& choices : of_expert) {
    if (choices.size() <= r.capacity) continue;
    if (drop == DropPolicy::probability)
      std::stable_sort(choices.begin(), choices.end(),
                       [&](uint64_t a, uint64_t b) { return choice_prob[a] > choice_prob[b]; });
    for (size_t j = r.capacity; j < choices.size(); ++j) r.expert_ids[choices[j]] = -1;
  }
}

}  // namespace

Routing route(const float* logits, uint64_t num_tokens, const RouterOptions& options) {
  check_options(options);
  const uint32_t E = options.num_experts, K = options.top_k;
  if (num_tokens > 0 && logits == nullptr) throw Error(Code::invalid_argument, "route: NULL logits");
  Routing r;
  r.num_tokens = num_tokens;
  r.top_k = K;
  r.expert_ids.resize(num_tokens * K);
  r.weights.resize(num_tokens * K);
  r.stats.num_tokens = num_tokens;
  r.stats.top_k = K;
  r.stats.routed.assign(E, 0);
  r.stats.kept.assign(E, 0);
  r.stats.prob_sum.assign(E, 0.0);
  std::vector<float> p(E), choice_prob(num_tokens * K);
  for (uint64_t t = 0; t < num_tokens; ++t) {
    const float* row = logits + t * E;
    for (uint32_t e = 0; e < E; ++e)
      if (!std::isfinite(row[e]))
        throw Error(Code::invalid_argument, "route: token " + std::to_string(t) + " has a non-finite logit " +
                                                std::to_string(row[e]) + " for expert " + std::to_string(e));
    int32_t* ids = r.expert_ids.data() + t * K;
    float* probs = choice_prob.data() + t * K;
    route_token(row, E, K, p, ids, probs);
    for (uint32_t e = 0; e < E; ++e) r.stats.prob_sum[e] += p[e];
    float top_sum = 0;
    for (uint32_t k = 0; k < K; ++k) top_sum += probs[k];
    for (uint32_t k = 0; k < K; ++k) {
      r.weights[t * K + k] = options.normalize_top_k ? probs[k] / top_sum : probs[k];
      ++r.stats.routed[static_cast<uint32_t>(ids[k])];
    }
  }
  if (options.capacity_factor > 0) {
    r.capacity = static_cast<uint64_t>(
        std::ceil(options.capacity_factor * static_cast<double>(num_tokens * K) / static_cast<double>(E)));
    apply_capacity(r, choice_prob, E, options.drop);
  }
  for (int32_t id : r.expert_ids)
    if (id >= 0) ++r.stats.kept[static_cast<uint32_t>(id)];
  return r;
}

uint64_t LoadStats::dropped() const {
  return std::accumulate(routed.begin(), routed.end(), uint64_t{0}) -
         std::accumulate(kept.begin(), kept.end(), uint64_t{0});
}

double LoadStats::aux_loss() const {
  if (num_tokens == 0 || top_k == 0) return 0;
  const double E = static_cast<double>(routed.size()), T = static_cast<double>(num_tokens);
  double sum = 0;
  for (size_t i = 0; i < routed.size(); ++i)
    sum += static_cast<double>(routed[i]) / (T * top_k) * (prob_sum[i] / T);
  return E * sum;
}

void LoadStats::add(const LoadStats& other) {
  if (routed.empty()) {
    *this = other;
    return;
  }
  if (other.routed.size() != routed.size() ||
      (other.top_k != top_k && other.num_tokens > 0 && num_tokens > 0))
    throw Error(Code::invalid_argument, "LoadStats::add: " + std::to_string(other.routed.size()) +
                                            " experts / top-" + std::to_string(other.top_k) + " added to " +
                                            std::to_string(routed.size()) + " / top-" +
                                            std::to_string(top_k));
  num_tokens += other.num_tokens;
  if (top_k == 0) top_k = other.top_k;
  for (size_t i = 0; i < routed.size(); ++i) {
    routed[i] += other.routed[i];
    kept[i] += other.kept[i];
    prob_sum[i] += other.prob_sum[i];
  }
}

}  // namespace sigma::parallel
