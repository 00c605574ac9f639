// Contained recovery in the simulator (contained_job.hpp).
#include "contained_job.hpp"

#include <algorithm>

namespace sigma::sim::detail {
namespace {

namespace ct = runtime::agent::contained;

std::vector<uint32_t> replica_of(uint32_t world, uint32_t size) {
  std::vector<uint32_t> of(world);
  for (uint32_t r = 0; r < world; ++r) of[r] = r / size;
  return of;
}

}  // namespace

void Effects::add(const Effects& e) {
  detect_s = std::max(detect_s, e.detect_s);
  reform_s += e.reform_s;
  redo_step = redo_step || e.redo_step;
  if (e.exact && !exact) exact_cause = e.exact_cause;
  exact = exact || e.exact;
  exact_ranks.insert(exact_ranks.end(), e.exact_ranks.begin(), e.exact_ranks.end());
  timers.insert(timers.end(), e.timers.begin(), e.timers.end());
  contained += e.contained;
  rejoins += e.rejoins;
}

ContainedJob::ContainedJob(uint32_t world, uint32_t replica_size, const ContainedCosts& costs)
    : machine_(replica_of(world, replica_size), ct::Options{}), size_(replica_size), costs_(costs) {}

double ContainedJob::pace() const {
  if (machine_.exact()) return 1;
  return static_cast<double>(machine_.live().size()) / machine_.replicas();
}

Effects ContainedJob::fault(const std::vector<uint32_t>& ranks, bool hung, bool device_gone,
                            const std::string& cause, double detect_s, uint64_t step, double t) {
  Effects out;
  ++calls_;
  machine_.step_done(step, t);
  const bool was_exact = machine_.exact();
  const auto kind = hung          ? ct::Machine::FaultKind::hung
                    : device_gone ? ct::Machine::FaultKind::device_lost
                                  : ct::Machine::FaultKind::process_ended;
  for (uint32_t rank : ranks) {
    ++calls_;
    if (!machine_.exact()) lost_[rank / size_].insert(rank);
    Effects e = apply(machine_.fault(rank, kind, cause, t), t);
    // A process that ends where its device still works restarts there.
    if (!device_gone && !machine_.exact())
      e.timers.push_back({t + detect_s + costs_.spare_ready_s, Timer::Kind::spare_ready, rank, 0});
    out.add(e);
  }
  if (out.reform_s > 0 || out.exact) out.detect_s = detect_s;
  if (!was_exact && machine_.exact())
    out.exact_ranks.insert(out.exact_ranks.end(), ranks.begin(), ranks.end());
  return out;
}

Effects ContainedJob::replaced(uint32_t rank, double t) {
  Effects out;
  if (!machine_.exact()) out.timers.push_back({t + costs_.spare_ready_s, Timer::Kind::spare_ready, rank, 0});
  return out;
}

Effects ContainedJob::timer(const Timer& timer, uint64_t step, double t) {
  ++calls_;
  machine_.step_done(step, t);  // a hand-off's boundary counts from where the live set is
  if (timer.kind == Timer::Kind::spare_ready) return apply(machine_.spare_ready(timer.id, t), t);
  const auto it = handing_.find(timer.id);
  if (it == handing_.end() || it->second.tag != timer.tag) return {};  // the hand-off was void
  it->second.transferring = false;
  it->second.transferred = true;
  Effects out;
  if (step > it->second.boundary) replay(timer.id, step, t, out);
  return out;
}

// The replica took its state and replays the reduced results streamed since
// the boundary (no forward or backward: assumed instant); its ranks are
// where the live set is.
void ContainedJob::replay(uint32_t replica, uint64_t step, double t, Effects& out) {
  handing_.at(replica).replayed_to = step;
  for (uint32_t rank = replica * size_; rank < (replica + 1) * size_; ++rank) {
    ++calls_;
    out.add(apply(machine_.replayed(rank, step, t), t));
  }
}

Effects ContainedJob::at_step(uint64_t step, double t) {
  ++calls_;
  Effects out = apply(machine_.step_done(step, t), t);
  std::vector<uint32_t> due;
  for (const auto& [q, h] : handing_) due.push_back(q);
  for (uint32_t q : due) {
    const auto it = handing_.find(q);
    if (it == handing_.end()) continue;
    Handing& h = it->second;
    if (h.rejoin_boundary && step >= *h.rejoin_boundary) {
      const uint64_t epoch = *h.rejoin_epoch;
      handing_.erase(it);
      lost_.erase(q);
      ++calls_;
      out.add(apply(machine_.reformed(epoch, t), t));
      out.reform_s += costs_.comm_s(static_cast<uint32_t>(machine_.live().size()));
      ++out.rejoins;
    } else if (!h.transferring && !h.transferred && step >= h.boundary) {
      h.transferring = true;
      out.timers.push_back({t + costs_.comm_s(size_) + costs_.handoff_s, Timer::Kind::transferred, q, h.tag});
    } else if (h.transferred && !h.rejoin_epoch && step > h.boundary) {
      replay(q, step, t, out);
    }
  }
  return out;
}

std::optional<uint64_t> ContainedJob::next_step() const {
  std::optional<uint64_t> next;
  auto keep = [&](uint64_t s) { next = next ? std::min(*next, s) : s; };
  for (const auto& [q, h] : handing_) {
    if (h.rejoin_boundary)
      keep(*h.rejoin_boundary);
    else if (h.transferred)
      keep(std::max(h.boundary, h.replayed_to) + 1);
    else if (!h.transferring)
      keep(h.boundary);
  }
  return next;
}

void ContainedJob::exact_done(double t) {
  ++calls_;
  machine_.exact_done(t);
  handing_.clear();
  lost_.clear();
}

Effects ContainedJob::apply(const ct::Actions& actions, double t) {
  Effects out;
  for (const auto& action : actions) {
    if (const auto* stop = std::get_if<ct::StopRanks>(&action)) {
      handing_.erase(stop->replica);    // a hand-off to it, if one ran, is void
      for (uint32_t r : stop->ranks) {  // they leave their collectives at the abort
        ++calls_;
        out.add(apply(machine_.rank_out(r, t), t));
      }
    } else if (const auto* r = std::get_if<ct::Reform>(&action)) {
      if (!r->boundary) {  // a replica out: the live set re-forms at once
        out.reform_s += costs_.comm_s(static_cast<uint32_t>(r->live.size()));
        out.redo_step = true;
      } else if (!r->rejoin) {
        for (uint32_t q : r->rejoining) {
          Handing h;
          h.boundary = *r->boundary;
          h.tag = ++tags_;
          handing_[q] = h;
        }
      } else {
        for (uint32_t q : r->rejoining) {
          handing_[q].rejoin_epoch = r->epoch;
          handing_[q].rejoin_boundary = *r->boundary;
        }
      }
    } else if (const auto* x = std::get_if<ct::ExactRound>(&action)) {
      out.exact = true;
      out.exact_cause = x->cause;
      // A replica out: the ranks whose process went hold nothing; a replica
      // that took a hand-off cleared its tier for the state it awaited.
      for (uint32_t q = 0; q < machine_.replicas(); ++q) {
        if (machine_.stage(q) == ct::Stage::healthy) continue;
        if (handing_.count(q)) {
          for (uint32_t rank = q * size_; rank < (q + 1) * size_; ++rank) out.exact_ranks.push_back(rank);
        } else if (const auto it = lost_.find(q); it != lost_.end()) {
          out.exact_ranks.insert(out.exact_ranks.end(), it->second.begin(), it->second.end());
        }
      }
      handing_.clear();
      lost_.clear();
    } else if (const auto* n = std::get_if<ct::Note>(&action)) {
      if (n->entry.value("event", "") == "replica_stopped") ++out.contained;
    }
  }
  return out;
}

}  // namespace sigma::sim::detail
