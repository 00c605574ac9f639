// The worker's side of contained recovery (sigmarun --recovery contained;
// the agent's side is agent/contained.hpp). The world is data-parallel
// replicas of one model-parallel group. Each rank holds three
// communicators: the world's (the memory tier's exchange), its replica's
// (the model-parallel group, never touched by another replica's fault) and
// its position's data-parallel group over the live replicas.
//
// A fault stops only its replica. The agent sends the others a Reform at
// once: the control thread aborts their data-parallel (and world)
// communicators, so the step's exchange fails; a vote over the replica
// makes the whole replica see the step as void alike (a step applies
// nothing before its exchange returns), the data-parallel group re-forms
// over the live replicas under the new epoch and the step runs again with
// the micro-batches of the replicas out. While a replica is out the world
// is not whole: snapshots stay with their rank. When the stopped replica's
// ranks are ready (spares in place), a Reform with a boundary tells every
// rank: at the end of that step the world and the data-parallel groups
// re-form over every replica, and the donor replica broadcasts its state
// over each data-parallel group to the rejoining ranks, which start at the
// next step.
//
// Rendezvous prefixes in the store: gen-G/ (the generation's world), gen-G/
// replica-Q/ (a replica's group at the start of a generation), gen-G/e-E/
// world/, gen-G/e-E/replica-Q/ and gen-G/e-E/dp-P/ (an epoch's).
#include "runtime/agent/contained.hpp"
#include "runtime/session_impl.hpp"

#include <numeric>

namespace sigma::runtime {

namespace {

uint32_t place_in(const std::vector<uint32_t>& live, uint32_t replica) {
  const auto at = std::find(live.begin(), live.end(), replica);
  if (at == live.end())
    throw Error(Code::aborted, "runtime: replica " + std::to_string(replica) + " is not in the live set");
  return static_cast<uint32_t>(at - live.begin());
}

std::string replicas_text(const std::vector<uint32_t>& live) {
  std::string s;
  for (uint32_t q : live) s += (s.empty() ? "" : ", ") + std::to_string(q);
  return "[" + s + "]";
}

}  // namespace

void Session::Impl::set_layout(const protocol::Assign& a) {
  contained = !a.replica_of.empty();
  contain_faults = a.contained;
  ReplicaLayout l;
  if (!contained) {
    l.size = a.world;
    l.position = a.rank;
    layout = l;
    return;
  }
  l.count = *std::max_element(a.replica_of.begin(), a.replica_of.end()) + 1;
  l.size = a.world / l.count;
  l.index = a.replica_of.at(a.rank);
  l.position =
      static_cast<uint32_t>(std::count(a.replica_of.begin(), a.replica_of.begin() + a.rank, l.index));
  l.epoch = a.epoch;
  l.live = a.live;
  layout = l;
}

// After an assignment of the world (the start, or an exact round): the
// replica's group and the data-parallel group of the epoch it names.
void Session::Impl::form_groups(uint64_t aborts_before) {
  handoff.reset();
  rejoin.reset();
  end_handoff();
  {
    std::lock_guard<std::mutex> lk(inbox_mu);
    reforms.erase(std::remove_if(reforms.begin(), reforms.end(),
                                 [&](const protocol::Reform& r) { return r.epoch <= layout.epoch; }),
                  reforms.end());
  }
  auto rc = make_comm("gen-" + std::to_string(generation) + "/replica-" + std::to_string(layout.index) + "/",
                      layout.position, layout.size, aborts_before);
  {
    std::lock_guard<std::mutex> lk(comm_mu);
    replica_comm = std::move(rc);
  }
  auto dc = make_comm(epoch_prefix(layout.epoch) + "dp-" + std::to_string(layout.position) + "/",
                      place_in(layout.live, layout.index), static_cast<uint32_t>(layout.live.size()),
                      aborts_before);
  std::lock_guard<std::mutex> lk(comm_mu);
  dp_comm = std::move(dc);
}

// A rank of a stopped replica (a spare that took it, or the rank itself
// once it left its collectives): waits for the hand-off's Reform, forms
// its replica's group and the stream from its donor counterpart, and takes
// the donor's state. Returns the step after the hand-off's boundary, from
// which it replays the donor's exchanges (computing nothing) until the
// rejoin.
uint64_t Session::Impl::join_replica(const protocol::Assign& a, uint64_t aborts_before) {
  const auto t0 = Clock::now();
  rank = a.rank;
  world = a.world;
  generation = a.generation;
  end_handoff();
  {
    std::lock_guard<std::mutex> lk(comm_mu);
    comm.reset();
    replica_comm.reset();
    dp_comm.reset();
  }
  const auto r = next_handoff(a.epoch);
  if (!r) return wait_and_apply();  // a command came first: the job ends, or another assignment
  auto rc = make_comm(epoch_prefix(r->epoch) + "replica-" + std::to_string(layout.index) + "/",
                      layout.position, layout.size, aborts_before);
  {
    std::lock_guard<std::mutex> lk(comm_mu);
    replica_comm = std::move(rc);
  }
  const auto at = std::find(r->rejoining.begin(), r->rejoining.end(), layout.index);
  auto hc = make_comm(epoch_prefix(r->epoch) + "handoff-" + std::to_string(layout.position) + "/",
                      1 + static_cast<uint32_t>(at - r->rejoining.begin()),
                      1 + static_cast<uint32_t>(r->rejoining.size()), aborts_before);
  {
    std::lock_guard<std::mutex> lk(comm_mu);
    handoff_comm = hc;
  }
  const auto t1 = Clock::now();
  tier->clear();
  receiver = std::make_unique<HandoffReceiver>(hc, plugin, collective_timeout());
  receiver->state(state);
  items.restore(false);
  const uint64_t index = *r->boundary + 1;
  stop_after = -1;
  assigned_aborts = aborts_before;
  current_step = static_cast<int64_t>(index);
  ch->send(protocol::encode(protocol::Joined{generation, rank, index, RestoreTier::peer,
                                             std::chrono::duration<double>(t1 - t0).count(), 0,
                                             seconds_since(t1)}));
  ch->send(protocol::encode(protocol::Reformed{r->epoch}));
  return index;
}

// The first hand-off Reform (of `epoch` or later) that rejoins this
// replica; nullopt when a command (a goodbye, a retirement, another
// assignment) or the agent's loss comes first.
std::optional<protocol::Reform> Session::Impl::next_handoff(uint64_t epoch) {
  std::unique_lock<std::mutex> lk(inbox_mu);
  for (;;) {
    while (!reforms.empty()) {
      protocol::Reform r = std::move(reforms.front());
      reforms.pop_front();
      const bool mine = r.boundary && !r.rejoin && r.epoch >= epoch &&
                        std::find(r.rejoining.begin(), r.rejoining.end(), layout.index) != r.rejoining.end();
      if (mine) return r;
    }
    if (!inbox.empty() || agent_gone.load()) return std::nullopt;
    inbox_cv.wait(lk);
  }
}

// The control thread, on a Reform at once: the data-parallel exchange and
// the world's communicator have a replica out. The replica's own group
// goes on (its vote must complete).
void Session::Impl::abort_for_reform() {
  std::shared_ptr<hal::Communicator> c, dc;
  {
    std::lock_guard<std::mutex> lk(comm_mu);
    ++reform_seq;  // under the lock: a group being built sees it or is cancelled
    c = comm;
    dc = dp_comm;
    if (bs) bs->cancel();
  }
  if (c) c->abort();
  if (dc) dc->abort();
}

// At a step's start, every rank of the replica in the same epoch: a Reform
// at once one of them carried out in another path (the last snapshot's
// exchange, a hand-off voided) the others carry out now, so that all
// compute the same micro-batches over the same groups.
void Session::Impl::agree_epoch(uint64_t step) {
  if (!contained) return;
  int64_t v[2] = {static_cast<int64_t>(layout.epoch), -static_cast<int64_t>(layout.epoch)};
  hal::Communicator* rc = nullptr;
  {
    std::lock_guard<std::mutex> lk(comm_mu);
    rc = replica_comm.get();
  }
  if (rc == nullptr) throw Error(Code::aborted, "runtime: no replica group (call join or recover)");
  host_staging().all_reduce(*rc, v, 2, HAL_DTYPE_I64, HAL_REDUCE_MIN, collective_timeout());
  const auto newest = static_cast<uint64_t>(-v[1]);
  if (layout.epoch == newest) return;
  if (!take_reform(step, collective_timeout()) || layout.epoch != newest) {
    throw Error(Code::aborted, "runtime: replica " + std::to_string(layout.index) +
                                   " is split between epochs " + std::to_string(v[0]) + " and " +
                                   std::to_string(newest) + " at step " + std::to_string(step));
  }
}

// Every rank of the replica, alike: whether every one's exchange held.
bool Session::Impl::vote(bool ok) {
  if (!ok) host_staging().release();  // the aborted exchange may still hold the staging buffer
  int32_t v = ok ? 1 : 0;
  hal::Communicator* rc = nullptr;
  {
    std::lock_guard<std::mutex> lk(comm_mu);
    rc = replica_comm.get();
  }
  if (rc == nullptr) throw Error(Code::aborted, "runtime: no replica group (call join or recover)");
  host_staging().all_reduce(*rc, &v, 1, HAL_DTYPE_I32, HAL_REDUCE_MIN, collective_timeout());
  return v == 1;
}

// Waits at most `wait` for a Reform at once (or an abort, a command, the
// agent's loss), then carries it out for `step`, the step to run next.
// False when none came, or an abort did: this replica itself stops.
bool Session::Impl::take_reform(uint64_t step, std::chrono::nanoseconds wait) {
  if (!contain_faults) return false;  // exact recovery: no Reform comes, the agent's abort does
  {
    std::unique_lock<std::mutex> lk(inbox_mu);
    const auto queued = [&] {
      return std::any_of(reforms.begin(), reforms.end(),
                         [&](const protocol::Reform& r) { return !r.boundary && r.epoch > layout.epoch; });
    };
    inbox_cv.wait_for(lk, wait, [&] {
      return queued() || abort_seq.load() != assigned_aborts || !inbox.empty() || agent_gone.load();
    });
  }
  if (abort_seq.load() != assigned_aborts || !reform_now(step)) return false;
  reformed_for = step;
  return true;
}

// Takes the newest Reform at once queued (a hand-off older than it is
// void) and re-forms the data-parallel group over its live set; `step` is
// the step about to run again. False when none is queued.
bool Session::Impl::reform_now(uint64_t step) {
  std::optional<protocol::Reform> now;
  {
    std::lock_guard<std::mutex> lk(inbox_mu);
    for (const auto& r : reforms)
      if (!r.boundary && r.epoch > layout.epoch && (!now || r.epoch > now->epoch)) now = r;
    if (!now) return false;
    reforms.erase(std::remove_if(reforms.begin(), reforms.end(),
                                 [&](const protocol::Reform& r) { return r.epoch <= now->epoch; }),
                  reforms.end());
  }
  if (handoff && handoff->epoch < now->epoch) handoff.reset();
  if (rejoin && rejoin->epoch < now->epoch) rejoin.reset();
  if (streaming && streaming->epoch < now->epoch) end_handoff();  // the rejoin it served is off
  tier->abandon();  // an exchange on the aborted world communicator is not held
  {
    std::lock_guard<std::mutex> lk(comm_mu);
    comm.reset();  // the world is not whole while a replica is out
    dp_comm.reset();
  }
  layout.epoch = now->epoch;
  layout.live = now->live;
  auto dc = make_comm(epoch_prefix(now->epoch) + "dp-" + std::to_string(layout.position) + "/",
                      place_in(layout.live, layout.index), static_cast<uint32_t>(layout.live.size()),
                      assigned_aborts);
  {
    std::lock_guard<std::mutex> lk(comm_mu);
    dp_comm = std::move(dc);
  }
  check_same_step(step);
  ch->send(protocol::encode(protocol::Reformed{now->epoch}));
  return true;
}

// With more than two replicas one may have finished the exchange a fault
// broke for another: the live replicas would then be a step apart. Never
// run on like that: the exact round sorts it out.
void Session::Impl::check_same_step(uint64_t step) {
  int64_t v[2] = {static_cast<int64_t>(step), -static_cast<int64_t>(step)};
  host_staging().all_reduce(*dp_comm, v, 2, HAL_DTYPE_I64, HAL_REDUCE_MIN, collective_timeout());
  if (v[0] != -v[1]) {
    throw Error(Code::aborted, "runtime: after re-forming as epoch " + std::to_string(layout.epoch) +
                                   " the live replicas are at steps " + std::to_string(v[0]) + " to " +
                                   std::to_string(-v[1]));
  }
}

// The world and this position's data-parallel group over `r`'s live set,
// and the memory tier's placement in the world it makes.
void Session::Impl::form_epoch(const protocol::Reform& r, uint64_t aborts_before,
                               std::optional<uint64_t> reforms_before) {
  {
    std::lock_guard<std::mutex> lk(comm_mu);
    comm.reset();
    dp_comm.reset();
  }
  auto c = make_comm(epoch_prefix(r.epoch) + "world/", rank, world, aborts_before, reforms_before);
  {
    std::lock_guard<std::mutex> lk(comm_mu);
    comm = std::move(c);
  }
  layout.epoch = r.epoch;
  layout.live = r.live;
  auto dc = make_comm(epoch_prefix(r.epoch) + "dp-" + std::to_string(layout.position) + "/",
                      place_in(layout.live, layout.index), static_cast<uint32_t>(layout.live.size()),
                      aborts_before, reforms_before);
  {
    std::lock_guard<std::mutex> lk(comm_mu);
    dp_comm = std::move(dc);
  }
  if (r.domains.size() == world) placement = checkpoint::ReplicaPlacement::across(r.domains, tier_replicas);
}

// The control thread's Reforms with a boundary, taken in order: the newest
// hand-off to start and the newest rejoin (a Reform at once newer than
// them makes them void).
void Session::Impl::take_boundaries() {
  std::lock_guard<std::mutex> lk(inbox_mu);
  for (auto it = reforms.begin(); it != reforms.end();) {
    if (!it->boundary || it->epoch <= layout.epoch) {
      ++it;
      continue;
    }
    auto& slot = it->rejoin ? rejoin : handoff;
    if (!slot || it->epoch > slot->epoch) slot = *it;
    it = reforms.erase(it);
  }
  for (const auto& r : reforms) {
    if (r.boundary) continue;
    if (handoff && r.epoch > handoff->epoch) handoff.reset();
    if (rejoin && r.epoch > rejoin->epoch) rejoin.reset();
  }
}

// At the end of `step` on a live rank: a hand-off whose boundary it is
// starts (the donor's ranks stream their state), a rejoin whose boundary
// it is ends the stream and re-forms the live set with the rejoining
// replicas in. A Reform at once that voids either is carried out instead.
void Session::Impl::maybe_hand_off(uint64_t step) {
  if (!contained) return;
  if (receiver) return rejoiner_step_end(step);
  take_boundaries();
  if (rejoin && sender && !notice_sent) {
    sender->rejoin(*rejoin->boundary, rejoin->epoch);  // before the exchanges of later steps
    notice_sent = true;
  }
  for (auto* due : {&handoff, &rejoin}) {
    if (*due && step > *(*due)->boundary) {
      throw Error(Code::aborted, "runtime: the Reform of epoch " + std::to_string((*due)->epoch) +
                                     " was due at the end of step " + std::to_string(*(*due)->boundary) +
                                     "; this rank heard of it only after step " + std::to_string(step));
    }
  }
  const uint64_t reforms_before = reform_seq.load();
  try {
    if (handoff && step == *handoff->boundary)
      start_handoff(*std::exchange(handoff, std::nullopt), reforms_before);
    if (rejoin && step == *rejoin->boundary)
      finish_rejoin(*std::exchange(rejoin, std::nullopt), reforms_before);
  } catch (const Error&) {
    // A Reform at once voided it (the rejoining replica or the donor
    // failed): this step is done; the live set re-forms for the next.
    end_handoff();
    if (!take_reform(step + 1, collective_timeout())) throw;
  }
}

// The donor's ranks: a stream to their counterparts in the rejoining
// replicas, starting with a copy of the state; every live rank says the
// hand-off has started.
void Session::Impl::start_handoff(const protocol::Reform& r, uint64_t reforms_before) {
  if (layout.index == *r.donor) {
    auto hc = make_comm(epoch_prefix(r.epoch) + "handoff-" + std::to_string(layout.position) + "/", 0,
                        1 + static_cast<uint32_t>(r.rejoining.size()), assigned_aborts, reforms_before);
    {
      std::lock_guard<std::mutex> lk(comm_mu);
      handoff_comm = hc;
    }
    // The memory tier's snapshot of the boundary, taken at the end of this
    // step (items saved), is the state as it is: sent as it lies, the
    // training thread copies nothing. Without one, a copy.
    if (auto image = tier->own_image(*r.boundary + 1)) {
      sender = std::make_unique<HandoffSender>(hc, plugin, std::move(image), state, collective_timeout());
    } else {
      items.save();
      sender = std::make_unique<HandoffSender>(hc, plugin, state, collective_timeout());
    }
    notice_sent = false;
  }
  streaming = r;
  ch->send(protocol::encode(protocol::Reformed{r.epoch}));
}

// A live rank at the rejoin's boundary: the stream's last record sent,
// then the world and the data-parallel groups over the whole live set.
void Session::Impl::finish_rejoin(const protocol::Reform& r, uint64_t reforms_before) {
  if (sender) {
    if (!notice_sent) sender->rejoin(*r.boundary, r.epoch);
    sender->finish();
  }
  end_handoff();
  form_epoch(r, assigned_aborts, reforms_before);
  resnapshot = true;  // the rejoined ranks' state in their peers as soon as possible
  ch->send(protocol::encode(protocol::Reformed{r.epoch}));
}

// A rejoining rank at the end of a replayed step: the rejoin, when the
// stream said this step is its last.
void Session::Impl::rejoiner_step_end(uint64_t step) {
  if (rejoin_notice && rejoin_notice->first == step) rejoin_now();
}

// A rejoining rank: the live set re-forms with its replica in, as the
// rejoin Reform the agent sent says (the stream named its epoch).
void Session::Impl::rejoin_now() {
  const uint64_t epoch = rejoin_notice->second;
  std::optional<protocol::Reform> r;
  {
    std::unique_lock<std::mutex> lk(inbox_mu);
    const auto find = [&] {
      for (auto it = reforms.begin(); it != reforms.end(); ++it)
        if (it->rejoin && it->epoch == epoch) {
          r = *it;
          reforms.erase(it);
          return true;
        }
      return false;
    };
    inbox_cv.wait_for(lk, collective_timeout(),
                      [&] { return find() || abort_seq.load() != assigned_aborts || agent_gone.load(); });
  }
  if (!r) throw Error(Code::aborted, "runtime: the rejoin of epoch " + std::to_string(epoch) + " never came");
  end_handoff();
  form_epoch(*r, assigned_aborts, std::nullopt);
  resnapshot = true;
  ch->send(protocol::encode(protocol::Reformed{r->epoch}));
}

// The hand-off this rank took part in is over (or void): its stream goes.
void Session::Impl::end_handoff() {
  sender.reset();  // aborts a stream still running and joins its thread
  receiver.reset();
  streaming.reset();
  rejoin_notice.reset();
  notice_sent = false;
  std::lock_guard<std::mutex> lk(comm_mu);
  handoff_comm.reset();
}

// A rejoining rank's data-parallel exchange: the donor's reduced result of
// the same step, from the stream. A rejoin notice for an earlier step
// means this step is the first the replica computes again: it rejoins and
// the step runs again with its micro-batches.
void Session::Impl::replay_exchange(void* data, uint64_t bytes, uint64_t step) {
  for (;;) {
    const StreamHeader h = receiver->next();
    if (h.kind == StreamHeader::rejoin) {
      rejoin_notice = std::make_pair(h.step, h.epoch);
      if (h.step >= step) continue;
      rejoin_now();
      void_step = true;
      throw Error(Code::aborted, "runtime: replica " + std::to_string(layout.index) +
                                     " rejoined at the end of step " + std::to_string(h.step) + ": step " +
                                     std::to_string(step) + " runs again with its micro-batches");
    }
    if (h.step != step || h.bytes != bytes) {
      throw Error(Code::data_loss, "runtime: the hand-off stream's exchange of step " +
                                       std::to_string(h.step) + " (" + std::to_string(h.bytes) +
                                       " bytes) is not this rank's, step " + std::to_string(step) + " (" +
                                       std::to_string(bytes) + " bytes)");
    }
    receiver->payload(data, bytes);
    return;
  }
}

// ---- the public calls ----------------------------------------------------

const ReplicaLayout& Session::replicas() const noexcept { return impl_->layout; }

hal::Communicator& Session::replica_comm() {
  if (!impl_->contained) return comm();
  std::lock_guard<std::mutex> lk(impl_->comm_mu);
  if (!impl_->replica_comm) throw Error(Code::aborted, "runtime: no replica group (call join or recover)");
  return *impl_->replica_comm;
}

hal::Communicator& Session::data_parallel_comm() {
  if (!impl_->contained) return comm();
  std::lock_guard<std::mutex> lk(impl_->comm_mu);
  if (!impl_->dp_comm) throw Error(Code::aborted, "runtime: no data-parallel group (call join or recover)");
  return *impl_->dp_comm;
}

std::vector<uint32_t> Session::microbatches(uint32_t total) const {
  const Impl& m = *impl_;
  if (m.receiver) return {};  // replaying a donor's exchanges: the live replicas compute every one
  if (!m.contained) {
    std::vector<uint32_t> all(total);
    std::iota(all.begin(), all.end(), 0u);
    return all;
  }
  return agent::contained::share_of(total, m.layout.live, m.layout.index);
}

void Session::data_parallel_all_reduce(void* data, uint64_t count, hal_dtype_t dtype, hal_reduce_op_t op,
                                       std::optional<std::chrono::nanoseconds> timeout) {
  Impl& m = *impl_;
  if (!m.contained) return all_reduce(data, count, dtype, op, timeout);
  const uint64_t bytes = count * hal::dtype_size(dtype);
  const auto now_step = static_cast<uint64_t>(std::max<int64_t>(0, m.current_step.load()));
  if (m.receiver) return m.replay_exchange(data, bytes, now_step);
  std::optional<Error> failed;
  try {
    m.host_staging().all_reduce(data_parallel_comm(), data, count, dtype, op,
                                timeout.value_or(m.collective_timeout()));
  } catch (const Error& e) {
    failed = e;
  }
  if (m.vote(!failed)) {
    if (m.sender) m.sender->exchange(now_step, data, bytes);  // a rejoining replica replays it
    return;
  }
  // Void for the whole replica. A Reform at once took a replica out (its
  // message may still be on the way to this rank, or this rank carried it
  // out already, in the last snapshot's exchange), or the exchange failed
  // for another reason: the agent then says so with an abort.
  const uint64_t step = static_cast<uint64_t>(std::max<int64_t>(0, m.current_step.load()));
  const bool done_already = m.reformed_for == step;
  const bool reformed =
      m.take_reform(step, done_already ? std::chrono::nanoseconds(0) : m.collective_timeout());
  if (reformed || done_already) {
    m.void_step = true;
    throw Error(Code::aborted, "runtime: the live set re-formed as epoch " + std::to_string(m.layout.epoch) +
                                   " (replicas " + replicas_text(m.layout.live) + ") during step " +
                                   std::to_string(step) + ": it runs again");
  }
  if (failed) throw *failed;
  throw Error(Code::aborted, "runtime: a data-parallel exchange of replica " +
                                 std::to_string(m.layout.index) + " failed during step " +
                                 std::to_string(step));
}

bool Session::take_void_step() noexcept { return std::exchange(impl_->void_step, false); }

}  // namespace sigma::runtime
