// The 1F1B schedule and the stage runner over the HAL's send / receive.
#include <sigma/pipeline.hpp>

#include <algorithm>
#include <deque>
#include <optional>
#include <string>

namespace sigma::parallel {

std::vector<PipeStep> schedule_1f1b(uint32_t stages, uint32_t stage, uint32_t micro) {
  if (stages == 0 || micro == 0 || stage >= stages)
    throw Error(Code::invalid_argument, "1F1B: stage " + std::to_string(stage) + " of " +
                                            std::to_string(stages) + " with " + std::to_string(micro) +
                                            " micro-batches");
  const uint32_t warmup = std::min(stages - stage - 1, micro);
  std::vector<PipeStep> out;
  for (uint32_t i = 0; i < warmup; ++i) out.push_back({PipeOp::forward, i});
  for (uint32_t i = warmup; i < micro; ++i) {
    out.push_back({PipeOp::forward, i});
    out.push_back({PipeOp::backward, i - warmup});
  }
  for (uint32_t i = micro - warmup; i < micro; ++i) out.push_back({PipeOp::backward, i});
  return out;
}

double bubble_fraction_1f1b(uint32_t stages, uint32_t micro) {
  if (stages == 0 || micro == 0) return 0;
  return (stages - 1.0) / (micro + stages - 1.0);
}

namespace {

void check_interleaved(uint32_t stages, uint32_t stage, uint32_t chunks, uint32_t micro) {
  if (stages == 0 || chunks == 0 || micro == 0 || stage >= stages || (chunks > 1 && stages == 1) ||
      (chunks > 1 && micro % stages != 0))
    throw Error(Code::invalid_argument,
                "interleaved 1F1B: stage " + std::to_string(stage) + " of " + std::to_string(stages) + ", " +
                    std::to_string(chunks) + " chunks, " + std::to_string(micro) +
                    " micro-batches (chunks > 1 needs two stages or more and micro-batches a multiple of the "
                    "stages)");
}

uint32_t warmup_interleaved(uint32_t stages, uint32_t stage, uint32_t chunks, uint32_t micro) {
  if (chunks == 1) return std::min(stages - stage - 1, micro);
  const uint32_t total = micro * chunks;
  if (micro == stages) return total;
  return std::min(total, (stages - stage - 1) * 2 + (chunks - 1) * stages);
}

// The k-th forward (or backward) of a stage: groups of `stages`
// micro-batches, each group through every chunk in turn.
PipeStep virtual_step(uint32_t stages, uint32_t chunks, uint32_t k, PipeOp op) {
  const uint32_t in_round = k % (stages * chunks), chunk = in_round / stages;
  return {op, k / (stages * chunks) * stages + k % stages,
          op == PipeOp::forward ? chunk : chunks - 1 - chunk};
}

}  // namespace

std::vector<PipeStep> schedule_interleaved(uint32_t stages, uint32_t stage, uint32_t chunks, uint32_t micro) {
  check_interleaved(stages, stage, chunks, micro);
  if (chunks == 1) return schedule_1f1b(stages, stage, micro);
  const uint32_t total = micro * chunks, warmup = warmup_interleaved(stages, stage, chunks, micro);
  std::vector<PipeStep> out;
  for (uint32_t k = 0; k < warmup; ++k) out.push_back(virtual_step(stages, chunks, k, PipeOp::forward));
  for (uint32_t k = 0; k + warmup < total; ++k) {
    out.push_back(virtual_step(stages, chunks, warmup + k, PipeOp::forward));
    out.push_back(virtual_step(stages, chunks, k, PipeOp::backward));
  }
  for (uint32_t k = total - warmup; k < total; ++k)
    out.push_back(virtual_step(stages, chunks, k, PipeOp::backward));
  return out;
}

double bubble_fraction_interleaved(uint32_t stages, uint32_t chunks, uint32_t micro) {
  if (stages == 0 || chunks == 0 || micro == 0) return 0;
  return (stages - 1.0) / (static_cast<double>(chunks) * micro + stages - 1.0);
}

PipeLinks pipe_links(uint32_t stages, uint32_t stage, uint32_t chunks, const PipeStep& step) {
  const bool first = stage == 0 && step.chunk == 0, last = stage + 1 == stages && step.chunk + 1 == chunks;
  const auto prev = static_cast<int32_t>((stage + stages - 1) % stages);
  const auto next = static_cast<int32_t>((stage + 1) % stages);
  PipeLinks l;
  if (step.op == PipeOp::forward) {
    l.receive_from = first ? -1 : prev;
    l.send_to = last ? -1 : next;
    l.receive_wraps = l.receive_from >= 0 && stage == 0;
    l.send_wraps = l.send_to >= 0 && stage + 1 == stages;
  } else {
    l.receive_from = last ? -1 : next;
    l.send_to = first ? -1 : prev;
    l.receive_wraps = l.receive_from >= 0 && stage + 1 == stages;
    l.send_wraps = l.send_to >= 0 && stage == 0;
  }
  return l;
}

uint32_t pipe_send_slots(uint32_t stages, uint32_t stage, uint32_t chunks, uint32_t micro, PipeOp op) {
  check_interleaved(stages, stage, chunks, micro);
  // 1F1B: at most stages - stage activations are in flight, and one more
  // slot lets a buffer be reused only after its send had a whole step to
  // go; gradients alternate with forwards, two suffice. Interleaved: as
  // many as the warm-up puts in flight, plus one, either way.
  if (chunks == 1) return op == PipeOp::forward ? std::min<uint32_t>(micro, stages - stage) + 1 : 2;
  return std::min(micro * chunks, warmup_interleaved(stages, stage, chunks, micro) + 1) + 1;
}

Pipeline::Pipeline(hal::Communicator& forward, hal::Communicator& backward, uint32_t stage, uint32_t stages,
                   const PipelineOptions& options, hal::Communicator* forward_wrap,
                   hal::Communicator* backward_wrap)
    : fwd_(forward),
      bwd_(backward),
      fwd_wrap_(forward_wrap),
      bwd_wrap_(backward_wrap),
      stage_(stage),
      stages_(stages),
      options_(options) {
  if (stage >= stages || options.micro_batches == 0 || (stages > 1 && options.activation_bytes == 0))
    throw Error(Code::invalid_argument, "pipeline: stage " + std::to_string(stage) + " of " +
                                            std::to_string(stages) + ", " +
                                            std::to_string(options.micro_batches) + " micro-batches, " +
                                            std::to_string(options.activation_bytes) + " activation bytes");
  check_interleaved(stages, stage, options.chunks, options.micro_batches);
  if (options.chunks > 1 && (!forward_wrap || !backward_wrap))
    throw Error(Code::invalid_argument,
                "pipeline: " + std::to_string(options.chunks) + " chunks need both wrap communicators");
}

namespace {

PipelineOptions with_layout(const Groups& g, PipelineOptions o) {
  o.chunks = g.layout().vpp;
  if (o.world_ranks.empty()) o.world_ranks = group_members(g.layout(), g.world_rank(), GroupKind::pipeline);
  return o;
}

}  // namespace

Pipeline::Pipeline(const Groups& g, PipelineOptions options)
    : Pipeline(g.comm(GroupKind::pipeline), g.comm(GroupKind::pipeline_grad), g.rank_in(GroupKind::pipeline),
               g.size_of(GroupKind::pipeline), with_layout(g, std::move(options)),
               g.layout().vpp > 1 ? &g.comm(GroupKind::pipeline_wrap) : nullptr,
               g.layout().vpp > 1 ? &g.comm(GroupKind::pipeline_grad_wrap) : nullptr) {}

// One step's state: receive buffers, rings of send buffers whose sends are
// waited only when the buffer comes round again, and the names for errors.
struct Pipeline::Impl {
  Pipeline& p;
  std::vector<uint8_t> act_in, grad_in_buf;
  struct Slot {
    std::vector<uint8_t> data;
    std::optional<hal::Request> send;
    uint32_t micro = 0;
  };
  std::vector<Slot> act_out, grad_out;
  size_t next_act = 0, next_grad = 0;

  explicit Impl(Pipeline& pipe) : p(pipe) {
    const uint64_t n = p.options_.activation_bytes;
    act_in.resize(n);
    grad_in_buf.resize(n);
    const auto slots = [&](PipeOp op) {
      return pipe_send_slots(p.stages_, p.stage_, p.options_.chunks, p.options_.micro_batches, op);
    };
    act_out.resize(slots(PipeOp::forward));
    grad_out.resize(slots(PipeOp::backward));
    for (auto& s : act_out) s.data.resize(n);
    for (auto& s : grad_out) s.data.resize(n);
  }

  std::string peer_name(uint32_t stage) const {
    std::string s = "stage " + std::to_string(stage);
    if (stage < p.options_.world_ranks.size())
      s += " (world rank " + std::to_string(p.options_.world_ranks[stage]) + ")";
    return s;
  }

  [[noreturn]] void fail(Code code, const std::string& what) {
    p.fwd_.abort();
    p.bwd_.abort();
    throw Error(code, "pipeline stage " + std::to_string(p.stage_) + ": " + what);
  }

  void wait(hal::Request& req, const std::string& what) {
    bool done = false;
    try {
      done = req.wait(p.options_.timeout);
    } catch (const Error& e) {
      fail(e.code(), what + ": " + e.what());
    }
    if (!done)
      fail(Code::timeout, what + ": nothing within " +
                              std::to_string(std::chrono::duration<double>(p.options_.timeout).count()) +
                              " s");
  }

  void receive(hal::Communicator& comm, void* buf, uint32_t peer, const std::string& what) {
    auto req = comm.post(hal::coll_args(HAL_COLL_RECV, HAL_DTYPE_U8, p.options_.activation_bytes, nullptr,
                                        buf, HAL_REDUCE_SUM, peer));
    wait(req, what);
  }

  // Takes the ring's next buffer, first waiting for the send still using it.
  Slot& take(std::vector<Slot>& ring, size_t& next, uint32_t peer, const char* kind) {
    Slot& s = ring[next++ % ring.size()];
    if (s.send) {
      wait(*s.send, std::string("sending the ") + kind + " of micro-batch " + std::to_string(s.micro) +
                        " to " + peer_name(peer));
      s.send.reset();
    }
    return s;
  }

  void send(hal::Communicator& comm, Slot& s, uint32_t peer, uint32_t micro) {
    s.micro = micro;
    s.send.emplace(comm.post(hal::coll_args(HAL_COLL_SEND, HAL_DTYPE_U8, p.options_.activation_bytes,
                                            s.data.data(), nullptr, HAL_REDUCE_SUM, peer)));
  }

  void drain(std::vector<Slot>& ring, uint32_t peer, const char* kind) {
    for (auto& s : ring)
      if (s.send) {
        wait(*s.send, std::string("sending the ") + kind + " of micro-batch " + std::to_string(s.micro) +
                          " to " + peer_name(peer));
        s.send.reset();
      }
  }
};

PipelineStats Pipeline::run(const StageFns& fns) {
  using clock = std::chrono::steady_clock;
  Impl st(*this);
  PipelineStats stats;
  const auto t0 = clock::now();
  const auto timed = [&](const auto& fn) {
    const auto a = clock::now();
    fn();
    stats.busy_seconds += std::chrono::duration<double>(clock::now() - a).count();
  };
  const uint32_t chunks = options_.chunks;
  try {
    for (const PipeStep& step : schedule_interleaved(stages_, stage_, chunks, options_.micro_batches)) {
      const PipeLinks to = pipe_links(stages_, stage_, chunks, step);
      const bool forward = step.op == PipeOp::forward;
      const std::string mb = "micro-batch " + std::to_string(step.micro) +
                             (chunks > 1 ? " (chunk " + std::to_string(step.chunk) + ")" : "");
      const auto comm_for = [&](bool wraps) -> hal::Communicator& {
        return forward ? (wraps ? *fwd_wrap_ : fwd_) : (wraps ? *bwd_wrap_ : bwd_);
      };
      uint8_t* in = forward ? st.act_in.data() : st.grad_in_buf.data();
      const char* kind = forward ? "activation" : "gradient";
      if (to.receive_from >= 0) {
        const auto from = static_cast<uint32_t>(to.receive_from);
        st.receive(comm_for(to.receive_wraps), in, from,
                   std::string("receiving the ") + kind + " of " + mb + " from " + st.peer_name(from));
      }
      Impl::Slot* out = nullptr;
      if (to.send_to >= 0)
        out = forward ? &st.take(st.act_out, st.next_act, static_cast<uint32_t>(to.send_to), kind)
                      : &st.take(st.grad_out, st.next_grad, static_cast<uint32_t>(to.send_to), kind);
      const void* arg_in = to.receive_from >= 0 ? in : nullptr;
      void* arg_out = out ? out->data.data() : nullptr;
      timed([&] {
        if (forward)
          fns.forward(step.micro, step.chunk, arg_in, arg_out);
        else
          fns.backward(step.micro, step.chunk, arg_in, arg_out);
      });
      if (out) st.send(comm_for(to.send_wraps), *out, static_cast<uint32_t>(to.send_to), step.micro);
    }
    if (stages_ > 1) {
      st.drain(st.act_out, (stage_ + 1) % stages_, "activation");
      st.drain(st.grad_out, (stage_ + stages_ - 1) % stages_, "gradient");
    }
  } catch (...) {
    // Ours are named already; the framework's pass on as they are. Either
    // way the peers must not wait on this stage: abort (idempotent).
    fwd_.abort();
    bwd_.abort();
    throw;
  }
  stats.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return stats;
}

}  // namespace sigma::parallel
