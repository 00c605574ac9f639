// sigma/pipeline.hpp -- pipeline parallelism over the HAL: the 1F1B and
// interleaved 1F1B schedules (pure) and the stage runner that moves
// activations forward and gradients back with the HAL's send / receive.
//
// Each stage runs its warm-up forwards (stages - stage - 1 of them), then
// alternates one forward and one backward, then drains its backwards: at
// most `stages - stage` activations wait for their backward, and
// micro-batches go backward in order 0, 1, ..., so gradients accumulate in
// the same order as without a pipeline. With interleaving each stage holds
// several model chunks (virtual stages) and a micro-batch goes round the
// stages once per chunk, which divides the bubble by the number of chunks
// for as many more sends. Activations travel on one
// communicator and gradients on another, each posted in schedule order and
// waited only when its data is needed or its buffer comes round again, so a
// stage never waits on a send while its peer waits on it.
#pragma once

#include <sigma/export.hpp>

#include <sigma/hal.hpp>
#include <sigma/parallel.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

namespace sigma::parallel {

enum class PipeOp { forward, backward };

struct PipeStep {
  PipeOp op = PipeOp::forward;
  uint32_t micro = 0;
  // The stage's model chunk: chunk c of stage s is the model's part
  // c * stages + s. Always 0 without interleaving.
  uint32_t chunk = 0;
  bool operator==(const PipeStep& o) const { return op == o.op && micro == o.micro && chunk == o.chunk; }
};

// The 1F1B order of one stage's steps. Throws Error(invalid_argument) for
// zero stages or micro-batches, or stage >= stages. Pure; any thread.
SIGMA_EXPORT std::vector<PipeStep> schedule_1f1b(uint32_t stages, uint32_t stage, uint32_t micro_batches);
// The idle fraction 1F1B leaves on each stage when forward and backward
// take the same time on every stage: (stages - 1) / (micro_batches +
// stages - 1). Pure.
SIGMA_EXPORT double bubble_fraction_1f1b(uint32_t stages, uint32_t micro_batches);

// Interleaved 1F1B (Narayanan et al., 2021) over `chunks` model chunks per
// stage. Forwards take micro-batches in groups of `stages`, each group
// through chunk 0, then chunk 1, ...; backwards the same groups through the
// chunks in reverse. Warm-up: (stages - stage - 1) * 2 + (chunks - 1) *
// stages forwards (all of them when micro_batches == stages), then one
// forward and one backward alternately, then the remaining backwards. Each
// chunk's micro-batches go backward in order, so gradients accumulate as
// without a pipeline. chunks 1 is schedule_1f1b. Throws
// Error(invalid_argument) for zero stages, chunks or micro-batches, stage
// >= stages, or chunks > 1 with one stage or micro_batches not a multiple
// of stages. Pure; any thread.
SIGMA_EXPORT std::vector<PipeStep> schedule_interleaved(uint32_t stages, uint32_t stage, uint32_t chunks,
                                                        uint32_t micro_batches);
// The ideal idle fraction with interleaving: (stages - 1) / (chunks *
// micro_batches + stages - 1). Pure.
SIGMA_EXPORT double bubble_fraction_interleaved(uint32_t stages, uint32_t chunks, uint32_t micro_batches);

// Where one step's input comes from and its output goes: a stage, or -1
// for the model's own input (the first chunk's forward, the last chunk's
// backward) and for its loss (the last chunk's forward, the first chunk's
// backward). A forward receives activations from the previous virtual
// stage and sends to the next: stage - 1 and stage + 1, wrapping from the
// last stage to the first between chunks. A backward the reverse. What
// wraps travels on the wrap communicators. Pure.
struct PipeLinks {
  int32_t receive_from = -1, send_to = -1;
  bool receive_wraps = false, send_wraps = false;
};
SIGMA_EXPORT PipeLinks pipe_links(uint32_t stages, uint32_t stage, uint32_t chunks, const PipeStep& step);
// How many send buffers a stage keeps for one direction (forward:
// activations, backward: gradients), so that a buffer is reused only after
// its send had time to be received. Pure.
SIGMA_EXPORT uint32_t pipe_send_slots(uint32_t stages, uint32_t stage, uint32_t chunks,
                                      uint32_t micro_batches, PipeOp op);

struct PipelineOptions {
  uint32_t micro_batches = 1;
  // Model chunks per stage (virtual stages): 1 is plain 1F1B; more
  // interleave (micro_batches must then be a multiple of the stages).
  uint32_t chunks = 1;
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
// `chunk` is the stage's model chunk (0 without interleaving).
struct StageFns {
  // in: the previous virtual stage's activation (nullptr for the model's
  // first chunk, which reads its own input). out: this chunk's activation,
  // activation_bytes (nullptr for the last chunk, which computes the loss).
  std::function<void(uint32_t micro, uint32_t chunk, const void* in, void* out)> forward;
  // grad_out: the gradient of this chunk's output from the next virtual
  // stage (nullptr for the last chunk). grad_in: the gradient of this
  // chunk's input, activation_bytes (nullptr for the first chunk).
  std::function<void(uint32_t micro, uint32_t chunk, const void* grad_out, void* grad_in)> backward;
};

struct PipelineStats {
  double seconds = 0;       // the whole step on this stage
  double busy_seconds = 0;  // inside forward and backward
  // The measured idle fraction: 1 - busy / whole.
  double bubble() const { return seconds > 0 ? 1 - busy_seconds / seconds : 0; }
};

// One stage of a pipeline. Holds borrowed communicators of the pipeline's
// stages (rank = stage), which must outlive it: `forward` carries
// activations, `backward` gradients; with interleaving, `forward_wrap`
// carries the activations from the last stage to the first between chunks
// and `backward_wrap` their gradients back. Operations on one communicator
// run in posting order and a send completes only when its peer receives,
// so a stage's sends and receives of one direction must not share a
// communicator where the other side could be waiting on this one: the wrap
// communicators keep them apart (a test runs every schedule against that
// transport). Thread-safety: one thread.
class SIGMA_EXPORT Pipeline {
 public:
  // Throws Error(invalid_argument) for stage >= stages, zero micro-batches,
  // zero activation bytes with more than one stage, chunks the interleaved
  // schedule refuses, or chunks > 1 without both wrap communicators.
  Pipeline(hal::Communicator& forward, hal::Communicator& backward, uint32_t stage, uint32_t stages,
           const PipelineOptions& options, hal::Communicator* forward_wrap = nullptr,
           hal::Communicator* backward_wrap = nullptr);
  // This rank's stage of `groups`: their pipeline communicators, chunks
  // from the layout's vpp, the stages' world ranks for messages.
  Pipeline(const Groups& groups, PipelineOptions options);
  // Runs one step: every micro-batch forward and backward through every
  // chunk, in (interleaved) 1F1B order.
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
  hal::Communicator* fwd_wrap_;
  hal::Communicator* bwd_wrap_;
  uint32_t stage_, stages_;
  PipelineOptions options_;
};

}  // namespace sigma::parallel
