// The root of the scheduler tree: routes each event to the group that owns
// the device, lifts the group's local ranks to global ones, and decides what
// a group escalates.
#include <sigma/hierarchy.hpp>

#include <algorithm>

namespace sigma::scheduler {

namespace {

bool has_world(Action::Kind k) {
  return k != Action::Kind::validate && k != Action::Kind::admit && k != Action::Kind::cordon;
}

}  // namespace

Hierarchy::Hierarchy(Config config) : config_(config), world_size_(config.world_size) {
  if (config_.group_size == 0 && config_.groups.empty()) {
    throw Error(Code::invalid_argument, "hierarchy: group_size must be >= 1 or groups given");
  }
  if (config_.world_size == 0) throw Error(Code::invalid_argument, "hierarchy: world_size must be >= 1");
  if (config_.min_world_size == 0 || config_.min_world_size > config_.world_size) {
    throw Error(Code::invalid_argument, "hierarchy: min_world_size must be in [1, world_size]");
  }
}

Hierarchy::~Hierarchy() = default;

Scheduler& Hierarchy::group(uint32_t g) {
  if (groups_.size() <= g) groups_.resize(g + 1);
  if (!groups_[g]) {
    Config c;
    c.proactive_migration = config_.proactive_migration;
    c.escalate = true;
    groups_[g] = std::make_unique<Scheduler>(c);
  }
  return *groups_[g];
}

uint32_t Hierarchy::owner_group(uint32_t device) const {
  auto it = lent_.find(device);
  return it == lent_.end() ? home_group(device) : it->second;
}

Scheduler& Hierarchy::owner(uint32_t device) {
  const uint32_t g = owner_group(device);
  if (g >= groups_.size() || !groups_[g]) {
    throw Error(Code::invalid_argument, "scheduler: unknown device " + std::to_string(device));
  }
  return *groups_[g];
}

const Scheduler& Hierarchy::owner(uint32_t device) const {
  return const_cast<Hierarchy*>(this)->owner(device);
}

uint32_t Hierarchy::offset(uint32_t g) const { return g < first_.size() ? first_[g] : world_size_; }

void Hierarchy::count_ranks() {
  first_.assign(ranks_.size(), 0);
  for (size_t g = 1; g < ranks_.size(); ++g) first_[g] = first_[g - 1] + ranks_[g - 1];
}

// A group's actions in the job's terms: global ranks and world.
std::vector<Action> Hierarchy::lift(uint32_t g, std::vector<Action> actions) {
  for (Action& a : actions) {
    if (a.rank != kNone) a.rank += offset(g);
    if (has_world(a.kind)) a.world_size = world_size_;
  }
  return actions;
}

std::vector<Action> Hierarchy::emit(std::vector<Action> actions) {
  history_.insert(history_.end(), actions.begin(), actions.end());
  return actions;
}

void Hierarchy::lend(uint32_t device, uint32_t to) {
  const uint32_t from = owner_group(device);
  if (from == to) return;
  const DeviceState s = group(from).state(device);
  group(from).release(device);
  group(to).adopt(device, s);
  if (to == home_group(device)) {
    lent_.erase(device);
  } else {
    lent_[device] = to;
  }
}

std::vector<Action> Hierarchy::add_device(uint32_t device, double t) {
  if (lent_.count(device) || (home_group(device) < groups_.size() && groups_[home_group(device)] &&
                              groups_[home_group(device)]->knows(device))) {
    throw Error(Code::invalid_argument, "scheduler: device " + std::to_string(device) + " added twice");
  }
  ++traffic_.group_calls;
  return emit(lift(home_group(device), group(home_group(device)).add_device(device, t)));
}

std::vector<Action> Hierarchy::validation_done(uint32_t device, bool passed, const std::string& detail,
                                               double t) {
  ++traffic_.group_calls;
  const uint32_t g = owner_group(device);
  auto out = lift(g, owner(device).validation_done(device, passed, detail, t));
  if (passed && !waiting_.empty()) {
    auto more = lend_to_waiting(device, t);
    out.insert(out.end(), more.begin(), more.end());
  }
  return emit(std::move(out));
}

// The job is paused: a validated device goes to the group whose rank has
// waited longest.
std::vector<Action> Hierarchy::lend_to_waiting(uint32_t device, double t) {
  ++traffic_.root_calls;
  const uint32_t to = waiting_.front();
  waiting_.erase(waiting_.begin());
  lend(device, to);
  auto out = lift(to, group(to).fill_missing(device, kNone, "disk", "a validated device", t));
  if (waiting_.empty()) {
    out.push_back({Action::Kind::resume, kNone, kNone, kNone, world_size_, "", "every rank has a device", t});
  }
  return out;
}

std::vector<Action> Hierarchy::start(double t) {
  if (started_) throw Error(Code::invalid_argument, "scheduler: start called twice");
  std::vector<uint32_t> free;
  for (const auto& g : groups_) free.push_back(g ? static_cast<uint32_t>(g->spares().size()) : 0);
  ranks_ = split_world(world_size_, free);
  count_ranks();
  started_ = true;
  std::vector<Action> out;
  for (uint32_t g = 0; g < groups_.size(); ++g) {
    if (!groups_[g]) continue;
    auto part = lift(g, groups_[g]->start(t, ranks_[g]));
    out.insert(out.end(), part.begin(), part.end());
  }
  traffic_.group_calls += groups_.size();
  return emit(std::move(out));
}

std::vector<Action> Hierarchy::on_warning(uint32_t device, const std::string& reason, double t) {
  ++traffic_.group_calls;
  return emit(lift(owner_group(device), owner(device).on_warning(device, reason, t)));
}

std::vector<Action> Hierarchy::on_calm(uint32_t device, double t) {
  ++traffic_.group_calls;
  return emit(lift(owner_group(device), owner(device).on_calm(device, t)));
}

std::vector<Action> Hierarchy::at_step_boundary(uint64_t step, double t) {
  std::vector<Action> out;
  for (uint32_t g = 0; g < groups_.size(); ++g) {
    if (!groups_[g]) continue;
    auto part = lift(g, groups_[g]->at_step_boundary(step, t));
    out.insert(out.end(), part.begin(), part.end());
  }
  traffic_.group_calls += groups_.size();
  // In the flat scheduler's order: by the device moved away from.
  std::stable_sort(out.begin(), out.end(),
                   [](const Action& a, const Action& b) { return a.device < b.device; });
  return emit(std::move(out));
}

std::vector<Action> Hierarchy::on_fault(uint32_t device, const std::string& reason, bool memory_tier_ok,
                                        double t) {
  ++traffic_.group_calls;
  const uint32_t g = owner_group(device);
  auto out = lift(g, owner(device).on_fault(device, reason, memory_tier_ok, t));
  if (!out.empty() && out.back().kind == Action::Kind::escalate) {
    auto more = escalated(g, out.back(), memory_tier_ok, t);
    if (groups_.size() == 1) out.pop_back();  // one group: it is the root, no message went up
    out.insert(out.end(), more.begin(), more.end());
  }
  return emit(std::move(out));
}

// Group `g` lost a rank's device and has no spare: lend the lowest free
// spare of another group, else shrink or pause the job.
std::vector<Action> Hierarchy::escalated(uint32_t g, const Action& e, bool memory_tier_ok, double t) {
  ++traffic_.root_calls;
  uint32_t best = kNone, from = 0;
  for (uint32_t h = 0; h < groups_.size(); ++h) {
    if (h == g || !groups_[h]) continue;
    const auto free = groups_[h]->spares();
    if (!free.empty() && free.front() < best) best = free.front(), from = h;
  }
  if (best != kNone) {
    lend(best, g);
    return lift(g, group(g).fill_missing(
                       best, e.device, memory_tier_ok ? "memory" : "disk",
                       "a spare lent by group " + std::to_string(from) + " replaces a failed device", t));
  }
  if (config_.allow_shrink && world_size_ - 1 >= config_.min_world_size) {
    group(g).drop_missing();
    --ranks_[g];
    count_ranks();
    --world_size_;
    return {{Action::Kind::shrink, e.device, e.rank, kNone, world_size_, "",
             "no spare left: continuing with " + std::to_string(world_size_) + " ranks", t},
            {Action::Kind::restore, kNone, kNone, kNone, world_size_, memory_tier_ok ? "memory" : "disk",
             "re-shard the state onto the smaller world", t}};
  }
  waiting_.push_back(g);
  const std::string where = groups_.size() > 1 ? " in any group" : "";
  return {{Action::Kind::pause, e.device, e.rank, kNone, world_size_, "",
           config_.allow_shrink ? "no spare left" + where + " and the world cannot shrink below " +
                                      std::to_string(config_.min_world_size) +
                                      ": paused until a repaired device passes validation"
                                : "no spare left" + where +
                                      " and the job does not allow shrinking: paused until a repaired device "
                                      "passes validation",
           t}};
}

std::vector<Action> Hierarchy::on_repaired(uint32_t device, double t) {
  ++traffic_.group_calls;
  lend(device, home_group(device));  // a lent device goes home for repair
  return emit(lift(home_group(device), group(home_group(device)).on_repaired(device, t)));
}

DeviceState Hierarchy::state(uint32_t device) const { return owner(device).state(device); }

std::optional<uint32_t> Hierarchy::device_of(uint32_t rank) const {
  if (rank >= world_size_ || first_.empty()) return std::nullopt;
  const auto g =
      static_cast<uint32_t>(std::upper_bound(first_.begin(), first_.end(), rank) - first_.begin() - 1);
  return groups_[g] ? groups_[g]->device_of(rank - first_[g]) : std::nullopt;
}

std::optional<uint32_t> Hierarchy::rank_of(uint32_t device) const {
  const auto r = owner(device).rank_of(device);
  if (!r) return std::nullopt;
  return *r + offset(owner_group(device));
}

std::vector<uint32_t> Hierarchy::spares() const {
  std::vector<uint32_t> out;
  for (const auto& g : groups_) {
    if (!g) continue;
    auto part = g->spares();
    out.insert(out.end(), part.begin(), part.end());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<uint32_t> Hierarchy::pending_migration(uint32_t device) const {
  return owner(device).pending_migration(device);
}

}  // namespace sigma::scheduler
