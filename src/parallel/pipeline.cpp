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

Pipeline::Pipeline(hal::Communicator& forward, hal::Communicator& backward, uint32_t stage, uint32_t stages,
                   const PipelineOptions& options)
    : fwd_(forward), bwd_(backward), stage_(stage), stages_(stages), options_(options) {
  if (stage >= stages || options.micro_batches == 0 || (stages > 1 && options.activation_bytes == 0))
    throw Error(Code::invalid_argument, "pipeline: stage " + std::to_string(stage) + " of " +
                                            std::to_string(stages) + ", " +
                                            std::to_string(options.micro_batches) + " micro-batches, " +
                                            std::to_string(options.activation_bytes) + " activation bytes");
}

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
    // At most stages - stage activations are in flight; one more slot so
    // that a buffer is reused only after its send had a whole step to go.
    act_out.resize(std::min<size_t>(p.options_.micro_batches, p.stages_ - p.stage_) + 1);
    grad_out.resize(2);
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
  const bool first = stage_ == 0, last = stage_ + 1 == stages_;
  PipelineStats stats;
  const auto t0 = clock::now();
  const auto timed = [&](const auto& fn) {
    const auto a = clock::now();
    fn();
    stats.busy_seconds += std::chrono::duration<double>(clock::now() - a).count();
  };
  try {
    for (const PipeStep& step : schedule_1f1b(stages_, stage_, options_.micro_batches)) {
      const std::string mb = "micro-batch " + std::to_string(step.micro);
      if (step.op == PipeOp::forward) {
        if (!first)
          st.receive(fwd_, st.act_in.data(), stage_ - 1,
                     "receiving the activation of " + mb + " from " + st.peer_name(stage_ - 1));
        Impl::Slot* out = last ? nullptr : &st.take(st.act_out, st.next_act, stage_ + 1, "activation");
        timed([&] {
          fns.forward(step.micro, first ? nullptr : st.act_in.data(), out ? out->data.data() : nullptr);
        });
        if (out) st.send(fwd_, *out, stage_ + 1, step.micro);
      } else {
        if (!last)
          st.receive(bwd_, st.grad_in_buf.data(), stage_ + 1,
                     "receiving the gradient of " + mb + " from " + st.peer_name(stage_ + 1));
        Impl::Slot* out = first ? nullptr : &st.take(st.grad_out, st.next_grad, stage_ - 1, "gradient");
        timed([&] {
          fns.backward(step.micro, last ? nullptr : st.grad_in_buf.data(), out ? out->data.data() : nullptr);
        });
        if (out) st.send(bwd_, *out, stage_ - 1, step.micro);
      }
    }
    if (!last) st.drain(st.act_out, stage_ + 1, "activation");
    if (!first) st.drain(st.grad_out, stage_ - 1, "gradient");
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
