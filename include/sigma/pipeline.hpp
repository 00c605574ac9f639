// sigma/pipeline.hpp -- pipeline parallelism over the HAL: the 1F1B
// schedule (pure) and the stage runner that moves activations forward and
// gradients back with the HAL's send / receive.
//
// Each stage runs its warm-up forwards (stages - stage - 1 of them), then
// alternates one forward and one backward, then drains its backwards: at
// most `stages - stage` activations wait for their backward, and
// micro-batches go backward in order 0, 1, ..., so gradients accumulate in
// the same order as without a pipeline. Activations travel on one
// communicator and gradients on another, each posted in schedule order and
// waited only when its data is needed or its buffer comes round again, so a
// stage never waits on a send while its peer waits on it.
#pragma once

#include <sigma/export.hpp>

#include <sigma/hal.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

namespace sigma::parallel {

enum class PipeOp { forward, backward };

struct PipeStep {
  PipeOp op = PipeOp::forward;
  uint32_t micro = 0;
  bool operator==(const PipeStep& o) const { return op == o.op && micro == o.micro; }
};

// The 1F1B order of one stage's steps. Throws Error(invalid_argument) for
// zero stages or micro-batches, or stage >= stages. Pure; any thread.
SIGMA_EXPORT std::vector<PipeStep> schedule_1f1b(uint32_t stages, uint32_t stage, uint32_t micro_batches);
// The idle fraction 1F1B leaves on each stage when forward and backward
// take the same time on every stage: (stages - 1) / (micro_batches +
// stages - 1). Pure.
SIGMA_EXPORT double bubble_fraction_1f1b(uint32_t stages, uint32_t micro_batches);

struct PipelineOptions {
  uint32_t micro_batches = 1;
  // Bytes of one micro-batch's activation between two stages (and of its
  // gradient): the same at every stage boundary.
  uint64_t activation_bytes = 0;
  // How long a stage waits for one activation or gradient before it
  // aborts its communicators and throws Error(timeout) naming the peer.
  std::chrono::nanoseconds timeout = std::chrono::seconds(60);
  // The world rank of each stage, for messages; empty: stage numbers only.
  std::vector<uint32_t> world_ranks{};
};

// The framework's compute for one stage. Both run on the thread that calls
// Pipeline::run, one at a time. The buffers are the pipeline's, valid only
// during the call: a framework keeps what its backward needs itself.
struct StageFns {
  // in: the previous stage's activation (nullptr on the first stage, which
  // reads its own input). out: this stage's activation, activation_bytes
  // (nullptr on the last stage, which computes its loss instead).
  std::function<void(uint32_t micro, const void* in, void* out)> forward;
  // grad_out: the gradient of this stage's output from the next stage
  // (nullptr on the last stage). grad_in: the gradient of this stage's
  // input, activation_bytes (nullptr on the first stage).
  std::function<void(uint32_t micro, const void* grad_out, void* grad_in)> backward;
};

struct PipelineStats {
  double seconds = 0;       // the whole step on this stage
  double busy_seconds = 0;  // inside forward and backward
  // The measured idle fraction: 1 - busy / whole.
  double bubble() const { return seconds > 0 ? 1 - busy_seconds / seconds : 0; }
};

// One stage of a pipeline. Holds borrowed communicators of the pipeline's
// stages (rank = stage), which must outlive it: `forward` carries
// activations, `backward` gradients. Thread-safety: one thread.
class SIGMA_EXPORT Pipeline {
 public:
  // Throws Error(invalid_argument) for stage >= stages, zero micro-batches,
  // or zero activation bytes with more than one stage.
  Pipeline(hal::Communicator& forward, hal::Communicator& backward, uint32_t stage, uint32_t stages,
           const PipelineOptions& options);
  // Runs one step: every micro-batch forward and backward, in 1F1B order.
  // Collective over the stages. A peer that fails or does not send within
  // the timeout ends the step with Error (its code: timeout, remote_error,
  // aborted, ...) naming this stage, the peer's stage and world rank and
  // the micro-batch; both communicators are then aborted (rebuild them).
  // An exception from the framework's functions aborts them too and is
  // passed on.
  PipelineStats run(const StageFns& fns);

 private:
  struct Impl;
  hal::Communicator& fwd_;
  hal::Communicator& bwd_;
  uint32_t stage_, stages_;
  PipelineOptions options_;
};

}  // namespace sigma::parallel
