#include "engine.hpp"

#include "contained_job.hpp"
#include "draws.hpp"
#include "exact_rounds.hpp"
#include "tiers.hpp"

#include <sigma/error.hpp>
#include <sigma/health.hpp>
#include <sigma/scheduler.hpp>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <queue>
#include <set>

namespace sigma::sim::detail {
namespace {

using scheduler::Action;
using scheduler::DeviceState;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kEps = 1e-9;

struct Event {
  enum class Kind {
    failure,
    precursor,
    sample,
    repaired,
    sdc_found,
    warning,
    calm,
    degrade,         // a straggler (category 0) or slow link (1) begins
    degrade_sample,  // the degraded device's next step or telemetry, for its Monitor
    clear,           // the degradation that began at `progress` ends
    contained,       // a timer of contained recovery's (category: Timer::Kind, device: its id)
  } kind;
  double t = 0;
  uint64_t seq = 0;
  uint32_t device = 0;
  uint32_t incarnation = 0;
  size_t category = 0;
  double progress = 0;  // sdc_found: the job's progress when the corruption began
  uint64_t tag = 0;     // contained: the timer's tag
};

struct Later {
  bool operator()(const Event& a, const Event& b) const { return a.t != b.t ? a.t > b.t : a.seq > b.seq; }
};

enum class Phase { detection, restart, restore, checkpoint, migration };

struct Stall {
  Phase phase;
  double left_s;
  bool round = false;  // a stage of the exact round (its end moves the round on)
};

// Where an accelerator's time goes, from its scheduler state.
enum class Bucket { job, spare, out };

Bucket bucket_of(DeviceState s) {
  if (s == DeviceState::in_use || s == DeviceState::suspect) return Bucket::job;
  if (s == DeviceState::available) return Bucket::spare;
  return Bucket::out;
}

// A precursor episode: the device's telemetry drifting towards its failure,
// read by a health Monitor of its own.
struct Episode {
  std::unique_ptr<health::Monitor> monitor;
  double start_s = 0, fail_s = 0;
  bool memory = false;  // an HBM/SRAM category: corrected ECC errors climb too
  uint64_t ecc = 0;
};

// A straggler or slow link on a device: how much it slows the job, and the
// health Monitor that watches it when the policy acts on warnings.
struct Degraded {
  double factor = 1;
  bool link = false;
  double since_s = 0;
  std::unique_ptr<health::Monitor> monitor;
  uint64_t samples = 0;
};

class PolicySim {
 public:
  PolicySim(const Scenario& s, const Policy& p);
  PolicyResult run();

 private:
  void push(Event e);
  void draw_next(uint32_t device);
  void apply(const std::vector<Action>& actions);
  void refresh(uint32_t device);
  void advance(double t);
  bool running() const { return stalls_.empty() && !job_paused(); }
  // The scheduler's pause stops the job, unless contained recovery goes on
  // without the replica that waits for a device.
  bool job_paused() const { return sched_.paused() && !(contained_ && !contained_->exact()); }
  double pace() const { return contained_ ? contained_->pace() : 1.0; }
  double next_internal() const;
  void internal();
  void checkpoint_due();
  void on_event(const Event& e);
  void on_failure(const Event& e);
  void hardware_fault(const std::vector<uint32_t>& devices, const std::string& reason);
  checkpoint::ReplicaPlacement placement();
  void note_move(const Action& a);
  std::optional<runtime::RestoreTier> job_fault(const std::vector<uint32_t>& ranks, bool everyone,
                                                const std::string& cause, double detect_s,
                                                double since_progress);
  void stall_over(const Stall& st);
  void back_at_reached_step();
  void to_repair(uint32_t device);
  void on_sample(const Event& e);
  void on_warning(uint32_t device, const std::string& why);
  void on_degrade(const Event& e);
  void on_degrade_sample(const Event& e);
  void update_slowdown();
  // Contained recovery (the runtime's machine, contained_job.hpp).
  bool contained_fault(const std::vector<uint32_t>& ranks, bool hung, bool device_gone,
                       const std::string& cause, double detect_s);
  void take(const Effects& e);
  void redo_step();
  void contained_due();
  void contained_moves();
  uint64_t step_of(double progress) const { return static_cast<uint64_t>(std::floor(progress / s_.step_s)); }
  // The progress at the last step boundary the job reached (at one: there).
  double last_boundary() const { return std::floor(progress_ / s_.step_s + 1e-6) * s_.step_s; }
  double hang_detect_s() const;

  const Scenario& s_;
  const Policy& p_;
  const double horizon_;
  const SparePool pool_;
  scheduler::Scheduler sched_;
  PolicyResult r_;
  std::priority_queue<Event, std::vector<Event>, Later> queue_;
  uint64_t seq_ = 0;
  double now_ = 0;
  double progress_ = 0;  // job seconds of training kept so far
  std::deque<Stall> stalls_;
  std::vector<double> snapshots_;  // progress at each kept snapshot (the last two)
  std::vector<double> disk_;       // progress at each committed disk checkpoint
  double next_snapshot_ = kInf, next_disk_ = kInf;
  std::vector<uint32_t> incarnation_;
  std::vector<double> installed_;
  std::vector<DeviceState> state_;
  std::vector<bool> in_repair_, migrated_;
  // Rank r's node at r, kept as the scheduler's actions move ranks (the
  // scheduler's own map is too slow to read whole at every fault); rebuilt
  // from it when a shrink or a resume renumbers the ranks.
  std::vector<uint32_t> node_of_rank_;
  bool nodes_stale_ = true;
  uint64_t placements_ = 0;
  uint64_t n_job_ = 0, n_spare_ = 0, n_out_ = 0;
  std::map<uint32_t, Episode> episodes_;
  std::map<uint32_t, Degraded> degraded_;
  std::set<uint32_t> failing_;  // warned or failed: hardware to repair, whatever else it has
  double slow_ = 1;             // the job's pace: its slowest degraded device's factor
  double snapshot_every_;       // the policy's, or Young and Daly's from the model
  std::vector<uint64_t> per_category_;
  std::optional<ContainedJob> contained_;  // the policy's replicas, when it contains faults
  bool exact_open_ = false;                // an exact round contained recovery fell back to
  ExactRounds rounds_;                     // the exact rounds, as the agent keeps them
  // The round in progress: what its assignment restores, what its stages cost.
  struct Assignment {
    uint64_t index = 0;
    runtime::RestoreTier tier = runtime::RestoreTier::none;
    double restart_s = 0, restore_s = 0;
  } assignment_;
  double boundary_due_ = kInf;             // progress at the boundary a pending migration waits for
  std::map<uint32_t, std::string> moves_;  // contained: warned devices whose replica cannot stop yet, and why
};

scheduler::Config sched_config(const Scenario& s, const Policy& p, uint32_t spares) {
  scheduler::Config c;
  c.world_size = s.accelerators - spares;
  c.proactive_migration = p.migrate_on_warning;
  c.groups = s.groups;
  c.allow_shrink = p.allow_shrink;
  c.min_world_size = p.allow_shrink ? std::clamp(p.min_world, 1u, c.world_size) : c.world_size;
  return c;
}

// Young and Daly: the interval that balances the stall of taking a
// snapshot against the work a failure throws away, sqrt(2 x stall x MTBF),
// with the job's MTBF at the model's constant-rate equivalent.
// Under contained recovery only a rollback restores a snapshot: the
// failures that need one are the silent corruptions (the rare exact
// fallback left out).
double snapshot_interval(const Scenario& s, const Policy& p) {
  if (!p.snapshot_from_model) return p.snapshot_every_s;
  const double share = p.replica_size > 0 ? scope_share(s.failures, Scope::silent) : 1.0;
  const double per_s =
      share * s.accelerators * s.failures.per_accelerator_day * s.failures.rate_multiplier / 86400.0;
  if (!(per_s > 0) || !(p.snapshot_stall_s > 0)) return p.snapshot_every_s;
  const double steps = std::round(std::sqrt(2 * p.snapshot_stall_s / per_s) / s.step_s);
  return std::max(1.0, steps) * s.step_s;
}

PolicySim::PolicySim(const Scenario& s, const Policy& p)
    : s_(s),
      p_(p),
      horizon_(s.days * 86400.0),
      pool_(spare_pool(s, p)),
      sched_(sched_config(s, p, pool_.spares)),
      snapshot_every_(snapshot_interval(s, p)) {
  const uint32_t n = s.accelerators;
  incarnation_.assign(n, 0);
  installed_.assign(n, 0);
  state_.assign(n, DeviceState::fresh);
  in_repair_.assign(n, false);
  migrated_.assign(n, false);
  per_category_.assign(s.failures.categories.size(), 0);
  n_out_ = n;
  r_.policy = p.name;
  r_.world = sched_.world_size();
  r_.spares = n - r_.world;
  r_.spare_risk = pool_.shortfall_risk;
  if (p.replica_size > 0)
    contained_.emplace(r_.world, p.replica_size,
                       ContainedCosts{p.comm_fixed_s, p.comm_per_member_s, p.handoff_s, p.spare_ready_s});
}

void PolicySim::push(Event e) {
  e.seq = seq_++;
  queue_.push(e);
}

void PolicySim::draw_next(uint32_t d) {
  const auto f = draw_failure(s_.failures, installed_[d], now_, horizon_, s_.seed, d, incarnation_[d]);
  if (!f) return;
  push({Event::Kind::failure, f->at_s, 0, d, incarnation_[d], f->category, 0});
  const bool watched = p_.migrate_on_warning && f->precursor;
  const double lead = s_.failures.precursor_lead_min * 60.0;
  if (watched && f->at_s - lead >= now_)
    push({Event::Kind::precursor, f->at_s - lead, 0, d, incarnation_[d], f->category, 0});
}

void PolicySim::refresh(uint32_t d) {
  if (d == scheduler::kNone) return;
  const DeviceState now = sched_.state(d);
  auto count = [&](DeviceState s, int by) {
    const Bucket b = bucket_of(s);
    uint64_t& c = b == Bucket::job ? n_job_ : b == Bucket::spare ? n_spare_ : n_out_;
    c = static_cast<uint64_t>(static_cast<int64_t>(c) + by);
  };
  count(state_[d], -1);
  count(now, +1);
  state_[d] = now;
}

// Keeps the per-bucket counts in step with the scheduler and sends what it
// cordoned to repair.
void PolicySim::apply(const std::vector<Action>& actions) {
  for (const Action& a : actions) {
    if (s_.record_decisions)
      r_.decisions.push_back({now_, scheduler::action_name(a.kind), a.device, a.rank, a.to_device, a.tier});
    refresh(a.device);
    refresh(a.to_device);
    note_move(a);
    const bool moved = a.kind == Action::Kind::replace || a.kind == Action::Kind::assign;
    if (moved && contained_ && a.rank < r_.world && contained_->out(a.rank))
      take(contained_->replaced(a.rank, now_));
    if (a.kind == Action::Kind::migrate) {
      ++r_.migrations;
      if (degraded_.count(a.device)) ++r_.degradations_moved;
      migrated_[a.device] = true;
      stalls_.push_back({Phase::migration, p_.migrate_s});
    }
    if (a.kind == Action::Kind::pause) ++r_.pauses;
    if (a.kind == Action::Kind::cordon) to_repair(a.device);
  }
  if (!degraded_.empty()) update_slowdown();
}

// The job's pace is its slowest stepping device's: a degraded device in a
// replica that is out (contained recovery) does not slow the live ones.
void PolicySim::update_slowdown() {
  slow_ = 1;
  for (const auto& [d, g] : degraded_) {
    if (bucket_of(state_[d]) != Bucket::job) continue;
    if (contained_) {
      const auto rank = sched_.rank_of(d);
      if (rank && *rank < r_.world && contained_->out(*rank)) continue;
    }
    slow_ = std::max(slow_, g.factor);
  }
}

// A cordoned device leaves service: to repair, or, moved away only for a
// straggler or slow link, until the episode is over and it validates again.
void PolicySim::to_repair(uint32_t d) {
  if (in_repair_[d]) return;
  in_repair_[d] = true;
  episodes_.erase(d);
  double back = now_ + s_.failures.repair_hours * 3600.0;
  size_t why = 0;
  if (auto it = degraded_.find(d); it != degraded_.end()) {
    if (!failing_.count(d)) {
      const double hours = it->second.link ? s_.failures.slow_link_hours : s_.failures.straggler_hours;
      back = std::max(now_, it->second.since_s + hours * 3600.0);
      why = 1;
    }
    degraded_.erase(it);
    update_slowdown();
  }
  push({Event::Kind::repaired, back, 0, d, incarnation_[d], why, 0});
}

void PolicySim::advance(double t) {
  const double dt = t - now_;
  if (dt <= 0) return;
  Ledger& l = r_.ledger;
  const double job = static_cast<double>(n_job_) * dt;
  if (job_paused()) {
    l.paused += job;
  } else if (!stalls_.empty()) {
    Stall& st = stalls_.front();
    double* b = st.phase == Phase::detection    ? &l.detection
                : st.phase == Phase::restart    ? &l.restart
                : st.phase == Phase::restore    ? &l.restore
                : st.phase == Phase::checkpoint ? &l.checkpoint
                                                : &l.migration;
    *b += job;
    st.left_s -= dt;
  } else {
    const double kept = pace();  // contained: the live replicas' share
    l.productive += job * kept / slow_;
    l.slow += job * kept * (1 - 1 / slow_);
    l.degraded += job * (1 - kept);
    progress_ += dt * kept / slow_;
  }
  l.spare += static_cast<double>(n_spare_) * dt;
  l.repair += static_cast<double>(n_out_) * dt;
  now_ = t;
}

double PolicySim::next_internal() const {
  if (job_paused()) return kInf;
  if (!stalls_.empty()) return now_ + std::max(0.0, stalls_.front().left_s);
  double next = std::min({next_snapshot_, next_disk_, boundary_due_});
  if (const auto to = rounds_.recomputing_to()) next = std::min(next, static_cast<double>(*to) * s_.step_s);
  if (contained_)
    if (const auto step = contained_->next_step())
      next = std::min(next, static_cast<double>(*step) * s_.step_s);
  return now_ + std::max(0.0, (next - progress_) * slow_ / pace());
}

void PolicySim::internal() {
  if (!stalls_.empty()) {
    const Stall st = stalls_.front();
    stalls_.pop_front();
    stall_over(st);
    if (stalls_.empty() && exact_open_) {  // the exact round is over: every replica steps again
      exact_open_ = false;
      contained_->exact_done(now_);
    }
    return;
  }
  back_at_reached_step();
  checkpoint_due();
  if (progress_ + kEps >= boundary_due_) {
    boundary_due_ = kInf;
    if (contained_ && contained_->replicas() > 1)
      contained_moves();
    else
      apply(sched_.at_step_boundary(step_of(progress_ + kEps), now_));
  }
  contained_due();
}

// A hung collective: by the agent's step watchdog's rule (step_watchdog.hpp),
// found step_timeout_s after the last step completed -- the time the job
// has spent in its step so far counts -- else after the policy's constant.
double PolicySim::hang_detect_s() const {
  if (!(p_.step_timeout_s > 0)) return p_.hang_detect_s;
  const double in_step_s = (progress_ - last_boundary()) * slow_ / pace();
  return std::max(0.0, p_.step_timeout_s - in_step_s);
}

// The exact round moves on as its stages end: the abort and re-form (the
// assignment is out), the restore (every rank has joined).
void PolicySim::stall_over(const Stall& st) {
  if (!st.round) return;
  if (st.phase == Phase::restart) rounds_.assigned(now_, assignment_.index, assignment_.tier);
  if (st.phase == Phase::restore) {
    rounds_.rejoined(now_, assignment_.restart_s, assignment_.restore_s);
    back_at_reached_step();  // nothing to recompute
  }
}

void PolicySim::back_at_reached_step() {
  if (const auto to = rounds_.recomputing_to();
      to && progress_ + kEps >= static_cast<double>(*to) * s_.step_s)
    rounds_.back(now_);
}

void PolicySim::checkpoint_due() {
  if (progress_ + kEps >= next_snapshot_) {
    snapshots_.push_back(progress_);
    if (snapshots_.size() > 2) snapshots_.erase(snapshots_.begin());
    next_snapshot_ = progress_ + snapshot_every_;
    if (p_.snapshot_stall_s > 0) stalls_.push_back({Phase::checkpoint, p_.snapshot_stall_s});
  }
  if (progress_ + kEps >= next_disk_) {
    disk_.push_back(progress_);
    next_disk_ = progress_ + p_.disk_every_s;
    if (p_.disk_stall_s > 0) stalls_.push_back({Phase::checkpoint, p_.disk_stall_s});
  }
}

void PolicySim::on_event(const Event& e) {
  switch (e.kind) {
    case Event::Kind::failure:
      on_failure(e);
      break;
    case Event::Kind::precursor:
      if (e.incarnation != incarnation_[e.device] || in_repair_[e.device]) break;
      episodes_[e.device] = {std::make_unique<health::Monitor>(), e.t,
                             e.t + s_.failures.precursor_lead_min * 60.0,
                             s_.failures.categories[e.category].name.find("memory") != std::string::npos, 0};
      episodes_[e.device].monitor->add_device(e.device);
      push({Event::Kind::sample, e.t, 0, e.device, e.incarnation, e.category, 0});
      break;
    case Event::Kind::sample:
      on_sample(e);
      break;
    case Event::Kind::repaired:  // category 1: back after a degradation, not a repair
      in_repair_[e.device] = false;
      migrated_[e.device] = false;
      failing_.erase(e.device);
      ++incarnation_[e.device];
      if (e.category == 0) installed_[e.device] = now_;  // new hardware: its age starts again
      apply(sched_.on_repaired(e.device, now_));
      apply(
          sched_.validation_done(e.device, true, e.category == 0 ? "repaired" : "degradation cleared", now_));
      draw_next(e.device);
      break;
    case Event::Kind::warning:
      if (!in_repair_[e.device]) on_warning(e.device, "replayed warning");
      break;
    case Event::Kind::calm:
      if (!in_repair_[e.device]) apply(sched_.on_calm(e.device, now_));
      break;
    case Event::Kind::degrade:
      on_degrade(e);
      break;
    case Event::Kind::degrade_sample:
      on_degrade_sample(e);
      break;
    case Event::Kind::clear:
      if (auto it = degraded_.find(e.device); it != degraded_.end() && it->second.since_s == e.progress) {
        degraded_.erase(it);
        update_slowdown();
      }
      break;
    case Event::Kind::contained:
      take(contained_->timer({e.t, static_cast<Timer::Kind>(e.category), e.device, e.tag}, step_of(progress_),
                             now_));
      break;
    case Event::Kind::sdc_found: {
      // The guardrails (or, without them, the loss curve) show the
      // corruption: roll back to state from before it.
      std::vector<uint32_t> rank;
      if (auto r = sched_.rank_of(e.device)) rank.push_back(*r);
      job_fault(rank, p_.full_restart || rank.empty(), "silent data corruption", 0, e.progress);
      if (!p_.full_restart && bucket_of(state_[e.device]) == Bucket::job)
        apply(sched_.on_fault(e.device, "silent data corruption", true, now_));
      break;
    }
  }
}

void PolicySim::on_failure(const Event& e) {
  const uint32_t d = e.device;
  if (e.incarnation != incarnation_[d]) return;  // a draw of an installation since repaired
  if (in_repair_[d]) {
    if (migrated_[d]) ++r_.averted;  // it failed where the job no longer was
    return;
  }
  const Category& c = s_.failures.categories[e.category];
  ++r_.failures;
  ++per_category_[e.category];
  episodes_.erase(d);
  failing_.insert(d);  // whatever else it had, it goes to repair now
  const bool in_job = bucket_of(state_[d]) == Bucket::job;
  switch (c.scope) {
    case Scope::device:
      hardware_fault({d}, c.name);
      break;
    case Scope::node: {
      std::vector<uint32_t> node;
      const uint32_t first = d / s_.per_node * s_.per_node;
      for (uint32_t x = first; x < std::min(first + s_.per_node, s_.accelerators); ++x)
        if (!in_repair_[x]) node.push_back(x);
      hardware_fault(node, c.name);
      break;
    }
    case Scope::software:
    case Scope::hang:
      if (in_job) {
        std::vector<uint32_t> rank;
        if (auto r = sched_.rank_of(d)) rank.push_back(*r);
        const bool hang = c.scope == Scope::hang;
        const double detect_s = hang ? hang_detect_s() : p_.crash_detect_s;
        if (!contained_fault(rank, hang, false, c.name, detect_s))
          job_fault(rank, p_.full_restart, c.name, detect_s, -1);
      }
      break;
    case Scope::silent:
      if (in_job && running()) {
        push({Event::Kind::sdc_found, now_ + p_.sdc_detect_s, 0, d, incarnation_[d], e.category, progress_});
      }
      break;
  }
}

// Accelerators that died: the scheduler replaces, pauses or cordons; the
// job restores from what the planner finds.
void PolicySim::hardware_fault(const std::vector<uint32_t>& devices, const std::string& reason) {
  std::vector<uint32_t> ranks;
  for (uint32_t d : devices)
    if (auto r = sched_.rank_of(d)) ranks.push_back(*r);
  std::sort(ranks.begin(), ranks.end());
  const bool job_hit = !ranks.empty();
  // Contained: the state comes from a live peer, nothing from memory or disk.
  const bool memory_ok = job_hit && (contained_fault(ranks, false, true, reason, p_.crash_detect_s) ||
                                     job_fault(ranks, p_.full_restart, reason, p_.crash_detect_s, -1) ==
                                         runtime::RestoreTier::memory);
  for (uint32_t d : devices) {
    if (!in_repair_[d]) apply(sched_.on_fault(d, reason, memory_ok, now_));  // cordons: repair starts
  }
}

// A fault of `ranks` under contained recovery: their replica stops, the
// others step on (or the machine falls back to the exact round). False
// when the policy does not contain faults or an exact round runs: the
// caller takes the exact path, which a fault during the round joins.
bool PolicySim::contained_fault(const std::vector<uint32_t>& ranks, bool hung, bool device_gone,
                                const std::string& cause, double detect_s) {
  if (!contained_ || contained_->exact() || ranks.empty()) return false;
  take(contained_->fault(ranks, hung, device_gone, cause, detect_s, step_of(progress_), now_));
  return true;
}

// What the contained machine's actions cost the job.
void PolicySim::take(const Effects& e) {
  r_.contained += e.contained;
  r_.rejoins += e.rejoins;
  for (const Timer& t : e.timers)
    push({Event::Kind::contained, t.at_s, 0, t.id, 0, static_cast<size_t>(t.kind), 0, t.tag});
  if (e.exact) {
    ++r_.exact_fallbacks;
    std::vector<uint32_t> ranks = e.exact_ranks;
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    job_fault(ranks, false, e.exact_cause, e.detect_s, -1);
    exact_open_ = true;
    return;
  }
  if (e.redo_step) redo_step();
  if (e.detect_s > 0) stalls_.push_back({Phase::detection, e.detect_s});
  if (e.reform_s > 0) stalls_.push_back({Phase::restart, e.reform_s});
  if (!degraded_.empty()) update_slowdown();  // a replica out or back
}

// The live set's step in flight broke with the replica that left: it runs
// again over the re-formed groups.
void PolicySim::redo_step() {
  const double back_to = last_boundary();  // at a boundary: nothing in flight
  const double lost = progress_ - back_to;
  if (!(lost > 0)) return;
  r_.ledger.productive -= lost * sched_.world_size();
  r_.ledger.lost_work += lost * sched_.world_size();
  progress_ = back_to;
  std::erase_if(snapshots_, [&](double x) { return x > back_to + kEps; });
  std::erase_if(disk_, [&](double x) { return x > back_to + kEps; });
}

// The live set reached a step boundary the contained machine waits for.
void PolicySim::contained_due() {
  if (!contained_) return;
  const auto step = contained_->next_step();
  if (!step || progress_ + kEps < static_cast<double>(*step) * s_.step_s) return;
  take(contained_->at_step(*step, now_));
}

// Where the memory tier keeps each rank's replicas now: as the runtime
// places them, across the nodes of the ranks' devices, or on the ring.
checkpoint::ReplicaPlacement PolicySim::placement() {
  if (!p_.replicas_across_nodes)
    return checkpoint::ReplicaPlacement::across(std::vector<uint32_t>(sched_.world_size(), 0), p_.replicas);
  if (nodes_stale_ || node_of_rank_.size() != sched_.world_size()) {
    node_of_rank_.assign(sched_.world_size(), 0);
    for (uint32_t r = 0; r < node_of_rank_.size(); ++r)
      node_of_rank_[r] = sched_.device_of(r).value_or(0) / s_.per_node;
    nodes_stale_ = false;
  }
  // The kept copy must be what a fresh read gives: checked at every fault
  // of a small cluster, every 64th of a large one.
  if (node_of_rank_.size() <= 4096 || ++placements_ % 64 == 0)
    for (uint32_t r = 0; r < node_of_rank_.size(); ++r)
      if (node_of_rank_[r] != sched_.device_of(r).value_or(0) / s_.per_node)
        throw Error(Code::internal, "sim: rank " + std::to_string(r) + "'s node was not kept");
  return checkpoint::ReplicaPlacement::across(node_of_rank_, p_.replicas);
}

// A rank that moved to another device moves to its node.
void PolicySim::note_move(const Action& a) {
  using K = Action::Kind;
  const bool to = a.kind == K::migrate || a.kind == K::replace;
  if ((a.kind == K::assign || to) && a.rank < node_of_rank_.size() && !nodes_stale_)
    node_of_rank_[a.rank] = (to ? a.to_device : a.device) / s_.per_node;
  else if (a.kind == K::shrink || a.kind == K::resume || a.kind == K::pause || a.kind == K::assign || to)
    nodes_stale_ = true;
}

// The job stops: roll back to what the planner restores, then detection,
// restart and restore stall it. `since` >= 0: state newer than that
// progress is corrupt and may not be restored. Returns the tier restored
// (nullopt: the state was lost, the job starts over).
std::optional<runtime::RestoreTier> PolicySim::job_fault(const std::vector<uint32_t>& ranks, bool everyone,
                                                         const std::string& cause, double detect_s,
                                                         double since) {
  rounds_.fault(cause, now_, detect_s, step_of(progress_));
  const double limit = since >= 0 ? since : progress_;
  std::vector<uint64_t> snaps, disk;
  for (double x : snapshots_)
    if (x <= limit + kEps) snaps.push_back(step_of(x));
  for (double x : disk_)
    if (x <= limit + kEps) disk.push_back(step_of(x));
  const bool memory = p_.memory_tier && !everyone;
  const TierChoice c =
      choose_restore(memory ? placement() : checkpoint::ReplicaPlacement::ring(sched_.world_size()), ranks,
                     !memory, memory ? snaps : std::vector<uint64_t>{}, disk, step_of(progress_));
  double back_to = 0;
  using runtime::RestoreTier;
  if (c.tier == RestoreTier::memory) {
    ++r_.restores_memory;
    for (double x : snapshots_)
      if (step_of(x) == c.step) back_to = x;
  } else if (c.tier == RestoreTier::disk) {
    ++r_.restores_disk;
    for (double x : disk_)
      if (step_of(x) == c.step) back_to = x;
  }
  const double lost = std::max(0.0, progress_ - back_to);
  r_.ledger.productive -= lost * sched_.world_size();
  r_.ledger.lost_work += lost * sched_.world_size();
  progress_ = back_to;
  if (boundary_due_ < kInf) boundary_due_ = back_to + s_.step_s;
  std::erase_if(snapshots_, [&](double x) { return x > back_to + kEps; });
  std::erase_if(disk_, [&](double x) { return x > back_to + kEps; });
  next_snapshot_ = p_.memory_tier ? back_to + snapshot_every_ : kInf;
  next_disk_ = back_to + p_.disk_every_s;
  // A round already under way starts its stages over with one more casualty.
  const double restart_s = everyone ? p_.restart_s : p_.replace_s;
  const double restore_s = c.tier == RestoreTier::memory ? p_.memory_restore_s
                           : c.tier == RestoreTier::disk ? p_.disk_restore_s
                                                         : 0;
  assignment_ = {c.step, c.tier.value_or(RestoreTier::none), restart_s, restore_s};
  stalls_.clear();
  stalls_.push_back({Phase::detection, detect_s, true});
  stalls_.push_back({Phase::restart, restart_s, true});
  stalls_.push_back({Phase::restore, restore_s, true});
  return c.tier;
}

// One telemetry sample of a drifting device, read by the real Monitor; the
// first warning goes to the scheduler and ends the episode.
void PolicySim::on_sample(const Event& e) {
  auto it = episodes_.find(e.device);
  if (it == episodes_.end() || e.incarnation != incarnation_[e.device]) return;
  Episode& ep = it->second;
  const double frac = std::clamp((now_ - ep.start_s) / (ep.fail_s - ep.start_s), 0.0, 1.0);
  hal_telemetry_sample_t v[2]{};
  v[0].id = HAL_FIELD_TEMPERATURE_C;
  v[0].status = HAL_OK;
  v[0].type = HAL_VALUE_F64;
  v[0].value.f64 = 70.0 + 30.0 * frac;  // to 100 °C at the failure
  size_t n = 1;
  if (ep.memory) {
    // Corrected errors climbing to 120 a minute by the failure.
    ep.ecc += static_cast<uint64_t>(120.0 * frac * s_.telemetry_period_s / 60.0);
    v[1].id = HAL_FIELD_ECC_CORRECTABLE;
    v[1].status = HAL_OK;
    v[1].type = HAL_VALUE_U64;
    v[1].value.u64 = ep.ecc;
    n = 2;
  }
  ep.monitor->observe_telemetry(e.device, now_, v, n);
  for (const health::Event& h : ep.monitor->evaluate(now_)) {
    if (h.kind == health::Event::Kind::state_changed && h.to != health::State::healthy) {
      const std::string why = h.warning.message.empty() ? health::state_name(h.to) : h.warning.message;
      episodes_.erase(it);
      failing_.insert(e.device);
      on_warning(e.device, why);
      return;
    }
  }
  if (now_ + s_.telemetry_period_s < ep.fail_s)
    push({Event::Kind::sample, now_ + s_.telemetry_period_s, 0, e.device, e.incarnation, e.category, 0});
}

// A device starts to straggle or its link slows: the job slows with it
// until the episode clears, unless the policy, warned by the Monitor,
// moves the rank away first.
void PolicySim::on_degrade(const Event& e) {
  const uint32_t d = e.device;
  if (in_repair_[d] || degraded_.count(d)) return;
  const FailureModel& f = s_.failures;
  const bool link = e.category == 1;
  Degraded& g = degraded_[d];
  g.factor = link ? f.slow_link_slowdown : f.straggler_slowdown;
  g.link = link;
  g.since_s = now_;
  if (bucket_of(state_[d]) == Bucket::job) ++r_.degradations;
  update_slowdown();
  push(
      {Event::Kind::clear, now_ + (link ? f.slow_link_hours : f.straggler_hours) * 3600.0, 0, d, 0, 0, now_});
  if (!p_.migrate_on_warning) return;
  health::Config watch;
  watch.straggler_min_steps = p_.straggler_min_steps;
  g.monitor = std::make_unique<health::Monitor>(watch);
  g.monitor->add_device(d);
  for (uint32_t k = 1; k <= 4; ++k) g.monitor->add_device(s_.accelerators + k);  // healthy peers
  push({Event::Kind::degrade_sample, now_, 0, d, 0, e.category, now_});
}

// One step (a straggler: its time and four healthy peers') or one
// telemetry sample (a slow link: link errors climbing at 120 a minute)
// for the real Monitor; its first warning goes to the scheduler.
void PolicySim::on_degrade_sample(const Event& e) {
  auto it = degraded_.find(e.device);
  if (it == degraded_.end() || it->second.since_s != e.progress || !it->second.monitor) return;
  Degraded& g = it->second;
  health::Monitor& m = *g.monitor;
  ++g.samples;
  double next = s_.telemetry_period_s;
  if (g.link) {
    hal_telemetry_sample_t v{};
    v.id = HAL_FIELD_LINK_ERRORS;
    v.status = HAL_OK;
    v.type = HAL_VALUE_U64;
    v.value.u64 = static_cast<uint64_t>(2.0 * (now_ - g.since_s));
    m.observe_telemetry(e.device, now_, &v, 1);
  } else {
    next = s_.step_s * g.factor;
    m.observe_step(e.device, g.samples, next, now_);
    for (uint32_t k = 1; k <= 4; ++k) m.observe_step(s_.accelerators + k, g.samples, s_.step_s, now_);
  }
  for (const health::Event& h : m.evaluate(now_)) {
    if (h.device == e.device && h.kind == health::Event::Kind::state_changed &&
        h.to != health::State::healthy) {
      g.monitor.reset();
      on_warning(e.device, h.warning.message);
      return;
    }
  }
  push({Event::Kind::degrade_sample, now_ + next, 0, e.device, 0, e.category, e.progress});
}

void PolicySim::on_warning(uint32_t d, const std::string& why) {
  apply(sched_.on_warning(d, why, now_));
  if (!sched_.pending_migration(d)) return;
  if (contained_ && contained_->replicas() > 1) moves_[d] = why;
  // The next step boundary the running job reaches (stalls and its pace
  // decide when).
  boundary_due_ = std::min(boundary_due_, last_boundary() + s_.step_s);
}

// As the agent migrates under contained recovery, as the live replicas
// finish a step: the warned device's replica alone stops, its spare takes
// the rank and the replica rejoins from a live peer while the others step
// on. It waits while that cannot be (its replica is out, or no other one
// steps), to the next step: no stop of the world for a device that works.
void PolicySim::contained_moves() {
  for (auto it = moves_.begin(); it != moves_.end();) {
    const uint32_t d = it->first;
    const auto rank = sched_.rank_of(d);
    if (!rank || in_repair_[d] || !sched_.pending_migration(d)) {
      it = moves_.erase(it);
      continue;
    }
    if (!contained_->contains(*rank)) {
      ++it;
      continue;
    }
    const std::string cause = "migration before it fails: " + it->second;
    it = moves_.erase(it);
    ++r_.migrations;
    if (degraded_.count(d)) ++r_.degradations_moved;
    migrated_[d] = true;
    contained_fault({*rank}, false, true, cause, 0);
    apply(sched_.on_fault(d, cause, true, now_));
  }
  if (!moves_.empty()) boundary_due_ = last_boundary() + s_.step_s;
}

PolicyResult PolicySim::run() {
  for (uint32_t d = 0; d < s_.accelerators; ++d) {
    apply(sched_.add_device(d, 0));
    apply(sched_.validation_done(d, true, "installed", 0));
  }
  apply(sched_.start(0));
  next_snapshot_ = p_.memory_tier ? snapshot_every_ : kInf;
  next_disk_ = p_.disk_every_s;
  for (uint32_t d = 0; d < s_.accelerators; ++d) draw_next(d);
  for (const DegradeDraw& g : draw_degradations(s_))
    push({Event::Kind::degrade, g.at_s, 0, g.device, 0, g.link ? size_t{1} : size_t{0}, 0});
  for (const ScriptedFailure& f : s_.script) {
    if (f.health == "straggler" || f.health == "slow_link") {
      push(
          {Event::Kind::degrade, f.at_s, 0, f.device, 0, f.health == "slow_link" ? size_t{1} : size_t{0}, 0});
      continue;
    }
    if (!f.health.empty()) {
      push({f.health == "warning" ? Event::Kind::warning : Event::Kind::calm, f.at_s, 0, f.device, 0, 0, 0});
      continue;
    }
    size_t c = 0;
    while (s_.failures.categories[c].name != f.category) ++c;  // run() checked the name
    push({Event::Kind::failure, f.at_s, 0, f.device, 0, c, 0});
    const double lead = s_.failures.precursor_lead_min * 60.0;
    if (f.precursor && p_.migrate_on_warning && f.at_s - lead >= 0)
      push({Event::Kind::precursor, f.at_s - lead, 0, f.device, 0, c, 0});
  }
  while (true) {
    const double t_ext = queue_.empty() ? horizon_ : std::min(queue_.top().t, horizon_);
    const double t_int = next_internal();
    const double t = std::min(t_ext, t_int);
    advance(t);
    if (t >= horizon_) break;
    ++r_.events;
    if (t_int <= t_ext) {
      internal();
    } else {
      const Event e = queue_.top();
      queue_.pop();
      on_event(e);
    }
  }
  const double total = static_cast<double>(s_.accelerators) * horizon_;
  r_.utilization = std::max(0.0, r_.ledger.productive) / total;
  r_.ettr = progress_ / horizon_;
  r_.incidents = rounds_.rounds();
  r_.joined = rounds_.joined();
  r_.recovery = rounds_.recovery();
  // Every fault that hit the job interrupted it, one that joined a round too.
  const uint64_t hits = r_.incidents + r_.joined;
  r_.mtti_h = hits ? horizon_ / 3600.0 / static_cast<double>(hits) : 0;
  if (contained_) r_.events += contained_->calls();
  for (size_t i = 0; i < per_category_.size(); ++i)
    r_.by_category.emplace_back(s_.failures.categories[i].name, per_category_[i]);
  return r_;
}

}  // namespace

PolicyResult simulate(const Scenario& s, const Policy& p) { return PolicySim(s, p).run(); }

}  // namespace sigma::sim::detail
