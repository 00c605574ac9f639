// The autotuner's decision: which rank's link is slow, when its experts
// move off (and its token share shrinks), and when they come back. Pure:
// samples in, placement and shares out.
#include <sigma/autotune.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace sigma::parallel {

namespace {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string describe(const RankSample& s, double median) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.0f link retries/s, exchange %.2f ms against the group's median %.2f ms",
                s.link_retry_rate, s.exchange_s * 1e3, median * 1e3);
  return buf;
}

}  // namespace

ExpertBalancer::ExpertBalancer(uint32_t num_experts, uint32_t ep, const BalancerOptions& options)
    : num_experts_(num_experts), ep_(ep), options_(options) {
  if (!(options.slow_ratio == 0 || options.slow_ratio > 1) || !(options.slow_retry_rate > 0) ||
      options.trigger_steps == 0 || options.recover_steps == 0 ||
      !(options.slow_token_share > 0 && options.slow_token_share <= 1))
    throw Error(
        Code::invalid_argument,
        "ExpertBalancer: slow_ratio must be 0 (off) or exceed 1, slow_retry_rate be positive, trigger "
        "and recover steps at least 1, slow_token_share in (0, 1]");
  for (uint32_t j = 0; j < ep; ++j) {
    const ExpertRange r = expert_range(num_experts, ep, j);
    for (uint32_t e = r.first; e < r.first + r.count; ++e) home_.push_back(j);
  }
  owner_ = home_;
  if (options_.max_experts_per_rank == 0) options_.max_experts_per_rank = 2 * (num_experts / ep);
  slow_steps_.assign(ep, 0);
  healthy_steps_.assign(ep, 0);
  evacuated_.assign(ep, false);
  token_share_.assign(ep, 1.0);
}

bool ExpertBalancer::reshare() {
  const auto n = static_cast<uint32_t>(std::count(evacuated_.begin(), evacuated_.end(), true));
  const double s = options_.slow_token_share;
  std::vector<double> share(ep_, 1.0);
  if (s < 1 && n > 0 && n < ep_)
    for (uint32_t r = 0; r < ep_; ++r) share[r] = evacuated_[r] ? s : (ep_ - n * s) / (ep_ - n);
  const bool changed = share != token_share_;
  token_share_ = std::move(share);
  return changed;
}

std::vector<uint64_t> split_tokens(uint64_t total, const std::vector<double>& share) {
  double sum = 0;
  for (double s : share) {
    if (!(s >= 0) || !std::isfinite(s))
      throw Error(Code::invalid_argument, "split_tokens: a share must be finite and >= 0");
    sum += s;
  }
  if (share.empty() || !(sum > 0)) throw Error(Code::invalid_argument, "split_tokens: no positive share");
  std::vector<uint64_t> out(share.size());
  std::vector<std::pair<double, size_t>> rest;
  uint64_t given = 0;
  for (size_t r = 0; r < share.size(); ++r) {
    const double exact = static_cast<double>(total) * share[r] / sum;
    out[r] = std::min<uint64_t>(total - given, static_cast<uint64_t>(std::floor(exact)));
    given += out[r];
    rest.emplace_back(exact - std::floor(exact), r);
  }
  std::stable_sort(rest.begin(), rest.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; given < total; i = (i + 1) % rest.size(), ++given) ++out[rest[i].second];
  return out;
}

std::string ExpertBalancer::save_state() const {
  return nlohmann::json{{"experts", num_experts_},
                        {"ep", ep_},
                        {"owner", owner_},
                        {"slow_steps", slow_steps_},
                        {"healthy_steps", healthy_steps_},
                        {"evacuated", evacuated_}}
      .dump();
}

void ExpertBalancer::restore_state(const std::string& text) {
  try {
    const auto j = nlohmann::json::parse(text);
    if (j.at("experts").get<uint32_t>() != num_experts_ || j.at("ep").get<uint32_t>() != ep_)
      throw Error(Code::invalid_argument, "ExpertBalancer: the state is of another group (" +
                                              std::to_string(j.at("experts").get<uint32_t>()) +
                                              " experts on " + std::to_string(j.at("ep").get<uint32_t>()) +
                                              " ranks)");
    auto owner = j.at("owner").get<std::vector<uint32_t>>();
    auto slow = j.at("slow_steps").get<std::vector<uint32_t>>();
    auto healthy = j.at("healthy_steps").get<std::vector<uint32_t>>();
    auto evacuated = j.at("evacuated").get<std::vector<bool>>();
    if (owner.size() != num_experts_ || slow.size() != ep_ || healthy.size() != ep_ ||
        evacuated.size() != ep_ ||
        std::any_of(owner.begin(), owner.end(), [&](uint32_t r) { return r >= ep_; }))
      throw Error(Code::invalid_argument, "ExpertBalancer: the state's sizes or owners do not fit the group");
    owner_ = std::move(owner);
    slow_steps_ = std::move(slow);
    healthy_steps_ = std::move(healthy);
    evacuated_ = std::move(evacuated);
    reshare();  // a function of which ranks are evacuated
  } catch (const nlohmann::json::exception& e) {
    throw Error(Code::invalid_argument, std::string("ExpertBalancer: not a balancer state: ") + e.what());
  }
}

std::optional<Rebalance> ExpertBalancer::observe(uint64_t step, const std::vector<RankSample>& samples) {
  if (samples.size() != ep_)
    throw Error(Code::invalid_argument, "ExpertBalancer: " + std::to_string(samples.size()) +
                                            " samples for a group of " + std::to_string(ep_));
  std::vector<double> times;
  for (const auto& s : samples) times.push_back(s.exchange_s);
  const double median = median_of(times);
  std::vector<bool> slow(ep_);
  for (uint32_t r = 0; r < ep_; ++r) {
    const auto& s = samples[r];
    slow[r] = s.link_retry_rate >= options_.slow_retry_rate ||
              (options_.slow_ratio > 1 && median > 0 && s.exchange_s > options_.slow_ratio * median);
    // Hysteresis: a slow step restarts the count of healthy ones, so a
    // flapping link never counts as recovered.
    slow_steps_[r] = slow[r] ? slow_steps_[r] + 1 : 0;
    healthy_steps_[r] = slow[r] ? 0 : healthy_steps_[r] + 1;
  }
  for (uint32_t r = 0; r < ep_; ++r)
    if (!evacuated_[r] && slow_steps_[r] >= options_.trigger_steps)
      if (auto d = evacuate(step, r, samples, slow, median)) return d;
  for (uint32_t r = 0; r < ep_; ++r)
    if (evacuated_[r] && healthy_steps_[r] >= options_.recover_steps)
      if (auto d = bring_back(step, r, samples)) return d;
  return std::nullopt;
}

std::optional<Rebalance> ExpertBalancer::evacuate(uint64_t step, uint32_t rank,
                                                  const std::vector<RankSample>& samples,
                                                  const std::vector<bool>& slow, double median) {
  Rebalance d;
  d.step = step;
  d.samples = samples;
  d.owner = owner_;
  std::vector<uint32_t> held(ep_, 0);
  for (uint32_t o : owner_) ++held[o];
  for (uint32_t e = 0; e < num_experts_; ++e) {
    if (owner_[e] != rank) continue;
    // The healthy rank holding the fewest experts (the lowest on a tie).
    int64_t to = -1;
    for (uint32_t j = 0; j < ep_; ++j) {
      if (j == rank || slow[j] || evacuated_[j] || held[j] >= options_.max_experts_per_rank) continue;
      if (to < 0 || held[j] < held[static_cast<uint32_t>(to)]) to = j;
    }
    if (to < 0) break;  // nowhere to go: what could move has moved
    d.owner[e] = static_cast<uint32_t>(to);
    ++held[static_cast<uint32_t>(to)];
    --held[rank];
    d.moves.push_back({e, rank, static_cast<uint32_t>(to)});
  }
  evacuated_[rank] = true;  // even when nothing could move: do not retry every step
  const bool reshared = reshare();
  d.token_share = token_share_;
  if (d.moves.empty() && !reshared) return std::nullopt;
  d.reason = "rank " + std::to_string(rank) + " slow for " + std::to_string(slow_steps_[rank]) +
             " steps: " + describe(samples[rank], median) + "; its experts move off";
  if (reshared) {
    char buf[96];
    std::snprintf(buf, sizeof buf, " and it takes %.2f of an even share of the tokens", token_share_[rank]);
    d.reason += buf;
  }
  owner_ = d.owner;
  return d;
}

std::optional<Rebalance> ExpertBalancer::bring_back(uint64_t step, uint32_t rank,
                                                    const std::vector<RankSample>& samples) {
  evacuated_[rank] = false;
  const bool reshared = reshare();
  Rebalance d;
  d.step = step;
  d.samples = samples;
  d.owner = owner_;
  d.token_share = token_share_;
  for (uint32_t e = 0; e < num_experts_; ++e)
    if (home_[e] == rank && owner_[e] != rank) {
      d.moves.push_back({e, owner_[e], rank});
      d.owner[e] = rank;
    }
  if (d.moves.empty() && !reshared) return std::nullopt;
  d.reason = "rank " + std::to_string(rank) + " healthy for " + std::to_string(healthy_steps_[rank]) +
             " steps; its experts come home" + (reshared ? " and the tokens are shared as before" : "");
  owner_ = d.owner;
  return d;
}

std::string rebalance_json(const Rebalance& r) {
  nlohmann::json j = {{"event", "rebalance"}, {"step", r.step}, {"reason", r.reason}, {"owner", r.owner}};
  j["moves"] = nlohmann::json::array();
  for (const Move& m : r.moves) j["moves"].push_back({{"expert", m.expert}, {"from", m.from}, {"to", m.to}});
  j["samples"] = nlohmann::json::array();
  for (const RankSample& s : r.samples)
    j["samples"].push_back({{"exchange_s", s.exchange_s}, {"link_retries_per_s", s.link_retry_rate}});
  if (!r.token_share.empty()) j["token_share"] = r.token_share;
  return j.dump();
}

void move_experts(Dispatcher& d, hal::Communicator& ep, uint32_t ep_rank, const Rebalance& r,
                  const std::function<std::vector<uint8_t>(uint32_t)>& state_of,
                  const std::function<void(uint32_t, std::vector<uint8_t>)>& adopt,
                  std::chrono::nanoseconds timeout) {
  // Every rank walks the same list in the same order, so each send meets
  // its receive at the same position and no two ranks wait on each other.
  for (const Move& m : r.moves) {
    if (m.from == m.to || (ep_rank != m.from && ep_rank != m.to)) continue;
    const std::string what = "moving expert " + std::to_string(m.expert) + " from rank " +
                             std::to_string(m.from) + " to rank " + std::to_string(m.to);
    try {
      if (ep_rank == m.from) {
        std::vector<uint8_t> bytes = state_of(m.expert);
        uint64_t size = bytes.size();
        ep.run(hal::coll_args(HAL_COLL_SEND, HAL_DTYPE_U8, sizeof size, &size, nullptr, HAL_REDUCE_SUM, m.to),
               timeout);
        if (size)
          ep.run(
              hal::coll_args(HAL_COLL_SEND, HAL_DTYPE_U8, size, bytes.data(), nullptr, HAL_REDUCE_SUM, m.to),
              timeout);
      } else {
        uint64_t size = 0;
        ep.run(
            hal::coll_args(HAL_COLL_RECV, HAL_DTYPE_U8, sizeof size, nullptr, &size, HAL_REDUCE_SUM, m.from),
            timeout);
        if (size > (uint64_t{1} << 40))
          throw Error(Code::data_loss, "a state of " + std::to_string(size) + " bytes");
        std::vector<uint8_t> bytes(size);
        if (size)
          ep.run(hal::coll_args(HAL_COLL_RECV, HAL_DTYPE_U8, size, nullptr, bytes.data(), HAL_REDUCE_SUM,
                                m.from),
                 timeout);
        adopt(m.expert, std::move(bytes));
      }
    } catch (const Error& e) {
      throw Error(e.code(), what + ": " + e.what());
    }
  }
  d.set_placement(r.owner);
}

}  // namespace sigma::parallel
