// The scheduler's decisions. Every public entry returns the actions it took
// and appends them to the history, so a journal can replay why a device
// moved.
#include <sigma/scheduler.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace sigma::scheduler {

const char* state_name(DeviceState s) noexcept {
  switch (s) {
    case DeviceState::fresh:
      return "new";
    case DeviceState::validating:
      return "validating";
    case DeviceState::available:
      return "available";
    case DeviceState::in_use:
      return "in_use";
    case DeviceState::suspect:
      return "suspect";
    case DeviceState::cordoned:
      return "cordoned";
    case DeviceState::repaired:
      return "repaired";
  }
  return "unknown";
}

const char* action_name(Action::Kind k) noexcept {
  switch (k) {
    case Action::Kind::validate:
      return "validate";
    case Action::Kind::admit:
      return "admit";
    case Action::Kind::cordon:
      return "cordon";
    case Action::Kind::assign:
      return "assign";
    case Action::Kind::migrate:
      return "migrate";
    case Action::Kind::abort_communicators:
      return "abort_communicators";
    case Action::Kind::replace:
      return "replace";
    case Action::Kind::restore:
      return "restore";
    case Action::Kind::shrink:
      return "shrink";
    case Action::Kind::pause:
      return "pause";
    case Action::Kind::resume:
      return "resume";
    case Action::Kind::escalate:
      return "escalate";
  }
  return "unknown";
}

namespace {

// log(k!) through lgamma_r: std::lgamma writes the global signgam, a data
// race when sweeps size spares on several threads.
double log_factorial(double k) {
  int sign = 0;
  return ::lgamma_r(k + 1.0, &sign);
}

// P(X > s) for X ~ Poisson(m), summed stably.
// P(X <= k) of a Poisson(m), extended one k at a time. The terms are
// computed in log space: exp(-m) alone underflows to 0 once m passes ~745
// (a large cluster's mean number of devices in repair).
class PoissonCdf {
 public:
  explicit PoissonCdf(double m) : m_(m), log_m_(std::log(m)) {}
  double next() {  // P(X <= k) for k = 0, 1, 2, ... on successive calls
    const double k = static_cast<double>(k_++);
    cdf_ += m_ > 0 ? std::exp(-m_ + k * log_m_ - log_factorial(k)) : (k == 0 ? 1.0 : 0.0);
    return std::min(1.0, cdf_);
  }

 private:
  double m_, log_m_, cdf_ = 0;
  uint64_t k_ = 0;
};

}  // namespace

SparePlan size_spares(uint32_t n, const FailureModel& m) {
  if (!(m.failures_per_device_hour >= 0) || !std::isfinite(m.failures_per_device_hour)) {
    throw Error(Code::invalid_argument, "spare sizing: failures_per_device_hour must be finite and >= 0");
  }
  if (!(m.repair_hours > 0) || !(m.job_hours > 0) || !std::isfinite(m.repair_hours) ||
      !std::isfinite(m.job_hours)) {
    throw Error(Code::invalid_argument, "spare sizing: repair_hours and job_hours must be positive");
  }
  if (!(m.target_risk > 0 && m.target_risk < 1)) {
    throw Error(Code::invalid_argument, "spare sizing: target_risk must be in (0, 1)");
  }
  const double window = std::min(m.repair_hours, m.job_hours);
  const double mean_out = n * m.failures_per_device_hour * window;
  const double windows = std::max(1.0, m.job_hours / m.repair_hours);
  SparePlan plan;
  plan.expected_failures = n * m.failures_per_device_hour * m.job_hours;
  PoissonCdf cdf(mean_out);
  for (uint32_t s = 0;; ++s) {
    const double p = std::max(0.0, 1.0 - cdf.next());
    const double risk = 1.0 - std::pow(1.0 - p, windows);
    if (risk <= m.target_risk || s >= n) {
      plan.spares = s;
      plan.risk = risk;
      break;
    }
  }
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "smallest S with P(more than S of %u devices in repair at once) over %.0f repair "
                "window(s) <= %.3g; in repair ~ Poisson(%u x %.3g/h x %.3g h = %.3g); S = %u gives "
                "risk %.3g, %.3g failures expected in %.3g h",
                n, windows, m.target_risk, n, m.failures_per_device_hour, window, mean_out, plan.spares,
                plan.risk, plan.expected_failures, m.job_hours);
  plan.rule = buf;
  return plan;
}

std::vector<uint32_t> split_world(uint32_t world, const std::vector<uint32_t>& available) {
  uint64_t total = 0;
  for (uint32_t a : available) total += a;
  if (total < world) {
    throw Error(Code::unavailable, "scheduler: " + std::to_string(total) +
                                       " device(s) passed validation, the job needs " +
                                       std::to_string(world));
  }
  std::vector<uint32_t> out(available.size(), 0);
  uint64_t given = 0;
  for (size_t g = 0; g < available.size(); ++g) {
    out[g] = static_cast<uint32_t>(uint64_t{world} * available[g] / total);
    given += out[g];
  }
  // Fewer than one rank per group is left; each goes where most are left.
  for (; given < world; ++given) {
    size_t best = 0;
    for (size_t g = 1; g < available.size(); ++g)
      if (available[g] - out[g] > available[best] - out[best]) best = g;
    ++out[best];
  }
  return out;
}

Scheduler::Scheduler(Config config) : config_(config), world_size_(config.world_size) {
  if (config_.world_size == 0) throw Error(Code::invalid_argument, "scheduler: world_size must be >= 1");
  if (config_.min_world_size == 0 || config_.min_world_size > config_.world_size) {
    throw Error(Code::invalid_argument, "scheduler: min_world_size must be in [1, world_size]");
  }
}

std::vector<Action> Scheduler::emit(std::vector<Action> actions) {
  history_.insert(history_.end(), actions.begin(), actions.end());
  return actions;
}

DeviceState& Scheduler::at(uint32_t device) {
  auto it = devices_.find(device);
  if (it == devices_.end()) {
    throw Error(Code::invalid_argument, "scheduler: unknown device " + std::to_string(device));
  }
  return it->second;
}

DeviceState Scheduler::state(uint32_t device) const {
  auto it = devices_.find(device);
  if (it == devices_.end()) {
    throw Error(Code::invalid_argument, "scheduler: unknown device " + std::to_string(device));
  }
  return it->second;
}

std::optional<uint32_t> Scheduler::device_of(uint32_t rank) const {
  auto it = rank_device_.find(rank);
  if (it == rank_device_.end()) return std::nullopt;
  return it->second;
}

std::optional<uint32_t> Scheduler::rank_of(uint32_t device) const {
  auto it = device_rank_.find(device);
  if (it == device_rank_.end()) return std::nullopt;
  return it->second;
}

std::vector<uint32_t> Scheduler::spares() const {
  std::vector<uint32_t> out;
  for (uint32_t d : available_) {
    if (!reserved_.count(d)) out.push_back(d);
  }
  return out;
}

// Every change of a device's state goes through here, so the indexes of
// spares and suspects stay true.
void Scheduler::set_state(uint32_t device, DeviceState s) {
  DeviceState& now = devices_[device];
  if (now == DeviceState::available) available_.erase(device);
  if (now == DeviceState::suspect) suspects_.erase(device);
  now = s;
  if (s == DeviceState::available) available_.insert(device);
  if (s == DeviceState::suspect) suspects_.insert(device);
}

void Scheduler::bind(uint32_t rank, uint32_t device) {
  if (auto it = rank_device_.find(rank); it != rank_device_.end()) device_rank_.erase(it->second);
  rank_device_[rank] = device;
  device_rank_[device] = rank;
}

void Scheduler::unbind(uint32_t rank) {
  if (auto it = rank_device_.find(rank); it != rank_device_.end()) {
    device_rank_.erase(it->second);
    rank_device_.erase(it);
  }
}

void Scheduler::reserve(uint32_t device, uint32_t spare) {
  migrations_[device] = spare;
  reserved_.insert(spare);
}

void Scheduler::unreserve(std::map<uint32_t, uint32_t>::iterator it) {
  reserved_.erase(it->second);
  migrations_.erase(it);
}

// A spare that can no longer be one: the migration counting on it waits
// for another.
void Scheduler::drop_reservation_of(uint32_t spare) {
  if (!reserved_.count(spare)) return;
  for (auto it = migrations_.begin(); it != migrations_.end(); ++it) {
    if (it->second == spare) {
      unreserve(it);
      return;
    }
  }
}

std::optional<uint32_t> Scheduler::pending_migration(uint32_t device) const {
  auto it = migrations_.find(device);
  if (it == migrations_.end()) return std::nullopt;
  return it->second;
}

uint32_t group_of(const Config& c, uint32_t device) noexcept {
  if (device < c.groups.size()) return c.groups[device];
  return c.group_size ? device / c.group_size : 0;
}

uint32_t Scheduler::group_of_rank(uint32_t rank) const {
  uint32_t first = 0;
  for (uint32_t g = 0; g < group_ranks_.size(); ++g) {
    first += group_ranks_[g];
    if (rank < first) return g;
  }
  return 0;
}

// A free spare for the rank on `exclude` (or for the device itself when it
// runs none): its own group's lowest first, then, when `other_groups`, the
// lowest anywhere.
std::optional<uint32_t> Scheduler::take_spare(uint32_t exclude, bool other_groups) {
  if (config_.group_size || !config_.groups.empty()) {
    const auto rank = rank_of(exclude);
    const uint32_t g = rank ? group_of_rank(*rank) : group_of(config_, exclude);
    if (config_.groups.empty()) {  // consecutive ids: look in the group's range only
      const uint64_t lo = uint64_t{g} * config_.group_size;
      for (auto it = available_.lower_bound(static_cast<uint32_t>(lo));
           it != available_.end() && *it < lo + config_.group_size; ++it) {
        if (*it != exclude && !reserved_.count(*it)) return *it;
      }
    } else {
      for (uint32_t d : available_) {
        if (d != exclude && !reserved_.count(d) && group_of(config_, d) == g) return d;
      }
    }
    if (!other_groups) return std::nullopt;
  }
  for (uint32_t d : available_) {
    if (d != exclude && !reserved_.count(d)) return d;
  }
  return std::nullopt;
}

// `rank` leaves the job: the ranks above it (bound or missing) move down.
void Scheduler::renumber_without(uint32_t rank) {
  if (!group_ranks_.empty()) --group_ranks_[group_of_rank(rank)];
  std::map<uint32_t, uint32_t> renumbered;
  for (auto& [r, d] : rank_device_) renumbered[r > rank ? r - 1 : r] = d;
  rank_device_ = std::move(renumbered);
  device_rank_.clear();
  for (auto& [r, d] : rank_device_) device_rank_[d] = r;
  for (uint32_t& r : missing_ranks_)
    if (r > rank) --r;
  --world_size_;
}

std::vector<Action> Scheduler::add_device(uint32_t device, double t) {
  if (devices_.count(device)) {
    throw Error(Code::invalid_argument, "scheduler: device " + std::to_string(device) + " added twice");
  }
  set_state(device, DeviceState::validating);
  return emit({{Action::Kind::validate, device, kNone, kNone, 0, "", "new device", t}});
}

std::vector<Action> Scheduler::validation_done(uint32_t device, bool passed, const std::string& detail,
                                               double t) {
  DeviceState& s = at(device);
  if (s != DeviceState::validating) {
    throw Error(Code::invalid_argument,
                "scheduler: device " + std::to_string(device) + " is " + state_name(s) + ", not validating");
  }
  if (!passed) {
    set_state(device, DeviceState::cordoned);
    return emit({{Action::Kind::cordon, device, kNone, kNone, 0, "", "validation failed: " + detail, t}});
  }
  set_state(device, DeviceState::available);
  std::vector<Action> out = emit({{Action::Kind::admit, device, kNone, kNone, 0, "", detail, t}});
  if (missing_ranks_.empty() || config_.escalate) return out;
  // Paused for want of a device: this one takes the first missing rank.
  auto more = fill_missing(device, kNone, "disk", "a validated device", t);
  if (missing_ranks_.empty()) {
    more.push_back(
        emit({{Action::Kind::resume, kNone, kNone, kNone, world_size_, "", "every rank has a device", t}})
            .front());
  }
  out.insert(out.end(), more.begin(), more.end());
  return out;
}

std::vector<Action> Scheduler::fill_missing(uint32_t device, uint32_t failed, const std::string& tier,
                                            const std::string& reason, double t) {
  if (missing_ranks_.empty()) throw Error(Code::invalid_argument, "scheduler: no rank is missing");
  if (state(device) != DeviceState::available || reserved_.count(device)) {
    throw Error(Code::invalid_argument,
                "scheduler: device " + std::to_string(device) + " is not a free spare");
  }
  const uint32_t rank = missing_ranks_.front();
  missing_ranks_.erase(missing_ranks_.begin());
  set_state(device, DeviceState::in_use);
  bind(rank, device);
  const char* why = tier == "memory"  ? "a peer holds the rank's snapshot"
                    : failed == kNone ? "the rank's memory replica did not survive the pause"
                                      : "no memory replica of the rank";
  return emit({{Action::Kind::replace, failed, rank, device, world_size_, "", reason, t},
               {Action::Kind::restore, kNone, kNone, kNone, world_size_, tier, why, t}});
}

void Scheduler::drop_missing() {
  if (missing_ranks_.empty()) throw Error(Code::invalid_argument, "scheduler: no rank is missing");
  const uint32_t rank = missing_ranks_.front();
  missing_ranks_.erase(missing_ranks_.begin());
  renumber_without(rank);
}

void Scheduler::adopt(uint32_t device, DeviceState s) {
  if (devices_.count(device)) {
    throw Error(Code::invalid_argument, "scheduler: device " + std::to_string(device) + " adopted twice");
  }
  if (s != DeviceState::available && s != DeviceState::cordoned) {
    throw Error(Code::invalid_argument, "scheduler: only an available or cordoned device is adopted");
  }
  set_state(device, s);
}

void Scheduler::release(uint32_t device) {
  const DeviceState s = state(device);
  if (!(s == DeviceState::available && !reserved_.count(device)) && s != DeviceState::cordoned) {
    throw Error(Code::invalid_argument, "scheduler: device " + std::to_string(device) + " is " +
                                            state_name(s) +
                                            ": only a free spare or a cordoned device is released");
  }
  set_state(device, DeviceState::cordoned);
  devices_.erase(device);
}

std::vector<Action> Scheduler::start(double t) { return start(t, config_.world_size); }

std::vector<Action> Scheduler::start(double t, uint32_t world) {
  if (started_) throw Error(Code::invalid_argument, "scheduler: start called twice");
  if (world == 0 && !config_.escalate) throw Error(Code::invalid_argument, "scheduler: a job of 0 ranks");
  // The free devices of each group, ascending; ranks fill group after group.
  std::vector<std::vector<uint32_t>> groups;
  for (uint32_t d : spares()) {
    const uint32_t g = group_of(config_, d);
    if (groups.size() <= g) groups.resize(g + 1);
    groups[g].push_back(d);
  }
  std::vector<uint32_t> counts;
  for (const auto& g : groups) counts.push_back(static_cast<uint32_t>(g.size()));
  group_ranks_ = split_world(world, counts);
  started_ = true;
  world_size_ = world;
  std::vector<Action> out;
  uint32_t r = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (uint32_t k = 0; k < group_ranks_[g]; ++k, ++r) {
      set_state(groups[g][k], DeviceState::in_use);
      bind(r, groups[g][k]);
      out.push_back({Action::Kind::assign, groups[g][k], r, kNone, world_size_, "", "job start", t});
    }
  }
  return emit(std::move(out));
}

std::vector<Action> Scheduler::on_warning(uint32_t device, const std::string& reason, double t) {
  DeviceState& s = at(device);
  if (s == DeviceState::available) {
    drop_reservation_of(device);
    set_state(device, DeviceState::cordoned);
    return emit({{Action::Kind::cordon, device, kNone, kNone, 0, "", "spare warned: " + reason, t}});
  }
  if (s != DeviceState::in_use) return {};
  set_state(device, DeviceState::suspect);
  if (!config_.proactive_migration) return {};
  if (auto spare = take_spare(device, false)) reserve(device, *spare);
  return {};
}

std::vector<Action> Scheduler::on_calm(uint32_t device, double /*t*/) {
  DeviceState& s = at(device);
  if (s == DeviceState::suspect) {
    set_state(device, DeviceState::in_use);
    if (auto it = migrations_.find(device); it != migrations_.end()) unreserve(it);
  }
  return {};
}

std::vector<Action> Scheduler::at_step_boundary(uint64_t step, double t) {
  std::vector<Action> out;
  // A suspect device still waiting for a spare gets one that appeared since.
  for (uint32_t d : suspects_) {
    if (config_.proactive_migration && !migrations_.count(d)) {
      if (auto spare = take_spare(d, false)) reserve(d, *spare);
    }
  }
  for (auto& [from, to] : migrations_) {
    const auto rank = rank_of(from);
    if (!rank) continue;
    set_state(from, DeviceState::cordoned);
    set_state(to, DeviceState::in_use);
    bind(*rank, to);
    out.push_back({Action::Kind::migrate, from, *rank, to, world_size_, "memory",
                   "early warning; moved at the boundary of step " + std::to_string(step), t});
    out.push_back({Action::Kind::cordon, from, kNone, kNone, 0, "", "migrated away after a warning", t});
  }
  migrations_.clear();
  reserved_.clear();
  return emit(std::move(out));
}

std::vector<Action> Scheduler::on_fault(uint32_t device, const std::string& reason, bool memory_tier_ok,
                                        double t) {
  DeviceState& s = at(device);
  if (s == DeviceState::available || s == DeviceState::validating || s == DeviceState::repaired) {
    drop_reservation_of(device);
    set_state(device, DeviceState::cordoned);
    return emit({{Action::Kind::cordon, device, kNone, kNone, 0, "", "spare failed: " + reason, t}});
  }
  if (s != DeviceState::in_use && s != DeviceState::suspect) return {};
  const auto rank = rank_of(device);
  set_state(device, DeviceState::cordoned);
  // A migration reserved for this device is moot: its spare replaces it now.
  std::optional<uint32_t> spare;
  if (auto it = migrations_.find(device); it != migrations_.end()) {
    spare = it->second;
    unreserve(it);
  } else {
    spare = take_spare(device, true);
  }
  std::vector<Action> out;
  out.push_back(
      {Action::Kind::abort_communicators, device, rank.value_or(kNone), kNone, world_size_, "", reason, t});
  out.push_back({Action::Kind::cordon, device, kNone, kNone, 0, "", "hard fault: " + reason, t});
  if (!rank) return emit(std::move(out));
  if (spare) {
    set_state(*spare, DeviceState::in_use);
    bind(*rank, *spare);
    out.push_back(
        {Action::Kind::replace, device, *rank, *spare, world_size_, "", "spare replaces a failed device", t});
    out.push_back({Action::Kind::restore, kNone, kNone, kNone, world_size_,
                   memory_tier_ok ? "memory" : "disk",
                   memory_tier_ok ? "a peer holds the rank's snapshot" : "no memory replica of the rank", t});
    return emit(std::move(out));
  }
  unbind(*rank);
  if (config_.escalate) {
    missing_ranks_.push_back(*rank);
    out.push_back({Action::Kind::escalate, device, *rank, kNone, world_size_, "",
                   "no spare in the group: " + reason, t});
  } else if (config_.allow_shrink && world_size_ - 1 >= config_.min_world_size) {
    // Ranks above the lost one move down by one; the world shrinks.
    renumber_without(*rank);
    out.push_back({Action::Kind::shrink, device, *rank, kNone, world_size_, "",
                   "no spare left: continuing with " + std::to_string(world_size_) + " ranks", t});
    out.push_back({Action::Kind::restore, kNone, kNone, kNone, world_size_,
                   memory_tier_ok ? "memory" : "disk", "re-shard the state onto the smaller world", t});
  } else {
    missing_ranks_.push_back(*rank);
    out.push_back({Action::Kind::pause, device, *rank, kNone, world_size_, "",
                   config_.allow_shrink
                       ? "no spare left and the world cannot shrink below " +
                             std::to_string(config_.min_world_size) +
                             ": paused until a repaired device passes validation"
                       : "no spare left and the job does not allow shrinking: paused until a repaired "
                         "device passes validation",
                   t});
  }
  return emit(std::move(out));
}

std::vector<Action> Scheduler::on_repaired(uint32_t device, double t) {
  DeviceState& s = at(device);
  if (s != DeviceState::cordoned) {
    throw Error(Code::invalid_argument, "scheduler: device " + std::to_string(device) + " is " +
                                            state_name(s) + ", only a cordoned device is repaired");
  }
  set_state(device, DeviceState::validating);
  return emit({{Action::Kind::validate, device, kNone, kNone, 0, "", "back from repair", t}});
}

}  // namespace sigma::scheduler
