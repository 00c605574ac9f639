// sigma/parallel.hpp -- MoE parallelism over the HAL: the layout of a job's
// ranks into data-, expert- and pipeline-parallel groups, top-k routing with
// capacity, and the token exchange between the ranks that hold the experts.
//
// The layout: world = pp * dp. Pipeline stages are outermost, so a stage's
// data-parallel ranks are consecutive (one node, where the all-to-all is
// cheapest). Expert parallelism folds into data parallelism: ep divides dp,
// the ep ranks of one expert group are consecutive inside their stage, and
// the dp / ep ranks that hold the same experts form the expert-data group
// (where expert gradients are averaged). By default expert e of E lives on
// expert-group rank e / (E / ep), in contiguous blocks, so a checkpoint
// that names each expert by its global index restores onto any ep that
// divides E; Dispatcher::set_placement puts experts anywhere else (the
// autotuner, sigma/autotune.hpp).
//
// The exchange: route() decides, on each rank alone, which experts every
// token goes to and which choices are dropped (over capacity) before any
// byte moves. Dispatcher::plan() exchanges the per-expert counts, dispatch()
// permutes the token rows (sigma::kernels) and sends them to the experts'
// ranks, the framework runs its experts on the rows it received, and
// combine() returns the rows and adds them up per token in a fixed order
// (k = 0, 1, ... in f32). An expert always sees its rows in the same order
// -- source rank, then token, then choice -- whatever the exchange, so
// results are bitwise the same for the all-to-all and all-gather exchanges,
// and, dropless, for any number of ranks.
#pragma once

#include <sigma/export.hpp>

#include <sigma/bootstrap.hpp>
#include <sigma/checkpoint.hpp>
#include <sigma/hal.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace sigma::parallel {

// --- Layout ------------------------------------------------------------------

struct Layout {
  uint32_t dp = 1;   // data-parallel degree (per pipeline stage)
  uint32_t ep = 1;   // expert-parallel degree; divides dp
  uint32_t pp = 1;   // pipeline stages
  uint32_t vpp = 1;  // model chunks per stage (interleaved 1F1B when > 1)
  uint32_t world() const { return dp * pp; }
};

// pipeline_grad has the pipeline's members: a second communicator, so that
// gradients going back never queue behind activations going forward. With
// interleaving (vpp > 1) two more carry what wraps from the last stage to
// the first between chunks (activations) and back (gradients): operations
// on one communicator run in posting order, and a stage whose sends and
// receives shared one would wait on itself (sigma/pipeline.hpp).
enum class GroupKind {
  data,
  expert,
  expert_data,
  pipeline,
  pipeline_grad,
  pipeline_wrap,
  pipeline_grad_wrap
};
SIGMA_EXPORT const char* group_kind_name(GroupKind kind);

// Where one rank sits. Thread-safety: plain data.
struct Coords {
  uint32_t stage = 0;      // pipeline stage, 0 .. pp-1
  uint32_t dp_index = 0;   // rank in its data group, 0 .. dp-1
  uint32_t ep_index = 0;   // rank in its expert group, 0 .. ep-1
  uint32_t edp_index = 0;  // rank in its expert-data group, 0 .. dp/ep-1
};

// Throws Error(invalid_argument) saying which degree is wrong: a zero
// degree, ep not dividing dp, dp * pp != world, or vpp > 1 with one stage.
// Pure.
SIGMA_EXPORT void check_layout(const Layout& layout, uint32_t world);
// Pure; `rank` < layout.world().
SIGMA_EXPORT Coords coords_of(const Layout& layout, uint32_t rank);
// The world ranks of `rank`'s group of that kind, in group-rank order.
SIGMA_EXPORT std::vector<uint32_t> group_members(const Layout& layout, uint32_t rank, GroupKind kind);
// Which group of that kind `rank` is in: 0 .. (number of such groups - 1).
SIGMA_EXPORT uint32_t group_index(const Layout& layout, uint32_t rank, GroupKind kind);

// The global experts expert-group rank `ep_index` holds: [first, first +
// count). Throws Error(invalid_argument) when ep does not divide
// num_experts. Pure.
struct ExpertRange {
  uint32_t first = 0;
  uint32_t count = 0;
};
SIGMA_EXPORT ExpertRange expert_range(uint32_t num_experts, uint32_t ep, uint32_t ep_index);

// --- In checkpoints ---------------------------------------------------------

// The layout as the checkpoint's Metadata::parallel_plan holds it:
// {"dp":4,"ep":2,"experts":8,"pp":1,"vpp":1} ("vpp" absent reads as 1). Pure.
SIGMA_EXPORT std::string layout_json(const Layout& layout, uint32_t num_experts);
// Reads it back. Throws Error(invalid_argument) naming what is missing or
// wrong (not JSON, a degree of 0, ep not dividing dp or the experts).
SIGMA_EXPORT Layout parse_layout_json(const std::string& json, uint32_t* num_experts = nullptr);

// This rank's block of experts as a checkpoint view: `view` holds
// expert_range(num_experts, ep, ep_index).count experts along dimension 0,
// saved split along it in a tensor of num_experts. The replicas of a block
// (the expert-data group's ranks) save the same slice; a restore onto any
// ep that divides num_experts reads each block from one of them. Throws
// Error(invalid_argument) when the view's first dimension is not the
// block's expert count.
SIGMA_EXPORT checkpoint::TensorView expert_shard(checkpoint::TensorView view, uint32_t num_experts,
                                                 uint32_t ep, uint32_t ep_index);

// The communicators of one rank, carved from the job's world through
// the HAL: each is created through its own bootstrap prefix
// "<prefix><kind>/<group index>/". A job rebuilds them after the runtime
// replaced a device or shrank the world by constructing new Groups with a
// new prefix (the session's generation) and the new layout.
// Construction is collective over the world: every rank constructs its
// Groups with the same prefix and layout (the groups are created in a fixed
// order, so no rank waits on a group another rank has not reached).
// Thread-safety: as hal::Communicator (one thread posts on each).
class SIGMA_EXPORT Groups {
 public:
  // Throws Error(invalid_argument) for a bad layout, and what
  // hal::Communicator throws (timeout when a group's peers did not come
  // within `timeout`). `store` is shared and kept alive.
  Groups(hal::PluginPtr plugin, std::shared_ptr<bootstrap::Store> store, const std::string& prefix,
         uint32_t device, uint32_t rank, const Layout& layout, std::chrono::nanoseconds timeout);
  ~Groups();
  Groups(const Groups&) = delete;
  Groups& operator=(const Groups&) = delete;

  // Throws Error(invalid_argument) for the wrap groups of a layout with
  // vpp 1, which has none.
  hal::Communicator& comm(GroupKind kind) const;
  // Aborts every group's communicator (what is in flight ends with
  // Error(aborted)). Any thread, like hal::Communicator::abort.
  void abort();
  uint32_t rank_in(GroupKind kind) const;
  uint32_t size_of(GroupKind kind) const;
  const Layout& layout() const { return layout_; }
  const Coords& coords() const { return coords_; }
  uint32_t world_rank() const { return rank_; }

  // After an operation on the `kind` group failed: aborts the group's
  // communicator (members blocked in the operation fail at once), says so
  // in the store (under the groups' prefix), waits up to `window` for the
  // other members
  // to say the same, and returns `failure` with what it learnt: the
  // members that did not report (dead, or hung in the operation) and what
  // each other member saw (a member whose own device was lost says so).
  // A crashed peer is named this way; a hung one only where its peers give
  // up first (else every member reports a timeout). Any thread; once per
  // group per Groups (rebuild the groups after a failure). Never throws:
  // if the store fails, `failure` comes back with a note.
  Error name_failure(GroupKind kind, const Error& failure,
                     std::chrono::nanoseconds window = std::chrono::seconds(2)) const;
  // A DispatchOptions::on_failure that calls name_failure for `kind`. It
  // refers to this Groups, which must outlive every use of it.
  std::function<Error(const Error&)> failure_namer(
      GroupKind kind, std::chrono::nanoseconds window = std::chrono::seconds(2)) const;

 private:
  struct Group;
  const Group& group(GroupKind kind) const;
  Layout layout_;
  Coords coords_;
  uint32_t rank_ = 0;
  std::shared_ptr<bootstrap::Store> store_;
  std::string prefix_;
  std::vector<std::unique_ptr<Group>> groups_;  // indexed by GroupKind
};

// --- Routing (pure) ----------------------------------------------------------

// Which choices over an expert's capacity are dropped.
enum class DropPolicy {
  probability,  // keep the choices with the highest router probability
  position,     // keep the first ones in (token, k) order
};

struct RouterOptions {
  uint32_t num_experts = 0;
  uint32_t top_k = 1;
  // Per expert, capacity = ceil(capacity_factor * num_tokens * top_k /
  // num_experts) choices of this rank's tokens; 0 is dropless.
  double capacity_factor = 0;
  DropPolicy drop = DropPolicy::probability;
  // Weights are the top-k probabilities divided by their sum (Mixtral) when
  // true, the raw softmax probabilities (Switch, GShard) when false.
  bool normalize_top_k = true;
};

// The load-balancing statistics of a batch of tokens, for the auxiliary
// loss and for monitoring. `routed` counts every choice the router made,
// before capacity -- the f_i of the Switch Transformer's loss, which a count
// after dropping understates exactly where the imbalance is worst; `kept`
// counts what the experts received.
struct SIGMA_EXPORT LoadStats {
  uint64_t num_tokens = 0;
  uint32_t top_k = 0;
  std::vector<uint64_t> routed;  // per expert, choices before capacity
  std::vector<uint64_t> kept;    // per expert, choices after capacity
  std::vector<double> prob_sum;  // per expert, the sum of its softmax probability over tokens
  uint64_t dropped() const;
  // E * sum_i f_i * P_i with f_i = routed_i / (tokens * k), P_i = prob_sum_i
  // / tokens: 1 when perfectly balanced; 0 for no tokens.
  double aux_loss() const;
  // Adds another batch's statistics (the same expert count and top_k).
  void add(const LoadStats& other);
};

struct Routing {
  uint64_t num_tokens = 0;
  uint32_t top_k = 0;
  uint64_t capacity = 0;              // per expert; 0 when dropless
  std::vector<int32_t> expert_ids{};  // [num_tokens * top_k]; -1 where dropped
  std::vector<float> weights{};       // [num_tokens * top_k]; a dropped choice keeps its weight
  LoadStats stats{};
};

// Softmax over each token's row of `logits` ([num_tokens, num_experts],
// row-major f32; computed in f32 after subtracting the row's maximum), the
// top_k experts by probability (ties: the lower expert), then capacity.
// Throws Error(invalid_argument) for zero experts, top_k outside
// [1, num_experts], a negative or non-finite capacity factor, or a
// non-finite logit (naming the token). Pure; any thread.
SIGMA_EXPORT Routing route(const float* logits, uint64_t num_tokens, const RouterOptions& options);

// --- Dispatch ----------------------------------------------------------------

enum class Exchange {
  all_to_all,  // each row goes only to its expert's rank (all-to-all(v))
  all_gather,  // every rank gathers every rank's tokens and picks its own
};

struct DispatchOptions {
  uint32_t num_experts = 0;
  Exchange exchange = Exchange::all_to_all;
  // Each collective's bound; a peer that does not arrive in time aborts the
  // communicator and throws Error(timeout).
  std::chrono::nanoseconds timeout = std::chrono::seconds(60);
  // Turns a failed collective's error into the one thrown (e.g.
  // Groups::failure_namer, which names the ranks behind it); unset: as is.
  std::function<Error(const Error&)> on_failure{};
  // The communicator's device: where the *_on_device calls' buffers are,
  // and where the small exchanges (counts, statistics) are staged when its
  // memory is not host-addressable.
  uint32_t device = 0;
  // The all-to-all exchange runs in rounds, one per local expert (as many
  // as the most experts any rank holds), when a round's average message
  // (Plan::moving_rows rows of the call's size over ranks x (ranks - 1) x
  // rounds) is at least this many bytes: round l carries every rank's rows
  // for its peers' l-th expert, so they land straight at their place in the
  // expert layout and nothing is regrouped by copy. Below it (small
  // messages, where a collective's latency costs more than the copy) it is
  // one all-to-all(v) per direction and a copy between source-major and
  // expert-major rows. 0: always rounds; UINT64_MAX: never. Every rank of
  // the group must give the same value.
  uint64_t round_min_bytes = uint64_t{1} << 20;
};

// What one dispatch decided, kept until its combine (one per MoE layer and
// micro-batch in flight). Row counts are in rows of `hidden` elements.
struct Plan {
  uint64_t num_tokens = 0;
  uint32_t top_k = 0;
  std::vector<int64_t> row_of{};  // [num_tokens * top_k]: row in the sent buffer; -1 dropped
  // [num_experts + 1]: rows sent to each expert, in slot order (experts
  // ordered by their rank, then by number: expert order under the default
  // placement).
  std::vector<uint64_t> sent_offsets{};
  std::vector<uint64_t> recv_counts{};  // [ep * local experts]: rows from source s for local expert l
  std::vector<uint64_t>
      expert_offsets{};  // [local experts + 1]: each local expert's rows in the expert buffer
  // all_gather only: [ep * (num_experts + 1)], each source's sent_offsets.
  std::vector<uint64_t> source_offsets{};
  // all_to_all only: the rows that cross between ranks, summed over the
  // group (every rank's plan holds the same number).
  uint64_t moving_rows = 0;
  uint64_t sent_rows() const { return sent_offsets.empty() ? 0 : sent_offsets.back(); }
  uint64_t expert_rows() const { return expert_offsets.empty() ? 0 : expert_offsets.back(); }
};

// The exchange of one expert group. Holds a borrowed communicator, which
// must outlive it. Every method that says "collective" must be called by
// every rank of the group in the same order.
// Thread-safety: one thread at a time (as the communicator).
class SIGMA_EXPORT Dispatcher {
 public:
  // `ep` is the expert group's communicator; ep_rank and ep_size its rank
  // and size. Throws Error(invalid_argument) when ep_size does not divide
  // num_experts.
  Dispatcher(hal::Communicator& ep, uint32_t ep_rank, uint32_t ep_size, const DispatchOptions& options);

  // Where each expert lives: owner[e] is its expert-group rank. The default
  // is contiguous blocks (expert_range). A rank may hold none. Every rank of
  // the group must set the same placement between one combine and the next
  // plan; moving the experts' parameters is the caller's (an autotuner's).
  // Results do not change with the placement: an expert sees the same rows
  // in the same order wherever it lives. Throws Error(invalid_argument) for
  // the wrong size or a rank outside the group. Not collective.
  void set_placement(const std::vector<uint32_t>& owner);
  const std::vector<uint32_t>& placement() const { return owner_; }
  uint32_t local_experts() const { return local_experts_; }
  // This rank's experts, ascending: the order of the expert layout's blocks.
  const std::vector<uint32_t>& local_expert_ids() const { return local_ids_; }

  // Collective. Exchanges how many rows each rank sends each expert (or,
  // all-gather, every rank's routing). A rank with no tokens takes part.
  Plan plan(const Routing& routing);
  // Collective. `tokens`: plan.num_tokens rows of `hidden` elements (host
  // memory). Returns the rows of this rank's experts, expert-major
  // (plan.expert_offsets), each expert's rows ordered by source rank, then
  // token, then choice.
  std::vector<uint8_t> dispatch(const Plan& plan, const void* tokens, uint64_t hidden, hal_dtype_t dtype);
  // The same into `rows` (resized; reuse one vector across steps so its
  // memory stays mapped).
  void dispatch(const Plan& plan, const void* tokens, uint64_t hidden, hal_dtype_t dtype,
                std::vector<uint8_t>& rows);
  // Collective. `expert_out`: the experts' output, the layout dispatch
  // returned. Writes out[t] = sum over k of weights[t * k] * row (f32, f16
  // or bf16; accumulated in f32 in k order); a token with every choice
  // dropped gets zeros. `weights` is Routing::weights.
  void combine(const Plan& plan, const void* expert_out, const float* weights, uint64_t hidden,
               hal_dtype_t dtype, void* out);

  // The two exchanges under dispatch and combine, for a framework's
  // autograd (each is the other's adjoint). to_experts: rows in the sent
  // layout (plan.sent_offsets, as kernels::moe_permute writes them) to the
  // expert layout; from_experts: back. Collective; any dtype.
  std::vector<uint8_t> to_experts(const Plan& plan, const void* sent, uint64_t hidden, hal_dtype_t dtype);
  std::vector<uint8_t> from_experts(const Plan& plan, const void* expert_rows, uint64_t hidden,
                                    hal_dtype_t dtype);
  void to_experts(const Plan& plan, const void* sent, uint64_t hidden, hal_dtype_t dtype,
                  std::vector<uint8_t>& out);
  void from_experts(const Plan& plan, const void* expert_rows, uint64_t hidden, hal_dtype_t dtype,
                    std::vector<uint8_t>& out);

  // --- On device memory --------------------------------------------------
  // dispatch and combine with tokens, rows and outputs in the device memory
  // (options.device) of the expert communicator's plugin (hal::Buffer pointers; any
  // memory the plugin's collectives take). Nothing is staged through the
  // host by libsigma: the permute and the weighted unpermute run through
  // the plugin's kernels extension (kernels.hpp's Place entry points, which
  // stage only where a plugin lacks it), the all-to-all(v)s take the
  // device buffers (in rounds where the host path would), and the rank's own
  // rows (and, without rounds, the reorder between source-major and
  // expert-major rows) are moved by the device's memcpy. The plan's row map and the weights (small)
  // are copied to the device. Results equal the host path's bit for bit.
  // all-to-all exchange only (Error(not_supported) for all-gather). `rows`
  // holds plan.expert_rows() rows, `out` plan.num_tokens rows. Collective.
  void dispatch_on_device(const Plan& plan, const void* tokens, uint64_t hidden, hal_dtype_t dtype,
                          void* rows);
  void combine_on_device(const Plan& plan, const void* expert_out, const float* weights, uint64_t hidden,
                         hal_dtype_t dtype, void* out);

  // Collective. The group's load statistics: every rank's LoadStats added
  // in rank order (so every rank computes the same auxiliary loss).
  LoadStats global_stats(const LoadStats& local);

 private:
  void run(const hal_coll_args_t& args);
  // The all-to-all exchange to the experts: other ranks' rows from the sent
  // layout `sent` to the expert layout `out` through the communicator, this
  // rank's own copied across unless `own_in_place` (dispatch permuted them
  // there already).
  void exchange_to_experts(const Plan& plan, const void* sent, uint64_t row, uint8_t* out, bool own_in_place);
  // The way back: other ranks' rows from the expert layout `in` through
  // the communicator to their place in the sent layout `back`, this rank's
  // own copied across unless `own_in_place` (combine reads them in `in`).
  void exchange_from_experts(const Plan& plan, const uint8_t* in, uint64_t row, uint8_t* back,
                             bool own_in_place);
  // plan.row_of split: others_row_of_ keeps the rows that go to other ranks
  // (-1 for the rest), own_row_of_ maps this rank's own choices to their
  // row in the expert layout.
  void split_row_map(const Plan& plan);
  // The number of exchange rounds for rows of `row` bytes (0: one exchange
  // and a regroup copy); the same on every rank.
  uint32_t rounds(const Plan& plan, uint64_t row) const;
  // The rounds' all-to-all(v)s of every other rank's rows: to the experts,
  // from the sent layout `send` into the expert layout `recv`; back, from
  // the expert layout `send` into the sent layout `recv`.
  void exchange_rounds(const Plan& plan, uint64_t row, const uint8_t* send, uint8_t* recv, bool to_experts);
  // A collective on small host buffers, staged through device buffers
  // where the device's memory is not host-addressable.
  void run_small(hal_coll_args_t args, uint64_t send_bytes, uint64_t recv_bytes);
  // Reused device buffers (grown, never shrunk).
  struct DeviceScratch {
    std::unique_ptr<hal::Buffer> buffer;
    uint32_t device = 0;
  };
  void* device_scratch(DeviceScratch& s, uint32_t device, uint64_t bytes);
  void to_device(void* dst, uint32_t device, const void* src, uint64_t bytes);
  DeviceScratch dev_sent_, dev_exchange_, dev_back_, dev_row_of_, dev_weights_, dev_small_in_, dev_small_out_;
  hal::Communicator& comm_;
  uint32_t ep_rank_, ep_size_, local_experts_;
  DispatchOptions options_;
  std::vector<uint32_t> owner_, slot_of_, first_slot_, local_ids_;  // the placement
  // Exchange buffers reused from call to call (their pages stay mapped).
  std::vector<uint8_t> sent_, exchange_, back_, gather_mine_, gather_all_;
  std::vector<int64_t> others_row_of_, own_row_of_;  // split_row_map's
};

}  // namespace sigma::parallel
