// The token exchange of one expert group: counts, rows to the experts'
// ranks, rows back, over the HAL's all-to-all(v) or all-gather.
#include <sigma/kernels.hpp>
#include <sigma/parallel.hpp>

#include <algorithm>
#include <cstring>
#include <string>

namespace sigma::parallel {

namespace {

// The HAL refuses NULL buffers with a non-zero count; an empty vector's data
// may be NULL, so every exchange buffer has at least one byte.
uint8_t* bytes_of(std::vector<uint8_t>& v) {
  if (v.empty()) v.resize(1);
  return v.data();
}

// A reused buffer of at least `bytes` (never shrunk, so its pages stay
// mapped from one step to the next; grown without zeroing what it had).
uint8_t* scratch(std::vector<uint8_t>& v, uint64_t bytes) {
  if (v.size() < bytes || v.empty()) v.resize(std::max<uint64_t>(bytes, 1));
  return v.data();
}

hal_coll_args_t bytes_args(hal_coll_op_t op, uint64_t count, const void* send, void* recv) {
  return hal::coll_args(op, HAL_DTYPE_U8, count, send, recv);
}

// An all-to-all(v): block j of `send` (sc[j] elements at sd[j]) to rank j,
// rank j's block to rc[j] elements at rd[j] of `recv`.
hal_coll_args_t alltoallv(hal_dtype_t dtype, const void* send, void* recv, const std::vector<uint64_t>& sc,
                          const std::vector<uint64_t>& sd, const std::vector<uint64_t>& rc,
                          const std::vector<uint64_t>& rd) {
  auto a = hal::coll_args(HAL_COLL_ALL_TO_ALLV, dtype, 0, send, recv);
  a.send_counts = sc.data();
  a.send_displs = sd.data();
  a.recv_counts = rc.data();
  a.recv_displs = rd.data();
  return a;
}

// Bytes of one row; throws for a dtype the ABI does not define.
uint64_t row_bytes(uint64_t hidden, hal_dtype_t dtype, const char* what) {
  const uint64_t row = hidden * hal::dtype_size(dtype);
  if (row == 0 && hidden > 0)
    throw Error(Code::invalid_argument, std::string(what) + ": dtype " + hal::dtype_name(dtype));
  return row;
}

}  // namespace

Dispatcher::Dispatcher(hal::Communicator& ep, uint32_t ep_rank, uint32_t ep_size,
                       const DispatchOptions& options)
    : comm_(ep), ep_rank_(ep_rank), ep_size_(ep_size), options_(options) {
  if (ep_size == 0 || ep_rank >= ep_size)
    throw Error(Code::invalid_argument, "Dispatcher: rank " + std::to_string(ep_rank) +
                                            " of an expert group of " + std::to_string(ep_size));
  std::vector<uint32_t> owner(options.num_experts);
  for (uint32_t j = 0; j < ep_size; ++j) {
    const ExpertRange r = expert_range(options.num_experts, ep_size, j);
    for (uint32_t e = r.first; e < r.first + r.count; ++e) owner[e] = j;
  }
  set_placement(owner);
}

void Dispatcher::set_placement(const std::vector<uint32_t>& owner) {
  const uint32_t E = options_.num_experts;
  if (owner.size() != E)
    throw Error(Code::invalid_argument, "set_placement: " + std::to_string(owner.size()) + " owners for " +
                                            std::to_string(E) + " experts");
  for (uint32_t e = 0; e < E; ++e)
    if (owner[e] >= ep_size_)
      throw Error(Code::invalid_argument, "set_placement: expert " + std::to_string(e) + " on rank " +
                                              std::to_string(owner[e]) + " of " + std::to_string(ep_size_));
  // Slots: the experts ordered by their rank, then by their number.
  first_slot_.assign(ep_size_ + 1, 0);
  for (uint32_t o : owner) ++first_slot_[o + 1];
  for (uint32_t j = 0; j < ep_size_; ++j) first_slot_[j + 1] += first_slot_[j];
  std::vector<uint32_t> next(first_slot_.begin(), first_slot_.end() - 1);
  slot_of_.assign(E, 0);
  for (uint32_t e = 0; e < E; ++e) slot_of_[e] = next[owner[e]]++;
  owner_ = owner;
  local_ids_.clear();
  for (uint32_t e = 0; e < E; ++e)
    if (owner[e] == ep_rank_) local_ids_.push_back(e);
  local_experts_ = static_cast<uint32_t>(local_ids_.size());
}

void Dispatcher::run(const hal_coll_args_t& args) {
  try {
    comm_.run(args, options_.timeout);
  } catch (const Error& e) {
    if (!options_.on_failure) throw;
    throw options_.on_failure(e);
  }
}

void Dispatcher::run_small(hal_coll_args_t a, uint64_t send_bytes, uint64_t recv_bytes) {
  const hal::Plugin& pl = *comm_.plugin();
  const uint32_t dev = options_.device;
  if (pl.host_addressable(dev)) return run(a);
  void* host_out = a.recvbuf;
  void* in = device_scratch(dev_small_in_, dev, send_bytes);
  void* out = device_scratch(dev_small_out_, dev, recv_bytes);
  to_device(in, dev, a.sendbuf, send_bytes);
  a.sendbuf = in;
  a.recvbuf = out;
  run(a);
  if (recv_bytes)
    pl.check(pl.device_api().memcpy(dev, host_out, out, recv_bytes, HAL_COPY_DEVICE_TO_HOST, nullptr),
             "hal_device_api_t.memcpy (MoE counts from the device)");
}

Plan Dispatcher::plan(const Routing& routing) {
  const size_t E = options_.num_experts, L = local_experts_, R = ep_size_;
  Plan p;
  p.num_tokens = routing.num_tokens;
  p.top_k = routing.top_k;
  p.row_of.resize(routing.num_tokens * routing.top_k);
  p.sent_offsets.resize(E + 1);
  // Rows go out in slot order (rank, then expert), so each rank's experts
  // are one block.
  std::vector<int32_t> slots(routing.expert_ids.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    const int32_t e = routing.expert_ids[i];
    if (e >= static_cast<int64_t>(E) || e < -1)
      throw Error(Code::invalid_argument, "plan: choice " + std::to_string(i) + " names expert " +
                                              std::to_string(e) + " of " + std::to_string(E));
    slots[i] = e < 0 ? -1 : static_cast<int32_t>(slot_of_[static_cast<uint32_t>(e)]);
  }
  kernels::moe_plan(slots.data(), routing.num_tokens, routing.top_k, options_.num_experts, p.row_of.data(),
                    p.sent_offsets.data());
  std::vector<uint64_t> sent(std::max<size_t>(E, 1));  // rows this rank sends each slot
  for (uint32_t q = 0; q < E; ++q) sent[q] = p.sent_offsets[q + 1] - p.sent_offsets[q];
  p.recv_counts.resize(R * L);
  if (options_.exchange == Exchange::all_to_all) {
    // Rank j gets its block of `sent` (what it must receive from here) and
    // the rows this rank sends to other ranks, which every rank sums.
    const uint64_t own = p.sent_offsets[first_slot_[ep_rank_ + 1]] - p.sent_offsets[first_slot_[ep_rank_]];
    std::vector<uint64_t> msg(E + R), sc(R), sd(R), rc(R, L + 1), rd(R);
    for (uint32_t j = 0; j < R; ++j) {
      sd[j] = first_slot_[j] + j;
      sc[j] = first_slot_[j + 1] - first_slot_[j] + 1;
      rd[j] = j * (L + 1);
      std::copy(sent.begin() + first_slot_[j], sent.begin() + first_slot_[j + 1], msg.begin() + sd[j]);
      msg[sd[j] + sc[j] - 1] = p.sent_rows() - own;
    }
    std::vector<uint64_t> recv(R * (L + 1));
    run_small(alltoallv(HAL_DTYPE_I64, msg.data(), recv.data(), sc, sd, rc, rd), msg.size() * 8,
              recv.size() * 8);
    for (uint32_t s = 0; s < R; ++s) {
      std::copy_n(recv.begin() + s * (L + 1), L, p.recv_counts.begin() + s * L);
      p.moving_rows += recv[s * (L + 1) + L];
    }
  } else {
    p.source_offsets.resize(R * (E + 1));
    std::vector<uint64_t> mine(p.sent_offsets);
    run_small(hal::coll_args(HAL_COLL_ALL_GATHER, HAL_DTYPE_I64, E + 1, mine.data(), p.source_offsets.data()),
              mine.size() * 8, p.source_offsets.size() * 8);
    const uint32_t first = first_slot_[ep_rank_];
    for (uint32_t s = 0; s < ep_size_; ++s)
      for (uint32_t l = 0; l < L; ++l) {
        const uint64_t* off = p.source_offsets.data() + static_cast<size_t>(s) * (E + 1);
        p.recv_counts[s * L + l] = off[first + l + 1] - off[first + l];
      }
  }
  p.expert_offsets.assign(L + 1, 0);
  for (uint32_t l = 0; l < L; ++l) {
    uint64_t rows = 0;
    for (uint32_t s = 0; s < ep_size_; ++s) rows += p.recv_counts[s * L + l];
    p.expert_offsets[l + 1] = p.expert_offsets[l] + rows;
  }
  return p;
}

namespace {

// Row offset of source s's block for local expert l in the expert layout.
uint64_t expert_block(const Plan& p, uint32_t L, uint32_t s, uint32_t l) {
  uint64_t off = p.expert_offsets[l];
  for (uint32_t q = 0; q < s; ++q) off += p.recv_counts[q * L + l];
  return off;
}

// The all-to-all(v) blocks in bytes: counts and displacements per rank.
struct Blocks {
  std::vector<uint64_t> sc, sd, rc, rd;
  uint64_t recv_total = 0;
  explicit Blocks(size_t R) : sc(R), sd(R), rc(R), rd(R) {}
};

// To the experts: each other rank's slots of the sent layout out; from
// each other source, its rows for this rank's experts in, source-major.
// This rank's own rows never enter the exchange (each_block copies them
// between the sent and expert layouts directly): its block is empty.
Blocks to_expert_blocks(const Plan& p, const std::vector<uint32_t>& first_slot, uint32_t self, uint32_t L,
                        uint32_t R, uint64_t row) {
  Blocks b(R);
  for (uint32_t j = 0; j < R; ++j) {
    b.sd[j] = p.sent_offsets[first_slot[j]] * row;
    b.rd[j] = b.recv_total;
    if (j == self) continue;
    b.sc[j] = (p.sent_offsets[first_slot[j + 1]] - p.sent_offsets[first_slot[j]]) * row;
    uint64_t rows = 0;
    for (uint32_t l = 0; l < L; ++l) rows += p.recv_counts[j * L + l];
    b.rc[j] = rows * row;
    b.recv_total += b.rc[j];
  }
  return b;
}

// Back: the reverse of to_expert_blocks.
Blocks from_expert_blocks(const Plan& p, const std::vector<uint32_t>& first_slot, uint32_t self, uint32_t L,
                          uint32_t R, uint64_t row) {
  const Blocks to = to_expert_blocks(p, first_slot, self, L, R, row);
  Blocks b(R);
  b.sc = to.rc;
  b.sd = to.rd;
  b.rc = to.sc;
  b.rd = to.sd;
  for (uint64_t n : b.rc) b.recv_total += n;
  return b;
}

// Round l of the exchange to the experts: to each other rank, the rows for
// its l-th expert (none when it holds fewer); from each other source, its
// rows for this rank's l-th expert, at their place in the expert layout.
Blocks round_blocks(const Plan& p, const std::vector<uint32_t>& first_slot, uint32_t self, uint32_t L,
                    uint32_t R, uint64_t row, uint32_t l) {
  Blocks b(R);
  for (uint32_t j = 0; j < R; ++j) {
    if (j == self) continue;
    const uint32_t slot = first_slot[j] + l;
    if (slot < first_slot[j + 1]) {
      b.sd[j] = p.sent_offsets[slot] * row;
      b.sc[j] = (p.sent_offsets[slot + 1] - p.sent_offsets[slot]) * row;
    }
    if (l < L) {
      b.rd[j] = expert_block(p, L, j, l) * row;
      b.rc[j] = p.recv_counts[j * L + l] * row;
    }
  }
  return b;
}

// Every (source, local expert) block: copy(expert-major byte offset, byte
// offset, bytes, own), in source-major order. Another source's rows are at
// that offset in the exchange buffer (source-major, this rank's own block
// left out); this rank's own (`own` true) at that offset in the sent layout.
template <typename Copy>
void each_block(const Plan& p, const std::vector<uint32_t>& first_slot, uint32_t self, uint32_t L, uint32_t R,
                uint64_t row, Copy copy) {
  uint64_t at = 0;
  for (uint32_t s = 0; s < R; ++s)
    for (uint32_t l = 0; l < L; ++l) {
      const uint64_t n = p.recv_counts[s * L + l] * row;
      if (s == self) {
        if (n) copy(expert_block(p, L, s, l) * row, p.sent_offsets[first_slot[self] + l] * row, n, true);
        continue;
      }
      if (n) copy(expert_block(p, L, s, l) * row, at, n, false);
      at += n;
    }
}

}  // namespace

std::vector<uint8_t> Dispatcher::to_experts(const Plan& p, const void* sent, uint64_t hidden,
                                            hal_dtype_t dtype) {
  std::vector<uint8_t> out;
  to_experts(p, sent, hidden, dtype, out);
  return out;
}

void Dispatcher::to_experts(const Plan& p, const void* sent, uint64_t hidden, hal_dtype_t dtype,
                            std::vector<uint8_t>& out) {
  const uint64_t row = row_bytes(hidden, dtype, "to_experts");
  const size_t E = options_.num_experts, L = local_experts_, R = ep_size_;
  out.resize(p.expert_rows() * row);
  if (options_.exchange == Exchange::all_to_all) {
    exchange_to_experts(p, sent, row, out.data(), /*own_in_place=*/false);
    return;
  }
  // All-gather: every source's sent rows, padded to the longest.
  uint64_t longest = 0;
  for (uint32_t s = 0; s < R; ++s) longest = std::max(longest, p.source_offsets[s * (E + 1) + E]);
  uint8_t* mine = scratch(gather_mine_, longest * row);
  uint8_t* all = scratch(gather_all_, longest * row * R);
  if (p.sent_rows()) std::memcpy(mine, sent, p.sent_rows() * row);
  run(bytes_args(HAL_COLL_ALL_GATHER, longest * row, mine, all));
  const uint32_t first = first_slot_[ep_rank_];
  for (uint32_t s = 0; s < R; ++s)
    for (uint32_t l = 0; l < L; ++l) {
      const uint64_t n = p.recv_counts[s * L + l] * row;
      const uint64_t from = (s * longest + p.source_offsets[s * (E + 1) + first + l]) * row;
      if (n) std::memcpy(out.data() + expert_block(p, L, s, l) * row, all + from, n);
    }
}

uint32_t Dispatcher::rounds(const Plan& p, uint64_t row) const {
  uint32_t most = 0;
  for (uint32_t j = 0; j < ep_size_; ++j) most = std::max(most, first_slot_[j + 1] - first_slot_[j]);
  if (most == 0 || ep_size_ < 2) return 0;  // nothing crosses ranks: one (empty) exchange
  // The average message of a round, in bytes (long double: no overflow).
  const long double message = static_cast<long double>(p.moving_rows) * row /
                              (static_cast<long double>(ep_size_) * (ep_size_ - 1) * most);
  return message >= static_cast<long double>(options_.round_min_bytes) ? most : 0;
}

void Dispatcher::exchange_rounds(const Plan& p, uint64_t row, const uint8_t* send, uint8_t* recv,
                                 bool to_experts) {
  for (uint32_t l = 0, n = rounds(p, row); l < n; ++l) {
    const Blocks b = round_blocks(p, first_slot_, ep_rank_, local_experts_, ep_size_, row, l);
    if (to_experts)
      run(alltoallv(HAL_DTYPE_U8, send, recv, b.sc, b.sd, b.rc, b.rd));
    else
      run(alltoallv(HAL_DTYPE_U8, send, recv, b.rc, b.rd, b.sc, b.sd));
  }
}

void Dispatcher::exchange_to_experts(const Plan& p, const void* sent, uint64_t row, uint8_t* out,
                                     bool own_in_place) {
  static const uint8_t kNone = 0;
  const auto* from = static_cast<const uint8_t*>(p.sent_rows() ? sent : &kNone);
  if (rounds(p, row) > 0) {
    uint8_t none = 0;  // the HAL wants an address even when nothing lands here
    exchange_rounds(p, row, from, p.expert_rows() ? out : &none, /*to_experts=*/true);
    if (!own_in_place)
      each_block(p, first_slot_, ep_rank_, local_experts_, ep_size_, row,
                 [&](uint64_t expert_at, uint64_t at, uint64_t n, bool own) {
                   if (own) std::memcpy(out + expert_at, from + at, n);
                 });
    return;
  }
  const Blocks b = to_expert_blocks(p, first_slot_, ep_rank_, local_experts_, ep_size_, row);
  uint8_t* by_source = scratch(exchange_, b.recv_total);
  run(alltoallv(HAL_DTYPE_U8, from, by_source, b.sc, b.sd, b.rc, b.rd));
  // Source-major to expert-major; this rank's own rows straight from `sent`
  // unless they are in place already.
  each_block(p, first_slot_, ep_rank_, local_experts_, ep_size_, row,
             [&](uint64_t expert_at, uint64_t at, uint64_t n, bool own) {
               if (!(own && own_in_place)) std::memcpy(out + expert_at, (own ? from : by_source) + at, n);
             });
}

std::vector<uint8_t> Dispatcher::from_experts(const Plan& p, const void* expert_rows, uint64_t hidden,
                                              hal_dtype_t dtype) {
  std::vector<uint8_t> out;
  from_experts(p, expert_rows, hidden, dtype, out);
  return out;
}

void Dispatcher::from_experts(const Plan& p, const void* expert_rows, uint64_t hidden, hal_dtype_t dtype,
                              std::vector<uint8_t>& out) {
  const uint64_t row = row_bytes(hidden, dtype, "from_experts");
  const size_t E = options_.num_experts, R = ep_size_;
  const auto* in = static_cast<const uint8_t*>(expert_rows);
  out.resize(p.sent_rows() * row);
  if (options_.exchange == Exchange::all_to_all) {
    exchange_from_experts(p, in, row, bytes_of(out), /*own_in_place=*/false);
    out.resize(p.sent_rows() * row);
    return;
  }
  // All-gather: every rank's expert rows, padded to the longest; each rank
  // then picks its own rows out of every expert's block.
  std::vector<uint64_t> expert_rows_of(R, 0);
  for (uint32_t j = 0; j < R; ++j)
    for (uint32_t s = 0; s < R; ++s) {
      const uint64_t* off = p.source_offsets.data() + static_cast<size_t>(s) * (E + 1);
      expert_rows_of[j] += off[first_slot_[j + 1]] - off[first_slot_[j]];
    }
  const uint64_t longest = *std::max_element(expert_rows_of.begin(), expert_rows_of.end());
  uint8_t* mine = scratch(gather_mine_, longest * row);
  uint8_t* all = scratch(gather_all_, longest * row * R);
  if (p.expert_rows()) std::memcpy(mine, in, p.expert_rows() * row);
  run(bytes_args(HAL_COLL_ALL_GATHER, longest * row, mine, all));
  for (uint32_t e = 0, j = 0; e < E; ++e) {  // e: a slot
    while (e >= first_slot_[j + 1]) ++j;
    // Rank j's slot e holds, in source order, every source's rows for it,
    // after its slots before e.
    uint64_t off = 0;
    for (uint32_t q = first_slot_[j]; q < e; ++q)
      for (uint32_t s = 0; s < R; ++s) {
        const uint64_t* so = p.source_offsets.data() + static_cast<size_t>(s) * (E + 1);
        off += so[q + 1] - so[q];
      }
    for (uint32_t s = 0; s < ep_rank_; ++s) {
      const uint64_t* so = p.source_offsets.data() + static_cast<size_t>(s) * (E + 1);
      off += so[e + 1] - so[e];
    }
    const uint64_t n = (p.sent_offsets[e + 1] - p.sent_offsets[e]) * row;
    if (n) std::memcpy(out.data() + p.sent_offsets[e] * row, all + (j * longest + off) * row, n);
  }
}

std::vector<uint8_t> Dispatcher::dispatch(const Plan& p, const void* tokens, uint64_t hidden,
                                          hal_dtype_t dtype) {
  std::vector<uint8_t> rows;
  dispatch(p, tokens, hidden, dtype, rows);
  return rows;
}

void Dispatcher::dispatch(const Plan& p, const void* tokens, uint64_t hidden, hal_dtype_t dtype,
                          std::vector<uint8_t>& rows) {
  const uint64_t row = row_bytes(hidden, dtype, "dispatch");
  uint8_t* sent = scratch(sent_, p.sent_rows() * row);
  if (options_.exchange != Exchange::all_to_all) {
    if (p.num_tokens > 0)
      kernels::moe_permute(tokens, p.num_tokens, hidden, dtype, p.row_of.data(), p.top_k, sent);
    return to_experts(p, sent, hidden, dtype, rows);
  }
  // This rank's own choices are permuted straight to their place among its
  // experts' rows; only the others' go to the sent layout and the exchange.
  rows.resize(p.expert_rows() * row);
  uint8_t none = 0;  // the kernel wants an address even when no row lands here
  uint8_t* here = rows.empty() ? &none : rows.data();
  if (p.num_tokens > 0) {
    split_row_map(p);
    kernels::moe_permute(tokens, p.num_tokens, hidden, dtype, others_row_of_.data(), p.top_k, sent);
    kernels::moe_permute(tokens, p.num_tokens, hidden, dtype, own_row_of_.data(), p.top_k, here);
  }
  exchange_to_experts(p, sent, row, here, /*own_in_place=*/true);
}

void Dispatcher::split_row_map(const Plan& p) {
  const uint32_t L = local_experts_, first = first_slot_[ep_rank_];
  // Per local expert: where its rows from this rank start in the sent
  // layout and in the expert layout.
  std::vector<uint64_t> sent_at(L + 1), expert_at(L);
  for (uint32_t l = 0; l <= L; ++l) sent_at[l] = p.sent_offsets[first + l];
  for (uint32_t l = 0; l < L; ++l) expert_at[l] = expert_block(p, L, ep_rank_, l);
  const size_t n = p.row_of.size();
  others_row_of_.assign(n, -1);
  own_row_of_.assign(n, -1);
  for (size_t i = 0; i < n; ++i) {
    const int64_t r = p.row_of[i];
    if (r < 0) continue;
    const auto u = static_cast<uint64_t>(r);
    if (u < sent_at[0] || u >= sent_at[L]) {
      others_row_of_[i] = r;
      continue;
    }
    uint32_t l = 0;
    while (u >= sent_at[l + 1]) ++l;
    own_row_of_[i] = static_cast<int64_t>(expert_at[l] + (u - sent_at[l]));
  }
}

void Dispatcher::exchange_from_experts(const Plan& p, const uint8_t* in, uint64_t row, uint8_t* back,
                                       bool own_in_place) {
  if (rounds(p, row) > 0) {
    static const uint8_t kNone = 0;
    if (!own_in_place)
      each_block(p, first_slot_, ep_rank_, local_experts_, ep_size_, row,
                 [&](uint64_t expert_at, uint64_t at, uint64_t n, bool own) {
                   if (own) std::memcpy(back + at, in + expert_at, n);
                 });
    exchange_rounds(p, row, p.expert_rows() ? in : &kNone, back, /*to_experts=*/false);
    return;
  }
  const Blocks b = from_expert_blocks(p, first_slot_, ep_rank_, local_experts_, ep_size_, row);
  uint8_t* by_source = scratch(exchange_, p.expert_rows() * row);
  // Expert-major to source-major; this rank's own rows straight to `back`
  // (the exchange leaves their place alone) unless they stay where they are.
  each_block(p, first_slot_, ep_rank_, local_experts_, ep_size_, row,
             [&](uint64_t expert_at, uint64_t at, uint64_t n, bool own) {
               if (!(own && own_in_place)) std::memcpy((own ? back : by_source) + at, in + expert_at, n);
             });
  run(alltoallv(HAL_DTYPE_U8, by_source, back, b.sc, b.sd, b.rc, b.rd));
}

void Dispatcher::combine(const Plan& p, const void* expert_out, const float* weights, uint64_t hidden,
                         hal_dtype_t dtype, void* out) {
  if (options_.exchange != Exchange::all_to_all) {
    from_experts(p, expert_out, hidden, dtype, back_);
    if (p.num_tokens == 0) return;
    kernels::moe_unpermute(bytes_of(back_), p.row_of.data(), weights, p.num_tokens, p.top_k, hidden, dtype,
                           out);
    return;
  }
  // Other ranks' rows come back through the exchange; this rank's own are
  // read where its experts wrote them.
  const uint64_t row = row_bytes(hidden, dtype, "combine");
  const auto* in = static_cast<const uint8_t*>(expert_out);
  back_.resize(p.sent_rows() * row);
  exchange_from_experts(p, in, row, bytes_of(back_), /*own_in_place=*/true);
  if (p.num_tokens == 0) return;
  static const uint8_t kNone = 0;
  split_row_map(p);
  kernels::moe_unpermute_split(bytes_of(back_), others_row_of_.data(), p.expert_rows() ? in : &kNone,
                               own_row_of_.data(), weights, p.num_tokens, p.top_k, hidden, dtype, out);
}

void* Dispatcher::device_scratch(DeviceScratch& s, uint32_t device, uint64_t bytes) {
  if (!s.buffer || s.device != device || s.buffer->size() < bytes) {
    s.buffer.reset();
    s.buffer = std::make_unique<hal::Buffer>(comm_.plugin(), device, std::max<uint64_t>(bytes, 1));
    s.device = device;
  }
  return s.buffer->data();
}

void Dispatcher::to_device(void* dst, uint32_t device, const void* src, uint64_t bytes) {
  const hal::Plugin& pl = *comm_.plugin();
  if (bytes)
    pl.check(pl.device_api().memcpy(device, dst, src, bytes, HAL_COPY_HOST_TO_DEVICE, nullptr),
             "hal_device_api_t.memcpy (MoE plan to the device)");
}

namespace {

void device_copy(const hal::Plugin& pl, uint32_t device, void* dst, const void* src, uint64_t bytes) {
  pl.check(pl.device_api().memcpy(device, dst, src, bytes, HAL_COPY_DEVICE_TO_DEVICE, nullptr),
           "hal_device_api_t.memcpy (MoE rows reordered on the device)");
}

}  // namespace

void Dispatcher::dispatch_on_device(const Plan& p, const void* tokens, uint64_t hidden, hal_dtype_t dtype,
                                    void* rows) {
  const uint32_t device = options_.device;
  if (options_.exchange != Exchange::all_to_all)
    throw Error(Code::not_supported, "dispatch_on_device: the all-gather exchange runs on host memory only");
  const uint64_t row = row_bytes(hidden, dtype, "dispatch_on_device");
  const uint32_t L = local_experts_, R = ep_size_;
  const kernels::Place where{comm_.plugin().get(), device};
  auto* sent = static_cast<uint8_t*>(device_scratch(dev_sent_, device, p.sent_rows() * row));
  if (p.num_tokens > 0) {
    auto* row_of =
        static_cast<int64_t*>(device_scratch(dev_row_of_, device, p.row_of.size() * sizeof(int64_t)));
    to_device(row_of, device, p.row_of.data(), p.row_of.size() * sizeof(int64_t));
    kernels::moe_permute(where, tokens, p.num_tokens, hidden, dtype, row_of, p.top_k, p.sent_rows(), sent);
  }
  const hal::Plugin& pl = *comm_.plugin();
  auto* to = static_cast<uint8_t*>(rows);
  if (rounds(p, row) > 0) {
    exchange_rounds(p, row, sent, to, /*to_experts=*/true);
    each_block(p, first_slot_, ep_rank_, L, R, row,
               [&](uint64_t expert_at, uint64_t at, uint64_t n, bool own) {
                 if (own) device_copy(pl, device, to + expert_at, sent + at, n);
               });
    return;
  }
  const Blocks b = to_expert_blocks(p, first_slot_, ep_rank_, L, R, row);
  auto* by_source = static_cast<uint8_t*>(device_scratch(dev_exchange_, device, b.recv_total));
  run(alltoallv(HAL_DTYPE_U8, sent, by_source, b.sc, b.sd, b.rc, b.rd));
  each_block(p, first_slot_, ep_rank_, L, R, row, [&](uint64_t expert_at, uint64_t at, uint64_t n, bool own) {
    device_copy(pl, device, to + expert_at, (own ? sent : by_source) + at, n);
  });
}

void Dispatcher::combine_on_device(const Plan& p, const void* expert_out, const float* weights,
                                   uint64_t hidden, hal_dtype_t dtype, void* out) {
  const uint32_t device = options_.device;
  if (options_.exchange != Exchange::all_to_all)
    throw Error(Code::not_supported, "combine_on_device: the all-gather exchange runs on host memory only");
  const uint64_t row = row_bytes(hidden, dtype, "combine_on_device");
  const uint32_t L = local_experts_, R = ep_size_;
  const hal::Plugin& pl = *comm_.plugin();
  const auto* in = static_cast<const uint8_t*>(expert_out);
  auto* back = static_cast<uint8_t*>(device_scratch(dev_back_, device, p.sent_rows() * row));
  if (rounds(p, row) > 0) {
    each_block(p, first_slot_, ep_rank_, L, R, row,
               [&](uint64_t expert_at, uint64_t at, uint64_t n, bool own) {
                 if (own) device_copy(pl, device, back + at, in + expert_at, n);
               });
    exchange_rounds(p, row, in, back, /*to_experts=*/false);
  } else {
    auto* by_source = static_cast<uint8_t*>(device_scratch(dev_exchange_, device, p.expert_rows() * row));
    each_block(p, first_slot_, ep_rank_, L, R, row,
               [&](uint64_t expert_at, uint64_t at, uint64_t n, bool own) {
                 device_copy(pl, device, (own ? back : by_source) + at, in + expert_at, n);
               });
    const Blocks b = from_expert_blocks(p, first_slot_, ep_rank_, L, R, row);
    run(alltoallv(HAL_DTYPE_U8, by_source, back, b.sc, b.sd, b.rc, b.rd));
  }
  if (p.num_tokens == 0) return;
  const uint64_t choices = p.row_of.size();
  auto* row_of = static_cast<int64_t*>(device_scratch(dev_row_of_, device, choices * sizeof(int64_t)));
  auto* w = static_cast<float*>(device_scratch(dev_weights_, device, choices * sizeof(float)));
  to_device(row_of, device, p.row_of.data(), choices * sizeof(int64_t));
  to_device(w, device, weights, choices * sizeof(float));
  kernels::moe_unpermute(kernels::Place{comm_.plugin().get(), device}, back, p.sent_rows(), row_of, w,
                         p.num_tokens, p.top_k, hidden, dtype, out);
}

LoadStats Dispatcher::global_stats(const LoadStats& local) {
  const size_t E = options_.num_experts, R = ep_size_;
  if (local.routed.size() != E)
    throw Error(Code::invalid_argument, "global_stats: statistics of " + std::to_string(local.routed.size()) +
                                            " experts in a group of " + std::to_string(E));
  std::vector<uint64_t> mine(2 + 2 * static_cast<size_t>(E)), all(mine.size() * R);
  mine[0] = local.num_tokens;
  mine[1] = local.top_k;
  std::copy(local.routed.begin(), local.routed.end(), mine.begin() + 2);
  std::copy(local.kept.begin(), local.kept.end(), mine.begin() + 2 + E);
  std::vector<double> probs(local.prob_sum), all_probs(static_cast<size_t>(E) * R);
  run_small(hal::coll_args(HAL_COLL_ALL_GATHER, HAL_DTYPE_I64, mine.size(), mine.data(), all.data()),
            mine.size() * 8, all.size() * 8);
  run_small(hal::coll_args(HAL_COLL_ALL_GATHER, HAL_DTYPE_F64, E, probs.data(), all_probs.data()), E * 8,
            all_probs.size() * 8);
  LoadStats sum;
  for (uint32_t s = 0; s < R; ++s) {
    const uint64_t* m = all.data() + s * mine.size();
    LoadStats one;
    one.num_tokens = m[0];
    one.top_k = static_cast<uint32_t>(m[1]);
    one.routed.assign(m + 2, m + 2 + E);
    one.kept.assign(m + 2 + E, m + 2 + 2 * E);
    one.prob_sum.assign(all_probs.begin() + s * E, all_probs.begin() + (s + 1) * E);
    sum.add(one);
  }
  return sum;
}

}  // namespace sigma::parallel
