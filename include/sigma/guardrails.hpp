// sigma/guardrails.hpp -- numerical guardrails for a training loop.
//
// Configure once (YAML or the Config struct), then per step hand over the
// gradient buffers grouped by layer, the loss and the step number. The
// engine runs one fused scan per buffer (non-finite count, sum of squares,
// amax), exchanges the per-layer figures of every rank in one small
// collective, and returns the same Decision on every rank: apply (with the
// factor to multiply gradients by), skip, roll back to a snapshot and skip
// a data window; plus loss-scale changes and layers to run in higher or
// lower precision. Every parameter-fingerprint interval it compares the
// data-parallel replicas' parameters and names the odd rank. Every decision
// is journalled as one JSON line with its reason and figures.
//
// Thread-safety: a Guardrails object is used by one thread at a time (the
// training loop's). Calls marked "collective" must be made by every rank of
// the group in the same order, like the HAL's collectives.
#pragma once

#include <sigma/export.hpp>

#include <sigma/hal.h>
#include <sigma/error.hpp>
#include <sigma/hal.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace sigma::guardrails {

// PyTorch GradScaler's semantics: start at initial_scale; on any non-finite
// gradient skip the step and multiply by backoff_factor; after
// growth_interval clean steps in a row multiply by growth_factor. Off: the
// scale stays 1 (bf16/f32 training), non-finite steps are still skipped.
struct LossScalingConfig {
  bool enabled = true;
  double initial_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  uint64_t growth_interval = 2000;
  double min_scale = 1.0;
  double max_scale = 16777216.0;  // 2^24
};

// Global-norm clipping over all ranks: the norm of the unscaled gradients
// is brought down to max_norm. 0 turns it off.
struct ClippingConfig {
  double max_norm = 1.0;
};

// Loss spikes, by robust statistics over the last `window` accepted
// losses: a loss above median + threshold * 1.4826 * MAD that is also more
// than min_relative above the median is a spike, once min_history losses are
// known. A spike rolls back to the newest snapshot at or before
// (spike step - 1 - rollback_margin) and skips the data of steps
// [spike - skip_before, spike + skip_after]. escalate_after spikes within
// escalate_within steps escalate every layer to fp32.
struct SpikeConfig {
  bool enabled = true;
  uint64_t window = 100;
  uint64_t min_history = 20;
  double threshold = 6.0;
  double min_relative = 0.05;
  uint64_t rollback_margin = 0;
  uint64_t skip_before = 0;
  uint64_t skip_after = 10;
  uint64_t escalate_after = 3;
  uint64_t escalate_within = 1000;
};

// Per-layer precision: a layer is escalated to fp32 when, over its last
// `window` steps, at least max_overflow_rate * window of them overflowed on
// some rank (a non-finite gradient, or an activation beyond its
// low-precision dtype's largest value), or when the headroom below that
// largest value falls under min_headroom_bits: of its unscaled gradients'
// amax, or of its activations' amax where the caller reports them
// (Guardrails::step). It steps back down after calm_steps steps with no
// overflow and at least min_headroom_bits + 1 of headroom.
struct PrecisionConfig {
  bool enabled = true;
  uint64_t window = 100;
  double max_overflow_rate = 0.05;
  double min_headroom_bits = 4.0;
  uint64_t calm_steps = 200;
};

// Silent data corruption: every interval steps the data-parallel replicas'
// parameter fingerprints (xxh3) are compared.
struct SdcConfig {
  bool enabled = true;
  uint64_t interval = 100;
};

struct JournalConfig {
  std::string path;        // JSON lines; empty: no journal
  bool all_ranks = false;  // false: rank 0 writes; true: "<path>.rank<N>"
};

struct SIGMA_EXPORT Config {
  LossScalingConfig loss_scaling;
  ClippingConfig clipping;
  SpikeConfig spike;
  PrecisionConfig precision;
  SdcConfig sdc;
  JournalConfig journal;
  // Bound on the one exchange per step; a peer that does not come within it
  // is treated as hung: the communicator is aborted and Error(timeout) thrown.
  std::chrono::milliseconds exchange_timeout{60000};

  // Throws Error(invalid_argument) "guardrails: <field>: <why>" for an
  // impossible value (negative or zero rates, factors on the wrong side of
  // 1, min above max, ...).
  void validate() const;
  // Parses YAML (the same keys as the structs above, nested under
  // loss_scaling, clipping, spike, precision, sdc, journal, plus
  // exchange_timeout_ms). Missing keys keep their defaults. Throws
  // Error(invalid_argument) "file:line: key: why" for a syntax error, an
  // unknown key, a wrong type or an impossible value.
  static Config from_yaml(const std::string& text, const std::string& name = "(guardrails config)");
  static Config from_yaml_file(const std::string& path);
};

// A layer the guardrails track, registered once. `dtype` is its
// low-precision compute type (f16 or bf16; f32 layers are never escalated).
struct LayerInfo {
  std::string name;
  hal_dtype_t dtype = HAL_DTYPE_BF16;
};

// One buffer of f32 / f16 / bf16 values, borrowed for the call only: in
// host memory (plugin nullptr), or in `device`'s memory of `plugin`, which
// the guardrails then read only through the HAL (its kernels extension, or
// copies to the host), never through the pointer.
struct BufferView {
  const void* data = nullptr;
  uint64_t count = 0;
  hal_dtype_t dtype = HAL_DTYPE_F32;
  const hal::Plugin* plugin = nullptr;
  uint32_t device = 0;
};

// What each rank's gradient buffers are. sharded: disjoint parts of the
// model's gradients (ZeRO/FSDP shards, tensor or expert parallel): the
// global sum of squares is the sum over ranks. replicated: the same,
// already all-reduced gradients on every rank (plain data parallelism): the
// ranks' figures must agree, and a rank whose figures differ from the
// majority's has a corrupted copy (a silent error in the all-reduce or in
// its memory): the step is skipped everywhere and the rank named.
enum class GradLayout { sharded, replicated };

// Who the exchange goes to. comm == nullptr (or world 1): a single process.
// The communicator is borrowed and must outlive the Guardrails; `device` is
// the HAL device its buffers are allocated on.
struct Group {
  hal::Communicator* comm = nullptr;
  uint32_t device = 0;
  int rank = 0;
  int world = 1;
  GradLayout layout = GradLayout::sharded;
};

enum class Action {
  apply,     // update with the gradients multiplied by Decision::grad_multiplier
  skip,      // do not update; go on with the next batch
  rollback,  // restore the snapshot of rollback_to_step, skip the data window
};
SIGMA_EXPORT const char* action_name(Action a);

struct Decision {
  uint64_t step = 0;
  Action action = Action::apply;
  std::string reason;                 // one sentence with the figures that decided it
  double loss = 0;                    // mean over ranks
  double global_norm = 0;             // of the unscaled gradients, over all ranks
  double clip_factor = 1;             // <= 1
  double loss_scale = 1;              // the scale these gradients carry
  double next_loss_scale = 1;         // the scale to use from the next step on
  double grad_multiplier = 1;         // clip_factor / loss_scale: what apply multiplies by
  uint64_t non_finite = 0;            // over all ranks and layers
  std::vector<int> non_finite_ranks;  // ranks that had any: suspects
  std::vector<int> mismatch_ranks;    // replicated layout: ranks whose figures differ from the majority's
  uint64_t rollback_to_step = 0;      // rollback: the snapshot to restore
  uint64_t skip_data_begin = 0, skip_data_end = 0;        // rollback: batches [begin, end) to skip
  std::vector<std::string> escalate;                      // layers to run in fp32 from now on
  std::vector<std::string> deescalate;                    // layers back to their low precision
  std::vector<std::string> escalate_why, deescalate_why;  // the reason for each, in the same order
  // Call check_fingerprint() after this step: its interval came, or the
  // replicated gradients disagreed. A mismatch there asks for the step to be
  // re-run on another device (FingerprintResult::rerun_needed).
  bool check_fingerprint = false;
  // Every rank's riders (see Guardrails::step), rank after rank.
  std::vector<double> riders;
};

struct FingerprintResult {
  uint64_t step = 0;
  bool match = true;
  std::vector<uint64_t> fingerprints;  // per rank
  // The ranks whose fingerprint differs from a strict majority's; empty when
  // all agree or when there is no majority (e.g. two replicas).
  std::vector<int> odd_ranks;
  // On a mismatch the suspect step must be re-run on another device (a spare
  // when the runtime has one) and the result given to attribute_rerun().
  bool rerun_needed = false;
  std::string reason;
};

// What the guardrails tell the health monitor about a device.
struct FaultReport {
  uint64_t step = 0;
  int rank = -1;
  std::string kind;  // "silent_data_corruption"
  std::string detail;
};

class SIGMA_EXPORT Guardrails {
 public:
  // Validates the config, opens the journal. Throws Error(invalid_argument)
  // for a bad config or layer list (empty names, duplicates, dtypes other
  // than f16/bf16/f32), Error(unavailable) when the journal cannot be
  // opened.
  Guardrails(Config config, std::vector<LayerInfo> layers, Group group = {});
  ~Guardrails();
  Guardrails(const Guardrails&) = delete;
  Guardrails& operator=(const Guardrails&) = delete;

  // Collective. grads[i] are the buffers of layers()[i] (any number each).
  // Scans each buffer once, exchanges [loss, per layer: non-finite, sum of
  // squares, amax] with every rank, decides and journals. Steps must grow
  // (after a rollback they restart above rollback_to_step).
  // `riders`: a few figures of this rank's own that travel in the same
  // exchange instead of a collective of their own (an autotuner's samples,
  // load statistics); every rank's come back in Decision::riders. Every
  // rank passes the same number of them.
  // `activation_amax`: empty, or one figure per layer: the largest |value|
  // this rank's forward pass computed in that layer before rounding it to
  // the layer's compute dtype (an escalated layer's f32 values too; +inf or
  // NaN for a value that was not finite). Every rank passes them or none
  // does. The largest over ranks is judged against the dtype's range with
  // the gradients' amax: a forward pass that would overflow the format
  // escalates its layer before a gradient shows it.
  // Throws Error(invalid_argument) for a wrong layer count, a NULL buffer or
  // another dtype, or activation figures for the wrong number of layers;
  // timeout / aborted / remote_error from the exchange.
  Decision step(uint64_t step, double loss, const std::vector<std::vector<BufferView>>& grads,
                const std::vector<double>& riders = {}, const std::vector<double>& activation_amax = {});

  // A snapshot of the state after `step` now exists (memory tier or disk):
  // a candidate for rollback.
  void note_snapshot(uint64_t step);

  // True when step() at `step` should be followed by check_fingerprint().
  bool fingerprint_due(uint64_t step) const;
  // Collective. xxh3 over the parameter buffers (their bytes, in order),
  // gathered from every rank and compared. Journalled.
  FingerprintResult check_fingerprint(uint64_t step, const std::vector<BufferView>& params);
  // After a mismatch at `step` (the last check_fingerprint): the fingerprint
  // of the same step re-run on `device`. Replicas that disagree with the
  // re-run are at fault; each is journalled and reported to on_fault().
  // Returns them; empty when the re-run matches no replica (the fault is
  // then not attributed, and the journal says so). Not collective: every
  // rank that calls it with the same figures reaches the same answer.
  // Throws Error(invalid_argument) when `step` had no mismatch.
  std::vector<int> attribute_rerun(uint64_t step, uint64_t rerun_fingerprint, const std::string& device);
  // A fingerprint vote the caller exchanged itself (vote_replicas): kept
  // as the last check's and journalled. Not collective.
  void note_fingerprints(const FingerprintResult& result);
  // Called for every attributed fault (the health monitor's entry).
  void on_fault(std::function<void(const FaultReport&)> sink);

  double loss_scale() const;
  const std::vector<LayerInfo>& layers() const;
  bool escalated(const std::string& layer) const;
  // The whole policy state (scale, counters, loss history, snapshots, layer
  // precision) as JSON, for checkpoints; restore_state() takes it back.
  // Throws Error(invalid_argument) for text that is not such a state.
  std::string save_state() const;
  void restore_state(const std::string& json);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// xxh3 over the bytes of every buffer, in order: a replica's fingerprint.
SIGMA_EXPORT uint64_t fingerprint(const std::vector<BufferView>& params);

// One rank's fingerprints in a world of data-parallel replicas: of what
// every rank holds alike (the replicated parameters) and of all it holds
// (what its counterparts, the same position in the other replicas, hold
// alike). `present`: false for the ranks of a replica that is out.
struct RankPrints {
  uint64_t shared = 0, whole = 0;
  bool present = false;
};

// The vote over such a world: `prints` by rank, rank = replica x `size` +
// position. The agreed value of a set of prints is its strict majority's,
// or else that of its one largest group of two or more equal prints (two
// ranks that computed the same bytes: a corruption does not give two
// hashes alike). A rank is odd when its shared print differs from the
// present ranks' agreed one, or its whole print from its counterparts'.
// Where counterparts agree on nothing (two replicas) their disagreement is
// settled when the ranks not already odd agree; otherwise the counterparts
// are unsettled and rerun_needed is set.
// fingerprints: the whole prints by rank (0 for absent ones). Pure. Throws
// Error(invalid_argument) when `prints` is not whole replicas of `size`.
SIGMA_EXPORT FingerprintResult vote_replicas(uint64_t step, uint32_t size,
                                             const std::vector<RankPrints>& prints);

}  // namespace sigma::guardrails
